"""The app factory: the only place that wires store, API, telemetry and dashboard together."""

from __future__ import annotations

import gc
from contextlib import asynccontextmanager
from typing import AsyncIterator
from urllib.parse import urlsplit

from a2wsgi import WSGIMiddleware
import orjson
from sqlalchemy.exc import DataError, OperationalError
from fastapi import FastAPI, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse

from parallax.dashboard.app import build_dash
from parallax.ingest.points import InvalidInput
from parallax.server import __version__
from parallax.server.alerting import AlertService
from parallax.server.aliasing import AliasService
from parallax.server.budget import MemoryBudget, ParseBudgetMiddleware
from parallax.server.ingestion import Ingestor
from parallax.server.prometheus import PromIngest
from parallax.server.retention import RetentionService
from parallax.server.api import alerts, audit, health, metrics, runs
from parallax.server.api import prometheus
from parallax.server.config import Settings
from parallax.server.migrate import ensure_schema, head_revision
from parallax.server.security import (
    BodyLimitMiddleware,
    CrossOriginMiddleware,
    HostAllowListMiddleware,
    TokenAuthMiddleware,
)
from parallax.server.store import RunNotFound, Store
from parallax.server.store.health import StorageFailure, storage_failure
from parallax.server.store.sql import SqlStore
from parallax.server.telemetry import Telemetry, TelemetryMiddleware


def open_store(settings: Settings) -> SqlStore:
    """Open the store; a new database is created at the newest schema, an old one is refused."""
    store = SqlStore(settings.database_url)
    try:
        ensure_schema(store.engine, store.engine.url.render_as_string(hide_password=True))
    except BaseException:
        store.close()
        raise
    return store


def error_response(detail: object, status_code: int) -> Response:
    """A ``{"detail": ...}`` answer that can always be written, whatever input it echoes.

    orjson, not json.dumps: the offending input may itself be NaN. It refuses
    what JSON text cannot carry (a lone surrogate from a ``\\ud800`` escape,
    an integer past 64 bits): those are written escaped, as text.
    """
    try:
        body = orjson.dumps({"detail": detail})
    except TypeError:
        body = orjson.dumps({"detail": _writable(detail)})
    return Response(body, status_code=status_code, media_type="application/json")


def _shallow(value: object, depth: int = 16) -> object:
    """``value`` as echoed in an error: containers past ``depth`` levels become "..." (a deep input cannot be encoded)."""
    if isinstance(value, dict):
        return {k: _shallow(v, depth - 1) for k, v in value.items()} if depth > 0 else "..."
    if isinstance(value, (list, tuple)):
        return [_shallow(v, depth - 1) for v in value] if depth > 0 else "..."
    return value


def _writable(value: object) -> object:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, dict):
        return {_writable(str(k)): _writable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_writable(v) for v in value]
    return _writable(str(value))


def create_app(settings: Settings | None = None, store: Store | None = None, *, tune_gc: bool = False) -> FastAPI:
    settings = settings or Settings()
    store = store or open_store(settings)
    try:
        alerting = AlertService(store, settings)
    except BaseException:
        store.close()
        raise
    telemetry = Telemetry(store, finished_runs_for_s=settings.export_finished_runs_for_s)
    telemetry.watch_leader(lambda: alerting.is_leader)
    retention = RetentionService(store, settings, telemetry.registry, leading=lambda: alerting.is_leader)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if tune_gc:
            # Everything built at start-up is long-lived: keep the collector
            # from rescanning it, and let the ingest path allocate freely.
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 20, 20)
        alerting.start()
        retention.start()
        prom.start()
        yield
        prom.stop()
        retention.stop()
        alerting.stop()
        store.close()

    app = FastAPI(
        title="Parallax",
        version=__version__,
        summary="Live dashboard and diagnostics for agentic-RL training runs",
        lifespan=lifespan,
        docs_url="/api/docs",
        redoc_url=None,
        openapi_url="/api/v1/openapi.json",
    )
    app.state.settings = settings
    app.state.store = store
    app.state.telemetry = telemetry
    app.state.schema_head = head_revision()  # read once: the migration files do not change while serving
    app.state.alerting = alerting
    app.state.retention = retention
    ingestor = app.state.ingestor = Ingestor(
        store, AliasService(store), alerting, settings.max_metrics_per_run, telemetry
    )
    prom = app.state.prom = PromIngest(store, ingestor, step_wait_s=settings.prometheus_step_wait_s)
    app.state.alerts = alerting.engine

    app.include_router(runs.router)
    app.include_router(metrics.router)
    app.include_router(alerts.router)
    app.include_router(health.router)
    app.include_router(prometheus.router)
    app.include_router(audit.router)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, exc: RequestValidationError) -> Response:
        errors = [{**e, "input": _shallow(e["input"])} if "input" in e else e for e in exc.errors()]
        return error_response(jsonable_encoder(errors), 422)

    @app.exception_handler(DataError)
    async def _unstorable(_request: Request, exc: DataError) -> JSONResponse:
        # A value the database refuses (PostgreSQL cannot hold a NUL character in text, say).
        detail = [{"loc": ["body"], "msg": "a value the database cannot store (a NUL character?)", "type": "value_error"}]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(OperationalError)
    async def _store_failed(_request: Request, exc: OperationalError) -> Response:
        # Answered, not raised: an exception that escapes is a plain-text 500 and uvicorn drops the connection,
        # failing the client's next request on it too.
        failure = storage_failure(exc) or StorageFailure(False, "the database is not available")
        detail = [{"loc": [], "msg": f"{failure.reason}: nothing of this request was stored; retry later",
                   "type": "insufficient_storage" if failure.full else "store_unavailable"}]
        return JSONResponse({"detail": detail}, status_code=507 if failure.full else 503,
                            headers={"retry-after": "30" if failure.full else "5"})

    @app.exception_handler(InvalidInput)
    async def _invalid_input(_request: Request, exc: InvalidInput) -> Response:
        return error_response(exc.errors, exc.status_code)

    @app.exception_handler(RunNotFound)
    async def _run_not_found(_request: Request, exc: RunNotFound) -> JSONResponse:
        return JSONResponse({"detail": [{"loc": ["path", "run_id"], "msg": str(exc), "type": "not_found"}]}, status_code=404)

    @app.get("/", include_in_schema=False)
    def _root() -> RedirectResponse:
        return RedirectResponse("/dashboard/")

    dash_app = build_dash(store, write_token=settings.secret("token"))
    app.mount("/dashboard", WSGIMiddleware(dash_app.server))

    # The last added is the outermost: telemetry sees every answer, including 401 and 413; a body is read within
    # its limit, and only a request with the token takes a share of the parse budget.
    app.state.parse_budget = parse_budget = MemoryBudget(settings.parse_memory_budget_bytes)
    app.add_middleware(ParseBudgetMiddleware, budget=parse_budget, max_body_bytes=settings.max_body_bytes,
                       wait_s=settings.parse_wait_seconds, read_timeout_s=settings.body_read_timeout_seconds)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(TokenAuthMiddleware, write_token=settings.secret("token"), read_token=settings.secret("read_token"))
    external = urlsplit(settings.external_url) if settings.external_url else None
    app.add_middleware(CrossOriginMiddleware,
                       trusted_origins=[f"{external.scheme}://{external.netloc}"] if external else [])
    app.add_middleware(HostAllowListMiddleware,
                       allowed=[settings.host, *settings.allowed_hosts, *([external.netloc] if external else [])])
    app.add_middleware(TelemetryMiddleware, telemetry=telemetry)
    return app
