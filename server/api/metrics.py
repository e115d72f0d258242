"""Metric points in (JSON or NDJSON), series and latest values out, and run events."""

from __future__ import annotations

import re
import time
from typing import Literal

import orjson
from fastapi import APIRouter, HTTPException, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from parallax.ingest.names import NAME_RULE, is_valid_name
from parallax.ingest.points import NONFINITE_LABELS, InvalidInput, parse_json, parse_ndjson
from parallax.server.api import API_PREFIX
from parallax.server.api.deps import RunId, SettingsDep, StoreDep, TelemetryDep
from parallax.server.ingestion import Ingestor
from parallax.server.api.schemas import (
    EventPublic,
    EventsCreate,
    EventsPublic,
    IngestPublic,
    LatestPublic,
    LatestsPublic,
    PointsPublic,
)
from parallax.server.store import IngestResult, Series

router = APIRouter(prefix=API_PREFIX + "/runs/{run_id}", tags=["metrics"])

NDJSON_TYPES = frozenset(("application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"))
MAX_METRICS_PER_SERIES_REQUEST = 100

_POINT_SCHEMA = {
    "type": "object",
    "required": ["step", "metrics"],
    "properties": {
        "step": {"type": "integer", "minimum": 0},
        "metrics": {"type": "object", "additionalProperties": {"type": "number"}},
        "time": {"type": "number", "description": "Unix seconds; the server's clock when absent"},
    },
}


class JSONBytes(Response):
    media_type = "application/json"

    def render(self, content: object) -> bytes:
        return orjson.dumps(content)


def _ingest(ingestor: Ingestor, run_id: int, body: bytes, ndjson: bool) -> tuple[IngestResult, int]:
    return ingestor.store_batch(run_id, (parse_ndjson if ndjson else parse_json)(body))


@router.post(
    "/metrics",
    response_model=IngestPublic,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "required": ["points"], "properties": {"points": {"type": "array", "items": _POINT_SCHEMA}}}
                },
                "application/x-ndjson": {"schema": _POINT_SCHEMA},
            },
        }
    },
)
async def ingest_metrics(run_id: RunId, request: Request, telemetry: TelemetryDep) -> Response:
    """Store a batch of points, idempotently keyed by (run, metric, step); all or nothing."""
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    ndjson = ctype in NDJSON_TYPES
    if not ndjson and ctype != "application/json" and not ctype.endswith("+json"):
        raise HTTPException(415, f"unsupported content type {ctype!r}: send application/json or application/x-ndjson")
    body = await request.body()
    start = time.perf_counter()
    try:
        result, aliased = await run_in_threadpool(_ingest, request.app.state.ingestor, run_id, body, ndjson)
    except Exception:
        telemetry.ingest_batches.labels("rejected").inc()
        raise
    telemetry.ingest_seconds.observe(time.perf_counter() - start)
    telemetry.ingest_batches.labels("stored").inc()
    doc = {"accepted": result.accepted - aliased, "replaced": result.replaced, "non_finite": result.non_finite}
    if aliased:
        doc["aliased"] = aliased  # canonical copies of framework keys, stored beside them
    return JSONBytes(doc)


@router.get("/metrics", response_model=LatestsPublic)
def latest_metrics(run_id: RunId, store: StoreDep) -> LatestsPublic:
    """Every metric the run logged, with its value at the highest step."""
    return LatestsPublic(
        metrics=[
            LatestPublic(name=lv.metric, step=lv.step, value=lv.value, non_finite=NONFINITE_LABELS.get(lv.nonfinite), time=lv.time)
            for lv in store.latest(run_id)
        ]
    )


def _series_json(s: Series, with_time: bool) -> dict:
    out: dict = {"steps": s.steps, "values": s.values, "min": s.vmin, "max": s.vmax, "downsampled": s.downsampled}
    if with_time:
        out["times"] = s.times
    if s.non_finite:
        out["non_finite"] = {"steps": [st for st, _ in s.non_finite], "values": [NONFINITE_LABELS[f] for _, f in s.non_finite]}
    return out


@router.get("/series")
def series(
    run_id: RunId,
    store: StoreDep,
    settings: SettingsDep,
    metric: list[str] = Query(..., description="Metric names; repeat the parameter for several"),
    max_points: int | None = Query(None, ge=3, description="Most points returned per metric"),
    since_step: int | None = Query(None, ge=-1, le=2**63 - 2, description="Only points after this step"),
    x: Literal["step", "time"] = Query("step", description="`time` adds each point's wall time"),
) -> Response:
    """Points of each metric, downsampled in SQL to at most ``max_points`` with min/max envelopes."""
    if len(metric) > MAX_METRICS_PER_SERIES_REQUEST:
        raise InvalidInput([{"loc": ["query", "metric"], "msg": f"at most {MAX_METRICS_PER_SERIES_REQUEST} metrics per request", "type": "too_long"}])
    bad = [(i, m) for i, m in enumerate(metric) if not is_valid_name(m)]
    if bad:
        raise InvalidInput([{"loc": ["query", "metric", i], "msg": f"invalid metric name: {NAME_RULE}", "type": "name_pattern"} for i, _ in bad])
    limit = settings.max_points_limit
    if max_points is not None and max_points > limit:
        raise InvalidInput([{"loc": ["query", "max_points"], "msg": f"max_points is at most {limit} (PARALLAX_MAX_POINTS_LIMIT)", "type": "less_than_equal"}])
    found = store.series(
        run_id, list(dict.fromkeys(metric)), max_points=max_points or settings.default_max_points, since_step=since_step
    )
    with_time = x == "time"
    return JSONBytes({"run_id": run_id, "x": x, "series": {s.metric: _series_json(s, with_time) for s in found}})


MAX_POINTS_PAGE = 100_000


#: A cursor as ``points`` writes it: a metric key's id and a step, in ASCII digits.
_CURSOR = re.compile(r"([0-9]{1,10})\.([0-9]{1,19})")


def _parse_cursor(cursor: str) -> tuple[int, int]:
    """``next_cursor`` of an earlier page, checked to fit the database's integers (a key id is 32-bit, a step
    64-bit): a number past them failed in the driver (SQLite: OverflowError, a plain-text 500)."""
    found = _CURSOR.fullmatch(cursor)
    if found is None or int(found[1]) > 2**31 - 1 or int(found[2]) > 2**63 - 1:
        raise InvalidInput([{"loc": ["query", "cursor"], "msg": "not a cursor this endpoint returned", "type": "value_error"}])
    return int(found[1]), int(found[2])


@router.get("/points", response_model=PointsPublic)
def points(
    run_id: RunId,
    store: StoreDep,
    metric: list[str] | None = Query(None, description="Metric names; repeat the parameter for several; every metric of the run when absent"),
    since_step: int | None = Query(None, ge=-1, le=2**63 - 2, description="Only points after this step"),
    cursor: str | None = Query(None, max_length=60, description="`next_cursor` of the previous page"),
    limit: int = Query(10_000, ge=1, le=MAX_POINTS_PAGE, description="Most points in this page"),
) -> Response:
    """Raw points at full resolution (no downsampling), ordered by metric then step, a page at a time.

    Non-finite values are `null` with `non_finite` (`NaN`, `Infinity`, `-Infinity`).
    Pass `next_cursor` back as `cursor` until it is `null`.
    """
    if metric is not None:
        if len(metric) > MAX_METRICS_PER_SERIES_REQUEST:
            raise InvalidInput([{"loc": ["query", "metric"], "msg": f"at most {MAX_METRICS_PER_SERIES_REQUEST} metrics per request", "type": "too_long"}])
        bad = [i for i, m in enumerate(metric) if not is_valid_name(m)]
        if bad:
            raise InvalidInput([{"loc": ["query", "metric", i], "msg": f"invalid metric name: {NAME_RULE}", "type": "name_pattern"} for i in bad])
        metric = list(dict.fromkeys(metric))
    after = _parse_cursor(cursor) if cursor is not None else None
    page = store.points(run_id, metric, after=after, since_step=since_step, limit=limit)
    out = []
    for p in page.points:
        doc = {"metric": p.metric, "step": p.step, "value": p.value, "time": p.time}
        if p.nonfinite:
            doc["non_finite"] = NONFINITE_LABELS[p.nonfinite]
        out.append(doc)
    next_cursor = f"{page.next[0]}.{page.next[1]}" if page.next is not None else None
    return JSONBytes({"run_id": run_id, "points": out, "next_cursor": next_cursor})


@router.post("/events", status_code=201)
def add_events(run_id: RunId, body: EventsCreate, store: StoreDep, request: Request) -> dict:
    """Markers such as resume, checkpoint, weight_sync, eval or note, drawn on the panels. An event the run
    already has (same step, kind and message) is not stored again: ``duplicates`` counts those."""
    now = time.time()
    n = store.add_events(run_id, [(e.step, e.kind, e.message, e.time if e.time is not None else now) for e in body.events])
    if n:
        request.app.state.alerting.run_changed(run_id)  # a resume holds rules back
    return {"accepted": n, "duplicates": len(body.events) - n}


@router.post("/heartbeat", status_code=204)
def heartbeat(run_id: RunId, store: StoreDep) -> Response:
    """The trainer's process is alive (the client sends one every 30 s while it has nothing else to send). A run
    whose heartbeats stop is paged as silent within minutes; one whose process lives but sends no data (a long
    evaluation) is given longer (the README's Rules section)."""
    store.heartbeat(run_id, time.time())
    return Response(status_code=204)


@router.get("/events", response_model=EventsPublic)
def list_events(run_id: RunId, store: StoreDep) -> EventsPublic:
    return EventsPublic(events=[EventPublic.of(e) for e in store.list_events(run_id)])
