"""Health and Parallax's own Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from server import __version__
from server.api.deps import StoreDep, TelemetryDep
from server.migrate import current_revision

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(store: StoreDep, request: Request) -> JSONResponse:
    reachable = store.ping()
    revision = current_revision(store.engine) if reachable else None
    head = request.app.state.schema_head
    ok = reachable and revision == head
    body = {
        "status": "ok" if ok else "unhealthy",
        "version": __version__,
        "leader": request.app.state.alerting.is_leader,  # evaluates rules and notifies (DESIGN §7)
        "database": {"backend": store.dialect, "reachable": reachable, "schema": revision, "schema_head": head, "at_head": revision == head},
    }
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics", include_in_schema=False)
def metrics(telemetry: TelemetryDep) -> Response:
    return Response(telemetry.exposition(), media_type=CONTENT_TYPE_LATEST)
