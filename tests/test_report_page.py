"""The report page in a real headless Chromium (the workbench test's driver), rendered from hand-made tables:
layout at 1,400 and 390 px, alt text, one heading hierarchy, display names only in the body, findings whose
numbers come from their table, an appendix holding every table complete, page breaks between experiments."""

from __future__ import annotations

import re
import shutil
import time

import pytest

from inferlab.report.page_html import LEGIBLE_SCALE
from tests.test_report import full_data
from tests.test_review import report_against_another_machine
from tests.test_workbench import _driver

pytestmark = pytest.mark.browser

BODY_BUDGET_PX = 7200  # the body, before the appendix, in about 8 screens of 1,400 × 900
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
EXPERIMENTS = "section.experiment"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The report a reviewer most often gets: run on another machine than the pinned reference, so every
    timing moved and none is comparable (the Changes section folds them into one line)."""
    data = full_data()
    paths, _ = report_against_another_machine(tmp_path_factory.mktemp("report"))
    driver, profile = _driver()
    try:
        driver.get(f"file://{paths.html}")
        yield driver, data
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


MAX_FRAME_PX = 100  # a window's frame around the viewport; a bigger gap is a resize not yet seen


def _at_width(driver, width: int) -> None:
    """Resizes so that the page's own viewport (innerWidth) is `width` px.

    The resize reaches the page a moment after set_window_size returns: on a loaded machine CI once
    read the old width and then asked for a negative window. So a viewport far from `width` is waited
    out, and one close to it is the window's frame, corrected once."""
    outer = width
    driver.set_window_size(outer, 900)
    deadline = time.monotonic() + 30
    while (inner := driver.execute_script("return window.innerWidth")) != width:
        assert time.monotonic() < deadline, f"the viewport is {inner} px after 30 s, not {width} px"
        if outer == width and abs(width - inner) <= MAX_FRAME_PX:
            outer += width - inner
            driver.set_window_size(outer, 900)
        time.sleep(0.05)


def _too_wide(driver) -> bool:
    return driver.execute_script("return document.documentElement.scrollWidth > window.innerWidth")


def test_no_element_makes_the_page_wider_than_the_window_at_1400_and_390(report):
    driver, _ = report
    driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")  # wide tables too
    try:
        for width in (1400, 390):
            _at_width(driver, width)
            assert not _too_wide(driver), (width, driver.execute_script(
                "return document.documentElement.scrollWidth"))
        # the measurement can fail: a table outside its scrolling box widens the page
        driver.execute_script("var t = document.querySelector('.table-box table').cloneNode(true);"
                              "t.id = 'loose'; t.style.width = '2000px'; document.body.appendChild(t)")
        assert _too_wide(driver)
    finally:
        driver.execute_script("var t = document.getElementById('loose'); if (t) t.remove();"
                              "document.querySelectorAll('details').forEach(d => d.open = false)")


def test_figures_keep_legible_labels_at_390_and_scroll_sideways_instead(report):
    driver, _ = report
    _at_width(driver, 390)
    shown = driver.execute_script(
        "return [...document.querySelectorAll('figure img')].filter(i => !i.closest('details'))"
        ".map(i => { const r = i.getBoundingClientRect(), f = i.parentElement;"
        " return [r.width / i.naturalWidth, r.height / i.naturalHeight, f.scrollWidth > f.clientWidth]; })")
    assert shown, "no figure in the body"
    assert all(min(w, h) >= LEGIBLE_SCALE - 0.01 and abs(w - h) < 0.01 for w, h, _ in shown), shown
    assert any(scrolls for *_, scrolls in shown), "no figure is wider than a phone: the test shows nothing"
    assert not _too_wide(driver)


def test_the_body_fits_in_about_eight_screens_at_1400(report):
    driver, _ = report
    _at_width(driver, 1400)
    top = driver.execute_script("return document.getElementById('appendix').getBoundingClientRect().top + scrollY")
    assert 0 < top <= BODY_BUDGET_PX, top


def test_every_figure_has_alt_text_and_the_headings_form_one_hierarchy(report):
    driver, _ = report
    alts = driver.execute_script("return [...document.images].map(i => i.getAttribute('alt') || '')")
    assert alts and all(a.strip() for a in alts), alts
    levels = driver.execute_script("return [...document.querySelectorAll('h1,h2,h3,h4,h5,h6')]"
                                   ".map(h => +h.tagName[1])")
    assert levels[0] == 1 and levels.count(1) == 1, levels
    skips = [(a, b) for a, b in zip(levels, levels[1:], strict=False) if b > a + 1]
    assert not skips, skips


def test_body_tables_use_only_display_names(report):
    driver, _ = report
    headers = driver.execute_script("return [...document.querySelectorAll('th')]"
                                    ".filter(th => !th.closest('#appendix')).map(th => th.textContent)")
    assert len(headers) > 20
    assert not [h for h in headers if "_" in h], [h for h in headers if "_" in h]


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def test_every_finding_of_each_experiment_quotes_only_its_tables_numbers(report):
    """The findings are written from the milestone's evidence (narrative.findings); each number they quote
    is one the reader finds in the experiment's tables (its body table and its targets table)."""
    driver, _ = report
    sections = driver.execute_script(
        f"return [...document.querySelectorAll('{EXPERIMENTS}')].map(s => ({{"
        "  title: s.querySelector('h2').textContent,"
        "  findings: [...s.querySelectorAll('ol.findings li')].map(li => li.textContent),"
        "  cells: [...s.querySelectorAll('.table-box td, .table-box th')].map(c => c.textContent)}))")
    assert [s["title"].split(":")[0] for s in sections] == [f"Experiment {i}" for i in range(1, 5)]
    for s in sections:
        table = set().union(*map(_numbers, s["cells"]))
        assert len(s["findings"]) == 3, s["findings"]
        for finding in s["findings"]:
            quoted = _numbers(finding)
            assert len(quoted) >= 2, finding
            assert quoted <= table, (s["title"], finding, quoted - table)
        assert not _numbers(s["findings"][0] + " and 12345.6 more") <= table  # a typed-in number would fail


def test_body_tables_are_compact(report):
    driver, _ = report
    shapes = driver.execute_script(
        f"return [...document.querySelectorAll('{EXPERIMENTS} .table-box table')]"
        ".map(t => [t.querySelectorAll('tbody tr').length, t.querySelectorAll('thead th').length])")
    assert len(shapes) == 8  # per experiment its table and its milestone's targets table
    assert all(rows <= 12 and columns <= 8 for rows, columns in shapes), shapes


def test_the_appendix_holds_every_table_the_report_read_complete(report):
    driver, data = report
    rows = driver.execute_script("return Object.fromEntries([...document.querySelectorAll('#appendix details')]"
                                 ".map(d => [d.id, d.querySelectorAll('tbody tr').length]))")
    for key, df in data.tables.items():
        if df is not None:
            assert rows.get(f"input-{key.replace('_', '-')}") == len(df), key
    links = driver.execute_script("return [...document.querySelectorAll('a[data-open]')]"
                                  ".map(a => [a.dataset.open, a.textContent])")
    assert len(links) >= 5
    for slug, label in links:
        assert f"all {rows[slug]} row" in label, (slug, label)


def test_a_link_opens_its_appendix_table(report):
    driver, _ = report
    link = driver.find_element("css selector", f"{EXPERIMENTS} a[data-open]")
    target = link.get_attribute("data-open")
    assert not driver.execute_script(f"return document.getElementById('{target}').open")
    driver.execute_script("arguments[0].click()", link)
    assert driver.execute_script(f"return document.getElementById('{target}').open")
    driver.execute_script(f"document.getElementById('{target}').open = false")


def test_printing_breaks_pages_between_experiments(report):
    driver, _ = report
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        breaks = driver.execute_script(f"return [...document.querySelectorAll('{EXPERIMENTS}')]"
                                       ".map(s => getComputedStyle(s).breakBefore)")
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})
    assert breaks == ["page"] * 4
    assert driver.execute_script(f"return getComputedStyle(document.querySelector('{EXPERIMENTS}')).breakBefore") \
        != "page"  # on screen, no break: the check sees the print rule
