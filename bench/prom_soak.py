"""Soak through a real Prometheus: 100 runs scraped and remote-written for a long while; samples and RSS checked.

    .venv/bin/python -m bench.prom_soak [--runs 100] [--seconds 600] [--shards 4] [--json FILE]

``make soak`` runs it after the writer soaks (``bench.soak``). Debian's
``prometheus`` and ``prometheus-alertmanager`` run by hand on loopback (see
tests/promstack.py), with a ``parallax serve`` on SQLite that notifies the
Alertmanager.

Load: ``runs`` runs spread over ``exporters`` prometheus_client trainers
(tests/prom_exporter.py, the ``run`` label on every series), each series of a
run moving one step per scrape (1 s): a step gauge, ``metrics`` gauges and
``pass_at_k{k="8"|"16"}`` and ``step_s`` (1 s; the crashed runs' config sets ``silent_min_s`` to a minute, so
``trainer_silent``'s floor for runs without heartbeats, 15 minutes by default, fits in the soak). Prometheus scrapes them and Parallax's own
``/metrics`` (the README's ``keep run=.+`` relabelling) and remote-writes with
``shards`` shards (min = max).

Faults, at 40 % of the time, as on a real cluster: the first half of the
trainers exit. The runs of all but the last of them were created with a
``total_steps`` they never reach (crashes: 40 of 100 runs; ``trainer_silent``
fires about a minute later and is sent to the Alertmanager, then re-sent every
minute, which is what once grew RSS by ~0.8 MB per notification); the last one
says it finished (``parallax_run_finished``). The rest run to the end.

Checks, once Prometheus has sent everything: for every run, each sample
Prometheus holds is stored at its step with its value (``lost`` otherwise) and
every stored point is accounted for by a sample (``invented`` otherwise); no
remote-write request refused; runs ended as ``server.lifecycle`` says; and the
server's RSS, sampled every few seconds, over time: start (after the first
minute), peak and end of the load, its growth over the load's second half and
since a minute after the alerts fired (re-sent every minute from then on).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.promstack import (
    Target,
    alertmanager,
    close_exporter,
    compare_run,
    exporter,
    prometheus,
    prometheus_config,
    remote_write_caught_up,
    remote_write_stats,
    wait_for,
)
from tests.servers import ServerProcess

PROJECT = "soak"
RSS_EVERY_S = 5.0
#: The server's RSS may grow this much over the second half of the soak and still count as flat.
FLAT_RSS_GROWTH = 0.10
#: ... and this much (MB) from a minute after the crash alerts fired (the first Alertmanager sends) to the end.
FLAT_AFTER_ALERTS_MB = 16.0


@dataclass
class PromSoakConfig:
    runs: int = 100
    seconds: float = 600.0
    exporters: int = 10
    metrics: int = 8
    shards: int = 4
    crash_share: float = 0.8  # of the runs of the trainers that exit early, those created with an unreached total_steps


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class RssSampler:
    def __init__(self, pid: int, every: float = RSS_EVERY_S):
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []  # (seconds since start, MB)
        self.marks: dict[str, float] = {}
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def now(self) -> float:
        return time.monotonic() - self._start

    def mark(self, what: str) -> None:
        self.marks[what] = round(self.now(), 1)

    def _loop(self) -> None:
        while True:
            try:
                self.samples.append((round(self.now(), 1), round(rss_mb(self.pid), 1)))
            except OSError:
                return
            if self._stop.wait(self.every):
                return

    def at(self, t: float) -> float | None:
        """The first sample at or after ``t`` seconds (MB)."""
        return next((mb for when, mb in self.samples if when >= t), None)

    def summary(self, warmup_s: float) -> dict:
        """RSS under load: after the warm-up until the trainers' end (start, peak, end), its growth over the second half
        of that and since a minute after the alerts fired; ``after_checks`` once the checks had read every point back."""
        until = self.marks.get("all trainers exited", self.samples[-1][0] if self.samples else 0.0)
        load = [(t, mb) for t, mb in self.samples if warmup_s <= t <= until] or self.samples
        start, end = load[0][1], load[-1][1]
        mid = self.at((load[0][0] + load[-1][0]) / 2) or start
        fired = self.marks.get("trainer_silent fired")
        after_alerts = self.at(fired + 60.0) if fired is not None else None
        return {
            "start": start, "peak": max(mb for _, mb in load), "end": end, "mid": mid,
            "second_half_growth": round((end - mid) / mid, 3) if mid else None,
            "a_minute_after_alerts_fired": after_alerts,
            "growth_since_mb": round(end - after_alerts, 1) if after_alerts is not None else None,
            "after_checks": self.samples[-1][1] if self.samples else None,
        }


def run_names(n: int) -> list[str]:
    return [f"r{i:03d}" for i in range(n)]


def prom_soak(cfg: PromSoakConfig, workdir: Path, log=lambda msg: print(f"[prom-soak] {msg}", file=sys.stderr, flush=True)) -> dict:
    names = run_names(cfg.runs)
    per = -(-cfg.runs // cfg.exporters)
    groups = [names[i : i + per] for i in range(0, cfg.runs, per)]
    early = len(groups) // 2  # these trainers exit at 40 % of the time
    exit_at = 0.4 * cfg.seconds
    early_runs = [r for g in groups[:early] for r in g]
    # The last early trainer says it finished (parallax_run_finished); crashes are among the others' runs.
    crashes = [r for g in groups[: early - 1] for r in g][: int(len(early_runs) * cfg.crash_share)]
    steps_early = max(25, int(exit_at))
    with alertmanager(workdir / "alertmanager") as am:
        server = ServerProcess(workdir, f"sqlite:///{workdir / 'soak.db'}",
                               env={"PARALLAX_NOTIFY_ALERTMANAGER_URL": am.url}, log_path=workdir / "parallax.log")
        with server:
            api = httpx.Client(base_url=server.url, timeout=120)
            for name in crashes:  # a crash is told from an exit by the total the config announces
                # silent_min_s: trainer_silent's 15-minute floor for runs without heartbeats (Prometheus-fed runs send
                # none) is a run setting; a minute here, so the crash pages (and is re-sent) within the soak
                r = api.post("/api/v1/runs", json={"project": PROJECT, "name": name,
                                                   "config": {"total_steps": 1_000_000, "silent_min_s": 60}})
                r.raise_for_status()
            with RssSampler(server.proc.pid) as rss:
                started = []
                try:
                    for i, g in enumerate(groups):
                        extra = ["--run-index", str(names.index(g[0])), "--pass-at-k", "--step-s", "1"]
                        if i == early - 1:
                            extra.append("--finish")
                        steps = (steps_early - 20 if i == early - 1 else steps_early) if i < early else 10**9
                        ctx = exporter(workdir / "exporters", name=f"trainer{i}", runs=g, steps=steps, metrics=cfg.metrics, extra=extra)
                        started.append((ctx, ctx.__enter__()))
                    targets = [Target(f"127.0.0.1:{e.port}", {"project": PROJECT}) for _, e in started]
                    config = prometheus_config(targets, remote_write_url=f"{server.url}/api/v1/prom/write", shards=cfg.shards,
                                               scrape_self=server.url.removeprefix("http://"))
                    with prometheus(workdir / "prometheus", config) as prom:
                        t0 = time.monotonic()
                        log(f"{cfg.runs} runs, {len(started)} trainers, {cfg.shards} shards, {cfg.seconds:.0f} s")
                        _sleep_until(t0 + exit_at, prom)
                        for _, e in started[:early]:
                            close_exporter(e)
                        rss.mark("early trainers exited")
                        log(f"{len(early_runs)} runs' trainers exited ({len(crashes)} short of their total steps)")
                        fired_at = None
                        while time.monotonic() < t0 + cfg.seconds:
                            _sleep_until(min(t0 + cfg.seconds, time.monotonic() + 10), prom)
                            if fired_at is None and crashes and len(_firing(api)) >= len(crashes):
                                fired_at = rss.now()
                                rss.mark("trainer_silent fired")
                                log(f"trainer_silent fired for the {len(crashes)} crashed runs")
                        for _, e in started[early:]:
                            close_exporter(e)
                        closed = time.time()
                        rss.mark("all trainers exited")
                        wait_for("Prometheus to send everything", lambda: remote_write_caught_up(prom.url, closed + 3),
                                 timeout=600, alive=[prom])
                        wait_for("the ended runs to finish", lambda: _finished(api) >= cfg.runs - len(crashes),
                                 timeout=300, alive=[prom])
                        stats = remote_write_stats(prom.url)
                        log("comparing every run with what Prometheus holds")
                        runs = {r["name"]: r for r in api.get("/api/v1/runs", params={"project": PROJECT}).json()["runs"]}
                        reports = {name: compare_run(prom.url, server.url, name, runs[name]["id"]) for name in names if name in runs}
                        own = api.get("/metrics").text
                        am_alerts = httpx.get(f"{am.url}/api/v2/alerts", timeout=30).json()
                finally:
                    for ctx, _ in reversed(started):
                        ctx.__exit__(None, None, None)
            firing = _firing(api)
            statuses = {r["name"]: r["status"] for r in api.get("/api/v1/runs", params={"project": PROJECT}).json()["runs"]}
    rss_summary = rss.summary(warmup_s=60.0)
    doc = {
        "runs": cfg.runs, "trainers": len(groups), "shards": cfg.shards, "seconds": cfg.seconds,
        "series_per_run": cfg.metrics + 4,
        "samples_sent": sum(r["sent"] for r in reports.values()),
        "points_stored": sum(r["stored"] for r in reports.values()),
        "lost": sum(r["lost"] for r in reports.values()),
        "invented": sum(r["invented"] for r in reports.values()),
        "unstepped": sum(r["unstepped"] for r in reports.values()),
        "runs_missing": sorted(set(names) - set(reports)),
        "remote_write_failed": stats["prometheus_remote_storage_samples_failed_total"],
        "remote_write_samples": stats["prometheus_remote_storage_samples_total"],
        "waited": _counter(own, 'parallax_remote_write_samples_total{outcome="waited"}'),
        "unplaced": _counter(own, 'parallax_remote_write_samples_total{outcome="unplaced"}'),
        "crashed_runs_running": sum(statuses.get(r) == "running" for r in crashes),
        "crashed_runs": len(crashes),
        "ended_runs_finished": sum(statuses.get(r) == "finished" for r in early_runs if r not in crashes),
        "trainer_silent_firing": sum(1 for a in firing if a["rule"] == "trainer_silent"),
        "other_alerts": sorted({a["rule"] for a in firing if a["rule"] != "trainer_silent"}),
        "alertmanager_alerts": len(am_alerts),
        "rss_mb": rss_summary,
        "rss_marks_s": rss.marks,
        "rss_series": rss.samples,
        "examples": {name: r["examples"] for name, r in reports.items() if r["lost"] or r["invented"]} or None,
    }
    doc["ok"] = not failures(doc)
    return doc


def failures(doc: dict) -> dict:
    bad = {k: doc[k] for k in ("lost", "invented", "unstepped", "runs_missing", "remote_write_failed", "unplaced") if doc[k]}
    if doc["crashed_runs_running"] != doc["crashed_runs"] or doc["trainer_silent_firing"] != doc["crashed_runs"]:
        bad["crashes"] = (doc["crashed_runs"], doc["crashed_runs_running"], doc["trainer_silent_firing"])
    growth = doc["rss_mb"]["second_half_growth"]
    if growth is not None and growth > FLAT_RSS_GROWTH:
        bad["rss_second_half_growth"] = growth
    since = doc["rss_mb"]["growth_since_mb"]
    if since is not None and since > FLAT_AFTER_ALERTS_MB:
        bad["rss_growth_after_alerts_mb"] = since
    return bad


def _sleep_until(deadline: float, prom) -> None:
    while time.monotonic() < deadline:
        if not prom.running:
            raise RuntimeError(f"prometheus exited:\n{prom.tail()}")
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def _firing(api: httpx.Client) -> list[dict]:
    return api.get("/api/v1/alerts", params={"state": "firing"}).json()["alerts"]


def _finished(api: httpx.Client) -> int:
    return sum(r["status"] == "finished" for r in api.get("/api/v1/runs", params={"project": PROJECT}).json()["runs"])


def _counter(text: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def rows(doc: dict, Row: type) -> list:
    rss = doc["rss_mb"]
    return [
        Row(f"Prometheus soak: {doc['runs']} runs, {doc['shards']} shards, {doc['seconds']:.0f} s",
            f"{doc['samples_sent']:,} sent", f"{doc['points_stored']:,} stored",
            f"lost {doc['lost']}, invented {doc['invented']}, refused {doc['remote_write_failed']:.0f}",
            f"RSS {rss['start']:.0f} -> peak {rss['peak']:.0f} -> end {rss['end']:.0f} MB", doc["ok"]),
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.prom_soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--seconds", type=float, default=600.0)
    p.add_argument("--exporters", type=int, default=10)
    p.add_argument("--metrics", type=int, default=8)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "prom_soak.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = PromSoakConfig(runs=args.runs, seconds=args.seconds, exporters=args.exporters, metrics=args.metrics, shards=args.shards)
    with tempfile.TemporaryDirectory(prefix="parallax-prom-soak-") as tmp:
        doc = prom_soak(cfg, Path(tmp))
    text = json.dumps(doc, indent=1)
    print(text)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(text + "\n")
    if not doc["ok"]:
        print(f"prom soak FAILED: {json.dumps(failures(doc))}", file=sys.stderr)
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
