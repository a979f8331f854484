"""Drives the admin page in Debian's headless Chromium (chromium-driver, python3-selenium), as an
operator would: the page lists the quarantined events and a replication slot no relay streams, a click on "retry" releases one, a click
on "skip" asks for a reason and skips the other. Saves a screenshot. The database checks are the
calling script's (admin_page.sh).

Usage: /usr/bin/python3 admin_page.py URL TOKEN EVENT_TO_RETRY EVENT_TO_SKIP SCREENSHOT
"""
import sys

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

url, token, to_retry, to_skip, screenshot = sys.argv[1:6]


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


options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--window-size=1280,1000"):
    options.add_argument(flag)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
try:
    driver.get(url)
    wait = WebDriverWait(driver, 20)
    # The listener has a token: the page asks for it once.
    asked = wait.until(ec.alert_is_present())
    asked.send_keys(token)
    asked.accept()
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
    # A slot no relay streams is said to keep WAL, with the command that drops it.
    slot = wait.until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, '#slots tr[data-slot="left_behind"]'))).text
    assert "not streamed" in slot and "outbox cdc drop --slot left_behind" in slot, slot
    # The chart draws from its first sample (a point at its top left: the sample is its own
    # maximum), not only once it has two. The labels start right of it, at x = 8.
    alpha = driver.execute_script("""
        samples.length = 0;
        samples.push({t: Date.now() / 1000, pending: 5, age: 3});
        draw();
        return document.getElementById("chart").getContext("2d")
            .getImageData(5, 5, 1, 1).data[3];""")
    assert alpha > 0, "one sample drew no point: the chart is empty until the second"
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
