"""The report in a real browser: headless Chromium (Selenium + the Debian package chromium-driver) opens
the page of tests/report/tiny_program.py from a local file; one SVG group per cluster in each function's
picture, the reasons' text, hovering a node shows its details, the advisor has an entry for the
deliberately tiny cluster, cluster details open from the table, no script errors. Screenshots are kept
in pytest's tmp_path and copied to ``out/`` (gitignored), next to the viz ones. No Graphviz is needed.
Without Chromium, chromedriver or Selenium: failed when CI is set, skipped loudly elsewhere
(tests/conftest.py).
"""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser


def _tiny(report):
    return next(c for f in report.functions for c in f.clusters.values() if "Abs" in c.ops)


def test_clusters_reasons_and_advisor(driver, browser, script_report):
    from selenium.webdriver.common.by import By

    report, path = script_report
    driver.get(path.as_uri())
    for k, fn in enumerate(report.functions):
        groups = driver.execute_script(
            "return Array.from(document.querySelectorAll('#fn-' + arguments[0] + ' svg g.xla-cluster'))"
            ".map(g => g.dataset.cluster);", k)
        assert sorted(groups) == sorted(fn.clusters), fn.name
        for name, c in fn.clusters.items():
            inside = driver.execute_script(
                "return Array.from(document.querySelector('#fn-' + arguments[0] + ' svg g.xla-cluster[data-cluster=\"'"
                " + arguments[1] + '\"]').querySelectorAll('g.node')).map(g => g.dataset.node);", k, name)
            assert sorted(inside) == sorted(c.members)
    step = next(k for k, f in enumerate(report.functions) if f.name.startswith("step"))
    reasons = driver.find_element(By.ID, f"f{step}-reasons").text
    assert "[unique]" in reasons and "Unique op" in reasons and "TF never auto-clusters Unique" in reasons
    tiny = _tiny(report)
    entry = driver.find_element(By.CSS_SELECTOR, f'#advisor .advice[data-kind="tiny_cluster"][data-cluster="{tiny.name}"]')
    assert entry.is_displayed() and "launch overhead dominates" in entry.text and "4 elements" in entry.text
    assert driver.find_element(By.CSS_SELECTOR, '#advisor .advice[data-kind="recompilation"]').is_displayed()
    assert "--tf_xla_cpu_global_jit" in driver.find_element(By.ID, "flags").text
    assert browser.severe_logs() == []
    browser.keep_screenshot("report_browser_page.png")


def test_hover_shows_node_and_cluster_details(driver, browser, script_report):
    from selenium.webdriver.common.by import By

    report, path = script_report
    driver.get(path.as_uri())
    step = next(k for k, f in enumerate(report.functions) if f.name.startswith("step"))
    big = next(c for c in report.functions[step].clusters.values() if "MatMul" in c.ops)
    tip = driver.find_element(By.ID, "tooltip")
    assert not tip.is_displayed()
    text = browser.hover(f'#fn-{step} g.node[data-node="MatMul"]').text
    assert "op: MatMul" in text and f"cluster: {big.name}" in text and "outputs float32" in text and "device CPU:0" in text
    browser.keep_screenshot("report_browser_hover.png")
    text = browser.hover(f'#fn-{step} g.node[data-node="Unique"]').text
    assert "not clustered [unique]" in text
    browser.hover("header h1")
    assert not driver.find_element(By.ID, "tooltip").is_displayed()
    assert browser.severe_logs() == []


def test_cluster_details_open_from_the_table(driver, browser, script_report):
    from selenium.webdriver.common.by import By

    report, path = script_report
    driver.get(path.as_uri())
    tiny = _tiny(report)
    k = next(k for k, f in enumerate(report.functions) if tiny.name in f.clusters)
    detail = driver.find_element(By.ID, f"f{k}-detail-{tiny.name}")
    assert detail.get_attribute("open") is None
    link = driver.find_element(By.CSS_SELECTOR, f'#f{k}-clusters a[href="#f{k}-detail-{tiny.name}"]')
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", link)
    link.click()
    assert detail.get_attribute("open") is not None
    text = detail.text
    assert "HLO before optimisation" in text and "TF's kernels" in text and "launch overhead dominates" in text
    assert browser.severe_logs() == []


def test_collapsed_pictures_expand_with_unique_ids(driver, browser, script_report, tmp_path):
    """Every function's picture starts collapsed; expanding a cluster in one puts its members there,
    with ids prefixed per function (no id twice on the page), and focus works per picture."""
    from tfxla_cluster.report import write_report

    report, _ = script_report
    path = write_report(report, tmp_path / "collapsed.html", collapse=True)
    driver.get(path.as_uri())
    for k, fn in enumerate(report.functions):
        for name, c in fn.clusters.items():
            sel = f'#fn-{k} svg g.xla-cluster[data-cluster="{name}"]'
            assert driver.execute_script(f"return document.querySelector('{sel}').getAttribute('class');") == \
                "node xla-cluster collapsed"
            driver.execute_script("var g = document.querySelector(arguments[0]); g.scrollIntoView({block: 'center'});"
                                  "g.dispatchEvent(new MouseEvent('click', {bubbles: true}));", sel)
            inside = driver.execute_script(
                "return Array.from(document.querySelector(arguments[0]).querySelectorAll('g.node'))"
                ".map(g => g.dataset.node);", sel)
            assert sorted(inside) == sorted(c.members)
    ids = driver.execute_script("return Array.from(document.querySelectorAll('[id]')).map(e => e.id);")
    assert len(ids) == len(set(ids))
    step = next(k for k, f in enumerate(report.functions) if f.name.startswith("step"))
    driver.execute_script("document.querySelector('#fn-' + arguments[0] + ' g.node[data-node=\"Unique\"]')"
                          ".dispatchEvent(new MouseEvent('click', {bubbles: true}));", step)
    info = driver.execute_script("return document.querySelector('#fn-' + arguments[0] + ' .focus-info').textContent;", step)
    assert info.startswith("neighbourhood of Unique")
    others = [k for k in range(len(report.functions)) if k != step]
    for k in others:   # the other pictures are not dimmed
        assert driver.execute_script("return document.querySelectorAll('#fn-' + arguments[0] + ' g.dim').length;", k) == 0
    browser.keep_screenshot("report_browser_expanded.png")
    assert browser.severe_logs() == []
