"""Every route of the app honours the tokens, and no token ever shows up in a log line or a response.

The routes are enumerated from ``app.routes`` (included routers and mounts
too) and each must have a request in ``REQUESTS`` below: a route added later
without an entry here fails ``test_every_route_has_an_auth_case``, and once it
has one, the parametrized checks hold it to the same rules as the others:

- a write (POST, PUT, PATCH, DELETE) is refused (401) with no token, a wrong
  token (Bearer or HTTP basic) or the read token, and accepted with the write
  token (Bearer or basic);
- a read (GET, HEAD, and the dashboard with its callbacks) is refused with no
  token or a wrong one, and accepted with the read token or the write token;
- the dashboard's acknowledge and silence callbacks act only with the write token.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import httpx
import pytest
from sqlalchemy import text
from starlette.routing import Mount, Route

from parallax.dashboard import ids
from parallax.ingest import remote_write as rw
from tests.conftest import make_client
from tests.servers import free_port, parallax_server, wait_healthy

WRITE = "w-" + secrets.token_hex(16)
READ = "r-" + secrets.token_hex(16)
WRONG = "x-" + secrets.token_hex(16)
SECRETS = (WRITE, READ, WRONG)
WRITE_METHODS = frozenset(("POST", "PUT", "PATCH", "DELETE"))
OPEN = {("GET", "/healthz")}  # probes stay open


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(token: str, user: str = "someone") -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()}


def forms(token: str) -> list[str]:
    """The ways a token travels: as itself and inside basic credentials."""
    return [token, base64.b64encode(f"someone:{token}".encode()).decode()]


# -- the routes ------------------------------------------------------------------


def walk_routes(routes: list, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path template) of every route; ("MOUNT", path) for a mounted app."""
    for r in routes:
        included = getattr(r, "original_router", None)  # FastAPI wraps an included router
        if included is not None:
            context = getattr(r, "include_context", None)
            yield from walk_routes(included.routes, prefix + (getattr(context, "prefix", "") or ""))
        elif isinstance(r, Mount):
            yield "MOUNT", prefix + r.path
        elif isinstance(r, Route) or hasattr(r, "methods"):
            for method in sorted(r.methods or ()):
                yield method, prefix + r.path
        else:
            raise AssertionError(f"a route of a kind this test does not know: {r!r}")


@dataclass
class Ctx:
    client: Any
    run: int
    alert: int
    store: Any
    deps: list = field(default_factory=list)

    def silence(self) -> int:
        return self.store.add_silence("rollout_stall", self.run, time.time() + 60, "auth test")["id"]


Req = Callable[[Ctx], dict]


def req(path: str | Callable[[Ctx], str], ok: tuple[int, ...] = (200,), **kwargs: Any) -> Req:
    def build(ctx: Ctx) -> dict:  # a callable json is called at request time (a silence's `until` must be ahead)
        extra = {k: v() if k == "json" and callable(v) else v for k, v in kwargs.items()}
        return {"url": path(ctx) if callable(path) else path, "ok": ok, **extra}

    return build


def points(step: int) -> dict:
    return {"points": [{"step": step, "metrics": {"entropy": 1.0}}]}


PUSH = b"# TYPE entropy gauge\nentropy 1.5\n# TYPE step gauge\nstep 3\n"
REMOTE_WRITE = rw.encode([({"__name__": "entropy", "run": "rw", "job": "trainer"}, [(1.0, int(time.time() * 1000))])])
TRAJECTORIES = {"trajectories": [{"step": 1, "turns": [{"prompt_ids": [1], "completion_ids": [2]}]}]}

REQUESTS: dict[tuple[str, str], Req] = {
    ("GET", "/"): req("/", ok=(307,), follow_redirects=False),
    ("GET", "/api/docs"): req("/api/docs"),
    ("HEAD", "/api/docs"): req("/api/docs"),
    ("GET", "/docs/oauth2-redirect"): req("/docs/oauth2-redirect"),
    ("HEAD", "/docs/oauth2-redirect"): req("/docs/oauth2-redirect"),
    ("GET", "/api/v1/openapi.json"): req("/api/v1/openapi.json"),
    ("HEAD", "/api/v1/openapi.json"): req("/api/v1/openapi.json"),
    ("GET", "/healthz"): req("/healthz"),
    ("GET", "/metrics"): req("/metrics"),
    # runs
    ("POST", "/api/v1/runs"): req("/api/v1/runs", ok=(200, 201), json={"project": "p", "name": "made-by-test"}),
    ("GET", "/api/v1/runs"): req("/api/v1/runs"),
    ("GET", "/api/v1/runs/{run_id}"): req(lambda c: f"/api/v1/runs/{c.run}"),
    ("PATCH", "/api/v1/runs/{run_id}"): req(lambda c: f"/api/v1/runs/{c.run}", json={"notes": "patched"}),
    # points and events
    ("POST", "/api/v1/runs/{run_id}/metrics"): req(lambda c: f"/api/v1/runs/{c.run}/metrics", json=points(100)),
    ("GET", "/api/v1/runs/{run_id}/metrics"): req(lambda c: f"/api/v1/runs/{c.run}/metrics"),
    ("GET", "/api/v1/runs/{run_id}/series"): req(lambda c: f"/api/v1/runs/{c.run}/series?metric=stall_s"),
    ("GET", "/api/v1/runs/{run_id}/points"): req(lambda c: f"/api/v1/runs/{c.run}/points?metric=stall_s"),
    ("POST", "/api/v1/runs/{run_id}/events"): req(
        lambda c: f"/api/v1/runs/{c.run}/events", ok=(200, 201), json={"events": [{"step": 1, "kind": "note"}]}
    ),
    ("GET", "/api/v1/runs/{run_id}/events"): req(lambda c: f"/api/v1/runs/{c.run}/events"),
    ("POST", "/api/v1/runs/{run_id}/heartbeat"): req(lambda c: f"/api/v1/runs/{c.run}/heartbeat", ok=(204,)),
    ("POST", "/api/v1/runs/{run_id}/trajectories"): req(lambda c: f"/api/v1/runs/{c.run}/trajectories", json=TRAJECTORIES),
    ("GET", "/api/v1/runs/{run_id}/audit"): req(lambda c: f"/api/v1/runs/{c.run}/audit"),
    ("GET", "/api/v1/runs/{run_id}/diagnosis"): req(lambda c: f"/api/v1/runs/{c.run}/diagnosis"),
    # alerts, silences, rules
    ("GET", "/api/v1/alerts"): req("/api/v1/alerts"),
    ("GET", "/api/v1/alerts/{alert_id}"): req(lambda c: f"/api/v1/alerts/{c.alert}"),
    ("POST", "/api/v1/alerts/{alert_id}/ack"): req(lambda c: f"/api/v1/alerts/{c.alert}/ack", json={}),
    ("POST", "/api/v1/silences"): req(
        "/api/v1/silences", ok=(200, 201), json=lambda: {"rule": "rollout_stall", "until": time.time() + 60}
    ),
    ("GET", "/api/v1/silences"): req("/api/v1/silences"),
    ("DELETE", "/api/v1/silences/{silence_id}"): req(lambda c: f"/api/v1/silences/{c.silence()}", ok=(200, 204)),
    ("GET", "/api/v1/rules"): req("/api/v1/rules"),
    ("POST", "/api/v1/rules/reload"): req("/api/v1/rules/reload"),
    ("GET", "/api/v1/aliases"): req("/api/v1/aliases"),
    # Prometheus ingest
    ("PUT", "/metrics/{grouping:path}"): req("/metrics/job/trainer/run/pushed", ok=(200, 202), content=PUSH),
    ("POST", "/metrics/{grouping:path}"): req("/metrics/job/trainer/run/pushed", ok=(200, 202), content=PUSH),
    ("DELETE", "/metrics/{grouping:path}"): req("/metrics/job/trainer/run/pushed", ok=(200, 202)),
    ("POST", "/api/v1/prom/write"): req(
        "/api/v1/prom/write", ok=(200, 204), content=REMOTE_WRITE,
        headers={"content-type": "application/x-protobuf", "content-encoding": "snappy"},
    ),
}
# The NDJSON form of the points route, a second body type on the same route.
EXTRA_WRITES: dict[str, Req] = {
    "ndjson points": req(
        lambda c: f"/api/v1/runs/{c.run}/metrics",
        content=b'{"step": 101, "metrics": {"entropy": 1.0}}\n',
        headers={"content-type": "application/x-ndjson"},
    ),
}


def callback(ctx: Ctx, output_prefix: str, outputs: list, inputs: list, state: list, changed: str) -> dict:
    [dep] = [d for d in ctx.deps if d["output"].startswith(output_prefix)]
    return {"output": dep["output"], "outputs": outputs, "inputs": inputs, "state": state, "changedPropIds": [changed]}


def route_callback(ctx: Ctx) -> dict:
    """The router callback rendering a run page: a read of the run's data through Dash."""
    return {
        "url": "/dashboard/_dash-update-component",
        "method": "POST",
        "ok": (200,),
        "json": {
            "output": f"{ids.PAGE}.children",
            "outputs": {"id": ids.PAGE, "property": "children"},
            "inputs": [{"id": ids.URL, "property": "pathname", "value": f"/dashboard/runs/{ctx.run}"},
                       {"id": ids.URL, "property": "search", "value": ""}],
            "changedPropIds": [f"{ids.URL}.pathname"],
        },
    }


DASHBOARD_READS: dict[str, Req] = {
    "page: runs": req("/dashboard/"),
    "page: run": req(lambda c: f"/dashboard/runs/{c.run}"),
    "page: compare": req(lambda c: f"/dashboard/compare?runs={c.run}"),
    "page: alerts": req("/dashboard/alerts"),
    "no trailing slash": req("/dashboard", ok=(200, 307, 308), follow_redirects=False),
    "layout": req("/dashboard/_dash-layout"),
    "dependencies": req("/dashboard/_dash-dependencies"),
    "stylesheet": req("/dashboard/assets/parallax.css"),
    "favicon": req("/dashboard/_favicon.ico"),
    "callback: run page": route_callback,
}


def do(ctx: Ctx, method: str, build: Req, headers: dict[str, str] | None = None) -> httpx.Response:
    spec = dict(build(ctx))
    spec.pop("ok")
    method = spec.pop("method", method)
    url = spec.pop("url")
    spec["headers"] = {**spec.get("headers", {}), **(headers or {})}
    return ctx.client.request(method, url, **spec)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> Iterator[Ctx]:
    db = tmp_path_factory.mktemp("auth") / "p.db"
    with make_client(database_url=f"sqlite:///{db}", token=WRITE, read_token=READ, alert_timer_seconds=0) as c:
        run = c.post("/api/v1/runs", json={"project": "p", "name": "r"}, headers=bearer(WRITE)).json()["id"]
        pts = [{"step": s, "metrics": {"stall_s": 30.0, "train_s": 30.0, "rollout_s": 60.0}} for s in range(50)]
        assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}, headers=bearer(WRITE)).status_code == 200
        store = c.app.state.store
        [alert] = store.list_alerts(state="firing")
        deps = c.get("/dashboard/_dash-dependencies", headers=bearer(READ)).json()
        yield Ctx(client=c, run=run, alert=alert["id"], store=store, deps=deps)


def assert_refused(r: httpx.Response) -> None:
    assert r.status_code == 401, (r.status_code, r.text[:300])
    assert "www-authenticate" in r.headers
    assert_no_secret(r)


def assert_accepted(r: httpx.Response, ok: tuple[int, ...]) -> None:
    assert r.status_code in ok, (r.status_code, r.text[:300])
    assert_no_secret(r)


def assert_no_secret(r: httpx.Response) -> None:
    seen = r.content + repr(sorted(r.headers.items())).encode()
    for token in SECRETS:
        for form in forms(token):
            assert form.encode() not in seen, f"a token came back in the response of {r.request.method} {r.request.url}"


# -- every route has a case --------------------------------------------------------


def test_every_route_has_an_auth_case(ctx):
    found = set(walk_routes(ctx.client.app.routes))
    mounts = {path for method, path in found if method == "MOUNT"}
    routes = {key for key in found if key[0] != "MOUNT"}
    assert mounts == {"/dashboard"}, "a new mounted app needs its reads and writes in DASHBOARD_READS"
    missing = routes - set(REQUESTS)
    assert not missing, f"routes with no auth case in tests/test_auth_paths.py REQUESTS: {sorted(missing)}"
    assert not set(REQUESTS) - routes, "REQUESTS names routes that no longer exist"
    # Pushgateway, remote write, trajectories, silences and acks are among them.
    for key in [("PUT", "/metrics/{grouping:path}"), ("POST", "/api/v1/prom/write"),
                ("POST", "/api/v1/runs/{run_id}/trajectories"), ("POST", "/api/v1/silences"),
                ("POST", "/api/v1/alerts/{alert_id}/ack")]:
        assert key in routes


WRITES = {f"{m} {p}": (m, b) for (m, p), b in REQUESTS.items() if m in WRITE_METHODS}
WRITES |= {name: ("POST", b) for name, b in EXTRA_WRITES.items()}
READS = {f"{m} {p}": (m, b) for (m, p), b in REQUESTS.items() if m not in WRITE_METHODS and (m, p) not in OPEN}
READS |= {name: ("GET", b) for name, b in DASHBOARD_READS.items()}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_a_write_needs_the_write_token(ctx, name):
    method, build = WRITES[name]
    ok = build(ctx)["ok"]
    for headers in ({}, bearer(WRONG), basic(WRONG), bearer(READ), basic(READ), {"Authorization": WRITE},
                    {"Authorization": f"Token {WRITE}"}, {"Authorization": "Basic !!not-base64!!"}):
        assert_refused(do(ctx, method, build, headers))
    assert_accepted(do(ctx, method, build, bearer(WRITE)), ok)
    assert_accepted(do(ctx, method, build, basic(WRITE)), ok)


@pytest.mark.parametrize("name", sorted(READS))
def test_a_read_needs_the_read_or_write_token(ctx, name):
    method, build = READS[name]
    ok = build(ctx)["ok"]
    for headers in ({}, bearer(WRONG), basic(WRONG), {"Authorization": READ}):
        assert_refused(do(ctx, method, build, headers))
    for headers in (bearer(READ), basic(READ), bearer(WRITE), basic(WRITE)):
        assert_accepted(do(ctx, method, build, headers), ok)


def test_probes_stay_open(ctx):
    for method, path in OPEN:
        assert ctx.client.request(method, path).status_code == 200


def test_paths_that_look_like_the_dashboard_do_not_reach_the_api(ctx):
    """A write is a read only inside the dashboard mount: a dot-segment or a look-alike prefix gets no further."""
    before = len(ctx.client.get("/api/v1/runs", headers=bearer(READ)).json()["runs"])
    for path in ("/dashboard/%2e%2e/api/v1/runs", "/dashboard/../api/v1/runs", "/dashboardx/../api/v1/runs",
                 "/dashboard/..%2fapi/v1/runs"):
        r = ctx.client.post(path, json={"project": "p", "name": "sneaky"}, headers=bearer(READ))
        assert r.status_code in (401, 404, 405), (path, r.status_code)
    assert len(ctx.client.get("/api/v1/runs", headers=bearer(READ)).json()["runs"]) == before


# -- the dashboard's write actions --------------------------------------------------


def alert_click(ctx: Ctx, action: str, typed: str | None, headers: dict[str, str]) -> httpx.Response:
    """The alerts page's acknowledge or silence button clicked, with ``typed`` in its token field."""

    def button(kind: str) -> list[dict]:
        return [{"id": {"type": kind, "index": ctx.alert}, "property": "n_clicks", "value": 1 if action == kind else None}]

    body = callback(
        ctx, f"..{ids.ALERTS_MESSAGE}.children",
        outputs=[{"id": ids.ALERTS_MESSAGE, "property": "children"}, {"id": ids.ALERTS_TABLE, "property": "children"}],
        inputs=[button(ids.ACK), button(ids.SILENCE)],
        state=[{"id": ids.URL, "property": "search", "value": ""},
               {"id": ids.ALERTS_TOKEN, "property": "value", "value": typed}],
        changed=json.dumps({"index": ctx.alert, "type": action}, separators=(",", ":")) + ".n_clicks",
    )
    return ctx.client.post("/dashboard/_dash-update-component", json=body, headers=headers)


@pytest.mark.parametrize("action", [ids.ACK, ids.SILENCE])
def test_dashboard_ack_and_silence_need_the_write_token(ctx, action):
    def acted() -> bool:
        if action == ids.ACK:
            return ctx.store.get_alert(ctx.alert)["acked_at"] is not None
        return any(s["comment"].startswith("from the dashboard") for s in ctx.store.list_silences())

    def reset() -> None:
        with ctx.store.engine.begin() as conn:
            conn.execute(text("UPDATE alerts SET acked_at = NULL, acked_by = NULL"))
            conn.execute(text("DELETE FROM silences WHERE comment LIKE 'from the dashboard%'"))

    reset()
    for headers in ({}, basic(WRONG)):  # the dashboard itself needs the read token, whatever is typed
        assert_refused(alert_click(ctx, action, WRITE, headers))
    for typed, headers in ((None, bearer(READ)), (WRONG, bearer(READ)), (READ, basic(READ))):
        r = alert_click(ctx, action, typed, headers)
        assert r.status_code == 200 and "write token" in r.text, r.text[:300]
        assert_no_secret(r)
        assert not acted()
    for typed, headers in ((WRITE, bearer(READ)), (None, basic(WRITE)), (None, bearer(WRITE))):
        r = alert_click(ctx, action, typed, headers)
        assert_accepted(r, (200,))
        assert acted() and "write token" not in r.text, (typed, headers, r.text[:400])
        reset()


# -- no token in logs or error bodies -----------------------------------------------


def test_no_token_in_logs_or_responses_in_process(ctx, caplog):
    with caplog.at_level(logging.DEBUG):
        for method, build in [*WRITES.values(), *READS.values()]:
            for headers in ({}, bearer(WRONG), basic(WRONG), bearer(READ), bearer(WRITE), basic(WRITE)):
                assert_no_secret(do(ctx, method, build, headers))
        # Malformed bodies with the right token: the errors name the field, never the credentials.
        for path in (f"/api/v1/runs/{ctx.run}/metrics", "/api/v1/silences", f"/api/v1/runs/{ctx.run}/trajectories"):
            r = ctx.client.post(path, content=b'{"points": [{"step": "x"}]', headers=bearer(WRITE))
            assert 400 <= r.status_code < 500
            assert_no_secret(r)
        for typed in (WRITE, WRONG):
            assert_no_secret(alert_click(ctx, ids.ACK, typed, bearer(READ)))
    logged = caplog.text + "".join(repr(r.args) for r in caplog.records)
    for token in SECRETS:
        for form in forms(token):
            assert form not in logged


@pytest.mark.timeout(120)
def test_no_token_in_the_logs_of_a_real_server(tmp_path):
    """`parallax serve` at the most verbose level uvicorn has, and uvicorn with its access log on."""
    env = {"PARALLAX_TOKEN": WRITE, "PARALLAX_READ_TOKEN": READ, "PARALLAX_LOG_LEVEL": "trace",
           "PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path}/a.db", "PARALLAX_ALERT_TIMER_SECONDS": "0"}
    with parallax_server(tmp_path, env=env) as server:
        exercise(server.url)
    assert_clean_output(server.output)
    assert "ASGI" in server.output  # trace level was on: uvicorn logged every request's scope and messages

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "parallax.server.app:create_app", "--port", str(port),
         "--log-level", "trace", "--access-log"],
        cwd=tmp_path, env={**_clean_env(), **env, "PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path}/b.db"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 30, lambda: proc.stdout.read())
        exercise(url)
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=15)
    assert_clean_output(output)
    assert '"POST /api/v1/runs HTTP/1.1" 401' in output  # the access log was on and saw the refusals


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}


def exercise(url: str) -> None:
    """Wrong and right tokens against writes, reads, the dashboard and its callbacks."""
    with httpx.Client(base_url=url, timeout=30) as c:
        run_body = {"project": "p", "name": "r"}
        for headers in ({}, bearer(WRONG), basic(WRONG), bearer(READ)):
            r = c.post("/api/v1/runs", json=run_body, headers=headers)
            assert r.status_code == 401
            assert_no_secret(r)
        run = c.post("/api/v1/runs", json=run_body, headers=bearer(WRITE)).json()["id"]
        for headers in ({}, bearer(WRONG), basic(WRITE), bearer(WRITE)):
            for r in (
                c.post(f"/api/v1/runs/{run}/metrics", json=points(1), headers=headers),
                c.post(f"/api/v1/runs/{run}/metrics", content=b"{nope", headers={**headers, "content-type": "application/json"}),
                c.put("/metrics/job/t/run/r", content=PUSH, headers=headers),
                c.post("/api/v1/prom/write", content=b"not snappy", headers=headers),
                c.post("/api/v1/silences", json={"rule": 1}, headers=headers),
                c.post("/api/v1/alerts/999/ack", json={}, headers=headers),
            ):
                assert_no_secret(r)
        # A dashboard callback carrying a typed token, well-formed or not (Dash then fails and logs it).
        typed = {"id": ids.ALERTS_TOKEN, "property": "value", "value": WRITE}
        for body in ({"output": f"..{ids.ALERTS_MESSAGE}.children...{ids.ALERTS_TABLE}.children..", "outputs": [],
                      "inputs": [[], []], "state": [{"id": ids.URL, "property": "search", "value": ""}, typed]},
                     {"output": "nope.children", "inputs": [typed], "state": [typed]}, {"state": WRITE}):
            for headers in ({}, bearer(WRONG), bearer(READ)):
                assert_no_secret(c.post("/dashboard/_dash-update-component", json=body, headers=headers))
        for headers in ({}, bearer(WRONG), basic(READ), bearer(READ), bearer(WRITE)):
            for path in (f"/api/v1/runs/{run}/series?metric=entropy", "/metrics", "/dashboard/", "/dashboard/_dash-layout",
                         "/api/v1/runs/999", f"/api/v1/runs/{run}/series"):
                assert_no_secret(c.get(path, headers=headers))


def assert_clean_output(output: str) -> None:
    assert output, "the server printed nothing"
    for token in SECRETS:
        for form in forms(token):
            assert form not in output, "a token appeared in the server's output"


# -- settings ------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["token", "read_token"])
@pytest.mark.parametrize("value", ["", "   "])
def test_a_blank_token_is_refused_not_taken_as_no_check(field, value, tmp_path):
    """`PARALLAX_TOKEN=` (an empty variable) once passed as "a token is set" yet let every write through."""
    from pydantic import ValidationError

    from parallax.server.config import Settings

    with pytest.raises(ValidationError, match="must not be empty"):
        Settings(database_url=f"sqlite:///{tmp_path}/p.db", **{field: value})


def test_serve_refuses_an_empty_token_on_a_public_address(monkeypatch, capsys):
    from parallax.server.cli import main

    monkeypatch.setenv("PARALLAX_TOKEN", "")
    assert main(["serve", "--host", "0.0.0.0", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert "invalid settings" in err and "must not be empty" in err
