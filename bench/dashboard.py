"""Dashboard benchmark (issue 5), called by bench.run (``make bench``); also ``python -m bench.dashboard [--quick]``.

Against its own ``parallax serve`` (SQLite file in a temporary folder), one run of
100,000 steps (20,000 with ``--quick``) of the eight panels' canonical metrics,
its run page (/dashboard/runs/<id>) in Debian's headless Chromium through Selenium:

(k) first render: from navigation start (``performance.timeOrigin``) to the
    first animation frame where all 8 panels have drawn data (``_fullData``
    non-empty), median of 3 cold loads (1 with ``--quick``), browser cache
    disabled; target <= 2 s. Bytes for that load: the navigation entry's
    ``transferSize`` plus every resource entry's, at that moment;
(l) live refresh: 10 new steps posted over HTTP, then the
    ``_dash-update-component`` requests started after the POST returned, up to
    the new points in the panels: response bytes (``transferSize``, headers
    included) plus request bodies; target <= 20 KB;
(m) the runs list with 10,000 runs (``seed_runs``: written to the database in
    one transaction): from navigation start to the first animation frame with
    its table's rows drawn, median of the cold loads; target <= 1.5 s. The
    list is filtered and paged in SQL (50 rows a page), so the page sent is
    the same size whatever the number of runs.
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from bench import run as _run

BenchError, log, running_server = _run.BenchError, _run.log, _run.running_server

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
METRICS = ("importance_weight_max", "staleness_mean", "staleness_max", "stall_s", "rollout_s", "train_s",
           "trainer_mfu", "pass_at_k", "pass_at_1", "entropy", "reward_train", "reward_heldout")
STEPS, STEPS_QUICK = 100_000, 20_000
BATCH_STEPS = 5_000
LOADS, LOADS_QUICK = 3, 1
LIVE_STEPS = 10
REFRESH_S = 1  # the live page's interval (?refresh=1), so the refresh comes within a second
TARGET_FIRST_RENDER_S = 2.0
RUNS = 10_000  # (m) the runs list with this many runs
RUNS_PAGE_ROWS = 50  # dashboard.pages.RUNS_PAGE_SIZE
TARGET_RUNS_LIST_S = 1.5
TARGET_LIVE_REFRESH_BYTES = 20_000
T0 = 1_764_000_000.0

# Runs in every document before the page's own scripts: a large resource-timing buffer, a record of the
# body size and start of each Dash callback request, and a per-frame check for the eight drawn panels.
PROBE = """
performance.setResourceTimingBufferSize(10000);
window.__px = {drawnAt: null, posts: []};
const _fetch = window.fetch;
window.fetch = function(input, init) {
    const url = typeof input === 'string' ? input : (input && input.url) || '';
    if (url.includes('_dash-update-component')) {
        const body = init && typeof init.body === 'string' ? init.body : '';
        window.__px.posts.push({t: performance.now(), bytes: new TextEncoder().encode(body).length});
    }
    return _fetch.apply(this, arguments);
};
function __pxDrawn() {
    const plots = document.querySelectorAll('[id^="panel-"] .js-plotly-plot');
    return plots.length === 8 && [...plots].every(p => p._fullData && p._fullData.length > 0);
}
window.__px.listAt = null;
(function frame() {
    if (window.__px.listAt === null && document.querySelector('#runs-table .run-row .run-link')) {
        window.__px.listAt = performance.now();
    }
    if (window.__px.drawnAt === null && __pxDrawn()) { window.__px.drawnAt = performance.now(); return; }
    requestAnimationFrame(frame);
})();
"""

FIRST_LOAD = """
const nav = performance.getEntriesByType('navigation')[0];
const res = performance.getEntriesByType('resource');
const layout = res.filter(e => e.name.includes('_dash-layout')).slice(-1)[0];
const page = res.filter(e => e.name.includes('_dash-update-component')).sort((a, b) => b.transferSize - a.transferSize)[0];
return {drawn_ms: window.__px.drawnAt, nav_bytes: nav ? nav.transferSize : 0,
        resource_bytes: res.reduce((a, e) => a + e.transferSize, 0), resources: res.length,
        zero_size: res.filter(e => e.transferSize === 0).length,
        dom_content_loaded_ms: nav ? nav.domContentLoadedEventEnd : null, load_event_ms: nav ? nav.loadEventEnd : null,
        layout_response_end_ms: layout ? layout.responseEnd : null, layout_bytes: layout ? layout.transferSize : null,
        page_callback_response_end_ms: page ? page.responseEnd : null, page_callback_bytes: page ? page.transferSize : null,
        largest: [...res].sort((a, b) => b.transferSize - a.transferSize).slice(0, 3)
                 .map(e => [new URL(e.name).pathname, e.transferSize])};
"""

POINTS_IN = "return document.querySelector('#panel-entropy .js-plotly-plot').data[2].x.length"  # the line (as in the test)


def point(step: int, rng: random.Random) -> dict:
    return {
        "step": step, "time": T0 + step * 0.5,
        "metrics": {
            "importance_weight_max": 1.2 + rng.random(), "staleness_mean": 0.8 + rng.random() * 0.1,
            "staleness_max": 2.0, "stall_s": rng.random(), "rollout_s": 20.0 + rng.random(), "train_s": 30.0 + rng.random(),
            "trainer_mfu": 0.42 + rng.random() * 0.02, "pass_at_k": 0.6 + rng.random() * 0.05,
            "pass_at_1": 0.3 + rng.random() * 0.05, "entropy": 2.0 - step / 100_000 + rng.random() * 0.01,
            "reward_train": 0.2 + step / 500_000 + rng.random() * 0.01, "reward_heldout": 0.25 + rng.random() * 0.01,
        },
    }


def post_points(c: httpx.Client, run_id: int, points: list[dict]) -> None:
    r = c.post(f"/api/v1/runs/{run_id}/metrics", content=orjson.dumps({"points": points}),
               headers={"content-type": "application/json"})
    if r.status_code != 200:
        raise BenchError(f"dashboard bench: ingest HTTP {r.status_code}: {r.text[:300]}")


def load_run(c: httpx.Client, steps: int, rng: random.Random) -> int:
    r = c.post("/api/v1/runs", json={"project": "bench-dashboard", "name": f"dash-{time.time_ns()}",
                                     "config": {"framework": "verl", "lr": 1e-6}})
    if r.status_code not in (200, 201):
        raise BenchError(f"dashboard bench: create run HTTP {r.status_code}: {r.text[:300]}")
    run_id = r.json()["id"]
    start = time.perf_counter()
    for lo in range(0, steps, BATCH_STEPS):
        post_points(c, run_id, [point(s, rng) for s in range(lo, min(steps, lo + BATCH_STEPS))])
    log(f"dashboard: run {run_id} loaded, {steps:,} steps x {len(METRICS)} metrics in {time.perf_counter() - start:.1f}s")
    return run_id


def seed_runs(database_url: str, n: int, *, start: int = 0) -> None:
    """Add ``n`` runs (no points) straight into a Parallax database, as a team's history of runs: 20 projects, 50
    sweep tags, mostly finished, some running or failed. SQL in one transaction (the server, if one runs on the
    database, sees them at its next read): the runs list's bench and browser test need 10,000 runs in a second,
    not the minute that many API calls take."""
    from sqlalchemy import create_engine, text

    now = time.time()
    rows = []
    for i in range(start, start + n):
        status = "running" if i % 40 == 0 else "failed" if i % 17 == 0 else "finished"
        rows.append({"project": f"team-{i % 20:02d}", "name": f"run-{i:05d}",
                     "config": json.dumps({"framework": ("verl", "trl", "openrlhf")[i % 3], "lr": 1e-6 * (1 + i % 7)}),
                     "tags": json.dumps([f"sweep-{i % 50:02d}"] + (["baseline"] if i % 10 == 0 else [])),
                     "status": status, "created_at": now - (start + n - i) * 60.0, "last_seen_at": now - (start + n - i) * 30.0,
                     "last_step": 1000 + i % 5000})
    engine = create_engine(database_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO runs (project, name, config, tags, notes, status, created_at, last_seen_at, "
                              "last_step) VALUES (:project, :name, :config, :tags, '', :status, :created_at, "
                              ":last_seen_at, :last_step)"), rows)
    finally:
        engine.dispose()


def chromium_options(profile: str):
    """Selenium options for Debian's headless Chromium at 1280x900 with its own profile (the bench and the browser
    tests alike)."""
    from selenium.webdriver.chrome.options import Options

    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--enable-unsafe-swiftshader",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
                "--no-first-run", "--window-size=1280,900", f"--user-data-dir={profile}"):
        opts.add_argument(arg)
    return opts


def new_driver(profile: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=chromium_options(profile))
    drv.set_page_load_timeout(60)
    drv.execute_cdp_cmd("Network.enable", {})
    drv.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})  # every load is a cold one
    drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE})
    return drv


def wait_for(drv, js: str, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = drv.execute_script(js)
        if value:
            return value
        time.sleep(0.05)
    raise BenchError(f"dashboard bench: timed out after {timeout:.0f}s waiting for {what}")


def first_load(drv, url: str) -> dict:
    drv.execute_cdp_cmd("Network.clearBrowserCache", {})
    drv.get("about:blank")
    drv.get(url)
    wait_for(drv, "return window.__px && window.__px.drawnAt !== null", 30, "the eight drawn panels")
    out = drv.execute_script(FIRST_LOAD)
    out["seconds"] = out.pop("drawn_ms") / 1000
    for k in ("dom_content_loaded_ms", "load_event_ms", "layout_response_end_ms", "page_callback_response_end_ms"):
        v = out.pop(k)
        out[k.replace("_ms", "_s")] = None if v is None else v / 1000
    out["bytes"] = out["nav_bytes"] + out["resource_bytes"]
    if out["bytes"] <= 0 or out["zero_size"] == out["resources"]:
        raise BenchError(f"dashboard bench: no transfer sizes reported: {out}")
    return out


def live_refresh(drv, base: str, c: httpx.Client, run_id: int, steps: int, rng: random.Random) -> dict:
    drv.get(f"{base}/dashboard/runs/{run_id}?refresh={REFRESH_S}")
    wait_for(drv, "return window.__px && window.__px.drawnAt !== null", 30, "the eight drawn panels (live page)")
    # A first interval tick, answered (a quiet tick: the baseline). Not just any callback request: the router's
    # is one too, and posting while a tick is in flight lets that tick, started before the mark, carry the new
    # steps, so none after it does.
    shown = drv.execute_script("return window.__px.posts.length")
    wait_for(drv, f"return window.__px.posts.length > {shown} && performance.getEntriesByType('resource')"
                  ".filter(e => e.name.includes('_dash-update-component')).length >= window.__px.posts.length",
             10, "a first interval tick, answered")
    before = drv.execute_script(POINTS_IN)
    post_points(c, run_id, [point(s, rng) for s in range(steps, steps + LIVE_STEPS)])
    mark = drv.execute_script("return performance.now()")  # ticks from here on see the new steps
    seen = wait_for(drv, f"return ({POINTS_IN.removeprefix('return ')}) >= {before + LIVE_STEPS} ? performance.now() : null",
                    15, f"{LIVE_STEPS} new steps in the entropy panel")
    got = drv.execute_script("""
        const mark = arguments[0];
        const upd = performance.getEntriesByType('resource').filter(e => e.name.includes('_dash-update-component'));
        const after = upd.filter(e => e.startTime >= mark && e.responseEnd <= arguments[1]);
        const quiet = upd.filter(e => e.startTime < mark).slice(-1);
        return {responses: after.map(e => e.transferSize), bodies: after.map(e => e.encodedBodySize),
                request_bodies: window.__px.posts.filter(p => p.t >= mark && p.t <= Math.max(...after.map(e => e.startTime))).map(p => p.bytes),
                quiet_tick_bytes: quiet.length ? quiet[0].transferSize : null,
                quiet_request_bytes: window.__px.posts.filter(p => p.t < mark).slice(-1).map(p => p.bytes)[0]};
    """, mark, seen)  # the requests that started after the POST and were answered by the time the steps showed
    if not got["responses"]:
        raise BenchError(f"dashboard bench: no _dash-update-component request seen for the refresh: {got}")
    received, sent = sum(got["responses"]), sum(got["request_bodies"])
    return {"new_steps": LIVE_STEPS, "requests": len(got["responses"]), "response_bytes": received,
            "response_body_bytes": sum(got["bodies"]), "request_body_bytes": sent, "bytes": received + sent,
            "seconds_to_appear": (seen - mark) / 1000, "quiet_tick_response_bytes": got["quiet_tick_bytes"],
            "quiet_tick_request_bytes": got["quiet_request_bytes"]}


def runs_list_load(drv, url: str) -> dict:
    """A cold load of the runs list: navigation start to the first frame with its table's rows drawn."""
    drv.execute_cdp_cmd("Network.clearBrowserCache", {})
    drv.get("about:blank")
    drv.get(url)
    wait_for(drv, "return window.__px && window.__px.listAt !== null", 60, "the runs list drawn")
    got = drv.execute_script("""
        const nav = performance.getEntriesByType('navigation')[0];
        const res = performance.getEntriesByType('resource');
        const page = res.filter(e => e.name.includes('_dash-update-component')).sort((a, b) => b.transferSize - a.transferSize)[0];
        return {ms: window.__px.listAt, rows: document.querySelectorAll('#runs-table .run-row').length,
                pager: (document.getElementById('runs-pager') || {}).innerText || '',
                bytes: (nav ? nav.transferSize : 0) + res.reduce((a, e) => a + e.transferSize, 0),
                page_callback_bytes: page ? page.transferSize : null};""")
    return {"seconds": got["ms"] / 1000, "rows": got["rows"], "pager": got["pager"], "bytes": got["bytes"],
            "page_callback_bytes": got["page_callback_bytes"]}


def measure(quick: bool = False, lib: object = None) -> dict:
    """First render and live refresh of a run page; the document bench.run puts under "dashboard"."""
    global BenchError, log, running_server
    if lib is not None:
        BenchError, log, running_server = lib.BenchError, lib.log, lib.running_server
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        raise BenchError(f"{CHROMIUM} and {CHROMEDRIVER} are needed: apt-get install -y chromium chromium-driver")
    try:
        from selenium.common.exceptions import WebDriverException
    except ImportError as exc:
        raise BenchError("selenium is needed for the dashboard benchmark (the project's test extra)") from exc
    steps, loads = (STEPS_QUICK, LOADS_QUICK) if quick else (STEPS, LOADS)
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix="parallax-bench-dashboard-") as tmp:
        with running_server(Path(tmp)) as server, httpx.Client(base_url=server.url, timeout=120) as c:
            log(f"(k) dashboard: loading a run of {steps:,} steps, {len(METRICS)} metrics")
            run_id = load_run(c, steps, rng)
            profile = tempfile.mkdtemp(prefix="parallax-chromium-", dir=tmp)
            try:
                drv = new_driver(profile)
            except WebDriverException as exc:
                raise BenchError(f"dashboard bench: Chromium did not start: {exc.msg}") from exc
            try:
                samples = []
                for i in range(loads):
                    s = first_load(drv, f"{server.url}/dashboard/runs/{run_id}")
                    log(f"dashboard first render {i + 1}/{loads}: {s['seconds']:.2f}s, {s['bytes'] / 1000:,.1f} kB "
                        f"in {s['resources'] + 1} requests")
                    samples.append(s)
                log(f"(l) dashboard live refresh: {LIVE_STEPS} new steps")
                live = live_refresh(drv, server.url, c, run_id, steps, rng)
                log(f"dashboard live refresh: {live['bytes']:,} bytes ({live['response_bytes']:,} received, "
                    f"{live['request_body_bytes']:,} sent) in {live['requests']} request(s)")
                log(f"(m) dashboard runs list: {RUNS:,} runs")
                seed_runs(f"sqlite:///{server.db_path}", RUNS - 1)  # and the benched run: 10,000
                lists = []
                for i in range(loads):
                    r = runs_list_load(drv, f"{server.url}/dashboard/")
                    if r["rows"] != RUNS_PAGE_ROWS or f"of {RUNS:,}" not in r["pager"]:
                        raise BenchError(f"dashboard bench: the runs list drew {r['rows']} rows, '{r['pager']}'")
                    log(f"dashboard runs list {i + 1}/{loads}: {r['seconds']:.2f}s, {r['bytes'] / 1000:,.1f} kB")
                    lists.append(r)
            except WebDriverException as exc:
                raise BenchError(f"dashboard bench: the browser failed: {exc.msg}") from exc
            finally:
                drv.quit()
                shutil.rmtree(profile, ignore_errors=True)
    render_s = statistics.median(s["seconds"] for s in samples)
    load_bytes = statistics.median(s["bytes"] for s in samples)
    list_s = statistics.median(r["seconds"] for r in lists)
    met = {"first_render": render_s <= TARGET_FIRST_RENDER_S, "live_refresh": live["bytes"] <= TARGET_LIVE_REFRESH_BYTES,
           "runs_list": list_s <= TARGET_RUNS_LIST_S}
    return {"steps": steps, "metrics": list(METRICS), "panels": 8, "loads": loads,
            "first_render_s": render_s, "first_load_bytes": load_bytes, "first_load_samples": samples,
            "live_refresh": live, "target_first_render_s_max": TARGET_FIRST_RENDER_S,
            "target_live_refresh_bytes_max": TARGET_LIVE_REFRESH_BYTES,
            "runs_list": {"runs": RUNS, "first_render_s": list_s, "bytes": statistics.median(r["bytes"] for r in lists),
                          "samples": lists, "target_s_max": TARGET_RUNS_LIST_S},
            "met_detail": met, "met": all(met.values())}


def rows(doc: dict, Row: type) -> list:
    """Lines for bench.run's table."""
    live, met = doc["live_refresh"], doc["met_detail"]
    out = [
        Row(f"dashboard, {doc['steps']:,} steps, first render", f"{doc['first_render_s']:.2f} s",
            target=f"≤ {doc['target_first_render_s_max']:.0f} s", met=met["first_render"]),
        Row("dashboard first load, bytes", f"{doc['first_load_bytes'] / 1000:,.1f} kB"),
        Row(f"dashboard live refresh, {live['new_steps']} steps", f"{live['bytes'] / 1000:,.1f} kB",
            f"{live['response_bytes'] / 1000:.1f} kB in, {live['request_body_bytes'] / 1000:.1f} kB out",
            target=f"≤ {doc['target_live_refresh_bytes_max'] / 1000:.0f} kB", met=met["live_refresh"]),
    ]
    lst = doc.get("runs_list")
    if lst:
        out.append(Row(f"dashboard runs list, {lst['runs']:,} runs, first render", f"{lst['first_render_s']:.2f} s",
                       f"{lst['bytes'] / 1000:,.1f} kB loaded", ratio=f"{lst['first_render_s'] / lst['target_s_max']:.2f}",
                       target=f"≤ {lst['target_s_max']:g} s", met=met["runs_list"]))
    return out


if __name__ == "__main__":
    out = measure(quick="--quick" in sys.argv)
    print(json.dumps(out, indent=2))
