"""The alert side of SqlStore: open alerts, transitions, silences, deliveries, and windows for the rules."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Any, Iterable, Mapping

from sqlalchemy import Connection, desc, func, select, text, update

from parallax.alerts.states import INACTIVE, OPEN_STATES, AlertState, Transition
from parallax.server.store import RunNotFound
from parallax.server.store.schema import alert_deliveries, alert_transitions, alerts, events, runs, silences

_RECENT = text(
    "SELECT step, value, nonfinite FROM points WHERE run_id = :r AND key_id = :k ORDER BY step DESC LIMIT :n"
)
_RECENT_AFTER = text(
    "SELECT step, value, nonfinite FROM points WHERE run_id = :r AND key_id = :k AND step > :after "
    "ORDER BY step DESC LIMIT :n"
)
_RECENT_AFTER_MANY = text(
    "SELECT w.k, p.step, p.value, p.nonfinite "
    "FROM unnest(CAST(:k AS integer[]), CAST(:a AS bigint[]), CAST(:n AS integer[])) AS w(k, a, n) "
    "CROSS JOIN LATERAL (SELECT step, value, nonfinite FROM points "
    "WHERE run_id = :r AND key_id = w.k AND step > w.a ORDER BY step DESC LIMIT w.n) p "
    "ORDER BY w.k, p.step DESC"
)
#: A shutdown drops what the dispatcher had not sent yet: the next leader sends it (see ``undelivered``).
_SHUTDOWN_DROPS = ("dropped: dispatcher closed", "not retried: dispatcher closing")
#: How earlier versions recorded a failed HTTP delivery: the status, then up to 200 characters of the
#: receiver's answer (which an echoing receiver filled with the request's token).
_OLD_HTTP_ERROR = re.compile(r"HTTP (\d{3}): .*", re.S)


def _shown_error(error: str | None) -> str | None:
    """A delivery's error as shown: an old HTTP error keeps its status and loses the receiver's words."""
    old = _OLD_HTTP_ERROR.fullmatch(error) if error else None
    if old is None:
        return error
    code = int(old.group(1))
    return f"HTTP {code}" + (" (redirects are not followed)" if 300 <= code < 400 else "") + " (answer not kept)"


def _state_of(row: Any) -> AlertState:
    return AlertState(
        rule=row.rule,
        run_id=row.run_id,
        state=row.state,
        severity=row.severity,
        active_since_step=row.active_since_step,
        active_since_time=row.active_since_time,
        last_active_step=row.last_active_step,
        fired_step=row.fired_step,
        fired_time=row.fired_time,
        ended_step=row.ended_step,
        ended_time=row.ended_time,
        value=row.value,
        summary=row.summary,
        causes=tuple(row.causes),
        id=row.id,
        labels=dict(row.labels),
    )


def _columns(a: AlertState, now: float) -> dict[str, Any]:
    return {
        "run_id": a.run_id,
        "rule": a.rule,
        "state": a.state,
        "severity": a.severity,
        "active_since_step": a.active_since_step,
        "active_since_time": a.active_since_time,
        "last_active_step": a.last_active_step,
        "fired_step": a.fired_step,
        "fired_time": a.fired_time,
        "ended_step": a.ended_step,
        "ended_time": a.ended_time,
        "value": a.value,
        "summary": a.summary,
        "causes": list(a.causes),
        "labels": a.labels,
        "updated_at": now,
    }


class AlertRecord(dict):
    """An alert row as a plain dict (the API's alert JSON), with ``transitions``/``deliveries`` when asked."""


def alert_record(row: Any, run: Any | None = None) -> AlertRecord:
    rec = AlertRecord(
        id=row.id,
        run_id=row.run_id,
        rule=row.rule,
        state=row.state,
        severity=row.severity,
        started_step=row.active_since_step,
        fired_step=row.fired_step,
        ended_step=row.ended_step,
        started_at=row.active_since_time,
        fired_at=row.fired_time,
        ended_at=row.ended_time,
        last_active_step=row.last_active_step,
        value=row.value,
        summary=row.summary,
        causes=list(row.causes),
        labels=dict(row.labels),
        acked_at=row.acked_at,
        acked_by=row.acked_by,
    )
    if run is not None:
        rec["project"], rec["run_name"] = run.project, run.name
    return rec


class AlertsMixin:
    """Mixed into SqlStore; uses its ``_write``/``_read``/``_run_key_ids`` (a run's linked names read their source)."""

    # -- what the engine needs -------------------------------------------

    def open_alerts(self, run_id: int | None) -> list[AlertState]:
        """The pending and firing alerts of a run (of every run when None)."""
        stmt = select(alerts).where(alerts.c.state.in_(OPEN_STATES))
        if run_id is not None:
            stmt = stmt.where(alerts.c.run_id == run_id)
        with self._read() as conn:
            return [_state_of(r) for r in conn.execute(stmt)]

    def save_transitions(self, transitions: list[Transition]) -> list[Transition]:
        """Store the transitions (and the alerts they move) in one transaction; returns them with alert ids."""
        now = time.time()

        def job(conn: Connection) -> list[Transition]:
            ids: dict[tuple[int, str], int] = {}
            out = []
            for t in transitions:
                a = t.alert
                alert_id = a.id
                if alert_id is None and t.from_state != INACTIVE:  # from inactive: a new alert, even after one closed
                    alert_id = ids.get((a.run_id, a.rule))  # in this same save (a batch of many steps)
                if alert_id is None:
                    alert_id = conn.execute(alerts.insert().values(**_columns(a, now)).returning(alerts.c.id)).scalar_one()
                else:
                    conn.execute(update(alerts).where(alerts.c.id == alert_id).values(**_columns(a, now)))
                ids[(a.run_id, a.rule)] = alert_id
                conn.execute(
                    alert_transitions.insert().values(
                        alert_id=alert_id, from_state=t.from_state, to_state=t.to_state, step=t.step, time=t.time,
                        summary=a.summary, causes=list(a.causes),
                    )
                )
                out.append(replace(t, alert=replace(a, id=alert_id)))
            return out

        return self._write(job)

    def recent_points(self, run_id: int, windows: Mapping[str, int]) -> dict[str, list[tuple[int, float | None]]]:
        ids = self._run_key_ids(run_id, list(windows))
        out: dict[str, list[tuple[int, float | None]]] = {}
        with self._read() as conn:
            for metric, n in windows.items():
                kid = ids.get(metric)
                if kid is None:
                    out[metric] = []
                    continue
                rows = conn.execute(_RECENT, {"r": run_id, "k": kid, "n": n}).all()
                out[metric] = [(s, v if not f else None) for s, v, f in reversed(rows)]
        return out

    def points_after(
        self, run_id: int, after: Mapping[str, tuple[int, int]]
    ) -> dict[str, list[tuple[int, float | None]]]:
        """Per metric, its points above a step, at most the newest ``n``: ``{metric: (step, n)}``, oldest first."""
        ids = self._run_key_ids(run_id, list(after))
        out: dict[str, list[tuple[int, float | None]]] = {m: [] for m in after}
        if self.dialect == "postgresql" and ids and len(set(ids.values())) == len(ids):
            # One round trip for every metric: the leader runs this for each batch it hears of.
            names = {kid: m for m, kid in ids.items()}
            kids = list(names)
            with self._read() as conn:
                rows = conn.execute(
                    _RECENT_AFTER_MANY,
                    {"r": run_id, "k": kids, "a": [after[names[k]][0] for k in kids], "n": [after[names[k]][1] for k in kids]},
                ).all()
            for kid, s, v, f in rows:  # newest first per metric
                out[names[kid]].append((s, v if not f else None))
            return {m: pts[::-1] for m, pts in out.items()}
        with self._read() as conn:
            for metric, (step, n) in after.items():
                kid = ids.get(metric)
                if kid is None:
                    out[metric] = []
                    continue
                rows = conn.execute(_RECENT_AFTER, {"r": run_id, "k": kid, "after": step, "n": n}).all()
                out[metric] = [(s, v if not f else None) for s, v, f in reversed(rows)]
        return out

    def run_context(self, run_id: int) -> tuple[dict, str, float | None, int | None, tuple[int, ...], float | None]:
        """(config, status, last seen, last step, the steps of its resumes ascending, last heartbeat) of a run."""
        with self._read() as conn:
            row = conn.execute(
                select(runs.c.config, runs.c.status, runs.c.last_seen_at, runs.c.last_step, runs.c.heartbeat_at)
                .where(runs.c.id == run_id)
            ).first()
            if row is None:
                return {}, "missing", None, None, (), None
            resumes = conn.execute(
                select(events.c.step).distinct()
                .where(events.c.run_id == run_id, events.c.kind == "resume")
                .order_by(events.c.step)
            ).scalars().all()
        return dict(row.config), row.status, row.last_seen_at, row.last_step, tuple(resumes), row.heartbeat_at

    def heartbeat(self, run_id: int, now: float) -> None:
        """The run's trainer process says it is alive."""

        def job(conn: Connection) -> int:
            return conn.execute(update(runs).where(runs.c.id == run_id).values(heartbeat_at=now)).rowcount

        if not self._write(job):
            raise RunNotFound(run_id)

    def running_runs(self) -> list[int]:
        with self._read() as conn:
            return [r[0] for r in conn.execute(select(runs.c.id).where(runs.c.status == "running"))]

    # -- what the API needs -----------------------------------------------

    def list_alerts(
        self, *, state: str | None = None, run_id: int | None = None, rule: str | None = None, limit: int = 500,
        severity: str | None = None,
    ) -> list[AlertRecord]:
        stmt = select(alerts, runs.c.project, runs.c.name).join(runs, runs.c.id == alerts.c.run_id)
        if state is not None:
            stmt = stmt.where(alerts.c.state == state)
        else:
            stmt = stmt.where(alerts.c.state != "dropped")
        if run_id is not None:
            stmt = stmt.where(alerts.c.run_id == run_id)
        if rule is not None:
            stmt = stmt.where(alerts.c.rule == rule)
        if severity is not None:
            stmt = stmt.where(alerts.c.severity == severity)
        stmt = stmt.order_by(desc(alerts.c.id)).limit(limit)
        with self._read() as conn:
            return [alert_record(r, r) for r in conn.execute(stmt)]

    def alert_runs(self, limit: int = 1000) -> list[tuple[int, str, str]]:
        """(id, project, name) of the runs that have alerts (not only dropped ones), newest run first."""
        stmt = (select(runs.c.id, runs.c.project, runs.c.name)
                .where(select(alerts.c.id).where(alerts.c.run_id == runs.c.id, alerts.c.state != "dropped").exists())
                .order_by(desc(runs.c.id)).limit(limit))
        with self._read() as conn:
            return [(r.id, r.project, r.name) for r in conn.execute(stmt)]

    def fired_alerts(self, run_ids: Iterable[int] | None = None) -> dict[int, list[dict]]:
        """Every alert that ever fired, per run (all runs when ``run_ids`` is None): what verdicts are made of."""
        cols = (alerts.c.id, alerts.c.run_id, alerts.c.rule, alerts.c.severity, alerts.c.state, alerts.c.fired_step,
                alerts.c.last_active_step, alerts.c.ended_step, alerts.c.causes)
        stmt = select(*cols).where(alerts.c.fired_step.is_not(None))
        ids = None if run_ids is None else sorted(set(run_ids))
        out: dict[int, list[dict]] = {}
        with self._read() as conn:
            chunks = [None] if ids is None else [ids[i:i + 1000] for i in range(0, len(ids), 1000)]
            for chunk in chunks:
                q = stmt if chunk is None else stmt.where(alerts.c.run_id.in_(chunk))
                for r in conn.execute(q.order_by(alerts.c.id)):
                    out.setdefault(r.run_id, []).append({
                        "id": r.id, "rule": r.rule, "severity": r.severity, "state": r.state,
                        "fired_step": r.fired_step, "last_active_step": r.last_active_step,
                        "ended_step": r.ended_step, "causes": list(r.causes or []),
                    })
        return out

    def get_alert(self, alert_id: int) -> AlertRecord | None:
        with self._read() as conn:
            row = conn.execute(
                select(alerts, runs.c.project, runs.c.name).join(runs, runs.c.id == alerts.c.run_id).where(alerts.c.id == alert_id)
            ).first()
            if row is None:
                return None
            rec = alert_record(row, row)
            rec["transitions"] = [
                {"from": t.from_state, "to": t.to_state, "step": t.step, "time": t.time, "summary": t.summary,
                 "causes": list(t.causes)}
                for t in conn.execute(
                    select(alert_transitions).where(alert_transitions.c.alert_id == alert_id).order_by(alert_transitions.c.id)
                )
            ]
            rec["deliveries"] = [
                {"notification_id": d.notification_id, "kind": d.kind, "channel": d.channel, "attempt": d.attempt,
                 "ok": d.ok, "final": d.final, "error": _shown_error(d.error), "reason": d.reason, "at": d.at}
                for d in conn.execute(
                    select(alert_deliveries).where(alert_deliveries.c.alert_id == alert_id).order_by(alert_deliveries.c.id)
                )
            ]
            return rec

    def ack_alert(self, alert_id: int, by: str) -> AlertRecord | None:
        def job(conn: Connection) -> int:
            return conn.execute(
                update(alerts).where(alerts.c.id == alert_id).values(acked_at=time.time(), acked_by=by)
            ).rowcount

        if not self._write(job):
            return None
        return self.get_alert(alert_id)

    def last_transition_step(self, run_id: int) -> int | None:
        """The highest step at which an alert of the run moved (pending, firing, resolved, dropped), or None."""
        stmt = (select(func.max(alert_transitions.c.step))
                .select_from(alert_transitions.join(alerts, alerts.c.id == alert_transitions.c.alert_id))
                .where(alerts.c.run_id == run_id))
        with self._read() as conn:
            return conn.execute(stmt).scalar()

    def add_silence(self, rule: str | None, run_id: int | None, until: float, comment: str) -> dict:
        if run_id is not None:
            self._require_run(run_id)

        def job(conn: Connection) -> int:
            return conn.execute(
                silences.insert()
                .values(rule=rule, run_id=run_id, until=until, comment=comment, created_at=time.time())
                .returning(silences.c.id)
            ).scalar_one()

        sid = self._write(job)
        return {"id": sid, "rule": rule, "run_id": run_id, "until": until, "comment": comment}

    def list_silences(self, *, active_at: float | None = None) -> list[dict]:
        stmt = select(silences).order_by(silences.c.id)
        if active_at is not None:
            stmt = stmt.where(silences.c.until > active_at)
        with self._read() as conn:
            return [
                {"id": s.id, "rule": s.rule, "run_id": s.run_id, "until": s.until, "comment": s.comment, "created_at": s.created_at}
                for s in conn.execute(stmt)
            ]

    def expire_silence(self, silence_id: int) -> bool:
        now = time.time()

        def job(conn: Connection) -> int:
            return conn.execute(update(silences).where(silences.c.id == silence_id).values(until=now)).rowcount

        return bool(self._write(job))

    def silence_for(self, rule: str, run_id: int, at: float) -> dict | None:
        """The silence that mutes (rule, run) at this time, if any."""
        for s in self.list_silences(active_at=at):
            if (s["rule"] is None or s["rule"] == rule) and (s["run_id"] is None or s["run_id"] == run_id):
                return s
        return None

    def undelivered(
        self, since: float, until: float, channels: list[str]
    ) -> list[tuple[AlertRecord, str, list[str]]]:
        """Firing and resolved transitions between ``since`` and ``until`` that some of these channels never finished delivering.

        Returns (alert, kind, channels left) in transition order. A channel is done with a
        transition once it recorded a final attempt, unless that was a drop at shutdown; a
        transition recorded as muted or without channels (channel "none") is done everywhere.
        A leader that died between saving a transition and delivering it leaves no record at all.
        """
        with self._read() as conn:
            moves = conn.execute(
                select(alert_transitions.c.alert_id, alert_transitions.c.to_state)
                .where(alert_transitions.c.to_state.in_(["firing", "resolved"]),
                       alert_transitions.c.time >= since, alert_transitions.c.time < until)
                .order_by(alert_transitions.c.id)
            ).all()
            if not moves:
                return []
            ids = sorted({m.alert_id for m in moves})
            done: dict[tuple[int, str], set[str]] = {}
            for d in conn.execute(
                select(alert_deliveries.c.alert_id, alert_deliveries.c.kind, alert_deliveries.c.channel,
                       alert_deliveries.c.error)
                .where(alert_deliveries.c.alert_id.in_(ids), alert_deliveries.c.final.is_(True))
            ):
                if d.channel == "none" or not any(s in (d.error or "") for s in _SHUTDOWN_DROPS):
                    done.setdefault((d.alert_id, d.kind), set()).add(d.channel)
            records = {
                r.id: alert_record(r, r)
                for r in conn.execute(
                    select(alerts, runs.c.project, runs.c.name).join(runs, runs.c.id == alerts.c.run_id)
                    .where(alerts.c.id.in_(ids))
                )
            }
        out = []
        for m in moves:
            finished = done.get((m.alert_id, m.to_state), set())
            left = [] if "none" in finished else [c for c in channels if c not in finished]
            if left and m.alert_id in records:
                out.append((records[m.alert_id], m.to_state, left))
        return out

    def record_delivery(
        self, *, alert_id: int, notification_id: str, kind: str, channel: str, attempt: int, ok: bool, final: bool,
        error: str | None, reason: str, at: float,
    ) -> None:
        def job(conn: Connection) -> None:
            conn.execute(
                alert_deliveries.insert().values(
                    alert_id=alert_id, notification_id=notification_id, kind=kind, channel=channel, attempt=attempt,
                    ok=ok, final=final, error=error, reason=reason, at=at,
                )
            )

        self._write(job)
