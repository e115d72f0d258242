"""The one ingest pipeline every path shares (JSON/NDJSON, Pushgateway, remote write, audited trajectories).

A validated batch gets its framework keys' canonical names too, is checked
against the run's metric limit, is stored atomically, then only the rules that
read the metrics it touched run for that run. Built by the app factory; routes
reach it through ``app.state``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Iterable

from parallax.ingest.points import Batch, InvalidInput
from parallax.server.aliasing import AliasService
from parallax.server.store import IngestResult

#: Runs whose metric names stay in memory (the least recently used reload from the store).
MAX_CACHED_RUNS = 1024
#: A run's cached names are re-read from the store when a batch brings new names and they are older than
#: this: other processes sharing a PostgreSQL database may have added some.
REFRESH_S = 30.0


class TooManyMetrics(InvalidInput):
    """A batch would take its run past ``max_metrics_per_run`` distinct metrics; nothing of it is stored."""

    def __init__(self, run_id: int | None, current: int, new: int, limit: int):
        self.run_id, self.current, self.new, self.limit = run_id, current, new, limit
        which = f"run {run_id} has" if run_id is not None else "a new run would have"
        msg = (
            f"too many metrics: {which} {current:,} distinct metric names and this batch adds {new:,} new ones, "
            f"past the limit of {limit:,} per run (PARALLAX_MAX_METRICS_PER_RUN); nothing of the batch was stored. "
            "Points of metrics the run already has are still accepted."
        )
        super().__init__(
            [{"loc": ["body"], "msg": msg, "type": "too_many_metrics", "limit": limit, "current": current, "new": new}]
        )


class MetricLimit:
    """Distinct metric names per run, counted from an in-memory set per run (loaded from the store on a miss).

    A batch whose names are all known costs one set lookup per name and no
    lock; only a batch that brings new names takes the lock, re-checks and
    reserves them before it is written.
    """

    def __init__(self, store: Any, limit: int | None):
        self._store = store
        self.limit = limit
        self._runs: OrderedDict[int, tuple[set[str], float]] = OrderedDict()
        self._lock = threading.Lock()

    def _load(self, run_id: int) -> set[str]:
        names = {lv.metric for lv in self._store.latest(run_id)}
        self._runs[run_id] = (names, time.monotonic())
        self._runs.move_to_end(run_id)
        while len(self._runs) > MAX_CACHED_RUNS:
            self._runs.popitem(last=False)
        return names

    def check(self, run_id: int | None, names: Iterable[str]) -> None:
        """Raise TooManyMetrics if ``names`` would take the run (None: a run not created yet) past the limit; reserves nothing."""
        if run_id is None:
            if self.limit is not None and len(names := set(names)) > self.limit:
                raise TooManyMetrics(None, 0, len(names), self.limit)
            return
        self.reserve(run_id, names, dry_run=True)

    def reserve(self, run_id: int, names: Iterable[str], *, dry_run: bool = False) -> None:
        """Count ``names`` as the run's, or raise TooManyMetrics (then nothing is reserved); ``dry_run`` only checks."""
        if self.limit is None:
            return
        entry = self._runs.get(run_id)
        if entry is not None:
            known = entry[0]
            for n in names:
                if n not in known:
                    break
            else:
                return  # the usual case: every name already counted
        with self._lock:
            entry = self._runs.get(run_id)
            if entry is None or time.monotonic() - entry[1] > REFRESH_S:
                known = self._load(run_id)
            else:
                known = entry[0]
                self._runs.move_to_end(run_id)
            new = [n for n in dict.fromkeys(names) if n not in known]
            if new and len(known) + len(new) > self.limit:
                raise TooManyMetrics(run_id, len(known), len(new), self.limit)
            if not dry_run:
                known.update(new)

    def forget(self, run_id: int) -> None:
        """Drop what is cached for the run (a write failed: what it reserved was not stored)."""
        with self._lock:
            self._runs.pop(run_id, None)


class Ingestor:
    def __init__(
        self,
        store: Any,
        aliases: AliasService,
        alerting: Any | None = None,
        max_metrics_per_run: int | None = None,
        telemetry: Any | None = None,
    ):
        self.store = store
        self.aliases = aliases
        self.alerting = alerting
        self.limit = MetricLimit(store, max_metrics_per_run)
        self.telemetry = telemetry  # server.telemetry.Telemetry: every path's points counted here, the same way

    def store_batch(self, run_id: int, batch: Batch, now: float | None = None) -> tuple[IngestResult, int]:
        """Store ``batch`` for the run; returns the store's counts and how many points were alias copies."""
        return self.write(run_id, batch, self.admit(run_id, batch), now)

    def admit(self, run_id: int, batch: Batch) -> int:
        """Add the canonical copies to ``batch`` and reserve its metric names (TooManyMetrics past the limit).

        Returns how many points were alias copies. A request that writes
        several runs admits every batch before writing any, so a refusal leaves
        nothing of it stored.
        """
        self.limit.check(run_id, batch.groups)  # the names as sent first: aliasing a flood of names costs more than refusing it
        aliased = self.aliases.apply(run_id, batch)  # framework keys also under their canonical names
        self.limit.reserve(run_id, batch.groups)
        return aliased

    def write(self, run_id: int, batch: Batch, aliased: int, now: float | None = None) -> tuple[IngestResult, int]:
        """Store an admitted batch, then let the rules that read its metrics run."""
        try:
            result = self.store.write_points(run_id, batch, now=time.time() if now is None else now)
        except BaseException:
            self.limit.forget(run_id)
            raise
        if self.telemetry is not None:
            points = self.telemetry.ingest_points
            points.labels("accepted").inc(result.accepted)  # stored points, alias copies included
            points.labels("aliased").inc(aliased)
            points.labels("replaced").inc(result.replaced)
            points.labels("non_finite").inc(result.non_finite)
        if self.alerting is not None:
            start = time.perf_counter()
            self.alerting.observe(run_id, batch.groups, batch.steps[1] if batch.steps else None)
            if self.telemetry is not None:
                self.telemetry.rules_seconds.observe(time.perf_counter() - start)
        return result, aliased
