"""The dashboard in a real browser: `parallax serve` as a subprocess, Debian's headless Chromium through Selenium.

Screenshots of each page are saved under pytest's temporary folder
(``<basetemp>/dashboard-screenshots``) or under
``$PARALLAX_TEST_ARTIFACTS`` when that is set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
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
    assert names == ["a (raw)", "a", "b (raw)", "b"]  # smoothed, the raw line faint behind
    # The spike at step 600 survives downsampling (bucket maxima) and smoothing, if damped.
    peak = driver.execute_script("return Math.max(...document.querySelector('#compare-importance_weight_max .js-plotly-plot').data[1].y)")
    assert peak > 4
    assert "lr" in driver.find_element(By.ID, "config-diff").text
    # Every panel's plot is as wide as the others (no legend of its own), so their x axes line up.
    wait(driver, """const s = [...document.querySelectorAll('[id^="compare-"] .js-plotly-plot')]
                        .map(gd => gd._fullLayout._size.l + ',' + gd._fullLayout._size.w);
                    return s.length === 8 && new Set(s).size === 1;""", what="eight plots of one width")
    assert driver.find_element(By.ID, "compare-legend").text.split("\n")[0].startswith("a (#")
    # Every panel really drew its lines, as SVG (the basic plotly.js bundle, see assets/plotly_early.js).
    wait(driver, """return [...document.querySelectorAll('[id^="compare-"] .js-plotly-plot')].every(gd =>
            [...gd.querySelectorAll('.scatterlayer path.js-line')].some(p => /^M[^Z]*L/.test(p.getAttribute('d') || '')));""",
         what="every compare panel's lines drawn as SVG")
    driver.save_screenshot(str(shots / "compare.png"))
    assert severe(driver) == []


def test_run_and_compare_pages_draw_with_the_basic_plotly_bundle(server, driver):
    """assets/plotly_early.js: the run page and the compare page load plotly-basic (once, before their graphs wait
    on it), never Dash's full plotly.min.js."""
    base, runs = server["base"], server["runs"]
    loaded = "return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname).filter(p => p.includes('plotly'))"
    for url in (f"{base}/dashboard/runs/{runs['a']}", f"{base}/dashboard/compare?runs={runs['a']},{runs['b']}"):
        driver.get("about:blank")
        driver.get(url)
        wait(driver, PANELS_DRAWN, what="eight drawn panels")
        scripts = driver.execute_script(loaded)
        assert scripts.count("/dashboard/assets/vendor/plotly-basic.min.js") == 1, scripts
        assert not any("plotly.min.js" in p for p in scripts), scripts
        assert driver.execute_script("return typeof Plotly.react") == "function"
    assert severe(driver) == []


def test_runs_and_alerts_pages(server, driver, shots):
    base = server["base"]
    driver.get(f"{base}/dashboard/")
    wait(driver, "return document.querySelectorAll('#runs-table .run-row').length === 2", what="two runs listed")
    assert "unbalanced_groups" in driver.find_element(By.ID, "runs-table").text  # the verdict: the stall's cause
    driver.save_screenshot(str(shots / "runs.png"))
    # "Compare" stays inert until two runs are picked.
    link = driver.find_element(By.ID, "compare-link")
    assert "disabled" in link.get_attribute("class") and link.value_of_css_property("pointer-events") == "none"
    driver.execute_script("window.dash_clientside.set_props('compare-pick', {value: [arguments[0]]})", server["runs"]["a"])
    wait(driver, "return document.getElementById('compare-link').innerText.includes('one more')", what="one run picked")
    driver.execute_script("window.dash_clientside.set_props('compare-pick', {value: arguments[0]})",
                          [server["runs"]["a"], server["runs"]["b"]])
    wait(driver, "return !document.getElementById('compare-link').className.includes('disabled')", what="two runs picked")
    assert link.get_attribute("href").endswith(f"/dashboard/compare?runs={server['runs']['a']},{server['runs']['b']}")
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


def test_runs_and_alerts_lists_refresh_live_and_tabs_are_titled(server, driver):
    """A run created and an alert fired while the runs list and the alerts page are open appear without a reload."""
    base = server["base"]
    driver.get(f"{base}/dashboard/?refresh=1")
    wait(driver, "return document.querySelectorAll('#runs-table .run-row').length >= 2", what="the runs listed")
    assert driver.title == "Runs · Parallax"
    rows = driver.execute_script("return document.querySelectorAll('#runs-table .run-row').length")
    driver.execute_script("window.__marker = 'same page'")
    c = httpx.Client(base_url=base, timeout=30)
    rid = c.post("/api/v1/runs", json={"project": "live", "name": "late-run"}).json()["id"]
    wait(driver, f"return document.querySelectorAll('#runs-table .run-row').length === {rows + 1}",
         what="the new run in the list")
    assert "late-run" in driver.find_element(By.ID, "runs-table").text
    assert driver.execute_script("return window.__marker") == "same page"

    driver.get(f"{base}/dashboard/alerts?state=firing&refresh=1")
    wait(driver, "return document.querySelectorAll('.alert-row').length > 0", what="firing alerts listed")
    assert driver.title == "Firing alerts · Parallax"
    before = driver.execute_script("return document.querySelectorAll('.alert-row').length")
    driver.execute_script("window.__marker = 'same page'")
    pts = [{"step": s, "metrics": {"stall_s": 30.0, "rollout_s": 60.0, "train_s": 30.0, "staleness_max": 1.0}}
           for s in range(50)]
    assert c.post(f"/api/v1/runs/{rid}/metrics", json={"points": pts}).status_code == 200
    wait(driver, f"return document.querySelectorAll('.alert-row').length === {before + 1}", what="the new alert listed")
    assert "late-run" in driver.find_element(By.ID, "alerts-table").text
    assert driver.execute_script("return window.__marker") == "same page"
    # The run finishes while the runs list is open: its alert resolves, its verdict stays (a finished faulty run
    # does not look healthy).
    driver.get(f"{base}/dashboard/?refresh=1&q=late-run")
    wait(driver, "return document.querySelectorAll('#runs-table .run-row').length === 1", what="the late run")
    assert c.patch(f"/api/v1/runs/{rid}", json={"status": "finished"}).status_code == 200
    wait(driver, "return document.querySelector('#runs-table .run-row').innerText.includes('finished')",
         what="the run finished, live")
    row = driver.find_element(By.CSS_SELECTOR, "#runs-table .run-row")
    assert "unbalanced_groups" in row.text and "healthy" not in row.text
    c.close()
    assert severe(driver) == []


def test_a_server_that_stops_answering_shows_in_the_page(tmp_path, driver):
    """The run page says when the server does not answer (not only the console), and clears once it answers."""
    from tests.servers import ServerProcess

    with ServerProcess(tmp_path, f"sqlite:///{tmp_path}/p.db") as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            rid = c.post("/api/v1/runs", json={"project": "p", "name": "down"}).json()["id"]
            assert c.post(f"/api/v1/runs/{rid}/metrics", json={"points": [point(s) for s in range(20)]}).status_code == 200
        driver.get(f"{srv.url}/dashboard/runs/{rid}?refresh=1")
        wait(driver, PANELS_DRAWN, what="eight drawn panels")
        assert driver.title == f"down (#{rid}) · p · Parallax"
        state = "return (document.getElementById('px-conn') || {dataset: {state: 'ok'}}).dataset.state"
        assert driver.execute_script(state) == "ok"
        srv.stop()
        wait(driver, state + " === 'error'", what="the connection error shown")
        text = driver.find_element(By.ID, "px-conn").text
        assert "No connection to the server" in text and "The page shows data as of" in text, text
        srv.start()
        wait(driver, state + " === 'ok'", what="the error cleared once the server answers")
    driver.get_log("browser")  # Dash logged the failed requests (SEVERE): the bar is the point; drained for the next test


def test_panels_zoom_and_hover_together_and_the_zoom_goes_in_the_url(server, driver):
    from selenium.webdriver.common.action_chains import ActionChains

    base, run = server["base"], server["runs"]["a"]
    driver.get(f"{base}/dashboard/runs/{run}")
    wait(driver, PANELS_DRAWN, what="eight drawn panels")
    ranges = "return [...document.querySelectorAll('[id^=\"panel-\"] .js-plotly-plot')].map(gd => gd._fullLayout.xaxis.range)"
    # A drag across the middle of the entropy panel zooms it, and the seven others follow.
    drag = driver.find_element(By.CSS_SELECTOR, "#panel-entropy .nsewdrag")
    w = drag.size["width"]
    ActionChains(driver).move_to_element_with_offset(drag, -w // 4, 0).click_and_hold() \
        .move_by_offset(w // 2, 5).release().perform()
    wait(driver, """const r = [...document.querySelectorAll('[id^="panel-"] .js-plotly-plot')].map(gd => gd._fullLayout.xaxis.range);
                    return r[6][1] - r[6][0] < 800 && r.every(x => Math.abs(x[0] - r[6][0]) < 1e-6 && Math.abs(x[1] - r[6][1]) < 1e-6);""",
         what="every panel zoomed to the entropy panel's steps")
    lo, hi = driver.execute_script(ranges)[6]
    wait(driver, f"return location.search.includes('from={int(lo)}') && location.search.includes('to=')",
         what="the zoom in the address bar")
    # The pointer over a step of one panel shows that step in every panel (unified hover labels).
    ActionChains(driver).move_to_element(drag).perform()
    wait(driver, """return [...document.querySelectorAll('[id^="panel-"] .js-plotly-plot')]
                        .every(gd => gd.querySelector('.hoverlayer') && gd.querySelector('.hoverlayer').children.length > 0);""",
         what="hover labels in all eight panels")
    # Log scale from its checkbox, into the URL, the zoom kept (the page redraws from the new address).
    driver.find_element(By.CSS_SELECTOR, "#run-log input").click()
    wait(driver, "return location.search.includes('log=1')", what="log=1 in the address bar")
    wait(driver, "return [...document.querySelectorAll('[id^=\"panel-\"] .js-plotly-plot')].every(gd => gd._fullLayout.yaxis.type === 'log')",
         what="every panel on a log scale")
    assert f"from={int(lo)}" in driver.current_url
    got = driver.execute_script(ranges)
    assert all(abs(r[0] - int(lo)) < 1e-6 for r in got), got
    # A shared link opens zoomed and on the log scale: the same steps in every panel.
    url = driver.current_url
    driver.get("about:blank")
    driver.get(url)
    wait(driver, PANELS_DRAWN, what="eight drawn panels (from the link)")
    got = driver.execute_script(ranges)
    assert all(abs(r[0] - int(lo)) < 1e-6 for r in got), got
    assert all(driver.execute_script("return [...document.querySelectorAll('[id^=\"panel-\"] .js-plotly-plot')]"
                                     ".map(gd => gd._fullLayout.yaxis.type === 'log')"))
    # A reset (double-click) of one panel resets them all. Dash's graph listens for it once its first plot has
    # resolved, which a busy machine may draw (the axes above) before it listens.
    wait(driver, "return [...document.querySelectorAll('[id^=\"panel-\"] .js-plotly-plot')]"
                 ".every(gd => gd._ev && gd._ev.listenerCount('plotly_relayout') > 0)",
         what="every panel listening for its zoom")
    driver.execute_script("Plotly.relayout(document.querySelector('#panel-stall .js-plotly-plot'), {'xaxis.autorange': true})")
    wait(driver, "return [...document.querySelectorAll('[id^=\"panel-\"] .js-plotly-plot')].every(gd => gd._fullLayout.xaxis.autorange)",
         what="every panel back to all steps")
    wait(driver, "return !location.search.includes('from=')", what="the zoom out of the address bar")
    assert severe(driver) == []


def viewport(drv, width: int, height: int) -> None:
    drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})


LAYOUT = """
const rect = e => e.getBoundingClientRect();
const panels = [...document.querySelectorAll('[id^="panel-"].dash-graph')].map(rect);
const side = document.querySelector('.run-side');
const grid = document.getElementById('panel-grid');
const overlaps = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
const clash = [...document.querySelectorAll('[id^="panel-"] .js-plotly-plot')].some(gd => {
    const legend = gd.querySelector('.legend'), bar = gd.querySelector('.modebar');
    return legend && bar && overlaps(rect(legend), rect(bar));
});
const pres = [...document.querySelectorAll('.run-side pre')];
return {panels: panels.map(r => [r.left, r.top, r.width, r.bottom]), height: innerHeight, width: innerWidth,
        grid: rect(grid).height, side_overflow: getComputedStyle(side).overflowY, side_bottom: rect(side).bottom,
        clash: clash, clipped: pres.filter(p => p.scrollWidth > p.clientWidth + 1).map(p => p.className || p.id),
        page_width: document.documentElement.scrollWidth};
"""


def test_run_page_layout_above_the_fold_and_on_a_phone(server, driver, shots):
    """At 1280x800 the eight panels sit above the fold beside a sidebar that scrolls on its own, legends clear of
    the modebar, the config and the audit command wrapped; at 390 px one column, nothing wider than the screen."""
    base = server["base"]
    with httpx.Client(base_url=base, timeout=30) as c:
        config = {"framework": "verl", "staleness_bound": 4,
                  "model_path": "/checkpoints/" + "a-very-long-directory-name-without-breaks" * 3 + "/final"}
        rid = c.post("/api/v1/runs", json={"project": "layout", "name": "wide-config", "config": config}).json()["id"]
        assert c.post(f"/api/v1/runs/{rid}/metrics", json={"points": [point(s) for s in range(1200)]}).status_code == 200
    try:
        viewport(driver, 1280, 800)
        driver.get(f"{base}/dashboard/runs/{rid}")
        wait(driver, PANELS_DRAWN, what="eight drawn panels")
        wait(driver, "return document.querySelector('#panel-stall .modebar') !== null", what="the modebars")
        got = driver.execute_script(LAYOUT)
        assert len(got["panels"]) == 8 and all(bottom <= got["height"] for *_, bottom in got["panels"]), got
        assert got["grid"] < got["height"]  # not stretched to the sidebar's height
        assert got["side_overflow"] == "auto" and got["side_bottom"] <= got["height"] + 1, got
        assert not got["clash"] and not got["clipped"], got
        assert {round(left) for left, *_ in got["panels"]}.__len__() == 2  # two columns
        driver.save_screenshot(str(shots / "run-1280x800.png"))

        viewport(driver, 390, 844)
        driver.get(f"{base}/dashboard/runs/{rid}")
        wait(driver, PANELS_DRAWN, what="eight drawn panels at 390 px")
        wait(driver, """return [...document.querySelectorAll('[id^="panel-"] .js-plotly-plot')]
                            .every(gd => gd._fullLayout && gd._fullLayout.width > 300)""", what="panels as wide as the screen")
        got = driver.execute_script(LAYOUT)
        assert len({round(left) for left, *_ in got["panels"]}) == 1, got  # one column
        assert all(w > 300 for _, _, w, _ in got["panels"]) and got["page_width"] <= 390, got
        assert not got["clipped"], got
        driver.save_screenshot(str(shots / "run-390.png"))
        driver.get(f"{base}/dashboard/")
        wait(driver, "return document.querySelectorAll('#runs-table .run-row').length > 0", what="the runs at 390 px")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 390
        driver.save_screenshot(str(shots / "runs-390.png"))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert severe(driver) == []


def test_an_alert_link_opens_its_run_zoomed_to_its_steps(server, driver):
    base = server["base"]
    driver.get(f"{base}/dashboard/alerts?state=firing&severity=warning&run={server['runs']['a']}")
    wait(driver, "return [...document.querySelectorAll('.alert-row')].some(r => r.innerText.includes('rollout_stall'))",
         what="the stall alert listed")
    rows = driver.find_elements(By.CSS_SELECTOR, ".alert-row")
    assert all("browser/a" in r.text and "warning" in r.text for r in rows)  # filtered by run and severity
    row = next(r for r in rows if "rollout_stall" in r.text)
    assert "unbalanced_groups" in row.text and "UTC" in row.text  # the cause and when it fired
    link = row.find_element(By.CSS_SELECTOR, "a.alert-link")
    href = link.get_attribute("href")
    assert "from=" in href and "to=" in href and "alert=" in href
    link.click()
    wait(driver, PANELS_DRAWN, what="the run page's panels")
    from urllib.parse import parse_qs, urlparse

    q = {k: v[0] for k, v in parse_qs(urlparse(driver.current_url).query).items()}
    lo, hi = float(q["from"]), float(q["to"])
    assert lo >= STALL_FROM - 200 and hi > STALL_FROM  # around the stall, not the whole run
    wait(driver, f"""return [...document.querySelectorAll('[id^="panel-"] .js-plotly-plot')]
                         .every(gd => Math.abs(gd._fullLayout.xaxis.range[0] - {lo}) < 1e-6
                                      && Math.abs(gd._fullLayout.xaxis.range[1] - {hi}) < 1e-6)""",
         what="every panel zoomed to the alert's steps")
    card = driver.find_element(By.CSS_SELECTOR, f".alert-card.alert-focus#alert-{q['alert']}")
    assert "rollout_stall" in card.text
    wait(driver, """const c = document.querySelector('.alert-card.alert-focus').getBoundingClientRect();
                    const s = document.querySelector('.run-side').getBoundingClientRect();
                    return c.top >= s.top - 1 && c.top < s.bottom;""", what="the alert's card in the sidebar's view")
    assert severe(driver) == []


def test_ten_thousand_runs_list_pages_and_filters(tmp_path, driver):
    """10,000 runs: the runs list draws one page of them, pages through them and finds one by name, status or
    verdict, filtered in SQL (the time it takes is make bench's)."""
    from bench.dashboard import seed_runs

    with parallax_server(tmp_path) as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        seed_runs(f"sqlite:///{tmp_path}/parallax.db", 10_000)
        needle = c.post("/api/v1/runs", json={"project": "hunt", "name": "needle-stall"}).json()["id"]
        pts = [{"step": s, "metrics": {"stall_s": 30.0, "rollout_s": 60.0, "train_s": 30.0, "staleness_max": 1.0}}
               for s in range(50)]
        assert c.post(f"/api/v1/runs/{needle}/metrics", json={"points": pts}).status_code == 200
        rows = "return [...document.querySelectorAll('#runs-table .run-row .run-link')].map(a => a.innerText)"
        driver.get(f"{srv.url}/dashboard/")
        wait(driver, "return document.querySelectorAll('#runs-table .run-row').length === 50", what="a page of 50 runs")
        assert driver.find_element(By.ID, "runs-pager").text.startswith("runs 1–50 of 10,001")
        first = driver.execute_script(rows)
        assert first[:2] == ["needle-stall", "run-09999"]  # newest first
        driver.find_element(By.LINK_TEXT, "next ›").click()
        wait(driver, "return document.getElementById('runs-pager').innerText.startsWith('runs 51–100 of 10,001')",
             what="the second page")
        second = driver.execute_script(rows)
        assert len(second) == 50 and not set(second) & set(first) and second[0] == "run-09950"
        assert "page=2" in driver.current_url
        # a search over all 10,001 runs, from the search box (Enter), into the URL
        box = driver.find_element(By.ID, "filter-search")
        box.send_keys("NEEDLE\n")
        wait(driver, "return document.querySelectorAll('#runs-table .run-row').length === 1", what="the search's run")
        assert driver.execute_script(rows) == ["needle-stall"] and "q=NEEDLE" in driver.current_url
        assert "page=" not in driver.current_url
        assert "unbalanced_groups" in driver.find_element(By.ID, "runs-table").text
        # verdict and status filters from the URL
        driver.get(f"{srv.url}/dashboard/?verdict=faulty")
        wait(driver, "return document.querySelectorAll('#runs-table .run-row').length === 1", what="the faulty run")
        assert driver.execute_script(rows) == ["needle-stall"]
        driver.get(f"{srv.url}/dashboard/?status=failed&tag=sweep-07&project=team-07")
        wait(driver, "return document.getElementById('runs-pager') !== null", what="the filtered list")
        names = driver.execute_script(rows)
        expect = [f"run-{i:05d}" for i in range(9999, -1, -1)
                  if i % 17 == 0 and i % 40 != 0 and i % 50 == 7 and i % 20 == 7][:50]
        assert names == expect and names
        # the compare picker finds any of the 10,001 runs by typing (searched on the server, not among the 50 shown)
        driver.get(f"{srv.url}/dashboard/")
        wait(driver, "return document.querySelectorAll('#runs-table .run-row').length === 50", what="the list again")
        # dcc.Dropdown is loaded lazily (its own script chunk): on a busy machine it can appear after the list
        wait(driver, "return document.getElementById('compare-pick') !== null", what="the compare picker")
        driver.find_element(By.ID, "compare-pick").click()
        wait(driver, "return document.activeElement && document.activeElement.type === 'search'", what="the search box")
        driver.switch_to.active_element.send_keys("run-00003")
        wait(driver, "return document.body.innerText.includes('team-03/run-00003')", what="an old run offered")
        assert severe(driver) == []
