"""A real `parallax serve` subprocess on a free loopback port, for the tests (and bench/soak.py) that need one.

`parallax_server` is a context manager for one server's lifetime; `ServerProcess`
keeps its port and database across SIGKILLs and restarts.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import httpx
from sqlalchemy import create_engine, make_url, text


@contextmanager
def fresh_postgres_database(admin_url: str, *, prefix: str) -> Iterator[str]:
    """A new, empty PostgreSQL database on the server of ``admin_url`` (``<prefix>_<hex>``), dropped afterwards
    with whatever is still connected. OperationalError when the server is not reachable."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without its PARALLAX_* (a token there would turn every POST into a 401), plus ``env``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    full_env.update(env or {})
    return full_env


def wait_healthy(
    url: str, proc: subprocess.Popen, timeout: float, output: Callable[[], str], *, interval: float = 0.1
) -> None:
    """Wait until ``url``/healthz answers 200; RuntimeError (with the process's output) if it exits or times out."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1) as client:
        while True:
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"server exited early with code {proc.returncode}:\n{output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not start in {timeout:.0f} s")
            time.sleep(interval)


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
    full_env = server_env(env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "parallax.server.cli", "serve", "--port", str(port), *args],
        cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    server = RunningServer(f"http://127.0.0.1:{port}", proc)
    try:
        wait_healthy(server.url, proc, start_timeout, lambda: proc.stdout.read())
        yield server
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            server.output, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            server.output, _ = proc.communicate()


class ServerProcess:
    """`parallax serve` on one loopback port and one database: start it, SIGKILL it, start it again.

    What every start prints is appended to ``log_path`` (a file, so that a busy server never blocks
    on a full pipe), and ``output()`` reads it back.
    """

    def __init__(
        self,
        cwd: Path,
        database_url: str,
        *,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        port: int | None = None,
        log_path: Path | None = None,
    ):
        self.cwd = Path(cwd)
        self.database_url = database_url
        self.env = server_env(env)
        self.args = tuple(args)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path or self.cwd / f"server-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> "ServerProcess":
        """Start the server and wait until /healthz answers 200 (the database reachable, schema at head)."""
        assert not self.running, "the server is already running"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "parallax.server.cli", "serve", "--port", str(self.port),
                 "--database-url", self.database_url, *self.args],
                cwd=self.cwd, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        self.starts += 1
        try:
            wait_healthy(self.url, self.proc, timeout, lambda: self.output()[-3000:], interval=0.05)
        except RuntimeError:
            self.kill()
            raise
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, whatever was in flight is cut off."""
        if self.running:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGINT (a clean shutdown), then SIGKILL if it takes longer than ``timeout``."""
        if self.running:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
