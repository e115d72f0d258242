"""Tokens, loopback-only defaults."""

import base64

import pytest

from server.cli import main
from server.security import is_loopback
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
