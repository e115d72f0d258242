"""Health and Parallax's own Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from parallax.server import __version__
from parallax.server.api.deps import SettingsDep, StoreDep, TelemetryDep
from parallax.server.migrate import current_revision

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz(store: StoreDep, settings: SettingsDep, request: Request) -> JSONResponse:
    """200 when the database is reachable, at the newest schema and can write; else 503 saying which is not."""
    reachable = store.ping()
    revision = current_revision(store.engine) if reachable else None
    head = request.app.state.schema_head
    failure = store.can_write(settings.write_probe_seconds) if reachable else None
    ok = reachable and revision == head and failure is None
    body = {
        "status": "ok" if ok else "unhealthy",
        "version": __version__,
        "leader": request.app.state.alerting.is_leader,  # evaluates rules and notifies (DESIGN §7)
        "database": {"backend": store.dialect, "reachable": reachable, "schema": revision, "schema_head": head,
                     "at_head": revision == head, "writable": reachable and failure is None,
                     "write_error": failure.reason if failure else None},
    }
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/metrics", include_in_schema=False)
def metrics(telemetry: TelemetryDep) -> Response:
    return Response(telemetry.exposition(), media_type=CONTENT_TYPE_LATEST)
