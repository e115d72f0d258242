"""A real `parallax serve` subprocess on a free loopback port, for the tests that need one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningServer:
    url: str
    proc: subprocess.Popen
    output: str = ""  # what it printed, once stopped


@contextmanager
def parallax_server(
    cwd: Path, *, env: dict[str, str] | None = None, args: Sequence[str] = (), start_timeout: float = 30.0
) -> Iterator[RunningServer]:
    """Start `parallax serve` in ``cwd`` (PARALLAX_* from the caller's environment left out, ``env`` added),
    wait for /healthz, and stop it with SIGINT when the block ends."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    full_env.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--port", str(port), *args],
        cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    server = RunningServer(f"http://127.0.0.1:{port}", proc)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, f"server exited early:\n{proc.stdout.read()}"
            assert time.monotonic() < deadline, f"server did not start in {start_timeout:.0f} s"
            time.sleep(0.1)
        yield server
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            server.output, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            server.output, _ = proc.communicate()
