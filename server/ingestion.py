"""The one ingest pipeline every path shares (JSON/NDJSON, Pushgateway, remote write).

A validated batch gets its framework keys' canonical names too, is stored
atomically, then only the rules that read the metrics it touched run for that
run. Built by the app factory; routes reach it through ``app.state``.
"""

from __future__ import annotations

import time
from typing import Any

from ingest.points import Batch
from server.aliasing import AliasService
from server.store import IngestResult


class Ingestor:
    def __init__(self, store: Any, aliases: AliasService, alerting: Any | None = None):
        self.store = store
        self.aliases = aliases
        self.alerting = alerting

    def store_batch(self, run_id: int, batch: Batch, now: float | None = None) -> tuple[IngestResult, int]:
        """Store ``batch`` for the run; returns the store's counts and how many points were alias copies."""
        aliased = self.aliases.apply(run_id, batch)  # framework keys also under their canonical names
        result = self.store.write_points(run_id, batch, now=time.time() if now is None else now)
        if self.alerting is not None:
            self.alerting.observe(run_id, batch.groups, batch.steps[1] if batch.steps else None)
        return result, aliased
