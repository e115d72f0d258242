"""What is sent (``Notification``) and what a channel answers (``DeliveryResult``, ``DeliveryAttempt``)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Protocol, runtime_checkable


FIRING, RESOLVED = "firing", "resolved"
KINDS = (FIRING, RESOLVED)


@dataclass(frozen=True, kw_only=True)
class Notification:
    """One alert transition to send. ``alert`` is the API's alert shape (DESIGN §4) plus
    ``run_name``, ``project``, ``labels``, ``started_at`` and ``ended_at`` (unix seconds or None)."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    kind: Literal["firing", "resolved"]
    alert: Mapping[str, Any]
    reason: str
    created_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be 'firing' or 'resolved', not {self.kind!r}")
        if not isinstance(self.alert, Mapping):
            raise ValueError("alert must be a mapping in the API's alert shape")

    @classmethod
    def for_alert(
        cls,
        alert: Mapping[str, Any],
        kind: str | None = None,
        reason: str | None = None,
        *,
        created_at: float | None = None,
    ) -> Notification:
        """A notification for this alert; ``kind`` defaults to the alert's state and
        ``reason`` to "rule R went firing at step S"."""
        kind = kind or alert.get("state")
        if kind not in KINDS:
            raise ValueError(f"kind must be 'firing' or 'resolved', not {kind!r}")
        if reason is None:
            step = alert.get("started_step") if kind == FIRING else alert.get("ended_step")
            reason = f"rule {alert.get('rule')} went {kind}" + (f" at step {step}" if step is not None else "")
        return cls(kind=kind, alert=alert, reason=reason, created_at=time.time() if created_at is None else created_at)


@dataclass(frozen=True)
class DeliveryResult:
    """What one ``send`` came to. ``retry_after`` is the receiver's Retry-After, in seconds, when it gave one."""

    ok: bool
    retryable: bool = False
    error: str | None = None
    retry_after: float | None = None


@dataclass(frozen=True)
class DeliveryAttempt:
    """One attempt to deliver a notification to a channel, as handed to ``record``.

    ``final`` is true on the last record of that (notification, channel): delivered,
    failed for good, out of attempts, or dropped. A dropped delivery (queue full,
    dispatcher closed) has ``dropped`` true and ``attempt`` = the attempts made before.
    """

    notification_id: str
    channel: str
    attempt: int
    ok: bool
    retryable: bool
    error: str | None
    at: float
    final: bool
    dropped: bool = False
    notification: Notification | None = field(default=None, repr=False, compare=False)


@runtime_checkable
class Notifier(Protocol):
    name: str

    def send(self, n: Notification) -> DeliveryResult: ...
