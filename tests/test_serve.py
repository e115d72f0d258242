"""The real `parallax serve` as a subprocess on a loopback port."""

import http.client
import signal
import time

import httpx

from tests.servers import parallax_server

TOKEN = "serve-test-token-5f2a"


def test_parallax_serve_end_to_end(tmp_path):
    # The default database is parallax.db in the working folder.
    with parallax_server(tmp_path, env={"PARALLAX_TOKEN": TOKEN, "PARALLAX_LOG_LEVEL": "debug"}) as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=server.url, timeout=10) as c:
            run = c.post("/api/v1/runs", json={"project": "p", "name": "r"}, headers=auth).json()["id"]
            pts = [{"step": s, "metrics": {"entropy": 1.0 / (s + 1)}} for s in range(50)]
            assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}, headers=auth).json()["accepted"] == 50
            assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}).status_code == 401
            series = c.get(f"/api/v1/runs/{run}/series", params={"metric": "entropy", "max_points": 10}).json()
            assert len(series["series"]["entropy"]["steps"]) <= 10
            assert c.get("/dashboard/").status_code == 200
            assert "parallax_ingest_points_total" in c.get("/metrics").text
        assert (tmp_path / "parallax.db").exists()
    assert f"{server.url}/" in server.output
    assert TOKEN not in server.output  # tokens are never logged, even at debug level
    # A clean shutdown; uvicorn re-raises the SIGINT it handled, so the exit code may say so.
    assert "Application shutdown complete" in server.output
    assert server.proc.returncode in (0, -signal.SIGINT)
    assert "Traceback" not in server.output  # Ctrl-C is how `parallax serve` is meant to stop


def test_an_idle_connection_stays_open_until_the_client_closes_it(tmp_path):
    """Prometheus keeps an idle remote-write connection 5 minutes; a server that closed it sooner (uvicorn's
    default: 5 s) raced its next send on it, and the batch failed and was sent again."""
    with parallax_server(tmp_path) as server:
        conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=30)
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() and conn.sock is not None
        first = conn.sock
        time.sleep(6)  # idle past uvicorn's default keep-alive
        conn.request("GET", "/healthz")  # on the same connection: a closed one fails here (RemoteDisconnected)
        assert conn.getresponse().status == 200 and conn.sock is first
        # stopping the server with the connection still open is a clean shutdown
    conn.close()
    assert "Application shutdown complete" in server.output and "Traceback" not in server.output

