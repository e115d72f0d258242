"""The dashboard in a real browser: `parallax serve` as a subprocess, Debian's headless Chromium through Selenium.

Screenshots of each page are saved under pytest's temporary folder
(``<basetemp>/dashboard-screenshots``) or under
``$PARALLAX_TEST_ARTIFACTS`` when that is set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from bench.dashboard import CHROMEDRIVER, CHROMIUM, chromium_options
from tests.servers import parallax_server

STEPS = 1200  # past pages.FIRST_LOAD_POINTS (downsampled, with envelopes); two runs overlaid pass figures.GL_THRESHOLD
STALL_FROM = 1150

if os.environ.get("PARALLAX_TEST_BROWSER") == "skip":
    pytest.skip("PARALLAX_TEST_BROWSER=skip", allow_module_level=True)

from selenium import webdriver  # noqa: E402  (in the test extra)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def point(step: int, scale: float = 1.0) -> dict:
    stalled = step >= STALL_FROM
    return {
        "step": step,
        "metrics": {
            "importance_weight_max": 1.2 + (8.0 if step == 600 else 0.0),  # a one-step spike the envelope keeps
            "staleness_mean": 0.8, "staleness_max": 2.0,
            "stall_s": 30.0 if stalled else 0.0, "rollout_s": 60.0 if stalled else 20.0, "train_s": 30.0,
            "trainer_mfu": 0.42 * scale, "pass_at_k": 0.6, "pass_at_1": 0.3 * scale,
            "entropy": 2.0 - step / 2000, "reward_train": 0.2 + step / 5000 * scale,
            "reward_heldout": 0.25,
        },
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[dict]:
    with parallax_server(tmp_path_factory.mktemp("serve")) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        runs = {}
        for name, scale, cfg in (("a", 1.0, {"framework": "verl", "lr": 1e-6, "k": 8}),
                                 ("b", 0.5, {"framework": "verl", "lr": 3e-6, "k": 8})):
            rid = c.post("/api/v1/runs", json={"project": "browser", "name": name, "config": cfg,
                                               "tags": ["ui"]}).json()["id"]
            for lo in range(0, STEPS, 400):
                pts = [point(s, scale) for s in range(lo, min(lo + 400, STEPS))]
                assert c.post(f"/api/v1/runs/{rid}/metrics", json={"points": pts}).status_code == 200
            runs[name] = rid
        c.post(f"/api/v1/runs/{runs['a']}/events", json={"events": [{"step": 500, "kind": "checkpoint"}]})
        yield {"base": srv.url, "runs": runs}


@pytest.fixture(scope="module")
def driver() -> Iterator[object]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(f"{CHROMIUM} and {CHROMEDRIVER} are needed: apt-get install -y chromium chromium-driver "
                    "(or set PARALLAX_TEST_BROWSER=skip)")
    profile = tempfile.mkdtemp(prefix="parallax-chromium-")
    opts = chromium_options(profile)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    where = os.environ.get("PARALLAX_TEST_ARTIFACTS")
    path = Path(where) if where else tmp_path_factory.getbasetemp() / "dashboard-screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def severe(drv) -> list[dict]:
    return [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"]


def wait(drv, js: str, timeout: float = 120, what: str = ""):
    return WebDriverWait(drv, timeout, poll_frequency=0.2).until(lambda d: d.execute_script(js), what or js)


PANELS_DRAWN = """
const plots = document.querySelectorAll('[id^="panel-"] .js-plotly-plot, [id^="compare-"] .js-plotly-plot');
return plots.length === 8 && [...plots].every(p => p._fullData && p._fullData.length > 0);
"""


def test_run_page_shows_eight_panels_diagnosis_and_live_points(server, driver, shots):
    base, run = server["base"], server["runs"]["a"]
    driver.get(f"{base}/dashboard/runs/{run}?refresh=1")
    wait(driver, PANELS_DRAWN, what="eight drawn panels")
    ids = driver.execute_script("return [...document.querySelectorAll('[id^=\"panel-\"] .js-plotly-plot')].map(p => p.parentElement.closest('[id]').id)")
    assert ids == ["panel-importance_weight_max", "panel-staleness", "panel-stall", "panel-trainer_mfu",
                   "panel-pass_at_k", "panel-pass_at_1", "panel-entropy", "panel-reward"]
    # Every panel really drew its downsampled points (SVG here: see figures.GL_THRESHOLD; the compare
    # page's busiest panel checks WebGL).
    wait(driver, """
        return [...document.querySelectorAll('[id^="panel-"] .js-plotly-plot')].every(gd =>
            [...gd.querySelectorAll('.scatterlayer path.js-line')].some(p => /^M[^Z]*L/.test(p.getAttribute('d') || '')));""",
         what="every panel's lines drawn as SVG")
    # The one-step spike at step 600 survived downsampling in the envelope's upper edge.
    spike = driver.execute_script("return Math.max(...document.querySelector('#panel-importance_weight_max .js-plotly-plot').data[1].y)")
    assert spike == pytest.approx(9.2)
    # The stall alert fired: shaded on the stall panel, explained in the diagnosis with the balancing ratio.
    diagnosis = driver.find_element(By.ID, "diagnosis").text
    assert "rollout_stall" in diagnosis and "unbalanced_groups" in diagnosis and "2.00:1" in diagnosis
    shapes = driver.execute_script("return document.querySelector('#panel-stall .js-plotly-plot').layout.shapes.map(s => s.name || '')")
    assert any("rollout_stall" in s for s in shapes)
    driver.save_screenshot(str(shots / "run.png"))

    # Live: ten new steps pushed over HTTP appear without a reload.
    count = "return document.querySelector('#panel-entropy .js-plotly-plot').data[2].x.length"
    before = driver.execute_script(count)
    driver.execute_script("window.__marker = 'same page'")
    pts = [point(s) for s in range(STEPS, STEPS + 10)]
    assert httpx.post(f"{base}/api/v1/runs/{run}/metrics", json={"points": pts}, timeout=10).status_code == 200
    wait(driver, f"return document.querySelector('#panel-entropy .js-plotly-plot').data[2].x.length >= {before + 10}",
         what="the new points in the entropy panel")
    last = driver.execute_script("const x = document.querySelector('#panel-entropy .js-plotly-plot').data[2].x; return x[x.length - 1]")
    assert last == STEPS + 9
    assert driver.execute_script("return window.__marker") == "same page"
    # Live: an alert that fires while the page is open reaches its diagnosis and verdict without a reload.
    assert "nonfinite_values" not in driver.find_element(By.ID, "diagnosis").text
    nan = '{"points": [{"step": %d, "metrics": {"loss": NaN}}]}' % (STEPS + 10)
    assert httpx.post(f"{base}/api/v1/runs/{run}/metrics", content=nan, headers={"content-type": "application/json"},
                      timeout=10).status_code == 200
    wait(driver, "return document.getElementById('diagnosis').innerText.includes('nonfinite_values')",
         what="the new alert in the diagnosis")
    verdict = driver.find_element(By.ID, "verdict").text
    assert "numerical_blowup" in verdict and "ongoing" in verdict
    assert driver.execute_script("return window.__marker") == "same page"
    assert severe(driver) == []


def test_compare_page_overlays_two_runs(server, driver, shots):
    base, runs = server["base"], server["runs"]
    driver.get(f"{base}/dashboard/compare?runs={runs['a']},{runs['b']}&smooth=0.5")
    wait(driver, PANELS_DRAWN, what="eight drawn compare panels")
    names = driver.execute_script("return document.querySelector('#compare-entropy .js-plotly-plot').data.map(t => t.name)")
    assert names == ["a", "b"]
    # The spike at step 600 survives downsampling (bucket maxima) and smoothing, if damped.
    peak = driver.execute_script("return Math.max(...document.querySelector('#compare-importance_weight_max .js-plotly-plot').data[0].y)")
    assert peak > 4
    assert "lr" in driver.find_element(By.ID, "config-diff").text
    # Two runs x three timing metrics (~600 points each) pass figures.GL_THRESHOLD: that panel is WebGL, and it really drew: its GL
    # canvas has a live context (asked of Plotly's own regl handle: calling getContext on other canvases would
    # create contexts and make Chromium drop the oldest), and no "WebGL is not supported" box.
    live = driver.execute_script("""
        const gd = document.querySelector('#compare-stall .js-plotly-plot');
        const gl = (gd._fullLayout._glcanvas ? gd._fullLayout._glcanvas.data() : []).filter(d => d.regl);
        return gl.length > 0 && gl.every(d => !d.regl._gl.isContextLost());""")
    assert live is True
    assert "WebGL is not supported" not in driver.find_element(By.TAG_NAME, "body").text
    time.sleep(1)  # WebGL draws on the next animation frames: let the screenshot show it
    driver.save_screenshot(str(shots / "compare.png"))
    assert severe(driver) == []


def test_run_pages_draw_with_the_basic_plotly_bundle_and_compare_with_the_full_one(server, driver):
    """assets/plotly_early.js: the run page loads plotly-basic (once, before its graphs wait on it), the compare
    page Dash's full plotly.min.js (WebGL); neither loads the other."""
    base, runs = server["base"], server["runs"]
    loaded = "return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname).filter(p => p.includes('plotly'))"
    driver.get(f"{base}/dashboard/runs/{runs['a']}")
    wait(driver, PANELS_DRAWN, what="eight drawn panels")
    scripts = driver.execute_script(loaded)
    assert scripts.count("/dashboard/assets/vendor/plotly-basic.min.js") == 1 and not any("plotly.min.js" in p for p in scripts)
    assert driver.execute_script("return typeof Plotly.react") == "function"
    driver.get(f"{base}/dashboard/compare?runs={runs['a']},{runs['b']}")
    wait(driver, PANELS_DRAWN, what="eight drawn compare panels")
    scripts = driver.execute_script(loaded)
    assert scripts.count("/dashboard/_dash-component-suites/plotly/package_data/plotly.min.js") == 1
    assert not any("plotly-basic" in p for p in scripts)
    assert severe(driver) == []


def test_runs_and_alerts_pages(server, driver, shots):
    base = server["base"]
    driver.get(f"{base}/dashboard/")
    wait(driver, "return document.querySelectorAll('#runs-table .run-row').length === 2", what="two runs listed")
    assert "unbalanced_groups" in driver.find_element(By.ID, "runs-table").text  # the verdict: the stall's cause
    driver.save_screenshot(str(shots / "runs.png"))
    # Filters live in the URL.
    driver.get(f"{base}/dashboard/?status=finished")
    wait(driver, "return document.body.innerText.includes('No run matches these filters.')", what="the filtered list")
    # A run's link opens its page in place (client-side routing).
    driver.get(f"{base}/dashboard/")
    wait(driver, "return document.querySelectorAll('#runs-table .run-link').length === 2", what="run links")
    driver.execute_script("window.__marker = 'same page'")
    driver.find_element(By.LINK_TEXT, "b").click()
    wait(driver, PANELS_DRAWN, what="the run page after a click")
    assert driver.current_url.endswith(f"/dashboard/runs/{server['runs']['b']}")
    assert driver.execute_script("return window.__marker") == "same page"
    driver.get(f"{base}/dashboard/alerts?state=firing")
    wait(driver, "return document.querySelectorAll('.alert-row').length > 0", what="firing alerts listed")
    driver.save_screenshot(str(shots / "alerts.png"))
    button = driver.find_element(By.XPATH, "//button[text()='Acknowledge']")
    button.click()
    wait(driver, "return document.getElementById('alerts-message').innerText.startsWith('Acknowledged')",
         what="the acknowledgement")
    assert severe(driver) == []


def test_demo_runs_show_their_diagnosis_in_the_browser(tmp_path, driver, shots):
    """`parallax demo`'s runs (three of them, lockstep): each faulty run page names the injected cause first, with
    the demo_fault marker on its panels; the healthy run page says every rule is quiet."""
    from parallax.server.demo import run_demo, select_runs

    with parallax_server(tmp_path) as srv:
        _, outcomes = run_demo(srv.url, select_runs("unbalanced-groups,reward-hacking"), steps=230, speed=0)
        for o in outcomes:
            driver.get(f"{srv.url}/dashboard/runs/{o.run_id}")
            wait(driver, PANELS_DRAWN, what=f"the panels of {o.run.name}")
            diagnosis = driver.find_element(By.ID, "diagnosis").text
            driver.save_screenshot(str(shots / f"demo-{o.run.name}.png"))
            if o.run.fault is None:
                assert "No alerts: every rule is quiet for this run." in diagnosis
                continue
            assert o.first_rule in diagnosis and o.run.expected in diagnosis, diagnosis
            # the injected cause is the first cause named on the page
            named = [c for c in ("unbalanced_groups", "padding_imbalance", "reward_hacking", "exploration_collapse")
                     if c in diagnosis]
            assert min(named, key=diagnosis.index) == o.run.expected
            shapes = driver.execute_script(
                "return [...document.querySelectorAll('[id^=\"panel-\"] .js-plotly-plot')]"
                ".flatMap(gd => (gd.layout.shapes || []).map(s => s.name || ''))")
            assert any("demo_fault" in s for s in shapes), shapes
        assert severe(driver) == []
