"""The real `parallax serve` as a subprocess on a loopback port."""

import os
import signal
import socket
import subprocess
import sys
import time

import httpx

TOKEN = "serve-test-token-5f2a"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_parallax_serve_end_to_end(tmp_path):
    port = free_port()
    env = {**os.environ, "PARALLAX_TOKEN": TOKEN, "PARALLAX_LOG_LEVEL": "debug"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--port", str(port)],
        cwd=tmp_path,  # the default database is parallax.db in the working folder
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, "server exited early"
            assert time.monotonic() < deadline, "server did not start in 30 s"
            time.sleep(0.1)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=base, timeout=10) as c:
            run = c.post("/api/v1/runs", json={"project": "p", "name": "r"}, headers=auth).json()["id"]
            pts = [{"step": s, "metrics": {"entropy": 1.0 / (s + 1)}} for s in range(50)]
            assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}, headers=auth).json()["accepted"] == 50
            assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}).status_code == 401
            series = c.get(f"/api/v1/runs/{run}/series", params={"metric": "entropy", "max_points": 10}).json()
            assert len(series["series"]["entropy"]["steps"]) <= 10
            assert c.get("/dashboard/").status_code == 200
            assert "parallax_ingest_points_total" in c.get("/metrics").text
        assert (tmp_path / "parallax.db").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert f"http://127.0.0.1:{port}/" in out
    assert TOKEN not in out  # tokens are never logged, even at debug level
    # A clean shutdown; uvicorn re-raises the SIGINT it handled, so the exit code may say so.
    assert "Application shutdown complete" in out
    assert proc.returncode in (0, -signal.SIGINT)
