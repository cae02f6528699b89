"""The playground in a real browser: headless Chromium driven by Selenium.

Skipped, with the reason, when Chromium, its driver or Selenium is missing; CI installs them
(.ci/browser.sh) and fails if this test did not run. It starts ``wirearrow playground`` as a
user would, on the bundled sample (benchmarks/corpus.py records, transforms/openrtb_flat.yaml),
then loads records from the page, types a path, watches the error and the preview update,
adds a column from the schema tree, downloads the plan and keeps a screenshot in
out/ci-artifacts/. A second run starts from a broken plan, uploads a TFRecord file from the
page and breaks the plan again (the tree and the last good preview stay).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa

ROOT = Path(__file__).resolve().parent.parent
# Where this process imports wirearrow from (the checkout's plugin/ for the editable install,
# site-packages for the minimal install's wheel): the commands run that one, not the source tree.
IMPORTED_FROM = Path(importlib.util.find_spec("wirearrow").origin).resolve().parents[1]
PLAN = ROOT / "transforms" / "openrtb_flat.yaml"
ARTIFACTS = ROOT / "out" / "ci-artifacts"
CHROMIUM = os.environ.get("WIREARROW_CHROMIUM", "/usr/bin/chromium")
DRIVER = os.environ.get("WIREARROW_CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT = 30  # seconds for the page to react

pytestmark = pytest.mark.browser


def _missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/browser.sh does)"
    if not (os.path.exists(DRIVER) or shutil.which("chromedriver")):
        return f"no chromedriver at {DRIVER} (apt-get install chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "Selenium is not installed (pip install selenium; .ci/browser.sh does)"
    return None


def _serve(*argv: str):
    """``wirearrow playground ARGV``: yields its URL, stops it after."""
    env = {**os.environ, "PYTHONPATH": str(IMPORTED_FROM)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wirearrow", "playground", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


@pytest.fixture
def playground(tmp_path):
    """The command on the bundled sample: (URL, records file, a second records file)."""
    first, second = tmp_path / "events.u32le", tmp_path / "more.u32le"
    corpus.write_corpus(first, 200, seed=0, framing="u32le")
    corpus.write_corpus(second, 50, seed=1, framing="u32le")
    for url in _serve(str(PLAN), str(first), "--framing", "u32le"):
        yield url, first, second


@pytest.fixture
def broken_playground(tmp_path):
    """The command on a plan with a bad path and no records: (URL, the plan's good text,
    a TFRecord file of 30 records)."""
    good = PLAN.read_text().replace(
        "import_paths: [../examples/schema]", f"import_paths: [{ROOT / 'examples' / 'schema'}]"
    )
    plan = tmp_path / "broken.yaml"
    plan.write_text(good.replace("path: id\n", "path: nope\n", 1))
    records = wa.frame_records(pa.array(corpus.generate(30, seed=2), pa.binary()), "tfrecord")
    tfrecord = tmp_path / "events.tfrecord"
    tfrecord.write_bytes(bytes(records))
    for url in _serve(str(plan)):
        yield url, good, tfrecord


@pytest.fixture
def browser(tmp_path):
    reason = _missing()
    if reason:
        if os.environ.get("WIREARROW_REQUIRE_BROWSER"):
            pytest.fail(f"the browser test must run here: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1600,1000",
    ):  # fmt: skip
        options.add_argument(flag)
    options.add_experimental_option(
        "prefs",
        {"download.default_directory": str(downloads), "download.prompt_for_download": False},
    )
    driver_path = DRIVER if os.path.exists(DRIVER) else shutil.which("chromedriver")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.downloads = downloads
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver, condition, what: str):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(
        driver, WAIT, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)
    )
    try:
        return wait.until(lambda d: condition(d))
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "playground-failure.png"))
        banner = driver.find_element("id", "error-banner").text
        problems = driver.find_element("id", "problems").text
        raise AssertionError(
            f"timed out waiting for {what}; banner={banner!r} problems={problems!r}"
        ) from None


def _text(driver, element_id: str) -> str:
    return driver.find_element("id", element_id).text


def _headers(driver) -> list[str]:
    # Read in the page at once: the table is redrawn on every preview (an element found
    # first may be gone when read), and Selenium gives no .text for cells out of view.
    script = "return [...document.querySelectorAll('#preview-table th')].map(t => t.dataset.name)"
    return driver.execute_script(script)


def test_playground_in_a_browser(browser, playground) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    url, _, second = playground
    driver = browser
    driver.get(url)
    # The plan and the records given on the command line: a preview with no problem.
    _wait(driver, lambda d: "no problems" in _text(d, "problems"), "the plan to compile")
    _wait(driver, lambda d: "200 records in" in _text(d, "preview-summary"), "the preview")
    assert "deal_id" in _headers(driver)
    assert "BidRequestEvent" in _text(driver, "schema-name")

    # Records loaded from the page.
    path = driver.find_element(By.ID, "records-path")
    path.clear()
    path.send_keys(str(second))
    driver.find_element(By.ID, "records-load").click()
    _wait(driver, lambda d: "50 records in" in _text(d, "preview-summary"), "the second sample")

    # Type a path that the message does not have: the error of `wirearrow check`, on its line.
    plan = driver.find_element(By.ID, "plan")
    plan.click()
    plan.send_keys(Keys.CONTROL, Keys.END)
    plan.send_keys("\n    - name: slot\n      path: imp[*].nope")
    _wait(driver, lambda d: "field 'nope' not in message Imp" in _text(d, "problems"), "the error")
    problem = driver.find_element(By.CSS_SELECTOR, "#problems .problem")
    line = int(problem.get_attribute("data-line"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "playground-error.png"))
    marked = driver.find_elements(By.CSS_SELECTOR, "#gutter .bad")
    assert [m.text for m in marked] == [str(line)]
    assert plan.get_attribute("value").splitlines()[line - 1].strip() == "- name: slot"

    # Fix it: the preview comes back with the new column.
    plan.send_keys(Keys.BACKSPACE * len("nope") + "tagid")
    _wait(driver, lambda d: "no problems" in _text(d, "problems"), "the fix")
    _wait(driver, lambda d: "slot" in _headers(d), "the new column")
    assert not driver.find_elements(By.CSS_SELECTOR, "#gutter .bad")

    # A click in the schema tree adds a column.
    driver.find_element(By.CSS_SELECTOR, '[data-path="imp[*].banner.w"]').click()
    _wait(driver, lambda d: "imp_banner_w" in _headers(d), "the clicked column")

    # The nested view follows the chosen record.
    index = driver.find_element(By.ID, "record-index")
    index.send_keys(Keys.CONTROL, "a")
    index.send_keys("3")
    _wait(driver, lambda d: _text(d, "nested").startswith("record 3:"), "record 3")
    assert '"imp"' in _text(driver, "nested")

    # Download the plan: a YAML plan that loads, with both new columns.
    driver.find_element(By.ID, "download-yaml").click()
    target = driver.downloads / "openrtb_flat.yaml"
    deadline = time.monotonic() + WAIT
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert target.exists(), list(driver.downloads.iterdir())
    downloaded = wa.load_plan(target.read_text(), base_dir=PLAN.parent)
    names = [c.output_name for c in downloaded.columns]
    assert names[-2:] == ["slot", "imp_banner_w"]

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(ARTIFACTS / "playground.png"))

    # The short format, one column per line; switched back to YAML it becomes a YAML plan.
    driver.find_element(By.ID, "mode-lines").click()
    plan.send_keys(Keys.CONTROL, "a")
    plan.send_keys(Keys.DELETE)
    plan.send_keys("id\nimp_id = imp[*].id")
    _wait(driver, lambda d: _headers(d) == ["id", "imp_id"], "the short plan's preview")
    driver.find_element(By.ID, "mode-yaml").click()
    _wait(driver, lambda d: "denormalizer:" in plan.get_attribute("value"), "the YAML form")
    _wait(driver, lambda d: "no problems" in _text(d, "problems"), "the YAML form to compile")
    assert _headers(driver) == ["id", "imp_id"]


def _set_plan(driver, text: str) -> None:
    """Replace the editor's text as typing would (an input event), at once."""
    driver.execute_script(
        "const p = document.getElementById('plan'); p.value = arguments[0];"
        "p.dispatchEvent(new Event('input'))",
        text,
    )


def test_a_broken_plan_and_an_uploaded_tfrecord_file(browser, broken_playground) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    url, good, tfrecord = broken_playground
    driver = browser
    driver.get(url)
    # Opened with a broken plan: its problem, and the tree of its proto section to fix it by.
    _wait(driver, lambda d: "field 'nope' not in message" in _text(d, "problems"), "the problem")
    assert "BidRequestEvent" in _text(driver, "schema-name")
    assert driver.find_elements(By.CSS_SELECTOR, '#schema-tree [data-path="imp[*].banner.w"]')
    assert "Click a field to add a column" in _text(driver, "tree-help")
    _wait(driver, lambda d: "no plan has compiled yet" in _text(d, "preview-summary"), "the note")

    # Upload a TFRecord file from the page, with its framing chosen first.
    Select(driver.find_element(By.ID, "input-framing")).select_by_value("tfrecord")
    driver.find_element(By.ID, "records-upload").send_keys(str(tfrecord))
    _wait(driver, lambda d: "30 records" in _text(d, "records-info"), "the upload")
    assert "events.tfrecord (uploaded)" in _text(driver, "records-info")

    # Fixed: the preview of the uploaded records.
    _set_plan(driver, good)
    _wait(driver, lambda d: "30 records in" in _text(d, "preview-summary"), "the preview")
    _wait(driver, lambda d: "no problems" in _text(d, "problems"), "no problems")
    rows = _headers(driver)
    assert "request_id" in rows
    assert "0 failed" in _text(driver, "preview-summary")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "playground-upload.png"))

    # Broken again, with a long path: the problem wraps (nothing cut on the right), the
    # tree and the last good preview stay, marked as such.
    long_path = "imp[*].banner." + "very_long_field_name_" * 8
    _set_plan(driver, good.replace("path: id\n", f"path: {long_path}\n", 1))
    _wait(driver, lambda d: "not in message" in _text(d, "problems"), "the long problem")
    summary = _text(driver, "preview-summary")
    assert summary.startswith("The plan has problems: below is the preview of the last plan")
    assert "30 records in" in summary and _headers(driver) == rows
    assert "stale" in driver.find_element(By.ID, "output").get_attribute("class")
    assert "BidRequestEvent" in _text(driver, "schema-name")
    overflow = driver.execute_script(
        "return [...document.querySelectorAll('#problems .problem')]"
        ".map(p => p.scrollWidth - p.clientWidth)"
    )
    assert overflow and max(overflow) <= 1, overflow
    driver.save_screenshot(str(ARTIFACTS / "playground-broken-plan.png"))

    # Another framing from the page reads the upload again: a wrong one, and the page
    # names the right one.
    _set_plan(driver, good)
    _wait(driver, lambda d: "no problems" in _text(d, "problems"), "the plan again")
    Select(driver.find_element(By.ID, "input-framing")).select_by_value("u32le")
    _wait(driver, lambda d: "u32le" in _text(d, "records-info"), "the records read again")
    _wait(
        driver,
        lambda d: "looks like tfrecord framing (framing='tfrecord')" in _text(d, "framing-hint"),
        "the framing hint",
    )
    assert "looks like tfrecord framing" in _text(driver, "preview-summary")
    driver.save_screenshot(str(ARTIFACTS / "playground-framing-hint.png"))
