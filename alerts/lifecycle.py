"""The alert lifecycle of one (rule, run), modelled on Prometheus alerting, counted in steps.

inactive → pending → firing → resolved. ``for`` is the number of steps the
condition must hold (from the step it first held) before the alert fires;
``keep_firing_for`` the steps a firing alert stays firing after the condition
stops holding. A pending alert whose condition clears is dropped: it is
recorded, but nobody is notified. After ``resolved`` a new activation starts a
new alert.

This module is pure: ``advance`` is a function of the previous state, the
evaluation and the step/time, so tests step a fake clock. The states and the
transition records it returns are in ``parallax.alerts.states``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from parallax.alerts.states import DROPPED, FIRING, INACTIVE, PENDING, RESOLVED, AlertState, Transition


def advance(
    prev: AlertState | None,
    active: bool,
    *,
    rule: str,
    run_id: int,
    step: int,
    time: float,
    for_steps: int,
    keep_firing_for: int,
    severity: str = "warning",
    value: float | None = None,
    summary: str = "",
    causes: tuple[Any, ...] = (),
    labels: dict | None = None,
) -> tuple[AlertState | None, list[Transition]]:
    """The next state of an alert (None when there is no open alert) and the transitions taken."""
    if prev is not None and not prev.open:
        prev = None
    if prev is None:
        if not active:
            return None, []
        state = AlertState(
            rule=rule,
            run_id=run_id,
            state=PENDING,
            severity=severity,
            active_since_step=step,
            active_since_time=time,
            last_active_step=step,
            value=value,
            summary=summary,
            causes=causes,
            labels=labels or {},
        )
        moves = [Transition(rule, run_id, step, time, INACTIVE, PENDING, state)]
        if for_steps <= 0:
            state = replace(state, state=FIRING, fired_step=step, fired_time=time)
            moves.append(Transition(rule, run_id, step, time, PENDING, FIRING, state))
        return state, moves

    if active:
        # Keep the newest evidence while the condition holds.
        state = replace(prev, last_active_step=max(prev.last_active_step, step), value=value, summary=summary,
                        causes=causes, severity=severity)
        if prev.state == PENDING and step - prev.active_since_step >= for_steps:
            state = replace(state, state=FIRING, fired_step=step, fired_time=time)
            return state, [Transition(rule, run_id, step, time, PENDING, FIRING, state)]
        return state, []

    if prev.state == PENDING:
        state = replace(prev, state=DROPPED, ended_step=step, ended_time=time)
        return None, [Transition(rule, run_id, step, time, PENDING, DROPPED, state)]
    if step - prev.last_active_step >= keep_firing_for:
        state = replace(prev, state=RESOLVED, ended_step=step, ended_time=time)
        return None, [Transition(rule, run_id, step, time, FIRING, RESOLVED, state)]
    return prev, []
