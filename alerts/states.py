"""The states of an alert and the records of its moves: what the lifecycle produces and the store keeps.

A leaf module (standard library only): ``parallax.alerts.lifecycle`` computes the moves, the store
(``parallax.server.store.alerts``) stores them, and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PENDING, FIRING, RESOLVED, DROPPED, INACTIVE = "pending", "firing", "resolved", "dropped", "inactive"
OPEN_STATES = (PENDING, FIRING)
#: Severities that page (notify, count as alarms, make a run's verdict faulty); ``info`` is a note.
PAGES = ("critical", "warning")


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
