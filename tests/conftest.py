"""Shared test set-up.

Tests run with ``--import-mode=importlib`` (test files in different folders share names) and with the
repository root and ``tools/`` on ``sys.path`` (``pythonpath = . tools`` in setup.cfg), so helper modules are
imported by their package path (``from tests.gdb import GDB``, ``from tests.codegen.cg_helpers import check``)
and the scripts tests drive by their own names (``import tf_record``, ``import zoo``). TF's
C++ logs stay quiet. The headless-Chromium fixtures of the
browser tests (tests/viz, tests/report) are here, so both drive the browser the same way.

A missing browser (Chromium, chromedriver or Selenium) fails the browser tests when ``CI`` is set
(``CI=true``: .ci/run installs them, so their absence is a broken set-up, not a reason to skip);
anywhere else they are skipped loudly: a pytest warning and a line in the terminal summary.
"""
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The persistent compile cache is on by default in the user's cache directory: tests (and the processes
# they start, which inherit this) must not share compiled code through it, nor depend on what an
# earlier run left there. Tests of the cache give it a directory of their own.
os.environ["TFXLA_COMPILE_CACHE"] = "off"
# The suite verifies the HLO after every pass that changed it, as XLA's pipelines do (DESIGN.md item 4),
# so a pass that breaks an invariant is named by the test that runs it; users get the cheaper default of
# one verification after the last pass (--tfxla_hlo_verifier=pipeline).
os.environ.setdefault("TFXLA_CLUSTER_FLAGS", "--tfxla_hlo_verifier=pass")
ROOT = Path(__file__).resolve().parent.parent
CHROME_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--no-first-run"]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _chromedriver() -> str | None:
    return "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else shutil.which("chromedriver")


BROWSER_SKIP = "browser test skipped: "


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def no_browser(what: str) -> None:
    """Fail (in CI) or skip loudly: ``what`` is missing."""
    if in_ci():
        pytest.fail(f"CI is set but {what}: the browser tests must run in CI (.ci/run installs the Debian "
                    "packages chromium and chromium-driver, and the test extra installs selenium)", pytrace=False)
    warnings.warn(pytest.PytestWarning(BROWSER_SKIP + what))
    pytest.skip(BROWSER_SKIP + what)


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if BROWSER_SKIP in str(getattr(r, "longrepr", ""))]
    if skipped:
        reason = str(skipped[0].longrepr[-1]) if isinstance(skipped[0].longrepr, tuple) else str(skipped[0].longrepr)
        terminalreporter.write_sep("!", f"{len(skipped)} BROWSER TESTS WERE SKIPPED, NOT RUN", red=True, bold=True)
        terminalreporter.write_line(reason.replace("Skipped: ", ""), red=True)
        terminalreporter.write_line("(with CI=true they fail instead; install: apt-get install chromium "
                                    "chromium-driver; pip install selenium)", red=True)


@pytest.fixture
def chrome_command() -> list[str]:
    """Chromium and its headless flags, for running it without Selenium (see :func:`no_browser`)."""
    browser = _chromium()
    if not browser:
        no_browser("headless Chromium is not installed (Debian package chromium)")
    return [browser, *CHROME_ARGS]


@pytest.fixture(scope="module")
def driver():
    """Headless Chromium under Selenium, one per test module (see :func:`no_browser`)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        no_browser("Selenium is not installed (pip install selenium)")
    browser, drv = _chromium(), _chromedriver()
    if not browser or not drv:
        no_browser("headless Chromium needs the Debian packages chromium and chromium-driver "
                   f"(missing: {', '.join(n for n, p in (('chromium', browser), ('chromedriver', drv)) if not p)})")
    profile = tempfile.mkdtemp(prefix="tfxla-chrome-")
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


class Browser:
    """What the browser tests do with ``driver`` besides plain Selenium calls."""

    def __init__(self, driver, tmp_path: Path):
        self.driver, self.tmp_path = driver, tmp_path

    def hover(self, css: str):
        """Moves the pointer onto the element at ``css``; returns the ``#tooltip`` element."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By

        el = self.driver.find_element(By.CSS_SELECTOR, css)
        # Pointer actions need the element in the viewport; the SVG sits in a scrolling canvas.
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'});", el)
        ActionChains(self.driver).move_to_element(el).perform()
        return self.driver.find_element(By.ID, "tooltip")

    def severe_logs(self) -> list:
        return [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def keep_screenshot(self, name: str) -> Path:
        """A screenshot in the test's tmp_path, copied to out/ (gitignored) to look at."""
        shot = self.tmp_path / name
        assert self.driver.save_screenshot(str(shot))
        out = ROOT / "out"
        out.mkdir(exist_ok=True)
        shutil.copy(shot, out / name)
        return shot


@pytest.fixture
def browser(driver, tmp_path) -> Browser:
    return Browser(driver, tmp_path)


# Tests whose expectations depend on TF's oneDNN mode (TF's CPU kernels and grappler's remapper differ with
# TF_ENABLE_ONEDNN_OPTS): every test under these paths is marked ``onednn_mode``, and
# tests/test_onednn_modes.py re-runs the marked tests in the mode this process is not in. A single test
# elsewhere carries the mark itself.
ONEDNN_MODE_PATHS = (
    "tests/tf2hlo/",
    "tests/e2e/test_corpus_e2e.py",
    "tests/e2e/test_runtime_regressions.py",
    "tests/e2e/test_keras_plugin.py",
    "tests/e2e/test_debugging_ops.py",
    "tests/runtime/test_function_e2e.py",
    "tests/test_readme_api.py",
    "tests/report/test_numerics.py",
    "tests/codegen/test_graphs.py",
)


# The longest single test (a whole pytest run in the other oneDNN mode) starts first, so that with one
# worker per CPU (setup.cfg) the other workers run the rest of the suite beside it.
FIRST = "tests/test_onednn_modes.py"


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: not Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix() == FIRST)
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
        if rel.startswith(ONEDNN_MODE_PATHS):
            item.add_marker(pytest.mark.onednn_mode)
