"""Harness audit: trajectories in (JSON or NDJSON), the audit's checks out; results stored as canonical metrics."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from parallax.ingest.audit import AuditInputError, audit, metric_rows, parse_trajectories
from parallax.ingest.points import Batch, InvalidInput, loads
from parallax.server.api import API_PREFIX
from parallax.server.api.deps import RunId, StoreDep
from parallax.server.api.metrics import NDJSON_TYPES, JSONBytes

router = APIRouter(prefix=API_PREFIX + "/runs/{run_id}", tags=["audit"])

_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_LOGPROBS = {"type": "array", "items": {"type": "number"}, "description": "one per completion token, or one per prompt + completion token"}
_TRAJECTORY_SCHEMA = {
    "type": "object",
    "required": ["step", "turns"],
    "properties": {
        "step": {"type": "integer", "minimum": 0},
        "policy_version": {"type": "integer", "minimum": 0},
        "id": {"type": "string"},
        "turns": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "prompt_ids": _IDS,
                    "completion_ids": _IDS,
                    "trainer_ids": _IDS,
                    "rollout_logprobs": _LOGPROBS,
                    "trainer_logprobs": _LOGPROBS,
                    "prompt_text": {"type": "string"},
                    "completion_text": {"type": "string"},
                },
            },
        },
    },
}


def _documents(body: bytes, ndjson: bool) -> tuple[list[Any], list]:
    if ndjson:
        docs = []
        for lineno, line in enumerate(body.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                docs.append(loads(line))
            except InvalidInput as exc:
                exc.errors[0]["loc"] = ["body", f"line {lineno}"]
                raise
        return docs, ["body"]
    doc = loads(body)
    if type(doc) is not dict or type(doc.get("trajectories")) is not list:
        raise InvalidInput([{"loc": ["body", "trajectories"], "msg": "expected an object with a 'trajectories' list", "type": "list_type"}])
    extra = set(doc) - {"trajectories"}
    if extra:
        raise InvalidInput([{"loc": ["body", sorted(extra)[0]], "msg": "unknown field; expected only 'trajectories'", "type": "extra_forbidden"}])
    return doc["trajectories"], ["body", "trajectories"]


def _audit(request: Request, run_id: int, body: bytes, ndjson: bool) -> dict[str, Any]:
    store = request.app.state.store
    store.get_run(run_id)  # 404 before any work
    docs, loc = _documents(body, ndjson)
    try:
        trajectories = parse_trajectories(docs, loc)
    except AuditInputError as exc:
        raise InvalidInput(exc.errors) from None
    steps = audit(trajectories)
    now = time.time()
    rows = metric_rows(steps, now)
    reports = [a.report() for a in steps.values()]
    if rows:
        request.app.state.ingestor.store_batch(run_id, Batch.of(rows), now=now)
    store.save_audit(run_id, reports, now=now)
    return {
        "trajectories": len(trajectories),
        "turns": sum(a.turns for a in steps.values()),
        "tokens": sum(a.tokens for a in steps.values()),
        "steps": {
            str(r["step"]): {"checks": {c: v["failed"] for c, v in r["checks"].items()}, "metrics": r["metrics"], "kinds": r["kinds"]}
            for r in reports
        },
        "passed": all(c["passed"] for r in reports for c in r["checks"].values()),
    }


@router.post(
    "/trajectories",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "required": ["trajectories"], "properties": {"trajectories": {"type": "array", "items": _TRAJECTORY_SCHEMA}}}
                },
                "application/x-ndjson": {"schema": _TRAJECTORY_SCHEMA},
            },
        }
    },
)
async def post_trajectories(run_id: RunId, request: Request) -> JSONBytes:
    """Audit trajectories (exact prefix, template, token stream, log-probabilities); store the per-step results.

    Each step's results become the canonical metrics ``prefix_break_rate``,
    ``token_mismatch_rate``, ``logprob_diff_max`` and ``importance_weight_max``
    (plus ``audit_*`` counts) at that step, so the rules read them; a step
    audited again replaces its earlier results. All or nothing: a bad
    trajectory is a 422 naming the trajectory, the turn and the field.
    """
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    ndjson = ctype in NDJSON_TYPES
    if not ndjson and ctype != "application/json" and not ctype.endswith("+json"):
        raise HTTPException(415, f"unsupported content type {ctype!r}: send application/json or application/x-ndjson")
    body = await request.body()
    return JSONBytes(await run_in_threadpool(_audit, request, run_id, body, ndjson))


@router.get("/audit")
def get_audit(
    run_id: RunId,
    store: StoreDep,
    since_step: int | None = Query(None, ge=-1, le=2**63 - 2, description="Only steps after this one"),
    examples: int = Query(5, ge=0, le=50, description="Worst examples kept per check"),
) -> JSONBytes:
    """The run's harness audit: the three checks pass/fail with counts, the worst examples, and the per-step results."""
    return JSONBytes(store.audit_summary(run_id, since_step=since_step, examples=examples))
