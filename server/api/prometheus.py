"""Prometheus in: the Pushgateway protocol and remote write 1.0. Also the alias table.

- ``PUT|POST /metrics/job/<job>{/<label>/<value>}``: a text-format push, as
  ``prometheus_client.push_to_gateway`` / ``pushadd_to_gateway`` send it
  (``Content-Encoding: gzip`` or ``snappy`` too; any content type but the
  protobuf exposition's is read as text, as by the Pushgateway). ``DELETE``
  marks the run finished.
- ``POST /api/v1/prom/write``: snappy-compressed protobuf WriteRequest.
- ``GET /api/v1/aliases``: the framework key table.

Bad input is a 400 whose ``detail`` says what was wrong; nothing of that request is stored.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from parallax.ingest import aliases, remote_write
from parallax.ingest.inflate import TooLarge, inflate
from parallax.ingest.points import InvalidInput
from parallax.ingest.prometheus import DEFAULT_IGNORED_LABELS, PromInputError, decode_text, parse_grouping_path, parse_text
from parallax.server.api import API_PREFIX
from parallax.server.api.deps import SettingsDep, TelemetryDep

router = APIRouter(tags=["prometheus"])

PROTOBUF_EXPOSITION = "application/vnd.google.protobuf"


def _error(status: int, msg: str, loc: list, kind: str = "prometheus_input") -> JSONResponse:
    return JSONResponse({"detail": [{"loc": loc, "msg": msg, "type": kind}]}, status_code=status)


def _ignored(settings: object) -> tuple[str, ...]:
    return tuple(getattr(settings, "prometheus_ignored_labels", DEFAULT_IGNORED_LABELS))


async def _stored(work: Callable[[], dict], telemetry: Any) -> Response:
    """Parse and store off the event loop; a bad body is a 400 (413 past the size limit), nothing stored."""
    try:
        doc = await run_in_threadpool(work)
    except TooLarge as exc:
        return _error(413, str(exc), ["body"])
    except PromInputError as exc:
        telemetry.ingest_batches.labels("rejected").inc()
        return _error(400, str(exc), ["body"])
    except InvalidInput as exc:  # past the run's metric limit: nothing stored, and not worth retrying
        telemetry.ingest_batches.labels("rejected").inc()
        return JSONResponse({"detail": exc.errors}, status_code=400)
    telemetry.ingest_batches.labels("stored").inc()  # its points are counted by the Ingestor
    return JSONResponse(doc, status_code=200)


# One handler, three operations (each its own operation id in the OpenAPI document).
@router.put("/metrics/{grouping:path}", summary="Pushgateway push (replace the group)", operation_id="pushgateway_put")
@router.post("/metrics/{grouping:path}", summary="Pushgateway push (add to the group)", operation_id="pushgateway_post")
@router.delete("/metrics/{grouping:path}", summary="Pushgateway delete (the run finishes)", operation_id="pushgateway_delete")
async def pushgateway(
    grouping: str, request: Request, settings: SettingsDep, telemetry: TelemetryDep
) -> Response:
    """The Pushgateway protocol: run = the `run` grouping label, else the job; step = the pushed `step` gauge, else the next step."""
    raw_path = request.scope.get("raw_path") or request.url.path.encode()
    raw = raw_path.decode("latin-1").split("?", 1)[0]
    try:
        key = parse_grouping_path(raw[len("/metrics/") :])
    except PromInputError as exc:
        return _error(400, str(exc), ["path"])
    service = request.app.state.prom
    if request.method == "DELETE":
        doc = await run_in_threadpool(service.delete, key)
        return JSONResponse(doc, status_code=202)
    ctype = request.headers.get("content-type", "text/plain").split(";")[0].strip().lower()
    if ctype == PROTOBUF_EXPOSITION:
        return _error(415, "the protobuf exposition format is not supported: push the text format (prometheus_client does)", ["header", "content-type"])
    # Any other content type is read as the text format, as the Pushgateway does (curl --data-binary sends
    # application/x-www-form-urlencoded).
    body = await request.body()
    encoding = request.headers.get("content-encoding", "").strip().lower()

    def work() -> dict:
        samples = parse_text(decode_text(inflate(body, encoding, settings.max_body_bytes)))
        return service.push(key, samples, _ignored(settings), time.time())

    return await _stored(work, telemetry)


@router.post(API_PREFIX + "/prom/write", summary="Prometheus remote write 1.0")
async def prom_write(request: Request, settings: SettingsDep, telemetry: TelemetryDep) -> Response:
    """Snappy-compressed protobuf `prometheus.WriteRequest`. Samples map to runs by their `run` label (others are skipped)."""
    ctype = request.headers.get("content-type", "application/x-protobuf").split(";")
    media = ctype[0].strip().lower()
    params = {p.split("=", 1)[0].strip(): p.split("=", 1)[-1].strip() for p in ctype[1:] if "=" in p}
    if media not in ("application/x-protobuf", ""):
        return _error(415, f"unsupported content type {media!r}: remote write sends application/x-protobuf", ["header", "content-type"])
    proto = params.get("proto", "prometheus.WriteRequest")
    if proto != "prometheus.WriteRequest":
        # Remote write 2.0 senders fall back to 1.0 on a 415.
        return _error(415, f"{proto} is not accepted: this receiver speaks remote write 1.0 (prometheus.WriteRequest)", ["header", "content-type"])
    encoding = request.headers.get("content-encoding", "snappy").strip().lower()
    if encoding != "snappy":
        return _error(400, f"unsupported Content-Encoding {encoding!r}: remote write bodies are snappy-compressed (block format)", ["header", "content-encoding"])
    body = await request.body()
    service = request.app.state.prom
    max_bytes = settings.max_body_bytes

    def work() -> dict:
        series = remote_write.parse(remote_write.decompress(body, max_bytes))
        return service.remote_write(series, _ignored(settings), time.time())

    return await _stored(work, telemetry)


@router.get(API_PREFIX + "/aliases", summary="Framework key aliases")
def list_aliases() -> dict:
    """Which key of which framework is stored under which canonical name too, with unit conversions."""
    return {
        "frameworks": aliases.table(),
        "capped": {
            "name": aliases.CAPPED_IMPORTANCE_WEIGHT_MAX,
            "meaning": "an importance-weight max that the framework logs after truncation; never the raw max",
        },
        "pass_at_k": 'every pass@<k> key is stored as pass_at_k{k="<k>"}; the run\'s k (config `k`, default 8) also as pass_at_k',
        "framework_from": "the run's config `framework`, else detected from the keys of its batches",
    }

