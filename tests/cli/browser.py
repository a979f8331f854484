"""What the admin page's browser tests share: Debian's headless Chromium through chromium-driver,
and the page's token form."""
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec


def headless_chromium():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def give_token(driver, wait, token):
    """Types the token into the page's form (never a prompt()) and waits for the form to go."""
    wait.until(ec.visibility_of_element_located((By.ID, "token"))).send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login button").click()
    wait.until(ec.invisibility_of_element_located((By.ID, "login")))
