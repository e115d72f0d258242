"""Parse and validate a batch of metric points without building a model per point.

A batch is ``{"points": [{"step": 12, "metrics": {"entropy": 1.9}, "time": 1764000000.5}]}``
as JSON, or the same point objects one per line as NDJSON. The result is a flat
list of rows ``(name, step, value, nonfinite, time)`` ready for the store.

Validation is complete: every error names the field path (FastAPI's ``loc``
convention) and, for batches, the point's index. ``NaN``, ``Infinity`` and
``-Infinity`` as Python's ``json.dumps`` writes them are accepted: the value is
stored as ``None`` with a non-finite marker.
"""

from __future__ import annotations

import json
import math
import re
import time as _time
from dataclasses import dataclass
from typing import Any

import orjson

from parallax.ingest.names import NAME_RULE, is_valid_name

# Non-finite markers, as stored beside a NULL value.
FINITE, NAN, POS_INF, NEG_INF = 0, 1, 2, 3
NONFINITE_LABELS = {NAN: "NaN", POS_INF: "Infinity", NEG_INF: "-Infinity"}

MAX_STEP = 2**63 - 1
MAX_ERRORS = 50
POINT_FIELDS = frozenset(("step", "metrics", "time"))

Row = tuple[str, int, float | None, int, float]
#: A point of one metric: (step, value, nonfinite, time).
Sample = tuple[int, float | None, int, float]


class InvalidInput(ValueError):
    """The body cannot be stored. ``errors`` follow FastAPI's error shape."""

    def __init__(self, errors: list[dict[str, Any]], status_code: int = 422):
        self.errors = errors
        self.status_code = status_code
        super().__init__(errors[0]["msg"] if errors else "invalid input")


def _error(loc: list, msg: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"loc": loc, "msg": msg, "type": kind, **extra}


@dataclass(slots=True)
class Batch:
    """Validated points grouped by metric name, with what the store needs to know of them.

    Grouping lets the store write each metric's samples as they are, without
    rebuilding a row per value, in the order of the points table's key.
    """

    groups: dict[str, list[Sample]]
    count: int
    non_finite: int
    steps: tuple[int, int] | None  # lowest and highest step, None for an empty batch
    #: Canonical names whose samples are another name's, unchanged (``ingest.aliases``): canonical name -> that name.
    links: dict[str, str] | None = None

    @classmethod
    def of(cls, rows: list[Row]) -> "Batch":
        """A batch of rows ``(name, step, value, nonfinite, time)`` that are already valid (tests, importers)."""
        groups: dict[str, list[Sample]] = {}
        for name, step, value, nonfinite, t in rows:
            groups.setdefault(name, []).append((step, value, nonfinite, t))
        steps = [r[1] for r in rows]
        return cls(
            groups=groups,
            count=len(rows),
            non_finite=sum(1 for r in rows if r[3]),
            steps=(min(steps), max(steps)) if steps else None,
        )

    @property
    def rows(self) -> list[Row]:
        return [(name, *sample) for name, samples in self.groups.items() for sample in samples]


def loads(body: bytes | str) -> Any:
    """orjson first; the standard library only when the body holds NaN/Infinity."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        doc = json.loads(body)
    except RecursionError:
        raise InvalidInput([_error(["body"], "malformed JSON: nested too deeply", "json_invalid")], status_code=400) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InvalidInput(
            [_error(["body"], f"malformed JSON{where}: {exc.args[0].split(':')[0]}", "json_invalid")],
            status_code=400,
        ) from None
    # orjson refuses a lone surrogate escape (\ud800 without its pair); the standard library keeps it
    # as a string that no database or JSON answer can hold.
    if _SURROGATE_ESCAPE.search(body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")) and _has_lone_surrogate(doc):
        raise InvalidInput(
            [_error(["body"], "malformed JSON: a \\u escape is a lone surrogate (\\ud800-\\udfff without its pair)", "json_invalid")],
            status_code=400,
        )
    return doc


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is str:
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif type(v) is dict:
            stack.extend(v)
            stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)
    return False


def parse_json(body: bytes, now: float | None = None) -> Batch:
    doc = loads(body)
    if type(doc) is not dict:
        raise InvalidInput([_error(["body"], "expected an object with a 'points' list", "object_type")])
    extra = set(doc) - {"points"}
    if extra:
        raise InvalidInput([_error(["body", sorted(extra)[0]], "unknown field; expected only 'points'", "extra_forbidden")])
    points = doc.get("points")
    if type(points) is not list:
        raise InvalidInput([_error(["body", "points"], "'points' must be a list of point objects", "list_type")])
    return validate(points, ["body", "points"], now)


def parse_ndjson(body: bytes, now: float | None = None) -> Batch:
    points = []
    for lineno, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            points.append(loads(line))
        except InvalidInput as exc:
            exc.errors[0]["loc"] = ["body", f"line {lineno}"]
            exc.errors[0]["line"] = lineno
            raise
    return validate(points, ["body"], now)


def _value(v: Any) -> tuple[float | None, int] | None:
    """(stored value, non-finite marker), or None when ``v`` is not a number."""
    tv = type(v)
    if tv is float:
        if v - v == 0.0:
            return v, FINITE
        if v != v:
            return None, NAN
        return None, POS_INF if v > 0 else NEG_INF
    if tv is int:
        try:
            return float(v), FINITE
        except OverflowError:
            return None, POS_INF if v > 0 else NEG_INF
    return None


def validate(points: list, loc: list, now: float | None = None) -> Batch:
    """Turn point objects into samples grouped by metric, or raise InvalidInput listing what is wrong.

    This loop runs once per value on the ingest hot path: the common case (a
    finite float under a name already seen) is checked inline.
    """
    if now is None:
        now = _time.time()
    groups: dict[str, list[Sample]] = {}
    errors: list[dict[str, Any]] = []
    count = non_finite = 0
    lo = hi = -1
    for i, p in enumerate(points):
        if len(errors) >= MAX_ERRORS:
            break
        if type(p) is not dict:
            errors.append(_error(loc + [i], "a point must be an object with 'step' and 'metrics'", "object_type", index=i))
            continue
        if not POINT_FIELDS.issuperset(p):
            field = sorted(set(p) - POINT_FIELDS)[0]
            errors.append(_error(loc + [i, field], "unknown field; a point has 'step', 'metrics' and optional 'time'", "extra_forbidden", index=i))
            continue
        step = p.get("step")
        if type(step) is not int or step < 0 or step > MAX_STEP:
            if "step" not in p:
                msg, kind = "field required", "missing"
            elif type(step) is int or (type(step) is float and step >= 2**63 and step.is_integer()):
                # (orjson reads an integer past 64 bits as a float)
                msg, kind = "step must be a non-negative integer below 2**63", "int_range"
            else:
                msg, kind = f"step must be a non-negative integer, not {type(step).__name__}", "int_type"
            errors.append(_error(loc + [i, "step"], msg, kind, index=i))
            continue
        t = p.get("time")
        if t is None:
            t = now
        elif (type(t) is not float and type(t) is not int) or not (0 <= t < 1e11):
            errors.append(_error(loc + [i, "time"], "time must be Unix seconds (a finite, non-negative number)", "float_type", index=i))
            continue
        else:
            t = float(t)
        metrics = p.get("metrics")
        if type(metrics) is not dict:
            msg = "field required" if "metrics" not in p else "metrics must be an object of name: number"
            errors.append(_error(loc + [i, "metrics"], msg, "dict_type", index=i))
            continue
        if not metrics:
            continue
        if step > hi:
            hi = step
        if step < lo or lo < 0:
            lo = step
        count += len(metrics)
        for name, v in metrics.items():
            samples = groups.get(name)
            if samples is None:
                if not is_valid_name(name):
                    errors.append(_error(loc + [i, "metrics", name], f"invalid metric name: {NAME_RULE}", "name_pattern", index=i))
                    continue
                samples = groups[name] = []
            if type(v) is float and v - v == 0.0:
                samples.append((step, v, FINITE, t))
                continue
            parsed = _value(v)
            if parsed is None:
                errors.append(_error(loc + [i, "metrics", name], f"value must be a number, not {_json_type(v)}", "float_type", index=i))
                continue
            if parsed[1]:
                non_finite += 1
            samples.append((step, parsed[0], parsed[1], t))
    if errors:
        raise InvalidInput(errors)
    return Batch(groups=groups, count=count, non_finite=non_finite, steps=(lo, hi) if count else None)


def _json_type(v: Any) -> str:
    return {bool: "a boolean", str: "a string", list: "a list", dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


def nonfinite_value(marker: int) -> float:
    return {NAN: math.nan, POS_INF: math.inf, NEG_INF: -math.inf}[marker]
