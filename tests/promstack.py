"""Debian's real Prometheus and Pushgateway, run by hand on loopback for the tests and bench/soak.py.

Each binary runs as a child process on a free 127.0.0.1 port with its data in
a temporary folder, and is stopped (SIGTERM, then SIGKILL) when its block
ends: never as a service. ``make test`` installs the packages when they are
missing. Without them the tests that need them fail (as the PostgreSQL ones
do) unless ``PARALLAX_TEST_PROMETHEUS=skip``.

Nothing here waits a fixed time: ``wait_for`` polls a condition until a
generous deadline, so a busy two-core machine passes too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import httpx

from tests.servers import free_port

PROMETHEUS = "prometheus"
PUSHGATEWAY = "prometheus-pushgateway"
ALERTMANAGER = "prometheus-alertmanager"
#: The Debian packages that ship the binaries (``make test`` installs them when missing).
PACKAGES = {PROMETHEUS: "prometheus", PUSHGATEWAY: "prometheus-pushgateway", ALERTMANAGER: "prometheus-alertmanager"}
#: Deadline of every wait (seconds): long, because the suite runs on busy two-core machines.
DEADLINE = 120.0


class Missing(RuntimeError):
    """A binary is not installed."""


def binary(name: str) -> str:
    """The path of ``name`` (``prometheus``, ``prometheus-pushgateway``), or Missing saying how to get it."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)
    if found is None:
        raise Missing(f"{name} is not installed: apt-get install -y {PACKAGES.get(name, name)} (make test does it as root)")
    return found


def wait_for(what: str, check: Callable[[], Any], *, timeout: float = DEADLINE, interval: float = 0.2,
             alive: Sequence["Process"] = ()) -> Any:
    """Poll ``check`` until it returns a true value (returned); TimeoutError naming ``what`` after ``timeout`` s.

    A process of ``alive`` that exits meanwhile fails the wait at once, with its log's tail.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            got = check()
            if got:
                return got
        except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
            last_error = exc
        for proc in alive:
            if not proc.running:
                raise RuntimeError(f"{proc.name} exited (code {proc.popen.returncode}) while waiting for {what}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s" + (f" (last error: {last_error})" if last_error else ""))
        time.sleep(interval)


@dataclass
class Process:
    """A child process with its output in a log file."""

    name: str
    popen: subprocess.Popen
    log_path: Path
    url: str = ""
    port: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a clean exit), then SIGKILL after ``timeout`` s; always waited for."""
        if self.running:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        self.popen.wait(timeout=30)


def _start(name: str, argv: list[str], workdir: Path, *, stdin: int | None = subprocess.DEVNULL,
           env: dict[str, str] | None = None) -> Process:
    log_path = workdir / f"{name}.log"
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, stdin=stdin, env=env)
    return Process(name, popen, log_path)


@contextmanager
def running(proc: Process, ready: Callable[[], Any] | None = None) -> Iterator[Process]:
    try:
        if ready is not None:
            wait_for(f"{proc.name} to be ready", ready, alive=[proc])
        yield proc
    finally:
        proc.stop()


def _ready(url: str) -> Callable[[], bool]:
    return lambda: httpx.get(f"{url}/-/ready", timeout=2).status_code == 200


# -- Pushgateway ---------------------------------------------------------------------------


@contextmanager
def pushgateway(workdir: Path) -> Iterator[Process]:
    """The real Pushgateway on a free loopback port (no persistence file)."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    # An explicit empty --persistence.file: Debian's default is a file under /var/lib/prometheus.
    argv = [binary(PUSHGATEWAY), f"--web.listen-address=127.0.0.1:{port}", "--persistence.file=", "--log.level=warn"]
    proc = _start("pushgateway", argv, workdir)
    proc.url, proc.port = f"http://127.0.0.1:{port}", port
    with running(proc, _ready(proc.url)):
        yield proc


# -- Alertmanager ---------------------------------------------------------------------------


@contextmanager
def alertmanager(workdir: Path) -> Iterator[Process]:
    """The real Alertmanager (one receiver that sends nowhere; no cluster), its data in ``workdir``."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "alertmanager.yml"
    config.write_text(json.dumps({"route": {"receiver": "keep"}, "receivers": [{"name": "keep"}]}))
    argv = [binary(ALERTMANAGER), f"--config.file={config}", f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"]
    proc = _start("alertmanager", argv, workdir)
    proc.url, proc.port = f"http://127.0.0.1:{port}", port
    with running(proc, _ready(proc.url)):
        yield proc


# -- Prometheus ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One scrape target: ``address`` (host:port) with target labels (``run`` and ``project`` pick the run)."""

    address: str
    labels: dict[str, str] = field(default_factory=dict)
    job: str = "trainer"


def prometheus_config(targets: Sequence[Target], *, remote_write_url: str | None, shards: int = 1,
                      token: str | None = None, scrape_interval: str = "1s", keep_run_only: bool = True,
                      scrape_self: str | None = None) -> dict:
    """A prometheus.yml (as a dict: JSON is YAML) scraping ``targets`` and remote-writing to ``remote_write_url``.

    ``shards``: min_shards = max_shards, so that several shards really run (Prometheus starts at min_shards
    and only adds shards under load). ``scrape_self``: also scrape that Parallax's own /metrics.
    """
    jobs: dict[str, list[Target]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append(t)
    scrapes = [
        {"job_name": job, "static_configs": [{"targets": [t.address], "labels": t.labels} for t in ts]}
        for job, ts in jobs.items()
    ]
    if scrape_self:
        scrape = {"job_name": "parallax", "static_configs": [{"targets": [scrape_self]}]}
        if token:
            scrape["authorization"] = {"credentials": token}
        scrapes.append(scrape)
    doc: dict = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval, "evaluation_interval": "1m"},
        "scrape_configs": scrapes,
    }
    if remote_write_url:
        rw: dict = {
            "url": remote_write_url,
            "queue_config": {"min_shards": shards, "max_shards": shards, "batch_send_deadline": "1s",
                             "max_samples_per_send": 200, "min_backoff": "50ms", "max_backoff": "1s"},
        }
        if token:
            rw["authorization"] = {"credentials": token}
        if keep_run_only:  # the README's relabelling: forward the trainers' series only
            rw["write_relabel_configs"] = [{"source_labels": ["run"], "regex": ".+", "action": "keep"}]
        doc["remote_write"] = [rw]
    return doc


@contextmanager
def prometheus(workdir: Path, config: dict) -> Iterator[Process]:
    """The real Prometheus with ``config`` (see ``prometheus_config``), its TSDB in ``workdir``."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "prometheus.yml"
    config_path.write_text(json.dumps(config, indent=1))
    argv = [
        binary(PROMETHEUS), f"--config.file={config_path}", f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ]
    proc = _start("prometheus", argv, workdir)
    proc.url, proc.port = f"http://127.0.0.1:{port}", port
    with running(proc, _ready(proc.url)):
        yield proc


def prometheus_samples(url: str, selector: str, window_s: int = 86_400) -> dict[tuple[tuple[str, str], ...], list[tuple[int, float]]]:
    """Every raw sample Prometheus holds for ``selector``: {sorted labels: [(timestamp ms, value)]}.

    Staleness markers are not returned by queries: these are what Prometheus stored as real samples.
    """
    r = httpx.get(f"{url}/api/v1/query", params={"query": f"{selector}[{window_s}s]"}, timeout=60)
    r.raise_for_status()
    out = {}
    for res in r.json()["data"]["result"]:
        labels = tuple(sorted(res["metric"].items()))
        out[labels] = [(round(float(t) * 1000), float(v)) for t, v in res["values"]]
    return out


def remote_write_stats(url: str) -> dict[str, float]:
    """Prometheus's own counters of its remote-write queue (samples sent, failed, dropped, retried, pending)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    names = ("prometheus_remote_storage_samples_total", "prometheus_remote_storage_samples_failed_total",
             "prometheus_remote_storage_samples_dropped_total", "prometheus_remote_storage_samples_retried_total",
             "prometheus_remote_storage_samples_pending", "prometheus_remote_storage_shards")
    got = {n: 0.0 for n in names}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in got:
            got[name] += float(line.rsplit(" ", 1)[1])
    return got


#: Seconds of samples past ``since`` that Prometheus must have sent when it is never seen with nothing pending.
SETTLED_S = 10.0


def remote_write_caught_up(url: str, since: float = 0.0) -> bool:
    """Whether Prometheus has sent (and had acknowledged) every sample it appended, up to at least ``since`` (Unix s).

    Either nothing is pending and what was sent reaches ``since``, or what was sent reaches ``since`` + SETTLED_S.
    The second: while Prometheus scrapes a target whose series pass the write relabelling (Parallax's own
    /metrics), new samples wait up to a batch deadline (1 s) on some shard after every scrape (1 s), so with several
    shards on a busy machine a moment with nothing pending may never come. Each shard sends in order and flushes
    what it holds at every deadline: a shard still holding a sample from before ``since`` ten deadlines after a
    later sample went out would be stuck in one request for that long, or retrying (the retried counter shows it).
    """
    text = httpx.get(f"{url}/metrics", timeout=10).text
    got: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in ("prometheus_remote_storage_highest_timestamp_in_seconds",
                    "prometheus_remote_storage_queue_highest_sent_timestamp_seconds",
                    "prometheus_remote_storage_samples_pending"):
            got[name] = max(got.get(name, 0.0), float(line.rsplit(" ", 1)[1]))
    highest = got.get("prometheus_remote_storage_highest_timestamp_in_seconds", 0.0)
    sent = got.get("prometheus_remote_storage_queue_highest_sent_timestamp_seconds", 0.0)
    if sent >= max(since, highest - 2.0) and got.get("prometheus_remote_storage_samples_pending", 1.0) == 0.0:
        return True
    return since > 0 and sent >= since + SETTLED_S


# -- the trainer's exporter ------------------------------------------------------------------


@contextmanager
def exporter(workdir: Path, *, name: str = "exporter", runs: Sequence[str] = (), steps: int, metrics: int = 3,
             extra: Sequence[str] = ()) -> Iterator[Process]:
    """``python -m tests.prom_exporter`` on a free loopback port: a prometheus_client trainer whose step moves on
    at each scrape (see that module). It exits when ``close_exporter`` closes its stdin, or at the block's end."""
    port = free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "tests.prom_exporter", "--port", str(port), "--steps", str(steps),
            "--metrics", str(metrics), *[a for r in runs for a in ("--run", r)], *extra]
    root = Path(__file__).resolve().parent.parent
    proc = _start(name, argv, workdir, stdin=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(root)})
    proc.url, proc.port = f"http://127.0.0.1:{port}", port
    # Ready when its port answers; /healthz does not advance the step (only /metrics scrapes do).
    with running(proc, lambda: httpx.get(f"{proc.url}/healthz", timeout=2).status_code == 200):
        yield proc


def close_exporter(proc: Process, timeout: float = DEADLINE) -> None:
    """Close the exporter's stdin: it exits, as a trainer does at its end."""
    if proc.popen.stdin is not None and not proc.popen.stdin.closed:
        proc.popen.stdin.close()
    proc.popen.wait(timeout=timeout)


# -- what Prometheus holds vs what Parallax stored ------------------------------------------------

#: Labels that pick the run or that Parallax leaves out of stored names by default.
_NOT_IN_NAMES = frozenset(("__name__", "run", "project", "job", "instance"))


def parallax_points(url: str, run_id: int, client: httpx.Client | None = None) -> dict[tuple[str, int], float | None]:
    """Every stored point of a run: {(metric, step): value} (None for a non-finite value)."""
    out: dict[tuple[str, int], float | None] = {}
    cursor = None
    own = client or httpx.Client(timeout=60)
    try:
        while True:
            params = {"limit": 50_000, **({"cursor": cursor} if cursor else {})}
            doc = own.get(f"{url}/api/v1/runs/{run_id}/points", params=params).raise_for_status().json()
            for p in doc["points"]:
                out[(p["metric"], p["step"])] = p["value"]
            cursor = doc["next_cursor"]
            if cursor is None:
                return out
    finally:
        if client is None:
            own.close()


def _stored_name(labels: dict[str, str]) -> str:
    from parallax.ingest.names import labelled_name

    return labelled_name(labels["__name__"], {k: v for k, v in labels.items() if k not in _NOT_IN_NAMES and v})


def compare_run(prom_url: str, parallax_url: str, run: str, run_id: int, *, k: int = 8) -> dict[str, Any]:
    """What Prometheus holds of a run's series against what Parallax stored: samples ``sent`` (Prometheus's real
    samples of the run's trainer series; staleness markers are not samples), points ``stored``, ``lost`` (a sample
    whose step has no point of that value) and ``invented`` (a point no sample accounts for), with examples.

    A sample's step is the run's step series' value at its timestamp. The canonical copies Parallax adds
    (``pass_at_k`` from ``pass_at_k{k="<k>"}``, ``pass_at_1``) must equal their source.
    """
    from parallax.ingest.prometheus import SCRAPE_SERIES, is_own_series

    held = prometheus_samples(prom_url, f'{{run="{run}"}}')
    trainer = {labels: samples for labels, samples in held.items()
               if dict(labels)["__name__"] not in SCRAPE_SERIES and not is_own_series(dict(labels)["__name__"])}
    steps: dict[int, int] = {}
    for labels, samples in trainer.items():
        d = dict(labels)
        if d["__name__"] in ("step", "global_step") and not set(d) - _NOT_IN_NAMES:
            for t, v in samples:
                if d["__name__"] == "step" or t not in steps:
                    steps[t] = int(v)
    expected: dict[tuple[str, int], float] = {}
    conflicts, unstepped, sent = [], [], 0
    for labels, samples in trainer.items():
        name = _stored_name(dict(labels))
        for t, v in samples:
            sent += 1
            if t not in steps:
                unstepped.append((name, t))
                continue
            key = (name, steps[t])
            if key in expected and expected[key] != v:
                conflicts.append((key, expected[key], v))
            expected[key] = v
    stored = parallax_points(parallax_url, run_id)
    lost = [(key, v, stored.get(key)) for key, v in expected.items() if stored.get(key) != v]
    invented = []
    for (name, step), v in stored.items():
        if (name, step) in expected:
            continue
        source = {"pass_at_k": f'pass_at_k{{k="{k}"}}', "pass_at_1": 'pass_at_k{k="1"}'}.get(name)
        if source is not None and (source, step) in expected and expected[(source, step)] == v:
            continue  # a canonical copy of a labelled sample
        invented.append(((name, step), v))
    return {
        "sent": sent, "distinct": len(expected), "stored": len(stored), "lost": len(lost), "invented": len(invented),
        "unstepped": len(unstepped), "conflicts": len(conflicts),
        "examples": {"lost": lost[:5], "invented": invented[:5], "unstepped": unstepped[:5], "conflicts": conflicts[:5]},
    }
