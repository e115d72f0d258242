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
(k2) the runs list with 10,000 runs (``seed_runs``: written to the database in
    one transaction): from navigation start to the first animation frame with
    its table's rows drawn, median of the cold loads; target <= 1.5 s. The
    list is filtered and paged in SQL (50 rows a page), so the page sent is
    the same size whatever the number of runs;
(l2) live-update latency: a batch of 10 new steps accepted (its POST answered)
    to those steps drawn in the open run page (refreshing every second), 5
    batches at random moments of the interval, with the page as the only
    viewer and with 49 simulated viewers refreshing the same run (threads
    sending the page's own refresh request every second); target: the worst
    at 50 viewers <= 1 refresh interval + 0.5 s;
(k3) the compare page with 8 runs of the bench's length (7 copies of the run,
    scaled, made in SQL): navigation start to the 8 panels drawn, median of
    the cold loads; target <= 2.5 s.
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
RUNS = 10_000  # (k2) the runs list with this many runs
RUNS_PAGE_ROWS = 50  # dashboard.pages.RUNS_PAGE_SIZE
TARGET_RUNS_LIST_S = 1.5
VIEWERS = 50  # (l2) the browser and 49 simulated viewers refreshing the same run page
LATENCY_SAMPLES = 5
TARGET_COMPARE_S = 2.5  # (k3) the compare page with 8 runs of the bench's length
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
window.__px.compareAt = null;
function __pxCompareDrawn() {
    const plots = document.querySelectorAll('[id^="compare-"] .js-plotly-plot');
    return plots.length === 8 && [...plots].every(p => p._fullData && p._fullData.length > 0);
}
(function frame() {
    if (window.__px.listAt === null && document.querySelector('#runs-table .run-row .run-link')) {
        window.__px.listAt = performance.now();
    }
    if (window.__px.compareAt === null && __pxCompareDrawn()) { window.__px.compareAt = performance.now(); }
    if (window.__px.drawnAt === null && __pxDrawn()) { window.__px.drawnAt = performance.now(); }
    if (window.__px.drawnAt === null || window.__px.compareAt === null) { requestAnimationFrame(frame); }
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


def live_latency(drv, c: httpx.Client, run_id: int, first_step: int, rng: random.Random, samples: int) -> list[float]:
    """Seconds from a batch of new steps accepted (its POST answered) to those steps drawn in the open run page's
    entropy panel, ``samples`` times, each batch at a random moment of the refresh interval."""
    out = []
    step = first_step
    for _ in range(samples):
        time.sleep(rng.uniform(0.2, 0.2 + REFRESH_S))
        before = drv.execute_script(POINTS_IN)
        post_points(c, run_id, [point(s, rng) for s in range(step, step + LIVE_STEPS)])
        mark = drv.execute_script("return performance.now()")
        seen = wait_for(drv, f"return ({POINTS_IN.removeprefix('return ')}) >= {before + LIVE_STEPS} ? "
                             "performance.now() : null", 30, f"{LIVE_STEPS} new steps in the entropy panel")
        out.append((seen - mark) / 1000)
        step += LIVE_STEPS
    return out


class Viewers:
    """Simulated viewers of a run page: each asks for the live refresh every REFRESH_S, as the page's interval
    does (the same ``_dash-update-component`` request, carrying the state the last answer gave it)."""

    def __init__(self, base: str, run_id: int, count: int):
        import threading

        self.base, self.run_id, self.count = base, run_id, count
        self.stop = threading.Event()
        self.seconds: list[float] = []  # each refresh's answer time
        self.errors = 0
        deps = httpx.get(f"{base}/dashboard/_dash-dependencies", timeout=30).json()
        from parallax.dashboard import ids
        from parallax.dashboard.figures import PANELS

        [self.output] = [d["output"] for d in deps if f"{ids.RUN_STATE}.data" in d["output"]
                         and f"{ids.RUN_STATUS}.children" in d["output"]]
        self.outputs = ([{"id": ids.panel(p.key), "property": "extendData"} for p in PANELS]
                        + [{"id": ids.panel(p.key), "property": "figure"} for p in PANELS]
                        + [{"id": ids.RUN_STATE, "property": "data"}, {"id": ids.RUN_STATUS, "property": "children"},
                           {"id": ids.DIAGNOSIS, "property": "children"}, {"id": ids.TITLE, "property": "data"}])
        self.ids = ids
        self.threads = [threading.Thread(target=self._viewer, args=(i,), daemon=True) for i in range(count)]
        # Where a viewer starts: the state its page load gave it (one refresh from nothing draws the panels anew and
        # hands it over), as a browser that opened the page has it.
        self.state = self._refresh(httpx.Client(base_url=base, timeout=120), {"run": run_id, "since": {}}, 0)[1]
        if not self.state:
            raise BenchError("dashboard bench: a viewer's first refresh gave no state")

    def _refresh(self, c: httpx.Client, state: dict, n: int) -> tuple[httpx.Response, dict | None]:
        ids = self.ids
        body = {"output": self.output, "outputs": self.outputs,
                "inputs": [{"id": ids.RUN_TICK, "property": "n_intervals", "value": n}],
                "state": [{"id": ids.RUN_STATE, "property": "data", "value": state}],
                "changedPropIds": [f"{ids.RUN_TICK}.n_intervals"]}
        r = c.post("/dashboard/_dash-update-component", content=orjson.dumps(body),
                   headers={"content-type": "application/json"})
        new = r.json().get("response", {}).get(ids.RUN_STATE, {}).get("data") if r.status_code == 200 else None
        return r, new

    def _viewer(self, i: int) -> None:
        state: dict = dict(self.state)
        n = 0
        with httpx.Client(base_url=self.base, timeout=60) as c:
            due = time.monotonic() + REFRESH_S * i / max(1, self.count)  # spread over the interval, as real ones are
            while not self.stop.is_set():
                time.sleep(max(0.0, due - time.monotonic()))
                due += REFRESH_S
                n += 1
                t0 = time.perf_counter()
                try:
                    r, new = self._refresh(c, state, n)
                except (httpx.HTTPError, ValueError):
                    self.errors += 1
                    continue
                self.seconds.append(time.perf_counter() - t0)
                if new:
                    state = new
                if r.status_code not in (200, 204):
                    self.errors += 1

    def __enter__(self) -> "Viewers":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def copy_run(database_url: str, source: int, copies: int) -> list[int]:
    """``copies`` runs holding the source run's points, each scaled by its own factor (points, latest values and
    rollups copied in SQL): the compare page's 8 long runs without loading each over HTTP."""
    from sqlalchemy import create_engine, text

    engine = create_engine(database_url)
    made = []
    try:
        for k in range(copies):
            f = 1.0 + 0.07 * (k + 1)
            with engine.begin() as conn:
                rid = conn.execute(text(
                    "INSERT INTO runs (project, name, config, tags, notes, status, created_at, last_seen_at, last_step) "
                    "SELECT project, name || :suffix, config, tags, notes, 'finished', created_at, last_seen_at, "
                    "last_step FROM runs WHERE id = :src RETURNING id"), {"suffix": f"-copy{k + 1}", "src": source}).scalar_one()
                args = {"new": rid, "src": source, "f": f}
                conn.execute(text("INSERT INTO points (run_id, key_id, step, value, nonfinite, time) SELECT :new, key_id, "
                                  "step, value * :f, nonfinite, time FROM points WHERE run_id = :src"), args)
                conn.execute(text("INSERT INTO latest (run_id, key_id, step, value, nonfinite, time) SELECT :new, key_id, "
                                  "step, value * :f, nonfinite, time FROM latest WHERE run_id = :src"), args)
                conn.execute(text("INSERT INTO rollups (run_id, key_id, level, block, n, vmin, vmax, last_step) SELECT "
                                  ":new, key_id, level, block, n, vmin * :f, vmax * :f, last_step FROM rollups "
                                  "WHERE run_id = :src"), args)
            made.append(rid)
    finally:
        engine.dispose()
    return made


def compare_load(drv, url: str) -> dict:
    """A cold load of the compare page: navigation start to the first frame with its 8 panels drawn."""
    drv.execute_cdp_cmd("Network.clearBrowserCache", {})
    drv.get("about:blank")
    drv.get(url)
    wait_for(drv, "return window.__px && window.__px.compareAt !== null", 120, "the compare page's eight panels")
    got = drv.execute_script("""
        const nav = performance.getEntriesByType('navigation')[0];
        const res = performance.getEntriesByType('resource');
        const page = res.filter(e => e.name.includes('_dash-update-component')).sort((a, b) => b.transferSize - a.transferSize)[0];
        return {ms: window.__px.compareAt, traces: [...document.querySelectorAll('[id^="compare-"] .js-plotly-plot')]
                    .reduce((a, gd) => a + gd._fullData.length, 0),
                bytes: (nav ? nav.transferSize : 0) + res.reduce((a, e) => a + e.transferSize, 0),
                page_callback_bytes: page ? page.transferSize : null,
                page_callback_response_end_s: page ? page.responseEnd / 1000 : null};""")
    return {"seconds": got["ms"] / 1000, "traces": got["traces"], "bytes": got["bytes"],
            "page_callback_bytes": got["page_callback_bytes"], "page_callback_response_end_s": got["page_callback_response_end_s"]}


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
                log(f"(l2) dashboard live-update latency, 1 viewer: {LATENCY_SAMPLES} batches of {LIVE_STEPS} steps")
                step = steps + LIVE_STEPS
                one = live_latency(drv, c, run_id, step, rng, LATENCY_SAMPLES)
                step += LIVE_STEPS * LATENCY_SAMPLES
                log("dashboard live-update latency, 1 viewer: " + ", ".join(f"{x:.2f}s" for x in one))
                with Viewers(server.url, run_id, VIEWERS - 1) as crowd:
                    wait_until = time.monotonic() + 60
                    while len(crowd.seconds) < 2 * crowd.count and time.monotonic() < wait_until:
                        time.sleep(0.1)  # every viewer refreshing
                    warm = len(crowd.seconds)
                    many = live_latency(drv, c, run_id, step, rng, LATENCY_SAMPLES)
                    ticks = sorted(crowd.seconds[warm:])
                step += LIVE_STEPS * LATENCY_SAMPLES
                log(f"dashboard live-update latency, {VIEWERS} viewers: " + ", ".join(f"{x:.2f}s" for x in many)
                    + f"; their refreshes answered in p50 {ticks[len(ticks) // 2]:.3f}s, "
                      f"p99 {ticks[int(len(ticks) * 0.99)]:.3f}s ({len(ticks)} refreshes, {crowd.errors} errors)")
                latency = {"refresh_s": REFRESH_S, "samples": LATENCY_SAMPLES, "one_viewer_s": one, "viewers": VIEWERS,
                           "many_viewers_s": many, "viewer_refreshes": len(ticks), "viewer_errors": crowd.errors,
                           "viewer_refresh_p50_s": ticks[len(ticks) // 2] if ticks else None,
                           "viewer_refresh_p99_s": ticks[int(len(ticks) * 0.99)] if ticks else None,
                           "target_s_max": REFRESH_S + 0.5}
                log(f"(k3) dashboard compare page: 8 runs x {steps:,} steps")
                others = copy_run(f"sqlite:///{server.db_path}", run_id, 7)
                compares = []
                for i in range(loads):
                    r = compare_load(drv, f"{server.url}/dashboard/compare?runs={','.join(map(str, [run_id, *others]))}")
                    log(f"dashboard compare page {i + 1}/{loads}: {r['seconds']:.2f}s, {r['bytes'] / 1000:,.1f} kB "
                        f"(the page's callback {r['page_callback_bytes'] / 1000:,.1f} kB, answered at "
                        f"{r['page_callback_response_end_s']:.2f}s), {r['traces']} traces")
                    compares.append(r)
                log(f"(k2) dashboard runs list: {RUNS:,} runs")
                seed_runs(f"sqlite:///{server.db_path}", RUNS - 1 - len(others))  # with the benched ones: 10,000
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
    compare_s = statistics.median(r["seconds"] for r in compares)
    met = {"first_render": render_s <= TARGET_FIRST_RENDER_S, "live_refresh": live["bytes"] <= TARGET_LIVE_REFRESH_BYTES,
           "runs_list": list_s <= TARGET_RUNS_LIST_S,
           "live_latency": max(latency["many_viewers_s"]) <= latency["target_s_max"],
           "compare": compare_s <= TARGET_COMPARE_S}
    return {"steps": steps, "metrics": list(METRICS), "panels": 8, "loads": loads,
            "first_render_s": render_s, "first_load_bytes": load_bytes, "first_load_samples": samples,
            "live_refresh": live, "target_first_render_s_max": TARGET_FIRST_RENDER_S,
            "target_live_refresh_bytes_max": TARGET_LIVE_REFRESH_BYTES,
            "runs_list": {"runs": RUNS, "first_render_s": list_s, "bytes": statistics.median(r["bytes"] for r in lists),
                          "samples": lists, "target_s_max": TARGET_RUNS_LIST_S},
            "live_latency": latency,
            "compare": {"runs": 8, "steps": steps, "first_render_s": compare_s, "samples": compares,
                        "bytes": statistics.median(r["bytes"] for r in compares), "target_s_max": TARGET_COMPARE_S},
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
    lat = doc.get("live_latency")
    if lat:
        for label, key, check in (("1 viewer", "one_viewer_s", None), (f"{lat['viewers']} viewers", "many_viewers_s",
                                                                        met.get("live_latency"))):
            worst = max(lat[key])
            out.append(Row(f"dashboard live update, point accepted → drawn, {label}",
                           f"{statistics.median(lat[key]):.2f} s median, {worst:.2f} s worst",
                           f"refresh every {lat['refresh_s']:g} s", ratio=f"{worst / lat['target_s_max']:.2f}",
                           target=f"≤ {lat['target_s_max']:g} s", met=check))
    cmp_ = doc.get("compare")
    if cmp_:
        out.append(Row(f"dashboard compare page, {cmp_['runs']} runs x {cmp_['steps']:,} steps, first render",
                       f"{cmp_['first_render_s']:.2f} s", f"{cmp_['bytes'] / 1000:,.1f} kB loaded",
                       ratio=f"{cmp_['first_render_s'] / cmp_['target_s_max']:.2f}",
                       target=f"≤ {cmp_['target_s_max']:g} s", met=met.get("compare")))
    lst = doc.get("runs_list")
    if lst:
        out.append(Row(f"dashboard runs list, {lst['runs']:,} runs, first render", f"{lst['first_render_s']:.2f} s",
                       f"{lst['bytes'] / 1000:,.1f} kB loaded", ratio=f"{lst['first_render_s'] / lst['target_s_max']:.2f}",
                       target=f"≤ {lst['target_s_max']:g} s", met=met["runs_list"]))
    return out


if __name__ == "__main__":
    out = measure(quick="--quick" in sys.argv)
    print(json.dumps(out, indent=2))
