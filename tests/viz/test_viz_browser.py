"""The HTML page in a real browser: headless Chromium driven by Selenium (chromedriver from the Debian
package ``chromium-driver``) opens the page from a local file; one SVG group per cluster, the reasons'
text, hover tooltips with node details, no script errors. Screenshots are kept in pytest's tmp_path and
copied to ``out/`` (gitignored). Skipped, not failed, when Chromium, chromedriver or Selenium is absent.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tfxla_cluster.viz import write

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--no-first-run"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def chromedriver() -> str | None:
    return "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else shutil.which("chromedriver")


@pytest.fixture(scope="module")
def driver():
    webdriver = pytest.importorskip("selenium.webdriver", reason="Selenium (pip install selenium) is not installed")
    from selenium.webdriver.chrome.service import Service

    browser, drv = chromium(), chromedriver()
    if not browser or not drv:
        pytest.skip("headless Chromium needs the Debian packages chromium and chromium-driver")
    profile = tempfile.mkdtemp(prefix="tfxla-viz-chrome-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in CHROME_ARGS + [f"--user-data-dir={profile}", "--window-size=1400,1000"]:
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(drv), options=opts)
    d.set_page_load_timeout(30)
    yield d
    d.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def pages(unique_result, variables_result, tmp_path_factory):
    from tfxla_cluster.viz.layout import graphviz_available

    if not graphviz_available():
        pytest.skip("Graphviz (Debian package graphviz, PyPI graphviz) is not installed")
    folder = tmp_path_factory.mktemp("pages")
    result, flags = unique_result
    full = write(result, folder / "unique_in_middle.html", flags=flags, title="unique_in_middle")
    result, flags = variables_result
    collapsed = write(result, folder / "variables_collapsed.html", flags=flags, title="variables",
                      collapse=True)
    return {"full": full, "collapsed": collapsed}


def keep_screenshot(driver, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    assert driver.save_screenshot(str(shot))
    out = ROOT / "out"
    out.mkdir(exist_ok=True)
    shutil.copy(shot, out / name)
    return shot


def hover(driver, css: str):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    el = driver.find_element(By.CSS_SELECTOR, css)
    # Pointer actions need the element in the viewport; the SVG sits in a scrolling canvas.
    driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'});", el)
    ActionChains(driver).move_to_element(el).perform()
    return driver.find_element(By.ID, "tooltip")


def severe_logs(driver) -> list:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def test_one_svg_group_per_cluster_and_the_reasons(driver, pages, unique_result, tmp_path):
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
    assert severe_logs(driver) == []
    keep_screenshot(driver, tmp_path, "viz_browser_page.png")


def test_hovering_a_node_shows_its_details(driver, pages, tmp_path):
    from selenium.webdriver.common.by import By

    driver.get(pages["full"].as_uri())
    tip = driver.find_element(By.ID, "tooltip")
    assert not tip.is_displayed()
    tip = hover(driver, 'g.node[data-node="Unique"]')
    assert tip.is_displayed()
    text = tip.text
    assert "op: Unique" in text and "not clustered [unique]: Unique op" in text
    assert "float32[?]" in text and "int32[12]" in text and "CPU:0" in text and "out_idx" in text
    keep_screenshot(driver, tmp_path, "viz_browser_hover.png")

    text = hover(driver, 'g.node[data-node="mul"]').text
    assert "op: Mul" in text and "cluster: cluster_1" in text and "float32[3,4]" in text

    hover(driver, "header h1")   # leaving the node hides the panel
    assert not driver.find_element(By.ID, "tooltip").is_displayed()
    assert severe_logs(driver) == []


def test_collapsed_clusters_hover_and_search(driver, pages, variables_result, tmp_path):
    from selenium.webdriver.common.by import By

    result, _ = variables_result
    driver.get(pages["collapsed"].as_uri())
    groups = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg g.xla-cluster.collapsed'))"
        ".map(g => [g.id, g.dataset.cluster]);")
    assert sorted(groups) == [[f"cluster_{n}", n] for n in sorted(result.clusters)]
    text = hover(driver, "#cluster_cluster_1").text
    assert "cluster_1" in text and f"{len(result.clusters['cluster_1'])} nodes" in text
    search = driver.find_element(By.ID, "search")
    search.send_keys("resource")
    assert driver.find_element(By.ID, "search-count").text.endswith("found")
    matches = driver.execute_script("return document.querySelectorAll('g.node.match').length;")
    assert matches == sum(1 for n in result.decisions if "resource" in n.lower() and not result.cluster_of(n))
    keep_screenshot(driver, tmp_path, "viz_browser_collapsed.png")
    assert severe_logs(driver) == []


def test_dump_dom_without_selenium(pages, unique_result, tmp_path):
    """Chromium alone (``--dump-dom``) sees the page's clusters after its script ran."""
    browser = chromium()
    if not browser:
        pytest.skip("headless Chromium needs the Debian package chromium")
    proc = subprocess.run([browser, *CHROME_ARGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           pages["full"].as_uri()], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-500:]
    dom = proc.stdout
    for name in unique_result[0].clusters:
        assert f'id="cluster_{name}"' in dom
    assert 'data-node="Unique"' in dom and 'id="tooltip"' in dom
