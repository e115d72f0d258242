"""Retention: a background thread that deletes the points of finished runs that sent nothing for N days.

Like Prometheus' ``--storage.tsdb.retention.time`` it bounds the disk a
long-lived server uses; unlike it, the unit is a whole run, not a time block:
half a curve would mislead a comparison, and a run that is still running is
never touched (its rules read its history). The run's row, config, events,
alerts and audit reports stay, so the runs list, the diagnosis and the alert
history still tell what happened; a ``retention`` event records the deletion.

Points go a chunk at a time (``SqlStore.purge_points_chunk``), each chunk its
own short transaction, so ingest is never queued behind a large deletion.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from prometheus_client import CollectorRegistry, Counter

log = logging.getLogger(__name__)

#: Most points one transaction deletes (a few milliseconds of the writer on SQLite).
CHUNK_POINTS = 10_000
DAY = 86_400.0


class RetentionService:
    def __init__(
        self,
        store: Any,
        settings: Any,
        registry: CollectorRegistry | None = None,
        *,
        chunk: int = CHUNK_POINTS,
        leading: Callable[[], bool] | None = None,
    ):
        self._store = store
        # Several processes on one PostgreSQL database: only the leader sweeps (the others would find the same
        # runs and queue behind its row locks). None: always (one process).
        self._leading = leading
        self.days = settings.retention_days or 0.0
        self._interval = settings.retention_interval_seconds
        self.chunk = chunk
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.deleted_points = Counter(
            "parallax_retention_deleted_points",
            "Metric points deleted by retention (PARALLAX_RETENTION_DAYS)",
            registry=registry,
        )
        self.purged_runs = Counter(
            "parallax_retention_purged_runs", "Runs whose points retention deleted, all of them", registry=registry
        )

    @property
    def enabled(self) -> bool:
        return self.days > 0

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="parallax-retention", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        delay = 0.0  # a sweep at start, then one per interval
        while not self._stop.wait(delay):
            delay = self._interval
            if self._leading is not None and not self._leading():
                continue
            try:
                self.sweep()
            except Exception:
                log.exception("retention sweep failed; trying again in %.0f s", self._interval)

    # -- the sweep ----------------------------------------------------------

    def sweep(self, now: float | None = None) -> int:
        """Delete the points of every run that qualifies; how many points were deleted.

        Stops between two chunks when the service is stopped; the next sweep
        picks up where this one left off.
        """
        if not self.enabled:
            return 0
        now = time.time() if now is None else now
        cutoff = now - self.days * DAY
        total = 0
        message = f"points deleted by retention: the run sent nothing for more than {self.days:g} days"
        for run_id in self._store.retention_candidates(cutoff):
            deleted, done = 0, False
            while not done and not self._stop.is_set():
                chunk = self._store.purge_points_chunk(run_id, cutoff, self.chunk, message=message, now=now)
                deleted += chunk.deleted
                done = chunk.done
                self.deleted_points.inc(chunk.deleted)
            total += deleted
            if done and deleted:
                self.purged_runs.inc()
                log.info("retention: deleted %d points of run %d (finished, silent for more than %g days)",
                         deleted, run_id, self.days)
            elif deleted:
                log.info("retention: deleted %d points of run %d before stopping; the next sweep goes on",
                         deleted, run_id)
            if self._stop.is_set():
                break
        return total
