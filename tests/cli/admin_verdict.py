"""Waits in Debian's headless Chromium until the admin page's headline shows STATE (healthy,
degraded, stalled), then checks the headline's pixels are that state's colour (green, amber,
red) and saves a screenshot of the page. Prints the headline.

Usage: /usr/bin/python3 admin_verdict.py URL TOKEN STATE SCREENSHOT
"""
import io
import sys

from PIL import Image
import browser
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

url, token, state, screenshot = sys.argv[1:5]
# As admin_page.hpp's style sets them.
COLOURS = {"healthy": (0x17, 0x70, 0x2b), "degraded": (0x9a, 0x5b, 0x00),
           "stalled": (0xb3, 0x26, 0x1e)}

driver = browser.headless_chromium()
try:
    driver.get(url)
    wait = WebDriverWait(driver, 30)
    browser.give_token(driver, wait, token)
    headline = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#verdict." + state)))
    # The element's own pixels, as drawn: a corner of its padding is its background.
    image = Image.open(io.BytesIO(headline.screenshot_as_png)).convert("RGB")
    pixel = image.getpixel((3, 3))
    expected = COLOURS[state]
    assert all(abs(a - b) <= 12 for a, b in zip(pixel, expected)), \
        f"the {state} headline is drawn in {pixel}, not {expected}"
    for other, colour in COLOURS.items():
        if other != state:
            assert any(abs(a - b) > 12 for a, b in zip(pixel, colour)), f"{pixel} is {other}'s"
    driver.save_screenshot(screenshot)
    print(headline.text)
finally:
    driver.quit()
