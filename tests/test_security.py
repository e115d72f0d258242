"""Tokens, loopback-only defaults."""

import base64

import pytest

from parallax.server.cli import main
from parallax.server.security import is_loopback
from tests.conftest import make_client

WRITE, READ = "w-secret-token", "r-secret-token"


def bearer(t):
    return {"Authorization": f"Bearer {t}"}


def test_write_token_guards_writes_only(sqlite_url):
    with make_client(database_url=sqlite_url, token=WRITE) as c:
        body = {"project": "p", "name": "r"}
        r = c.post("/api/v1/runs", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert c.post("/api/v1/runs", json=body, headers=bearer("wrong")).status_code == 401
        assert c.post("/api/v1/runs", json=body, headers=bearer(WRITE)).status_code == 201
        run = c.get("/api/v1/runs").json()["runs"][0]["id"]  # reads stay open without a read token
        assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": []}).status_code == 401
        assert c.patch(f"/api/v1/runs/{run}", json={"status": "failed"}).status_code == 401
        assert c.get(f"/api/v1/runs/{run}").json()["status"] == "running"
        basic = base64.b64encode(f"trainer:{WRITE}".encode()).decode()
        ok = c.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": 1, "metrics": {"a": 1}}]}, headers={"Authorization": f"Basic {basic}"})
        assert ok.status_code == 200


def test_read_token_guards_reads_dashboard_and_metrics(sqlite_url):
    with make_client(database_url=sqlite_url, token=WRITE, read_token=READ) as c:
        assert c.get("/healthz").status_code == 200  # probes stay open
        for path in ("/api/v1/runs", "/metrics", "/dashboard/", "/dashboard/_dash-layout"):
            assert c.get(path).status_code == 401, path
            assert c.get(path, headers=bearer(READ)).status_code == 200, path
            assert c.get(path, headers=bearer(WRITE)).status_code == 200, path
        page = c.get("/dashboard/")
        assert page.headers["www-authenticate"] == 'Basic realm="parallax"'
        basic = base64.b64encode(f"me:{READ}".encode()).decode()
        assert c.get("/dashboard/", headers={"Authorization": f"Basic {basic}"}).status_code == 200
        # The read token cannot write.
        assert c.post("/api/v1/runs", json={"project": "p", "name": "r"}, headers=bearer(READ)).status_code == 401


def test_token_is_never_echoed(sqlite_url):
    with make_client(database_url=sqlite_url, token=WRITE) as c:
        r = c.post("/api/v1/runs", json={"project": "p", "name": "r"}, headers=bearer(WRITE[:-1] + "x"))
        assert WRITE not in r.text and WRITE[:-1] not in r.text


@pytest.mark.parametrize("host, loop", [("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("localhost", True),
                                        ("0.0.0.0", False), ("192.168.1.4", False), ("::", False), ("example.org", False)])
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_serve_refuses_a_public_address_without_a_token(capsys, monkeypatch):
    monkeypatch.delenv("PARALLAX_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "8999"]) == 2
    assert "refusing to listen on 0.0.0.0" in capsys.readouterr().err


def test_bad_settings_are_a_clear_error(capsys, monkeypatch):
    monkeypatch.setenv("PARALLAX_PORT", "not-a-port")
    assert main(["serve"]) == 2
    assert "invalid settings" in capsys.readouterr().err


def test_incomplete_notification_settings_are_refused_at_startup(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PARALLAX_NOTIFY_SMTP_HOST", "127.0.0.1")
    assert main(["serve", "--database-url", f"sqlite:///{tmp_path}/x.db", "--port", "8997"]) == 2
    err = capsys.readouterr().err
    assert "PARALLAX_NOTIFY_SMTP" in err and err.count("\n") <= 3


# -- cross-origin writes and the Host allow-list (DNS rebinding) --------------------------------------------------

PUSH = "/metrics/job/x"
NAN_PUSH = b"# TYPE step gauge\nstep 1\nentropy NaN\n"


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site", "Origin": "http://other.testserver"},
    {"Origin": "null"},  # a sandboxed frame or a data: URL
    {"Origin": "http://testserver.evil.example"},
    {"Origin": "http://testserver:8050"},  # another port is another origin
])
def test_a_browser_write_from_another_origin_is_refused_without_a_token(sqlite_url, headers):
    """A page elsewhere once made a browser push text/plain to /metrics/job/x: a run, a NaN, a critical alert."""
    with make_client(database_url=sqlite_url, alert_timer_seconds=0) as c:
        for method, path, kwargs in (
            ("POST", PUSH, {"content": NAN_PUSH, "headers": {"content-type": "text/plain"}}),
            ("PUT", PUSH, {"content": NAN_PUSH}),
            ("POST", "/api/v1/runs", {"json": {"project": "p", "name": "r"}}),
            ("POST", "/dashboard/_dash-update-component", {"json": {}}),
            ("DELETE", PUSH, {}),
        ):
            kwargs["headers"] = {**kwargs.get("headers", {}), **headers}
            r = c.request(method, path, **kwargs)
            assert r.status_code == 403, (method, path, r.text)
            assert "another origin" in r.json()["detail"]
        assert c.get("/api/v1/runs", headers=headers).json()["runs"] == []  # reads go on: nothing was stored


@pytest.mark.parametrize("headers", [
    {},  # curl, prometheus_client, Prometheus, the Python client
    {"Origin": "http://testserver"},
    {"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"},
    {"Sec-Fetch-Site": "same-origin", "Origin": "https://proxy.example"},  # a proxy that rewrote Host: the browser knows
    {"Sec-Fetch-Site": "none"},  # typed or bookmarked by the user
    {"Origin": "https://parallax.example"},  # PARALLAX_EXTERNAL_URL's origin, behind a proxy
])
def test_same_origin_and_non_browser_writes_go_on(sqlite_url, headers):
    with make_client(database_url=sqlite_url, alert_timer_seconds=0, external_url="https://parallax.example") as c:
        r = c.put(PUSH, content=b"# TYPE step gauge\nstep 1\nentropy 1.5\n", headers=headers)
        assert r.status_code == 200, r.text


def test_the_origin_check_comes_before_the_token_check(sqlite_url):
    with make_client(database_url=sqlite_url, token=WRITE) as c:
        evil = {"Origin": "http://evil.example", **bearer(WRITE)}  # a basic-auth browser would attach the token
        assert c.post("/api/v1/runs", json={"project": "p", "name": "r"}, headers=evil).status_code == 403
        assert c.post("/api/v1/runs", json={"project": "p", "name": "r"}, headers=bearer(WRITE)).status_code == 201


@pytest.mark.parametrize("host, allowed", [
    ("testserver", True), ("localhost:8050", True), ("LOCALHOST", True), ("app.localhost:1", True),
    ("127.0.0.1:8050", True), ("[::1]:8050", True), ("10.1.2.3", True), ("gpu-box.internal:8050", True),
    ("parallax.example", True), ("evil.example", False), ("evil.example:8050", False), ("127.0.0.1.evil.example", False),
    ("localhost.evil.example", False),
])
def test_a_host_the_server_was_not_told_of_is_refused(sqlite_url, host, allowed):
    """DNS rebinding: evil.example re-pointed at 127.0.0.1 makes the browser send its requests with Host: evil.example."""
    with make_client(database_url=sqlite_url, allowed_hosts=["testserver", "gpu-box.internal"],
                     external_url="https://parallax.example/") as c:
        for method, path in (("GET", "/api/v1/runs"), ("GET", "/dashboard/"), ("POST", PUSH)):
            r = c.request(method, path, headers={"Host": host}, content=b"step 1\n" if method == "POST" else None)
            assert (r.status_code != 400) is allowed, (method, path, r.status_code, r.text)
            if not allowed:
                assert "PARALLAX_ALLOWED_HOSTS" in r.json()["detail"]
        assert c.get("/healthz", headers={"Host": host}).status_code == 200  # probes answer any Host


def test_any_host_when_told_so(sqlite_url):
    with make_client(database_url=sqlite_url, allowed_hosts=["*"]) as c:
        assert c.get("/api/v1/runs", headers={"Host": "evil.example"}).status_code == 200


def test_a_real_server_refuses_a_rebound_host_and_takes_plain_clients(tmp_path):
    import httpx

    from tests.servers import parallax_server

    with parallax_server(tmp_path, args=["--database-url", f"sqlite:///{tmp_path}/x.db"]) as server:
        with httpx.Client(base_url=server.url, timeout=30) as h:
            assert h.get("/api/v1/runs", headers={"Host": "evil.example:8050"}).status_code == 400
            r = h.post(PUSH, content=NAN_PUSH, headers={"Origin": "http://evil.example", "content-type": "text/plain"})
            assert r.status_code == 403
            assert h.get("/api/v1/runs").json()["runs"] == []
            from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

            registry = CollectorRegistry()
            Gauge("step", "step", registry=registry).set(1)
            push_to_gateway(server.url.removeprefix("http://"), job="x", registry=registry)
            assert [r["name"] for r in h.get("/api/v1/runs").json()["runs"]] == ["x"]
