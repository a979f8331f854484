"""Drives the admin page in Debian's headless Chromium (chromium-driver, python3-selenium), as an
operator would: the token goes into the page's form, the headline says degraded and why, the
page lists the quarantined events and a replication slot no relay streams, a click on "retry"
releases one, a click on "skip" asks for a reason and skips the other. Saves a screenshot. The database checks are the
calling script's (admin_page.sh).

Usage: /usr/bin/python3 admin_page.py URL TOKEN EVENT_TO_RETRY EVENT_TO_SKIP SCREENSHOT OPEN_URL
OPEN_URL: a listener without a token, whose page is read-only: no form, buttons disabled with a
hint.
"""
import sys

import browser
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

url, token, to_retry, to_skip, screenshot, open_url, in_doubt, held = sys.argv[1:9]


def click(selector):
    """Clicks the element, found again if the page rebuilt its table between finding and
    clicking (it refreshes every 2 s and after each action)."""
    for _ in range(10):
        try:
            driver.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{selector} kept going stale")


driver = browser.headless_chromium()
try:
    wait = WebDriverWait(driver, 20)
    # Without a token: read-only, and the page says why instead of failing on a click.
    driver.get(open_url)
    retry_button = wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, f'#quarantine tr[data-event-id="{to_retry}"] button.retry')))
    assert not retry_button.is_enabled(), "retry is enabled on a listener without a token"
    assert "--admin-token-file" in retry_button.get_attribute("title")
    assert "read-only" in driver.find_element(By.ID, "summary").text
    assert not driver.find_element(By.ID, "login").is_displayed(), "a form for a token not needed"

    driver.get(url)
    # The listener has a token: the page asks for it in a form (not a prompt()), once.
    browser.give_token(driver, wait, token)
    row = f'#quarantine tr[data-event-id="{to_retry}"]'
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, row)))
    wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, f'#quarantine tr[data-event-id="{to_skip}"]')))
    # A hostile aggregate type shows as text, never as markup.
    assert not driver.find_elements(By.CSS_SELECTOR, "#quarantine b.injected"), "markup injected"
    shown = driver.find_element(By.ID, "quarantine").text
    assert "<b class=\"injected\">" in shown
    # Control characters and a right-to-left override are shown escaped, not acted on.
    assert "c-1\\x1b[31m\\x07\\u202eevil" in shown, shown
    assert not any(c in shown for c in "\x1b\x07\u202e"), "a control character shown raw"
    # An event in doubt is listed with what the sink saw, apart from the quarantine.
    doubt = wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, f'#in_doubt tr[data-event-id="{in_doubt}"]'))).text
    assert "payment p-1" in doubt and "Operation timed out" in doubt, doubt
    # An event a gap-aware consumer parked is listed under "Held by consumers", with why.
    parked = wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, f'#inbox_held tr[data-event-id="{held}"]'))).text
    assert "projection" in parked and "parked (failed)" in parked and "boom" in parked, parked
    assert "1 parked at consumers" in driver.find_element(By.ID, "summary").text
    # A slot no relay streams is said to keep WAL, with the command that drops it.
    slot = wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, '#slots tr[data-slot="left_behind"]'))).text
    assert "not streamed" in slot and "outbox cdc drop --slot left_behind" in slot, slot
    # The headline gives the server's verdict: two events pending (behind two quarantined ones)
    # and no relay running.
    try:
        verdict = wait.until(
            ec.presence_of_element_located((By.CSS_SELECTOR, "#verdict.stalled")))
    except Exception:
        print("headline:", driver.find_element(By.ID, "verdict").get_attribute("outerHTML"),
              "error:", driver.find_element(By.ID, "error").text,
              "console:", driver.get_log("browser"))
        raise
    assert verdict.text.startswith("stalled: 2 events pending and no relay running"), verdict.text
    assert "2 events quarantined" in verdict.text and "slot left_behind" in verdict.text, \
        verdict.text
    assert "1 event in doubt (outbox reconcile)" in verdict.text, verdict.text
    assert "1 event parked at consumer projection (outbox inbox list)" in verdict.text, verdict.text
    # The last hour comes from the server: a page opened now already has samples.
    samples = driver.execute_script("return hist.t.length")
    assert samples >= 1, "no history from the server"
    # Each chart draws a known value with no known neighbour (the rate's first: a point at the
    # right edge, at its axis's top), and a series all 0 along the bottom.
    drawn = driver.execute_script("""
        hist = {t: [990, 995, 1000], pending: [0, 0, 0], published_per_second: [null, null, 3]};
        draw();
        const g = document.getElementById("published").getContext("2d");
        return [g.getImageData(715, 17, 1, 1).data[3],
                Math.max(...document.getElementById("pending").getContext("2d")
                    .getImageData(713, 104, 2, 2).data.filter((_, i) => i % 4 === 3))];""")
    assert drawn[0] > 0 and drawn[1] > 0, f"a lone value or a line of zeros drew nothing: {drawn}"
    driver.save_screenshot(screenshot)

    click(row + " button.retry")
    wait.until(ec.invisibility_of_element_located((By.CSS_SELECTOR, row)))

    skip_row = f'#quarantine tr[data-event-id="{to_skip}"]'
    click(skip_row + " button.skip")
    prompt = wait.until(ec.alert_is_present())
    prompt.send_keys("customer deleted; event obsolete")
    prompt.accept()
    wait.until(ec.invisibility_of_element_located((By.CSS_SELECTOR, skip_row)))
    errors = driver.find_element(By.ID, "error").text
    assert errors == "", errors
    print("admin_page.py: retried", to_retry, "and skipped", to_skip)
finally:
    driver.quit()
