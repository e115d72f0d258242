"""Alerts, silences, rules and a run's diagnosis (DESIGN §4)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status
from pydantic import BaseModel, ConfigDict, Field, field_validator

from parallax.alerts.verdict import verdict
from parallax.server.api import API_PREFIX
from parallax.server.api.deps import RunId, StoreDep

router = APIRouter(prefix=API_PREFIX, tags=["alerts"])

AlertId = Annotated[int, Path(ge=1, le=2**31 - 1)]


def get_engine(request: Request):  # -> alerts.engine.AlertEngine
    return request.app.state.alerts


EngineDep = Annotated[object, Depends(get_engine)]


class AckBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field("api", min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")


#: The latest ``until`` a silence may have: the end of year 9999 UTC, the last time a date can be written. Past it
#: (1e300, Infinity) a silence could not be shown, and "forever" is no more useful than a date in year 9999.
MAX_SILENCE_UNTIL = 253_402_300_799.0


class SilenceCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rule: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$", description="Rule to mute; every rule when absent")
    run_id: int | None = Field(None, ge=1, le=2**31 - 1, description="Run to mute; every run when absent")
    until: float | datetime = Field(description="Unix seconds or an ISO 8601 time; in the future, at the latest 9999-12-31T23:59:59Z")
    comment: str = Field("", max_length=10_000, pattern=r"^[^\x00]*$")

    @field_validator("until")
    @classmethod
    def _future(cls, v: float | datetime) -> float:
        ts = v.timestamp() if isinstance(v, datetime) else float(v)
        if not ts > time.time():
            raise ValueError("until must be in the future")
        if not ts <= MAX_SILENCE_UNTIL:
            raise ValueError("until must be at the latest 9999-12-31T23:59:59Z (253402300799 Unix seconds)")
        return ts


@router.get("/alerts")
def list_alerts(
    store: StoreDep,
    state: Literal["pending", "firing", "resolved", "dropped"] | None = None,
    run_id: int | None = Query(None, ge=1, le=2**31 - 1),
    rule: str | None = Query(None, max_length=200),
    limit: int = Query(500, ge=1, le=10_000),
) -> dict:
    found = store.list_alerts(state=state, run_id=run_id, rule=rule, limit=limit)
    return {"alerts": found, "count": len(found)}


@router.get("/alerts/{alert_id}")
def get_alert(alert_id: AlertId, store: StoreDep) -> dict:
    found = store.get_alert(alert_id)
    if found is None:
        raise HTTPException(404, f"alert {alert_id} not found")
    return found


@router.post("/alerts/{alert_id}/ack")
def ack_alert(alert_id: AlertId, store: StoreDep, body: AckBody | None = None) -> dict:
    found = store.ack_alert(alert_id, (body or AckBody()).by)
    if found is None:
        raise HTTPException(404, f"alert {alert_id} not found")
    return found


@router.post("/silences", status_code=status.HTTP_201_CREATED)
def add_silence(body: SilenceCreate, store: StoreDep) -> dict:
    return store.add_silence(body.rule, body.run_id, body.until, body.comment)


@router.get("/silences")
def list_silences(store: StoreDep, active: bool = True) -> dict:
    return {"silences": store.list_silences(active_at=time.time() if active else None)}


@router.delete("/silences/{silence_id}", status_code=status.HTTP_204_NO_CONTENT)
def expire_silence(silence_id: Annotated[int, Path(ge=1, le=2**31 - 1)], store: StoreDep) -> None:
    if not store.expire_silence(silence_id):
        raise HTTPException(404, f"silence {silence_id} not found")


def rule_json(rule) -> dict:
    return {
        "name": rule.name,
        "expr": rule.condition.source,
        "for": rule.for_steps,
        "keep_firing_for": rule.keep_firing_for,
        "severity": rule.severity,
        "labels": rule.labels,
        "metrics": sorted(rule.metrics),
        "causes": [{"id": c.id, "score": c.score.source, "evidence": [e.source for e in c.evidence], "advice": c.advice} for c in rule.causes],
        "on_timer": rule.on_timer,
        "hold_after_resume": rule.hold_after_resume,
        "source": rule.source,
    }


@router.get("/rules")
def list_rules(engine: EngineDep) -> dict:
    return {"rules": [rule_json(r) for r in engine.rules]}


@router.post("/rules/reload")
def reload_rules(request: Request) -> dict:
    """Read the rule files again. An invalid file is refused (422, with file, rule and position) and the rules in force stay."""
    from parallax.alerts.rules import RuleError

    try:
        rules = request.app.state.alerting.reload()
    except RuleError as exc:
        raise HTTPException(422, str(exc)) from None
    return {"rules": [r.name for r in rules], "count": len(rules)}


@router.get("/runs/{run_id}/diagnosis")
def diagnosis(run_id: RunId, store: StoreDep) -> dict:
    """The run's verdict (healthy, or the faults found, with cause ids and step ranges; it stays true after the
    run ends) and its alerts, firing and past, each with its ranked causes, evidence and advice; within a state,
    critical before warning before info, then the earliest first."""
    run = store.get_run(run_id)
    found = store.list_alerts(run_id=run_id, limit=10_000)
    by_state: dict[str, list] = {"firing": [], "pending": [], "resolved": []}
    rank = {"critical": 0, "warning": 1, "info": 2}
    for a in sorted(found, key=lambda a: (rank.get(a["severity"], 3), a["started_step"], a["id"])):
        by_state.setdefault(a["state"], []).append(a)
    return {"run_id": run_id, "status": run.status, "verdict": verdict(store.fired_alerts([run_id]).get(run_id, ())),
            **by_state}
