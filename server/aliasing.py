"""Applies ingest.aliases to every batch a run receives, whatever the path (JSON, Pushgateway, remote write).

A run's config never changes after creation, so what it says (framework, k)
is read once per run and kept. A run whose config names no framework has it
detected from its keys; once a batch makes that clear (at least
``SURE_DETECTION`` keys of one framework) the answer is kept for the run, so
that a later batch with few keys is read the same way.
"""

from __future__ import annotations

import threading
from typing import Any

from ingest import aliases
from ingest.points import Batch

SURE_DETECTION = 2
MAX_RUNS = 10_000


class AliasService:
    def __init__(self, store: Any):
        self._store = store
        self._runs: dict[int, aliases.RunAliasing] = {}
        self._lock = threading.Lock()

    def run(self, run_id: int) -> aliases.RunAliasing:
        found = self._runs.get(run_id)
        if found is None:
            found = aliases.run_aliasing(self._store.get_run(run_id).config)
            with self._lock:
                if len(self._runs) >= MAX_RUNS:
                    self._runs.clear()
                self._runs[run_id] = found
        return found

    def apply(self, run_id: int, batch: Batch) -> int:
        """Add canonical names to ``batch`` in place; the number of points added."""
        if not batch.groups:
            return 0
        run = self.run(run_id)

        def previous(key: str, step: int) -> float | None:
            lv = self._store.values_before(run_id, [key], step).get(key)
            return lv.value if lv is not None and not lv.nonfinite else None

        added, framework, score = aliases.apply(batch, run, previous)
        if run.framework is None and framework is not None and score >= SURE_DETECTION:
            self._runs[run_id] = aliases.RunAliasing(framework, run.k, run.sequence_is)
        return added

