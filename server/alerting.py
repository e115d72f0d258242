"""Wires the rule engine to the store and the notification channels, and runs its timer.

The engine itself (alerts/) knows nothing of the server: it is handed the
store and a function for transitions. This module turns firing and resolved
transitions into notifications — unless a silence mutes them, which is
recorded too — and records every delivery attempt the dispatcher reports.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

from alerts.engine import AlertEngine  # noqa
from alerts.lifecycle import Transition
from alerts.notify import AlertmanagerNotifier, DeliveryAttempt, Dispatcher, Notification, build_notifiers
from alerts.rules import Rule, load_rules

log = logging.getLogger(__name__)

#: Alertmanager ends an alert it has not heard of for its resolve_timeout (5 min by
#: default): firing alerts are sent to it again this often, as Prometheus does.
ALERTMANAGER_RESEND_SECONDS = 60.0


class AlertService:
    def __init__(self, store: Any, settings: Any):
        self._store = store
        self._rule_files = [Path(p) for p in settings.rules]
        self._timer_seconds = settings.alert_timer_seconds
        self._external_url = settings.external_url
        self.engine = AlertEngine(load_rules(self._rule_files), store, on_transitions=self._on_transitions)
        notifiers = build_notifiers(settings.notify_config())
        self._dispatcher = Dispatcher(notifiers, self._record) if notifiers else None
        alertmanagers = [n for n in notifiers if isinstance(n, AlertmanagerNotifier)]
        self._resender = Dispatcher(alertmanagers, self._record_resend) if alertmanagers else None
        self._resent_at = 0.0
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        if self._timer is None and self._timer_seconds > 0:
            self._timer = threading.Thread(target=self._tick_loop, name="parallax-alert-timer", daemon=True)
            self._timer.start()

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=10)
        for dispatcher in (self._dispatcher, self._resender):
            if dispatcher is not None:
                dispatcher.close(timeout=5.0)

    def _tick_loop(self) -> None:
        while not self._stop.wait(self._timer_seconds):
            try:
                self.engine.tick()
                if time.time() - self._resent_at >= ALERTMANAGER_RESEND_SECONDS:
                    self.resend_firing()
            except Exception:
                log.exception("alert timer evaluation failed")

    def resend_firing(self) -> int:
        """Send every firing alert to the Alertmanager channels again; how many were sent."""
        if self._resender is None:
            return 0
        self._resent_at = time.time()
        firing = self._store.list_alerts(state="firing", limit=10_000)
        for alert in firing:
            self._resender.submit(
                Notification(id=f"a{alert['id']}.firing.{uuid.uuid4().hex[:12]}", kind="firing", alert=dict(alert),
                             reason="still firing: sent again so that Alertmanager keeps it open", created_at=time.time())
            )
        return len(firing)

    def reload(self) -> list[Rule]:
        """Read the rule files again; an invalid file raises RuleError and the old rules stay in force."""
        rules = load_rules(self._rule_files)
        self.engine.set_rules(rules)
        self.engine.retire()  # alerts of rules that are gone would otherwise stay open forever
        return rules

    # -- ingest hook ----------------------------------------------------------

    def observe(self, run_id: int, groups: Any, step: int | None = None) -> None:
        try:
            self.engine.observe(run_id, groups, step)
        except Exception:  # the points are stored; a rule problem must not fail the request
            log.exception("alert evaluation failed for run %s", run_id)

    def run_changed(self, run_id: int, status: str | None = None) -> None:
        self.engine.forget_context(run_id)
        if status is not None and status != "running":
            try:
                self.engine.settle(run_id)  # nothing will come to resolve its alerts otherwise
            except Exception:
                log.exception("settling the alerts of run %s failed", run_id)

    # -- notifications --------------------------------------------------------

    def _on_transitions(self, moves: Sequence[Transition]) -> None:
        for t in moves:
            if not t.notifies:
                continue
            alert = self._alert_json(t)
            kind = "firing" if t.to_state == "firing" else "resolved"
            reason = f"rule {t.rule} went {t.to_state} at step {t.step} on run {t.run_id}"
            nid = f"a{t.alert.id}.{kind}.{uuid.uuid4().hex[:12]}"
            muted = self._store.silence_for(t.rule, t.run_id, t.time)
            if muted is not None or self._dispatcher is None:
                why = f"{reason}; muted by silence {muted['id']}" if muted else f"{reason}; no channel configured"
                self._store.record_delivery(
                    alert_id=t.alert.id, notification_id=nid, kind=kind, channel="none", attempt=0, ok=False,
                    final=True, error=None, reason=why, at=time.time(),
                )
                continue
            self._dispatcher.submit(Notification(id=nid, kind=kind, alert=alert, reason=reason, created_at=time.time()))

    def _alert_json(self, t: Transition) -> dict:
        a = t.alert
        try:
            run = self._store.get_run(a.run_id)
            project, name = run.project, run.name
        except LookupError:
            project = name = ""
        return {
            "id": a.id, "run_id": a.run_id, "run_name": name, "project": project, "rule": a.rule, "state": a.state,
            "severity": a.severity, "started_step": a.active_since_step, "fired_step": a.fired_step,
            "ended_step": a.ended_step, "started_at": a.active_since_time, "ended_at": a.ended_time,
            "causes": list(a.causes), "summary": a.summary, "labels": a.labels,
        }

    def _record_resend(self, attempt: DeliveryAttempt) -> None:
        if attempt.final and not attempt.ok:  # only failures: a resend a minute would flood the log
            self._record(attempt)

    def _record(self, attempt: DeliveryAttempt) -> None:
        n = attempt.notification
        # Our notification ids read "a<alert id>.<kind>.<random>".
        alert_id = n.alert["id"] if n is not None else int(attempt.notification_id.split(".", 1)[0][1:])
        kind = n.kind if n is not None else attempt.notification_id.split(".")[1]
        reason = n.reason if n is not None else f"delivery of a {kind} notification"
        if attempt.dropped:
            reason += "; dropped (queue full or shutting down)"
        self._store.record_delivery(
            alert_id=alert_id, notification_id=attempt.notification_id, kind=kind, channel=attempt.channel,
            attempt=attempt.attempt, ok=attempt.ok, final=attempt.final, error=attempt.error, reason=reason,
            at=attempt.at,
        )
