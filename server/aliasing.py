"""Applies ingest.aliases to every batch a run receives, whatever the path (JSON, Pushgateway, remote write).

A run's config never changes after creation, so what it says (framework, k,
mode) is read once per run and kept. A run whose config names no framework
has it detected from its keys; once a batch makes that clear (at least
``SURE_DETECTION`` keys of one framework) the answer is kept for the run, so
that a later batch with few keys is read the same way. Likewise a run whose
config does not say its mode is read as asynchronous from the first batch that
holds a key only asynchronous runs log; a framework whose trainer wait means
generation or idling by the mode (``Framework.idle_wait``: slime's) has it
decided by how short its waits are (``aliases.wait_mode``), and the decision
is kept the same way.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from parallax.ingest import aliases
from parallax.ingest.points import Batch

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
            self._remember(run_id, found)
        return found

    def _remember(self, run_id: int, run: aliases.RunAliasing) -> None:
        with self._lock:
            if len(self._runs) >= MAX_RUNS:
                self._runs.clear()
            self._runs[run_id] = run

    def apply(self, run_id: int, batch: Batch) -> int:
        """Add canonical names to ``batch`` in place; the number of points added."""
        if not batch.groups:
            return 0
        run = self.run(run_id)

        def previous(key: str, step: int) -> tuple[int, float] | None:
            lv = self._store.values_before(run_id, [key], step).get(key)
            return (lv.step, lv.value) if lv is not None and not lv.nonfinite else None

        done = aliases.apply(batch, run, previous)
        learned = run
        if run.framework is None and done.framework is not None and done.score >= SURE_DETECTION:
            learned = dataclasses.replace(learned, framework=done.framework)
        if run.synchronous is None and done.learned is not None:
            learned = dataclasses.replace(learned, synchronous=done.learned)
        elif run.synchronous is None and (done.quiet_waits, done.loud_waits) != (run.quiet_waits, run.loud_waits):
            learned = dataclasses.replace(learned, quiet_waits=done.quiet_waits, loud_waits=done.loud_waits)
        if learned is not run:
            self._remember(run_id, learned)
        return done.added
