"""The real `parallax serve` as a subprocess on a loopback port."""

import signal

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
