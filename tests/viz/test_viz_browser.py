"""The HTML page in a real browser: headless Chromium driven by Selenium (chromedriver from the Debian
package ``chromium-driver``) opens the page from a local file; one SVG group per cluster, the reasons'
text, hover tooltips with node details, no script errors. Screenshots are kept in pytest's tmp_path and
copied to ``out/`` (gitignored). Without Chromium, chromedriver or Selenium: failed when CI is set,
skipped loudly elsewhere (tests/conftest.py).
"""
from __future__ import annotations

import subprocess

import pytest

from tfxla_cluster.viz import write

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def pages(unique_result, variables_result, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pages")
    result, flags = unique_result
    full = write(result, folder / "unique_in_middle.html", flags=flags, title="unique_in_middle")
    result, flags = variables_result
    collapsed = write(result, folder / "variables_collapsed.html", flags=flags, title="variables",
                      collapse=True)
    return {"full": full, "collapsed": collapsed}


def test_one_svg_group_per_cluster_and_the_reasons(driver, browser, pages, unique_result):
    from selenium.webdriver.common.by import By

    result, _ = unique_result
    driver.get(pages["full"].as_uri())
    ids = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg g.xla-cluster')).map(g => g.id);")
    assert sorted(ids) == [f"cluster_{name}" for name in sorted(result.clusters)]
    for name, members in result.clusters.items():
        inside = driver.execute_script(
            "return Array.from(document.getElementById(arguments[0]).querySelectorAll('g.node'))"
            ".map(g => g.dataset.node);", f"cluster_{name}")
        assert sorted(inside) == sorted(members)
    reasons = driver.find_element(By.ID, "reasons").text
    assert "[unique]" in reasons and "Unique op" in reasons and "TF never auto-clusters Unique" in reasons
    assert "[no_xla_kernel]" in reasons and "No registered 'Placeholder' OpKernel" in reasons
    unique_label = driver.find_element(By.CSS_SELECTOR, 'g.node[data-node="Unique"]').text
    assert "[unique]" in unique_label
    assert "Clustering info for graph of size 24" in driver.find_element(By.ID, "tf-summary").text
    assert "--tf_xla_cpu_global_jit" in driver.find_element(By.ID, "flags").text
    assert browser.severe_logs() == []
    browser.keep_screenshot("viz_browser_page.png")


def test_hovering_a_node_shows_its_details(driver, browser, pages):
    from selenium.webdriver.common.by import By

    driver.get(pages["full"].as_uri())
    tip = driver.find_element(By.ID, "tooltip")
    assert not tip.is_displayed()
    tip = browser.hover('g.node[data-node="Unique"]')
    assert tip.is_displayed()
    text = tip.text
    assert "op: Unique" in text and "not clustered [unique]: Unique op" in text
    assert "float32[?]" in text and "int32[12]" in text and "CPU:0" in text and "out_idx" in text
    browser.keep_screenshot("viz_browser_hover.png")

    text = browser.hover('g.node[data-node="mul"]').text
    assert "op: Mul" in text and "cluster: cluster_1" in text and "float32[3,4]" in text

    browser.hover("header h1")   # leaving the node hides the panel
    assert not driver.find_element(By.ID, "tooltip").is_displayed()
    assert browser.severe_logs() == []


def test_collapsed_clusters_hover_and_search(driver, browser, pages, variables_result):
    from selenium.webdriver.common.by import By

    result, _ = variables_result
    driver.get(pages["collapsed"].as_uri())
    groups = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg g.xla-cluster.collapsed'))"
        ".map(g => [g.id, g.dataset.cluster]);")
    assert sorted(groups) == [[f"cluster_{n}", n] for n in sorted(result.clusters)]
    text = browser.hover("#cluster_cluster_1").text
    assert "cluster_1" in text and f"{len(result.clusters['cluster_1'])} nodes" in text
    search = driver.find_element(By.ID, "search")
    search.send_keys("resource")
    assert driver.find_element(By.ID, "search-count").text.endswith("found")
    matches = driver.execute_script("return document.querySelectorAll('g.node.match').length;")
    assert matches == sum(1 for n in result.decisions if "resource" in n.lower() and not result.cluster_of(n))
    browser.keep_screenshot("viz_browser_collapsed.png")
    assert browser.severe_logs() == []


def test_dump_dom_without_selenium(pages, unique_result, tmp_path, chrome_command):
    """Chromium alone (``--dump-dom``) sees the page's clusters after its script ran."""
    proc = subprocess.run([*chrome_command, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           pages["full"].as_uri()], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-500:]
    dom = proc.stdout
    for name in unique_result[0].clusters:
        assert f'id="cluster_{name}"' in dom
    assert 'data-node="Unique"' in dom and 'id="tooltip"' in dom
