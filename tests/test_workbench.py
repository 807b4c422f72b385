"""The sampling workbench in a real headless Chromium: its numbers equal the Python table.

Needs Debian's /usr/bin/chromium and /usr/bin/chromedriver (selenium never downloads a driver
here). Without them the test fails with a message, unless INFERLAB_SKIP_BROWSER=1.
"""

from __future__ import annotations

import math
import os
import random
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from inferlab.core.sampler import distribution_rows
from inferlab.report.workbench import grid_records, workbench_html

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

pytestmark = pytest.mark.browser

# Cells of the real grid's shape, plus edge cases: a cut inside a run of tied logits, T far
# from 1, a min-p that keeps only the top token, and no truncation at all.
CELLS = [
    {"cell": "T0.5_p0.5", "truncation": "top_p", "temperature": 0.5, "top_p": 0.5, "min_p": 0.0},
    {"cell": "T0.7_p0.9", "truncation": "top_p", "temperature": 0.7, "top_p": 0.9, "min_p": 0.0},
    {"cell": "T1_p0.95", "truncation": "top_p", "temperature": 1.0, "top_p": 0.95, "min_p": 0.0},
    {"cell": "T1.3_p1", "truncation": "top_p", "temperature": 1.3, "top_p": 1.0, "min_p": 0.0},
    {"cell": "T1_minp0.05", "truncation": "min_p", "temperature": 1.0, "top_p": 1.0, "min_p": 0.05},
    {"cell": "T1.3_minp0.1", "truncation": "min_p", "temperature": 1.3, "top_p": 1.0, "min_p": 0.1},
    {"cell": "T0.05_minp0.5", "truncation": "min_p", "temperature": 0.05, "top_p": 1.0, "min_p": 0.5},
]


def synthetic_logits(n: int = 400, seed: int = 7) -> list[float]:
    """float32-representable logits with a heavy head, a long tail and some exact ties."""
    import numpy as np

    rng = random.Random(seed)
    values = [rng.gauss(0.0, 2.0) - 0.01 * i for i in range(n)]
    values[10:14] = [values[10]] * 4  # ties that a top-p cut can fall into
    return [float(v) for v in np.asarray(values, dtype=np.float32)]


def _driver():
    if os.environ.get("INFERLAB_SKIP_BROWSER") == "1":
        pytest.skip("INFERLAB_SKIP_BROWSER=1")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(
            f"{CHROMIUM} and {CHROMEDRIVER} are required for the workbench test; install them with "
            "`apt-get install chromium chromium-driver` (Debian) or set INFERLAB_SKIP_BROWSER=1 to skip"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="inferlab-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    return driver, profile


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    logits = synthetic_logits()
    vocab = ["<unk>"] + [chr(0x4E00 + i) for i in range(1, len(logits))]
    table = pd.DataFrame(distribution_rows(logits, CELLS))
    path = tmp_path_factory.mktemp("wb") / "workbench.html"
    path.write_text(workbench_html("孔明曰：「", vocab, logits, grid_records(table)), encoding="utf-8")
    driver, profile = _driver()
    try:
        driver.get(path.as_uri())
        yield driver, table
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _set(driver, element_id: str, value: float) -> None:
    """Type into the number input the way a user does (clear, keys), which fires 'input'."""
    box = driver.find_element("id", element_id)
    box.clear()
    box.send_keys(repr(value))


def test_page_recomputes_every_cell_like_python(page):
    driver, table = page
    for row in table.itertuples():
        _set(driver, "temperature", row.temperature)
        _set(driver, "top_p", row.top_p)
        _set(driver, "min_p", row.min_p)
        assert driver.find_element("id", "error").text == ""
        kept = int(driver.find_element("id", "kept").text)
        nats_el, bits_el = driver.find_element("id", "entropy-nats"), driver.find_element("id", "entropy-bits")
        assert kept == row.kept, row.cell
        # displayed to 6 decimals, and the full double behind it (V8's exp/log vs libm: ~1 ulp)
        assert nats_el.text == f"{row.entropy_nats:.6f}", row.cell
        assert bits_el.text == f"{row.entropy_bits:.6f}", row.cell
        assert math.isclose(float(nats_el.get_attribute("data-value")), row.entropy_nats, rel_tol=1e-12, abs_tol=1e-12)


def test_page_self_check_agrees_and_bars_drawn(page):
    driver, table = page
    check = driver.find_element("id", "grid-check")
    assert check.get_attribute("data-total") == str(len(table))
    assert check.get_attribute("data-ok") == str(len(table))
    assert len(driver.find_elements("css selector", "#bars rect")) == 60


def test_cells_differ_so_the_check_can_fail(page):
    """Guard: the cells really differ in kept count, so matching them is not trivial."""
    _, table = page
    assert table["kept"].nunique() >= 5
    assert table["kept"].min() == 1 and table["kept"].max() == 400
