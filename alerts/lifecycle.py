"""The alert lifecycle of one (rule, run), modelled on Prometheus alerting, counted in steps.

inactive → pending → firing → resolved. ``for`` is the number of steps the
condition must hold (from the step it first held) before the alert fires;
``keep_firing_for`` the steps a firing alert stays firing after the condition
stops holding. A pending alert whose condition clears is dropped: it is
recorded, but nobody is notified. After ``resolved`` a new activation starts a
new alert.

This module is pure: ``advance`` is a function of the previous state, the
evaluation and the step/time, so tests step a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

PENDING, FIRING, RESOLVED, DROPPED, INACTIVE = "pending", "firing", "resolved", "dropped", "inactive"
OPEN_STATES = (PENDING, FIRING)


@dataclass(frozen=True)
class AlertState:
    """An open alert (pending or firing), or the closed one a transition just produced."""

    rule: str
    run_id: int
    state: str
    severity: str
    active_since_step: int  # the step the condition first held
    active_since_time: float
    last_active_step: int  # the last step the condition held
    fired_step: int | None = None
    fired_time: float | None = None
    ended_step: int | None = None
    ended_time: float | None = None
    value: float | None = None
    summary: str = ""
    causes: tuple[dict, ...] = ()  # ranked best first: {"id", "score", "evidence", "advice"}
    id: int | None = None  # the store's id, once stored
    labels: dict = field(default_factory=dict)

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES


@dataclass(frozen=True)
class Transition:
    rule: str
    run_id: int
    step: int
    time: float
    from_state: str
    to_state: str
    alert: AlertState  # the alert after the transition

    @property
    def causes(self) -> tuple[Any, ...]:
        return self.alert.causes

    @property
    def top_cause(self) -> str | None:
        return self.alert.causes[0]["id"] if self.alert.causes else None

    @property
    def notifies(self) -> bool:
        """Firing and resolved are sent to the channels; pending and dropped are not."""
        return self.to_state in (FIRING, RESOLVED)


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
