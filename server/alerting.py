"""Wires the rule engine to the store and the notification channels, and runs its timer.

The engine itself (alerts/) knows nothing of the server: it is handed the
store and a function for transitions. This module turns firing and resolved
transitions into notifications — unless a silence mutes them, which is
recorded too — and records every delivery attempt the dispatcher reports.

Several processes on one PostgreSQL database (DESIGN §7): only the leader
(server/leader.py) evaluates rules and notifies. Every points write announces
itself in its own transaction (run, step range, metric ids); the leader brings
its windows up from the store for each announcement, its own batches included,
so its windows hold every process's points. Run changes and rule reloads that
reach a follower are announced too. A new leader forgets what it knew, sends
what the previous leader saved but never delivered, judges every step it
heard announced while it followed (past the last step an alert of the run
moved at: what the previous leader judged already), then evaluates every
running run from the store.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

from parallax.alerts.engine import AlertEngine  # noqa
from parallax.alerts.states import Transition
from parallax.alerts.notify import AlertmanagerNotifier, DeliveryAttempt, Dispatcher, Notification, build_notifiers
from parallax.alerts.rules import Rule, RuleError, load_rules
from parallax.server.leader import LeaderElector, libpq_conninfo
from parallax.server.lifecycle import end_run

log = logging.getLogger(__name__)

#: Alertmanager ends an alert it has not heard of for its resolve_timeout (5 min by
#: default): firing alerts are sent to it again this often, as Prometheus does.
ALERTMANAGER_RESEND_SECONDS = 60.0
#: A run whose last step reached its configured total is marked finished after this long without data.
COMPLETED_QUIET_SECONDS = 60.0
#: A new leader sends the notifications the previous one saved but never delivered, this far back.
REDELIVER_WITHIN_SECONDS = 3600.0
#: ... and evaluates the running runs that reported within this long (the others were evaluated already).
CATCH_UP_WITHIN_SECONDS = 3600.0
#: A follower remembers the step ranges it hears announced (and writes itself) for at least this long, at most
#: twice: what a new leader judges step by step on taking over. The leader it replaces may have died before it
#: judged them; a fault at one of those steps, gone by the newest, would never be alerted.
MISSED_KEEP_SECONDS = 300.0
#: The PostgreSQL channel processes announce on (server/store/sql.py writes to it too).
ANNOUNCE_CHANNEL = "parallax"

_TAKEOVER, _STOP = object(), object()
#: At most this many announcements are taken from the inbox at once (and merged per run).
INBOX_BATCH = 1000


def _coalesced(items: list[Any]) -> list[Any]:
    """Consecutive points announcements merged per run (metrics joined, step ranges widened); the rest kept in order.

    A leader that falls behind then evaluates each run once for many batches, as for one large batch.
    """
    out: list[Any] = []
    merged: dict[int, dict] = {}
    for item in items:
        if isinstance(item, dict) and item.get("t") == "points":
            run = merged.get(item.get("r"))
            if run is None:
                merged[item.get("r")] = dict(item)
            else:
                keys = None if run.get("k") is None or item.get("k") is None else [*run["k"], *item["k"]]
                run.update(k=keys, lo=min(run["lo"], item["lo"]), hi=max(run["hi"], item["hi"]))
            continue
        out.extend(merged.values())
        merged.clear()
        out.append(item)
    out.extend(merged.values())
    return out


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
        self._closing = False
        # Several processes may share a PostgreSQL database: elect the one that evaluates.
        self._shared = getattr(store, "dialect", None) == "postgresql"
        self._elector: LeaderElector | None = None
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._inbox_worker: threading.Thread | None = None
        self._elected_at = 0.0  # wall time of the last win: transitions before it were the previous leader's
        # {run: [lowest step, highest step, {metric key id} or None]} announced while this process followed, the
        # current generation and the one before (see MISSED_KEEP_SECONDS)
        self._missed: list[dict[int, list]] = [{}, {}]
        self._missed_since = time.monotonic()
        self._missed_lock = threading.Lock()
        if self._shared:
            store.announce_writes = True
            self._elector = LeaderElector(
                libpq_conninfo(store.url), poll_seconds=settings.leader_poll_seconds, channel=ANNOUNCE_CHANNEL,
                on_elected=self._elected, on_deposed=self._deposed, on_message=self._heard,
            )

    @property
    def is_leader(self) -> bool:
        """Whether this process evaluates rules and notifies (always, on SQLite)."""
        if self._closing:
            return False
        return self._elector is None or self._elector.is_leader

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        if self._elector is not None and self._inbox_worker is None:
            self._inbox_worker = threading.Thread(target=self._work_inbox, name="parallax-alert-inbox", daemon=True)
            self._inbox_worker.start()
            self._elector.start()
        elif self._elector is None:
            self._elected_at = time.time()
            try:
                self._redeliver()  # what a crash left undelivered
            except Exception:
                log.exception("sending the notifications left undelivered failed")
        if self._timer is None and self._timer_seconds > 0:
            self._timer = threading.Thread(target=self._tick_loop, name="parallax-alert-timer", daemon=True)
            self._timer.start()

    def stop(self) -> None:
        self._closing = True  # evaluates and notifies no more
        if self._shared:
            self._store.announce_writes = True  # the next leader evaluates what still comes in
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=10)
        if self._inbox_worker is not None:
            self._inbox.put(_STOP)
            self._inbox_worker.join(timeout=10)
        for dispatcher in (self._dispatcher, self._resender):
            if dispatcher is not None:
                dispatcher.close(timeout=5.0)
        if self._elector is not None:
            # Last: the next leader must see the deliveries (and the drops) recorded above.
            self._elector.stop()

    def _tick_loop(self) -> None:
        while not self._stop.wait(self._timer_seconds):
            if not self.is_leader:
                continue
            try:
                self.engine.tick()
                self._finish_completed()
                if time.time() - self._resent_at >= ALERTMANAGER_RESEND_SECONDS:
                    self.resend_firing()
            except Exception:
                log.exception("alert timer evaluation failed")

    def _finish_completed(self, now: float | None = None) -> None:
        """Runs that reached their configured total and went quiet ended normally: mark them finished."""
        for run_id in self.engine.completed(now, quiet_s=COMPLETED_QUIET_SECONDS):
            try:
                end_run(self._store, self, run_id, "finished", reason="reached its configured total steps and went quiet")
            except Exception:
                log.exception("marking run %s finished failed", run_id)

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
        """Read the rule files again; an invalid file raises RuleError and the old rules stay in force.

        The other processes sharing the database are told to read theirs again too.
        """
        rules = self._reload()
        self._announce({"t": "reload"})
        return rules

    def _reload(self) -> list[Rule]:
        rules = load_rules(self._rule_files)
        self.engine.set_rules(rules)
        if self.is_leader:
            self.engine.retire()  # alerts of rules that are gone would otherwise stay open forever
        return rules

    # -- ingest hook ----------------------------------------------------------

    def observe(self, run_id: int, groups: Any, step: int | None = None) -> None:
        if not self.is_leader:
            # The write announced itself: the leader evaluates. Should this process lead next, before that
            # leader did, it judges it on taking over (its own announcements it does not hear).
            if self._shared:
                steps = [sample[0] for samples in groups.values() for sample in samples]
                if steps:
                    self._remember({"r": run_id, "lo": min(steps), "hi": max(steps), "k": None})
            return
        try:
            if self._shared:
                steps = [sample[0] for samples in groups.values() for sample in samples]
                if steps:
                    self.engine.observe_stored(run_id, list(groups), (min(steps), max(steps)))
            else:
                self.engine.observe(run_id, groups, step)
        except Exception:  # the points are stored; a rule problem must not fail the request
            log.exception("alert evaluation failed for run %s", run_id)

    def run_changed(self, run_id: int, status: str | None = None) -> None:
        self._run_changed(run_id, status)
        self._announce({"t": "run", "r": run_id, "s": status})

    def _run_changed(self, run_id: int, status: str | None) -> None:
        self.engine.forget_context(run_id)
        if status is not None and status != "running" and self.is_leader:
            try:
                self.engine.settle(run_id)  # nothing will come to resolve its alerts otherwise
            except Exception:
                log.exception("settling the alerts of run %s failed", run_id)

    # -- several processes: election and announcements --------------------------

    def _announce(self, message: dict) -> None:
        if not self._shared:
            return
        try:
            self._store.announce(message)
        except Exception:
            log.exception("announcing %s to the other processes failed", message.get("t"))

    def _elected(self) -> None:
        """On the elector's thread, before this process counts as leader: start from the store."""
        self._elected_at = time.time()
        self.engine.reset()
        # The leader evaluates its own batches as they are stored: they need no announcement (so a
        # lone process on PostgreSQL pays nothing for it).
        self._store.announce_writes = False
        self._inbox.put(_TAKEOVER)

    def _deposed(self) -> None:
        self._store.announce_writes = True
        self.engine.reset()

    def _heard(self, payload: str) -> None:
        """An announcement, on the elector's thread: queue it for the inbox worker."""
        try:
            message = json.loads(payload)
        except ValueError:
            log.warning("ignoring an announcement that is not JSON: %.200r", payload)
            return
        if not isinstance(message, dict) or message.get("o") == self._store.origin:
            return  # our own: already handled where it happened
        if message.get("t") == "points" and not all(isinstance(message.get(f), int) for f in ("r", "lo", "hi")):
            log.warning("ignoring a malformed points announcement: %.200r", payload)
            return
        if message.get("t") == "reload" or self.is_leader:
            self._inbox.put(message)
        elif message.get("t") == "points":
            self._remember(message)

    def _remember(self, points: dict) -> None:
        """A follower: keep a points announcement's run and steps, merged per run, for a takeover."""
        with self._missed_lock:
            if time.monotonic() - self._missed_since >= MISSED_KEEP_SECONDS:
                self._missed = [{}, self._missed[0]]
                self._missed_since = time.monotonic()
            run, lo, hi, keys = points["r"], points["lo"], points["hi"], points.get("k")
            keys = set(keys) if isinstance(keys, list) and all(isinstance(k, int) for k in keys) else None
            found = self._missed[0].get(run)
            if found is None:
                self._missed[0][run] = [lo, hi, keys]
            else:
                found[0], found[1] = min(found[0], lo), max(found[1], hi)
                found[2] = None if found[2] is None or keys is None else found[2] | keys

    def _take_missed(self) -> dict[int, list]:
        """What was remembered while following, both generations merged; forgotten here."""
        with self._missed_lock:
            merged: dict[int, list] = {}
            for generation in reversed(self._missed):
                for run, (lo, hi, keys) in generation.items():
                    found = merged.get(run)
                    if found is None:
                        merged[run] = [lo, hi, keys]
                    else:
                        found[0], found[1] = min(found[0], lo), max(found[1], hi)
                        found[2] = None if found[2] is None or keys is None else found[2] | keys
            self._missed = [{}, {}]
            return merged

    def _work_inbox(self) -> None:
        while True:
            items = [self._inbox.get()]
            while len(items) < INBOX_BATCH:  # whatever else is waiting: one evaluation per run for the lot
                try:
                    items.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            for item in _coalesced(items):
                if item is _STOP:
                    return
                self._handle(item)

    def _handle(self, item: Any) -> None:
        try:
            if item is _TAKEOVER:
                self._take_over()
            elif item.get("t") == "reload":
                self._reload()
            elif not self.is_leader:
                return
            elif item.get("t") == "points":
                keys = item.get("k")
                metrics = None if keys is None else list(self._store.metric_names(keys).values())
                self.engine.observe_stored(int(item["r"]), metrics, (int(item["lo"]), int(item["hi"])))
            elif item.get("t") == "run":
                self._run_changed(int(item["r"]), item.get("s"))
        except RuleError as exc:
            log.error("rule files announced as reloaded are invalid here; the old rules stay in force: %s", exc)
        except Exception:
            log.exception("handling announcement %s failed", "takeover" if item is _TAKEOVER else item.get("t"))

    def _take_over(self) -> None:
        """A new leader: send what was left undelivered, settle runs that stopped, judge every step announced
        while it followed that no alert has moved past, then catch every running run up."""
        began = time.monotonic()
        missed = self._take_missed()
        resent = self._redeliver()
        running = self._store.list_runs(status="running")
        ids = {r.id for r in running}
        stopped = sorted({a.run_id for a in self._store.open_alerts(None) if a.run_id not in ids})
        for run_id in stopped:
            self.engine.settle(run_id)
        moves = steps = 0
        for run in running:
            if run.id not in missed or not self.is_leader:
                continue
            lo, hi, keys = missed[run.id]
            # The dead leader judged some of these: not again up to where an alert of the run last moved
            # (judging a step anew after a later one moved an alert would move it twice). Past that step, its
            # judgements moved nothing, and judging them again moves nothing either.
            moved = self._store.last_transition_step(run.id)
            lo = lo if moved is None else max(lo, moved + 1)
            hi = max(hi, run.last_step if run.last_step is not None else hi)  # the windows reach back to lo
            if lo > hi:
                continue
            metrics = None if keys is None else list(self._store.metric_names(sorted(keys)).values())
            moves += len(self.engine.observe_stored(run.id, metrics, (lo, hi), every_step=True))
            steps += hi - lo + 1
        # Runs that reported lately may have points nobody evaluated (while nobody led); older ones
        # were evaluated up to their last step already.
        since = self._elected_at - CATCH_UP_WITHIN_SECONDS
        recent = [r.id for r in running if r.last_seen_at is not None and r.last_seen_at >= since]
        for run_id in recent:
            if not self.is_leader:
                return
            moves += len(self.engine.evaluate_run(run_id))
        log.info(
            "leader took over in %.2f s: %d notifications sent again, %d stopped runs settled, %d steps announced "
            "while following judged, %d running runs evaluated (%d transitions)", time.monotonic() - began, resent,
            len(stopped), steps, len(recent), moves,
        )

    def _redeliver(self) -> int:
        """Send the notifications that transitions saved before this process led never finished; how many."""
        if self._dispatcher is None:
            return 0
        until = self._elected_at
        found = self._store.undelivered(until - REDELIVER_WITHIN_SECONDS, until, self._dispatcher.channels)
        for alert, kind, channels in found:
            sent = {
                "id": alert["id"], "run_id": alert["run_id"], "run_name": alert.get("run_name", ""),
                "project": alert.get("project", ""), "rule": alert["rule"], "state": kind,
                "severity": alert["severity"], "started_step": alert["started_step"], "fired_step": alert["fired_step"],
                "ended_step": alert["ended_step"] if kind == "resolved" else None, "started_at": alert["started_at"],
                "ended_at": alert["ended_at"] if kind == "resolved" else None, "causes": alert["causes"],
                "summary": alert["summary"], "labels": alert["labels"],
            }
            step = alert["fired_step"] if kind == "firing" else alert["ended_step"]
            reason = (f"rule {alert['rule']} went {kind} at step {step} on run {alert['run_id']}; sent by the "
                      "process that took over: the one before had not delivered it")
            self._dispatcher.submit(
                Notification(id=f"a{alert['id']}.{kind}.{uuid.uuid4().hex[:12]}", kind=kind, alert=sent,
                             reason=reason, created_at=time.time()),
                channels=channels,
            )
        return len(found)

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
