"""Runs: create (idempotent on project+name), list, read, update."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request, Response, status

from parallax.server.api import API_PREFIX
from parallax.server.api.deps import RunId, StoreDep
from parallax.server.api.schemas import RunCreate, RunPublic, RunsPublic, RunUpdate
from parallax.alerts.verdict import verdict
from parallax.server.lifecycle import end_run

router = APIRouter(prefix=f"{API_PREFIX}/runs", tags=["runs"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RunPublic)
def create_run(body: RunCreate, store: StoreDep, response: Response) -> RunPublic:
    run, created = store.create_run(body.project, body.name, body.config, body.tags)
    if not created:
        response.status_code = status.HTTP_200_OK
    return RunPublic.of(run)


@router.get("", response_model=RunsPublic)
def list_runs(
    store: StoreDep,
    project: str | None = None,
    tag: str | None = None,
    status: Literal["running", "finished", "failed"] | None = Query(None),
    verdict_: Literal["healthy", "faulty"] | None = Query(None, alias="verdict"),
) -> RunsPublic:
    """Runs, each with its verdict (healthy, or the faults its pages found: it stays after the run ends)."""
    found = store.list_runs(project=project, tag=tag, status=status)
    fired = store.fired_alerts([r.id for r in found]) if found else {}
    out = [RunPublic.of(r, verdict(fired.get(r.id, ()))) for r in found]
    if verdict_ is not None:
        out = [r for r in out if r.verdict is not None and r.verdict["state"] == verdict_]
    return RunsPublic(runs=out, count=len(out))


@router.get("/{run_id}", response_model=RunPublic)
def get_run(run_id: RunId, store: StoreDep) -> RunPublic:
    run = store.get_run(run_id)
    return RunPublic.of(run, verdict(store.fired_alerts([run_id]).get(run_id, ())))


@router.patch("/{run_id}", response_model=RunPublic)
def update_run(run_id: RunId, body: RunUpdate, store: StoreDep, request: Request) -> RunPublic:
    before = store.get_run(run_id).status if body.status is not None else None
    run = store.update_run(run_id, tags=body.tags, notes=body.notes)
    if body.status is not None and body.status != before:
        if body.status == "running":
            run = store.update_run(run_id, status="running")
            request.app.state.alerting.run_changed(run_id, "running")
        else:  # an end event at the last step, and a finished run's alerts resolve
            run = end_run(store, request.app.state.alerting, run_id, body.status, reason="status set through the API")
    return RunPublic.of(run)
