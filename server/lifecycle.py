"""How a run ends: one place that marks it finished or failed, whichever path told the server.

Paths that end a run explicitly (PATCH status, the client's ``close()``, the
TRL callback, a Pushgateway DELETE) call :func:`end_run`. A path that only sees
a run's data stop (Prometheus staleness markers when a scrape target goes
away) calls :func:`series_ended`, which cannot tell an exit from a crash by
itself: a run whose config announces a total step count and whose last step is
short of it is left running, so ``trainer_silent`` pages when its silence
lasts; otherwise the run is marked finished. The rule engine does the same for
a run that goes quiet after its last configured step (``alerts.engine``).
"""

from __future__ import annotations

import time
from typing import Any

from parallax.ingest.runconfig import reached_total, total_steps
from parallax.server.store import Run

#: The event kind stored when a run ends (drawn on the panels like any event).
END_EVENT = "end"


def end_run(store: Any, alerting: Any, run_id: int, status: str, *, reason: str) -> Run:
    """Mark the run ``status`` (finished or failed), record an ``end`` event at its last step saying why,
    and let the rules settle its alerts."""
    run = store.update_run(run_id, status=status)
    if run.last_step is not None:
        store.add_events(run_id, [(run.last_step, END_EVENT, f"{status}: {reason}", time.time())])
    if alerting is not None:
        alerting.run_changed(run_id, status)
    return run


def series_ended(store: Any, alerting: Any, run_id: int, *, reason: str) -> str:
    """A run's data stopped without a status (its series went stale). Returns the status it is left with."""
    run = store.get_run(run_id)
    if run.status != "running":
        return run.status
    if total_steps(run.config) is not None and not reached_total(run.config, run.last_step):
        return "running"  # stopped short of its configured total: a crash, which trainer_silent reports
    return end_run(store, alerting, run_id, "finished", reason=reason).status
