"""The rule expression language: a small, safe language over metric windows.

An expression is parsed with Python's ``ast`` (never ``eval``/``compile``) and
turned into a tree of whitelisted nodes; anything else is refused with the
0-based column where it starts. Evaluation reads a run through an
:class:`EvalContext` and returns a float, a bool, or ``None``.

``None`` means "unknown": a metric the expression needs has no data (never
logged, or only non-finite values in the window), a division by zero, a
non-finite result. Unknown propagates through arithmetic and comparisons;
``and``/``or``/``not`` use three-valued (Kleene) logic, so ``x > 1 or y > 1``
is true when ``x > 1`` even if ``y`` was never logged, and ``coalesce(e, d)``
turns an unknown into a default. A rule whose condition is unknown is inactive.

Windows count a metric's own points (the n most recent points it logged at or
before the evaluated step), so sparse metrics such as a held-out evaluation
every 25 steps work with the same functions. Non-finite points are skipped by
every statistic and counted by ``count_nonfinite``. The README's "Rules"
section is the reference for the functions.
"""

from __future__ import annotations

import ast
import math
import re
from bisect import bisect_right
from typing import Callable, Iterable, Protocol, Sequence

__all__ = ["EvalContext", "Expr", "ExprError", "FUNCTIONS", "parse_expr"]

MAX_SOURCE_CHARS = 4000
MAX_WINDOW = 10_000
METRIC_NAME = re.compile(r"[A-Za-z0-9_:./@-]{1,200}")  # ingest.names.NAME_PATTERN

Point = tuple[int, "float | None"]


class EvalContext(Protocol):
    """What an expression reads from a run (alerts.engine provides it; tests fake it)."""

    step: int
    config: dict

    def points(self, metric: str, n: int) -> list[tuple[int, float | None]]: ...

    def seconds_since_report(self) -> float | None: ...

    def steps_since_resume(self) -> int | None: ...

    # Optional: ``report_interval() -> float | None``, the typical wall seconds between the
    # run's reports; read by the report_interval() function when the context has it.
    # Optional: ``longest_pause() -> float | None``, the longest wait between two of the run's reports so far
    # (its evaluations, checkpoints); read by the longest_pause() function.
    # Optional: ``heartbeat_age() -> float | None``, seconds since the trainer's process last said it is alive.


class ExprError(ValueError):
    """An expression that cannot be parsed or uses something not allowed."""

    def __init__(self, message: str, column: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.column = column  # 0-based offset in the expression source

    def __str__(self) -> str:
        return f"column {self.column}: {self.message}"


# -- values -------------------------------------------------------------------


def _num(v: float | bool | None) -> float | None:
    return None if v is None else float(v)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _truth(v: float | bool | None) -> bool | None:
    return None if v is None else bool(v)


_INF = math.inf
_MISSING = object()


def _finite_values(points: Iterable[Point]) -> list[float]:
    # -inf < v < inf is False for NaN and the infinities, and cheaper than math.isfinite here
    return [v for _, v in points if v is not None and -_INF < v < _INF]


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


# -- nodes ----------------------------------------------------------------------


class _Node:
    __slots__ = ("col",)

    def ev(self, ctx: EvalContext) -> float | bool | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def evs(self, ctxs: Sequence[EvalContext]) -> list:
        """``[self.ev(c) for c in ctxs]``, each node once for all contexts (see ``Expr.evaluate_many``)."""
        return [self.ev(c) for c in ctxs]

    def children(self) -> Sequence["_Node"]:
        return ()


class _Const(_Node):
    __slots__ = ("value",)

    def __init__(self, value: float | bool, col: int) -> None:
        self.value, self.col = value, col

    def ev(self, ctx):
        return self.value

    def evs(self, ctxs):
        return [self.value] * len(ctxs)


class _Arith(_Node):
    __slots__ = ("op", "left", "right")

    def __init__(self, op: str, left: _Node, right: _Node, col: int) -> None:
        self.op, self.left, self.right, self.col = op, left, right, col

    def children(self):
        return (self.left, self.right)

    def ev(self, ctx):
        a = _num(self.left.ev(ctx))
        if a is None:
            return None
        b = _num(self.right.ev(ctx))
        if b is None:
            return None
        return _arith(self.op, a, b)

    def evs(self, ctxs):
        op = self.op
        left = list(map(_num, self.left.evs(ctxs)))
        out: list = [None] * len(ctxs)
        known = [i for i, a in enumerate(left) if a is not None]  # the right side only where ev would read it
        for i, b in zip(known, map(_num, self.right.evs(_pick(ctxs, known)))):
            if b is not None:
                out[i] = _arith(op, left[i], b)
        return out


def _pick(ctxs: Sequence, idx: list[int]) -> list:
    return [ctxs[i] for i in idx] if len(idx) != len(ctxs) else list(ctxs)


def _arith(op: str, a: float, b: float) -> float | None:
    if op == "+":
        r = a + b
    elif op == "-":
        r = a - b
    elif op == "*":
        r = a * b
    else:
        if b == 0:
            return None
        r = a / b
    return _finite(r)


class _Neg(_Node):
    __slots__ = ("operand",)

    def __init__(self, operand: _Node, col: int) -> None:
        self.operand, self.col = operand, col

    def children(self):
        return (self.operand,)

    def ev(self, ctx):
        v = _num(self.operand.ev(ctx))
        return None if v is None else -v

    def evs(self, ctxs):
        return [None if v is None else -v for v in map(_num, self.operand.evs(ctxs))]


class _Not(_Node):
    __slots__ = ("operand",)

    def __init__(self, operand: _Node, col: int) -> None:
        self.operand, self.col = operand, col

    def children(self):
        return (self.operand,)

    def ev(self, ctx):
        t = _truth(self.operand.ev(ctx))
        return None if t is None else not t

    def evs(self, ctxs):
        return [None if t is None else not t for t in map(_truth, self.operand.evs(ctxs))]


class _And(_Node):
    __slots__ = ("values",)

    def __init__(self, values: list[_Node], col: int) -> None:
        self.values, self.col = values, col

    def children(self):
        return self.values

    def ev(self, ctx):
        unknown = False
        for node in self.values:
            t = _truth(node.ev(ctx))
            if t is False:
                return False
            if t is None:
                unknown = True
        return None if unknown else True

    def evs(self, ctxs):
        return _junction(self.values, ctxs, decisive=False)


class _Or(_Node):
    __slots__ = ("values",)

    def __init__(self, values: list[_Node], col: int) -> None:
        self.values, self.col = values, col

    def children(self):
        return self.values

    def ev(self, ctx):
        unknown = False
        for node in self.values:
            t = _truth(node.ev(ctx))
            if t is True:
                return True
            if t is None:
                unknown = True
        return None if unknown else False

    def evs(self, ctxs):
        return _junction(self.values, ctxs, decisive=True)


def _junction(values: list[_Node], ctxs: Sequence, *, decisive: bool) -> list:
    """``and`` (decisive False) or ``or`` (decisive True) over contexts: each operand is read only for the
    contexts it has not decided yet, as ``ev`` stops at the first decisive operand."""
    out: list = [not decisive] * len(ctxs)
    open_ = list(range(len(ctxs)))
    for node in values:
        if not open_:
            break
        for i, t in zip(open_, map(_truth, node.evs(_pick(ctxs, open_)))):
            if t is decisive:
                out[i] = decisive
            elif t is None:
                out[i] = None
        open_ = [i for i in open_ if out[i] is not decisive]
    return out


_COMPARE: dict[type, tuple[str, Callable[[float, float], bool]]] = {
    ast.Lt: ("<", lambda a, b: a < b),
    ast.LtE: ("<=", lambda a, b: a <= b),
    ast.Gt: (">", lambda a, b: a > b),
    ast.GtE: (">=", lambda a, b: a >= b),
    ast.Eq: ("==", lambda a, b: a == b),
    ast.NotEq: ("!=", lambda a, b: a != b),
}


class _Compare(_Node):
    __slots__ = ("operands", "ops")

    def __init__(self, operands: list[_Node], ops: list[Callable[[float, float], bool]], col: int) -> None:
        self.operands, self.ops, self.col = operands, ops, col

    def children(self):
        return self.operands

    def ev(self, ctx):
        return self._judge([_num(o.ev(ctx)) for o in self.operands])

    def _judge(self, values: list) -> bool | None:
        unknown = False
        for op, a, b in zip(self.ops, values, values[1:]):
            if a is None or b is None:
                unknown = True
            elif not op(a, b):
                return False
        return None if unknown else True

    def evs(self, ctxs):
        columns = [list(map(_num, o.evs(ctxs))) for o in self.operands]
        return [self._judge(list(row)) for row in zip(*columns)]


class _IfElse(_Node):
    __slots__ = ("test", "body", "orelse")

    def __init__(self, test: _Node, body: _Node, orelse: _Node, col: int) -> None:
        self.test, self.body, self.orelse, self.col = test, body, orelse, col

    def children(self):
        return (self.test, self.body, self.orelse)

    def ev(self, ctx):
        t = _truth(self.test.ev(ctx))
        if t is None:
            return None
        return self.body.ev(ctx) if t else self.orelse.ev(ctx)

    def evs(self, ctxs):
        tests = list(map(_truth, self.test.evs(ctxs)))
        out: list = [None] * len(ctxs)
        for branch, want in ((self.body, True), (self.orelse, False)):
            idx = [i for i, t in enumerate(tests) if t is want]
            if idx:
                for i, v in zip(idx, branch.evs(_pick(ctxs, idx))):
                    out[i] = v
        return out


class _Apply(_Node):
    """A scalar function of expression arguments: abs, log, min, max, clamp, coalesce."""

    __slots__ = ("name", "args", "fn")

    def __init__(self, name: str, args: list[_Node], fn: Callable[[list], float | bool | None], col: int) -> None:
        self.name, self.args, self.fn, self.col = name, args, fn, col

    def children(self):
        return self.args

    def ev(self, ctx):
        if self.name == "coalesce":  # lazy: stop at the first known value
            for a in self.args:
                v = a.ev(ctx)
                if v is not None:
                    return v
            return None
        return self.fn([a.ev(ctx) for a in self.args])

    def evs(self, ctxs):
        if self.name == "coalesce":  # each argument only where the ones before it are unknown
            out: list = [None] * len(ctxs)
            open_ = list(range(len(ctxs)))
            for a in self.args:
                if not open_:
                    break
                for i, v in zip(open_, a.evs(_pick(ctxs, open_))):
                    out[i] = v
                open_ = [i for i in open_ if out[i] is None]
            return out
        columns = [a.evs(ctxs) for a in self.args]
        fn = self.fn
        return [fn(list(row)) for row in zip(*columns)]


class _Window(_Node):
    """A statistic over the n most recent points of one metric (leaving out the ``skip`` newest)."""

    __slots__ = ("name", "metric", "n", "skip", "fn", "need", "key", "q", "on_finite", "reads")

    def __init__(self, name: str, metric: str, n: int, skip: int, fn: Callable, col: int, q: float | None = None) -> None:
        self.name, self.metric, self.n, self.skip, self.col, self.q = name, metric, n, skip, col, q
        #: most recent points this call reads
        self.need = n + 1 if name == "delta" else n + skip
        self.key = (name, metric, n, skip, q)
        on_finite = _ON_FINITE.get(name)
        if skip and name != "baseline":  # the statistic of the window that ends `skip` points back
            inner, inner_finite = fn, on_finite
            fn = lambda points, node: inner(points[: max(0, len(points) - skip)], node)  # noqa: E731
            if inner_finite is not None:
                on_finite = lambda xs, node: inner_finite(xs[: max(0, len(xs) - skip)], node)  # noqa: E731
        self.fn, self.on_finite = fn, on_finite
        #: (metric, most recent points) this call reads, for the engine's windows
        self.reads: tuple[tuple[str, int], ...] = ((metric, self.need),)

    def window(self, ctx) -> list[Point]:
        return ctx.points(self.metric, self.need)

    def ev(self, ctx):
        memo = getattr(ctx, "memo", None)  # rules.evaluate's context: one value per call per evaluation
        if memo is None:
            return self.fn(self.window(ctx), self)
        try:
            return memo[self.key]
        except KeyError:
            v = memo[self.key] = self.fn(self.window(ctx), self)
            return v

    def evs(self, ctxs):
        key, fn, metric, need = self.key, self.fn, self.metric, self.need
        memos = [getattr(ctx, "memo", None) for ctx in ctxs]
        out = [_MISSING if memo is None else memo.get(key, _MISSING) for memo in memos]
        todo = [i for i, v in enumerate(out) if v is _MISSING]
        if not todo:
            return out
        # Contexts that can hand over their windows' values when all are finite (the engine's, for a batch's
        # steps) save building (step, value) pairs and filtering them: the same value, computed on floats.
        on_finite = self.on_finite
        windows = getattr(ctxs[todo[0]], "finite_windows", None) if on_finite is not None else None
        values = windows([ctxs[i] for i in todo], metric, need) if windows is not None else None
        for j, i in enumerate(todo):
            xs = values[j] if values is not None else None
            v = on_finite(xs, self) if xs is not None else fn(self.window(ctxs[i]), self)  # type: ignore[misc]
            out[i] = v
            if memos[i] is not None:
                memos[i][key] = v
        return out


#: A pair series' left (denser) metric is averaged over at most this many of its points before each point of the
#: right one, and this many of its points are kept for it (evaluations up to ~50 steps apart over ~16 evaluations).
PAIR_SPAN = 10
PAIR_LEFT_POINTS = 1000
#: A window over a pair reads at most this many of its points (n + skip).
PAIR_RIGHT_POINTS = 64


class _PairWindow(_Window):
    """A statistic over a series of one point at each of the right metric's steps, where the left one's value
    is the mean of its points since the right one's previous point (at most its last PAIR_SPAN, at or before
    the step): ``left - right`` is their difference there (``reward_train - reward_heldout``: the train/held-out
    gap at each evaluation), ``at(left, right)`` the left one's value alone (the training reward at each
    evaluation)."""

    __slots__ = ("left", "right", "op")

    def __init__(self, name: str, left: str, right: str, n: int, skip: int, fn: Callable, col: int,
                 q: float | None = None, op: str = "-") -> None:
        label = f"{left} - {right}" if op == "-" else f"at({left}, {right})"
        super().__init__(name, label, n, skip, fn, col, q)
        self.left, self.right, self.op = left, right, op
        self.on_finite = None  # the pair series is built per context: no batch fast path
        self.reads = ((right, PAIR_RIGHT_POINTS + 1), (left, PAIR_LEFT_POINTS))

    def window(self, ctx) -> list[Point]:
        # One pair series per context (step), however many calls read it: built for the longest window a pair
        # may have, then sliced.
        memo = getattr(ctx, "memo", None)
        key = ("pair", self.left, self.right, self.op)
        out = memo.get(key) if memo is not None else None
        if out is None:
            out = self._series(ctx)
            if memo is not None:
                memo[key] = out
        return out[-self.need:]

    def _series(self, ctx) -> list[Point]:
        right = ctx.points(self.right, PAIR_RIGHT_POINTS + 1)  # one more: where the first point's interval begins
        if not right:
            return []
        # A point of the pair depends only on points at or before its step: one computed at an earlier step of
        # the run is reused (the context's pair_cache, kept with its windows and emptied when they change other
        # than by growing), so a step computes the points of the sparse metric's new steps only.
        cache = getattr(ctx, "pair_cache", None)
        known: dict | None = None
        if cache is not None:
            known = cache.get((self.left, self.right, self.op))
            if known is None:
                known = cache[(self.left, self.right, self.op)] = {}
        left: list[Point] | None = None
        lsteps: list[int] = []
        out: list[Point] = []
        prev = None
        at = self.op == "at"
        first = len(right) <= PAIR_RIGHT_POINTS  # the run's first point of the sparse metric is in the window
        for step, b in right:
            if prev is not None or first:
                hit = known.get(step) if known is not None else None
                if hit is not None and hit[0] == prev and hit[1] == b:
                    out.append((step, hit[2]))
                    prev = step
                    continue
                if left is None:
                    # the newest point only, at the context's step: its interval is within the left's newest points
                    n = PAIR_SPAN + 1 if step == ctx.step and out and len(out) == len(right) - (0 if first else 1) - 1 \
                        else PAIR_LEFT_POINTS
                    left = ctx.points(self.left, n)
                    lsteps = [p[0] for p in left]
                end = bisect_right(lsteps, step)
                start = end - PAIR_SPAN if end > PAIR_SPAN else 0
                if prev is not None:
                    start = max(start, bisect_right(lsteps, prev, 0, end))
                total, count = 0.0, 0
                for _, v in left[start:end]:
                    if v is not None and -_INF < v < _INF:
                        total += v
                        count += 1
                value = None
                if count and at:
                    value = _finite(total / count)
                elif count and b is not None and -_INF < b < _INF:
                    value = _finite(total / count - b)
                out.append((step, value))
                if known is not None:
                    known[step] = (prev, b, value)
            prev = step
        if known is not None and len(known) > 4 * PAIR_RIGHT_POINTS:
            for step in sorted(known)[: len(known) - 2 * PAIR_RIGHT_POINTS]:
                del known[step]
        return out


class _ContextCall(_Node):
    """absent_for(), step(), steps_since_resume(), report_interval(), longest_pause(), heartbeat_age(),
    config(key, default)."""

    __slots__ = ("name", "key", "default")

    def __init__(self, name: str, col: int, key: str | None = None, default: float | bool | None = None) -> None:
        self.name, self.col, self.key, self.default = name, col, key, default

    def ev(self, ctx):
        if self.name == "absent_for":
            return _finite(_num(ctx.seconds_since_report()))
        if self.name == "step":
            return float(ctx.step)
        if self.name == "steps_since_resume":
            return _num(ctx.steps_since_resume())
        if self.name in ("report_interval", "longest_pause", "heartbeat_age"):
            method = getattr(ctx, self.name, None)
            return _finite(_num(method())) if callable(method) else None
        return _config_value(ctx.config, self.key, self.default)


def _config_value(config: dict | None, key: str, default: float | bool | None) -> float | bool | None:
    """A numeric config value: the key itself, else a dotted path into nested dicts; default otherwise."""
    found, value = False, None
    if isinstance(config, dict):
        if key in config:
            found, value = True, config[key]
        elif "." in key:
            node: object = config
            for part in key.split("."):
                if isinstance(node, dict) and part in node:
                    node = node[part]
                else:
                    break
            else:
                found, value = True, node
    if not found or value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return _finite(float(value))
    if isinstance(value, str):
        try:
            return _finite(float(value))
        except ValueError:
            return default
    return default


# -- window statistics ------------------------------------------------------------


def _w_last(points: list[Point], node: _Window):
    if not points:
        return None
    v = points[-1][1]
    return v if v is not None and math.isfinite(v) else None


def _w_stat(reduce: Callable[[list[float]], float], minimum: int = 1):
    def fn(points: list[Point], node: _Window):
        return on_finite(_finite_values(points), node)

    def on_finite(xs: list[float], node: _Window):
        return _finite(reduce(xs)) if len(xs) >= minimum else None

    fn.on_finite = on_finite  # type: ignore[attr-defined]
    return fn


def _std(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


# E|Z| over the lower 80% of |Z| for a standard normal Z: 2 (phi(0) - phi(1.2816)) / 0.8
_TRIMMED_ABS_MEAN = 0.5586


def _noise(xs: list[float]) -> float:
    """Robust sigma of the point-to-point noise of a series.

    From the first differences (a linear trend only shifts them), centred on their
    median; the largest fifth of the absolute deviations is dropped (an isolated spike
    makes two outlying differences; the fault itself) and the mean of the rest is scaled
    to a normal sigma, divided by sqrt(2) because a difference holds two points' noise.
    """
    d = [b - a for a, b in zip(xs, xs[1:])]
    md = _median(d)
    r = sorted(abs(x - md) for x in d)
    keep = r[: max(1, math.ceil(0.8 * len(r)))]
    return (sum(keep) / len(keep)) / _TRIMMED_ABS_MEAN / math.sqrt(2.0)


def _w_slope(points: list[Point], node: _Window):
    pts = [(float(s), v) for s, v in points if v is not None and math.isfinite(v)]
    if len(pts) < 2:
        return None
    n = len(pts)
    mx = sum(s for s, _ in pts) / n
    my = sum(v for _, v in pts) / n
    sxx = sum((s - mx) ** 2 for s, _ in pts)
    if sxx == 0:
        return None
    return _finite(sum((s - mx) * (v - my) for s, v in pts) / sxx)


def _w_delta(points: list[Point], node: _Window):
    xs = _finite_values(points)
    if len(points) < node.n + 1 or len(xs) < 2:
        return None
    return _finite(xs[-1] - xs[0])


def _quantile(xs: list[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    ys = sorted(xs)
    pos = q * (len(ys) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def _w_quantile(points: list[Point], node: _Window):
    return _on_finite_quantile(_finite_values(points), node)


def _on_finite_quantile(xs: list[float], node: _Window):
    return _finite(_quantile(xs, node.q)) if xs else None


_w_quantile.on_finite = _on_finite_quantile  # type: ignore[attr-defined]


def _w_baseline(points: list[Point], node: _Window):
    return _median_of_enough(_finite_values(points[: max(0, len(points) - node.skip)][-node.n :]), node)


def _median_of_enough(xs: list[float], node: _Window) -> float | None:
    """A baseline: the median of the finite values of its window, if they are at least half of it."""
    return _median(xs) if len(xs) >= max(1, math.ceil(node.n / 2)) else None


def _w_count_nonfinite(points: list[Point], node: _Window):
    return float(sum(1 for _, v in points if v is None or not math.isfinite(v)))


def _w_count_over(points: list[Point], node: _Window):
    return float(len(_finite_values(points)))


def _w_last_step(points: list[Point], node: _Window):
    return float(points[-1][0]) if points else None


def _w_spacing(points: list[Point], node: _Window):
    """The median number of steps between consecutive points (an evaluation's cadence)."""
    gaps = [b[0] - a[0] for a, b in zip(points, points[1:])]
    return float(_median(gaps)) if gaps else None


def _w_exists(points: list[Point], node: _Window):
    return bool(points)


_WINDOWS: dict[str, Callable] = {
    "last": _w_last,
    "mean_over": _w_stat(lambda xs: sum(xs) / len(xs)),
    "max_over": _w_stat(max),
    "min_over": _w_stat(min),
    "median_over": _w_stat(_median),
    "sum_over": _w_stat(sum),
    "std_over": _w_stat(_std, minimum=2),
    "noise": _w_stat(_noise, minimum=3),
    "slope": _w_slope,
    "delta": _w_delta,
    "baseline": _w_baseline,
    "count_nonfinite": _w_count_nonfinite,
    "count_over": _w_count_over,
    "exists": _w_exists,
    "quantile_over": _w_quantile,
    "last_step": _w_last_step,
    "spacing": _w_spacing,
}

# The same statistics from the window's values when every one of them is finite (so the points are the values):
# what ``_Window.evs`` uses with a context that has ``finite_windows``. ``slope`` reads the steps: not here.
_ON_FINITE: dict[str, Callable[[list[float], _Window], float | bool | None]] = {
    name: fn.on_finite for name, fn in _WINDOWS.items() if hasattr(fn, "on_finite")
}
_ON_FINITE.update({
    "last": lambda xs, node: xs[-1] if xs else None,
    "delta": lambda xs, node: _finite(xs[-1] - xs[0]) if len(xs) >= max(node.n + 1, 2) else None,
    "baseline": lambda xs, node: _median_of_enough(xs[: max(0, len(xs) - node.skip)][-node.n :], node),
    "count_nonfinite": lambda xs, node: 0.0,
    "count_over": lambda xs, node: float(len(xs)),
    "exists": lambda xs, node: bool(xs),
})

#: Window functions over one metric only (no pair series)
_SINGLE_METRIC = frozenset({"exists", "count_nonfinite", "delta", "slope", "last_step", "spacing"})

# minimum n per window function
_MIN_WINDOW = {"slope": 2, "std_over": 2, "noise": 3, "spacing": 2}


# -- scalar functions ---------------------------------------------------------------


def _f_abs(args):
    v = _num(args[0])
    return None if v is None else abs(v)


def _f_log(args):
    v = _num(args[0])
    return math.log(v) if v is not None and v > 0 else None


def _f_min(args):
    vs = [_num(a) for a in args]
    return None if any(v is None for v in vs) else min(vs)


def _f_max(args):
    vs = [_num(a) for a in args]
    return None if any(v is None for v in vs) else max(vs)


def _f_clamp(args):
    x, lo, hi = (_num(a) for a in args)
    if x is None or lo is None or hi is None:
        return None
    return min(max(x, lo), hi)


_SCALARS: dict[str, tuple[int, int | None, Callable]] = {
    # name: (min args, max args or None for any, implementation)
    "abs": (1, 1, _f_abs),
    "log": (1, 1, _f_log),
    "min": (2, None, _f_min),
    "max": (2, None, _f_max),
    "clamp": (3, 3, _f_clamp),
    "coalesce": (2, None, lambda args: next((a for a in args if a is not None), None)),
}

# Parameters of the window functions: "m" metric, "n" window length, "skip" newest points left out, "q" quantile.
_WINDOW_PARAMS: dict[str, tuple[str, ...]] = {name: ("m", "n", "skip") for name in _WINDOWS}
_WINDOW_PARAMS.update({"last": ("m",), "exists": ("m",), "last_step": ("m",), "delta": ("m", "n"), "spacing": ("m", "n"),
                       "quantile_over": ("m", "n", "q", "skip")})

_CONTEXT_PARAMS: dict[str, tuple[str, ...]] = {
    "absent_for": (),
    "step": (),
    "steps_since_resume": (),
    "report_interval": (),
    "longest_pause": (),
    "heartbeat_age": (),
    "config": ("key", "default"),
}

#: Every function name the language knows.
FUNCTIONS: frozenset[str] = frozenset(_WINDOWS) | frozenset(_SCALARS) | frozenset(_CONTEXT_PARAMS)


# -- the parsed expression ----------------------------------------------------------


class Expr:
    """A parsed, whitelisted expression. Immutable; compare and hash by source."""

    __slots__ = ("source", "metrics", "windows", "uses_time", "_root", "_headline")

    def __init__(self, source: str, root: _Node) -> None:
        self.source = source
        self._root = root
        windows: dict[str, int] = {}
        uses_time = False
        for node in _walk(root):
            if isinstance(node, _Window):
                for metric, need in node.reads:
                    windows[metric] = max(windows.get(metric, 0), need)
            elif isinstance(node, _ContextCall) and node.name == "absent_for":
                uses_time = True
        self.windows = windows
        self.metrics = frozenset(windows)
        self.uses_time = uses_time
        self._headline = _headline(root)

    def evaluate(self, ctx: EvalContext) -> float | bool | None:
        try:
            v = self._root.ev(ctx)
        except (ArithmeticError, ValueError):  # math domain / overflow: unknown, never an exception
            return None
        if isinstance(v, float) and not math.isfinite(v):
            return None
        return v

    def evaluate_many(self, ctxs: Sequence[EvalContext]) -> list[float | bool | None]:
        """``[self.evaluate(c) for c in ctxs]``, walking the tree once for all the contexts (the steps of one
        batch): each node's work is a loop over the contexts instead of a call per context. An operand is read
        for just the contexts ``evaluate`` would read it for (``and``/``or``/``coalesce``/``if``/arithmetic stop
        early alike), so the values are the same; if something raises, each context is evaluated on its own."""
        try:
            values = self._root.evs(ctxs)
        except (ArithmeticError, ValueError):
            return [self.evaluate(c) for c in ctxs]
        return [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]

    def headline(self, ctx: EvalContext) -> float | None:
        """The number the condition is about: the left side of its first comparison
        (``max_over(x, 5)`` in ``max_over(x, 5) > 10 and ...``), else the value itself."""
        try:
            v = self._headline.ev(ctx)
        except (ArithmeticError, ValueError):
            return None
        v = _num(v)
        return v if v is not None and math.isfinite(v) else None

    @property
    def window_call(self) -> tuple[str, int] | None:
        """(metric, points read) when the whole expression is one window function call."""
        if isinstance(self._root, _Window):
            return self._root.metric, self._root.need
        return None

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and other.source == self.source

    def __hash__(self) -> int:
        return hash(("Expr", self.source))


def _walk(node: _Node) -> Iterable[_Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children())


def _headline(root: _Node) -> _Node:
    node = root
    while isinstance(node, (_And, _Or)):
        node = node.values[0]
    if isinstance(node, _Compare):
        return node.operands[0]
    return node


# -- parsing ------------------------------------------------------------------------


def parse_expr(source: str) -> Expr:
    """Parse ``source`` into an :class:`Expr`; raise :class:`ExprError` with the column."""
    if not isinstance(source, str):
        raise ExprError(f"an expression must be a string, not {type(source).__name__}", 0)
    if not source.strip():
        raise ExprError("empty expression", 0)
    if len(source) > MAX_SOURCE_CHARS:
        raise ExprError(f"expression longer than {MAX_SOURCE_CHARS} characters", MAX_SOURCE_CHARS)
    # The parentheses let an expression span lines (YAML block scalars); offsets are shifted back by one.
    wrapped = "(" + source + "\n)"
    try:
        tree = ast.parse(wrapped, mode="eval")
    except SyntaxError as exc:
        col = _offset(wrapped, exc.lineno or 1, (exc.offset or 1) - 1, chars=True) - 1
        raise ExprError(f"syntax error: {exc.msg}", _clamp_col(col, source)) from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise ExprError(f"expression cannot be parsed ({type(exc).__name__})", 0) from None
    builder = _Builder(source, wrapped)
    try:
        root = builder.build(tree.body)
    except RecursionError:
        raise ExprError("expression nested too deeply", 0) from None
    return Expr(source, root)


def _offset(text: str, lineno: int, col: int, *, chars: bool) -> int:
    lines = text.split("\n")
    lineno = min(max(lineno, 1), len(lines))
    line = lines[lineno - 1]
    if not chars:  # ast col_offset counts UTF-8 bytes
        col = len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))
    return sum(len(x) + 1 for x in lines[: lineno - 1]) + col


def _clamp_col(col: int, source: str) -> int:
    return min(max(col, 0), len(source))


_NOT_ALLOWED = {
    ast.Attribute: "'.' is not allowed; quote a metric name that contains '.', e.g. last(\"actor.entropy\")",
    ast.Subscript: "indexing is not allowed",
    ast.Lambda: "lambda is not allowed",
    ast.NamedExpr: "':=' is not allowed",
    ast.List: "lists are not allowed",
    ast.Tuple: "tuples are not allowed",
    ast.Dict: "dicts are not allowed",
    ast.Set: "sets are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.Await: "await is not allowed",
}

_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


class _Builder:
    def __init__(self, source: str, wrapped: str) -> None:
        self.source = source
        self.wrapped = wrapped

    def col(self, node: ast.AST) -> int:
        lineno = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 1)
        return _clamp_col(_offset(self.wrapped, lineno, col, chars=False) - 1, self.source)

    def error(self, node: ast.AST, message: str) -> ExprError:
        return ExprError(message, self.col(node))

    def build(self, node: ast.AST) -> _Node:
        col = self.col(node)
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return _Const(v, col)
            if isinstance(v, (int, float)):
                f = float(v)
                if not math.isfinite(f):
                    raise self.error(node, "number out of range")
                return _Const(f, col)
            if isinstance(v, str):
                raise self.error(
                    node, f"a quoted metric name goes inside a function, e.g. last({v!r}); strings are not values"
                )
            raise self.error(node, f"{type(v).__name__} constants are not allowed")
        if isinstance(node, ast.Name):
            return self.metric_last(node.id, col)
        if isinstance(node, ast.BinOp):
            op = _ARITH.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator {type(node.op).__name__} is not allowed (use + - * /)")
            left, right = self.build(node.left), self.build(node.right)
            if isinstance(left, _Const) and isinstance(right, _Const):
                v = _Arith(op, left, right, col).ev(None)  # type: ignore[arg-type]
                if v is None:
                    raise self.error(node, "constant expression has no finite value (division by zero?)")
                return _Const(v, col)
            return _Arith(op, left, right, col)
        if isinstance(node, ast.UnaryOp):
            operand = self.build(node.operand)
            if isinstance(node.op, ast.Not):
                return _Not(operand, col)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.USub):
                if isinstance(operand, _Const) and not isinstance(operand.value, bool):
                    return _Const(-operand.value, col)
                return _Neg(operand, col)
            raise self.error(node, "operator ~ is not allowed")
        if isinstance(node, ast.BoolOp):
            values = [self.build(v) for v in node.values]
            return _And(values, col) if isinstance(node.op, ast.And) else _Or(values, col)
        if isinstance(node, ast.Compare):
            ops = []
            for op in node.ops:
                entry = _COMPARE.get(type(op))
                if entry is None:
                    raise self.error(node, f"comparison {type(op).__name__} is not allowed (use < <= > >= == !=)")
                ops.append(entry[1])
            operands = [self.build(node.left)] + [self.build(c) for c in node.comparators]
            return _Compare(operands, ops, col)
        if isinstance(node, ast.IfExp):
            return _IfElse(self.build(node.test), self.build(node.body), self.build(node.orelse), col)
        if isinstance(node, ast.Call):
            return self.call(node)
        for kind, message in _NOT_ALLOWED.items():
            if isinstance(node, kind):
                raise self.error(node, message)
        raise self.error(node, f"{type(node).__name__} is not allowed")

    def metric_last(self, name: str, col: int) -> _Node:
        if name in FUNCTIONS:
            raise ExprError(f"{name} is a function; call it: {name}(...)", col)
        return _Window("last", name, 1, 0, _WINDOWS["last"], col)

    def call(self, node: ast.Call) -> _Node:
        col = self.col(node)
        if not isinstance(node.func, ast.Name):
            raise self.error(node.func, "only the built-in functions can be called")
        name = node.func.id
        if name not in FUNCTIONS:
            hint = _suggest(name)
            raise self.error(node.func, f"unknown function {name!r}" + (f" (did you mean {hint}?)" if hint else ""))
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.error(a, "*args is not allowed")
        for kw in node.keywords:
            if kw.arg is None:
                raise self.error(kw.value, "**kwargs is not allowed")
        if name in _SCALARS:
            lo, hi, fn = _SCALARS[name]
            if node.keywords:
                raise self.error(node.keywords[0].value, f"{name}() takes no keyword arguments")
            n = len(node.args)
            if n < lo or (hi is not None and n > hi):
                want = f"{lo}" if hi == lo else (f"{lo} to {hi}" if hi else f"at least {lo}")
                raise self.error(node, f"{name}() takes {want} arguments, got {n}")
            return _Apply(name, [self.build(a) for a in node.args], fn, col)
        params = _WINDOW_PARAMS.get(name) or _CONTEXT_PARAMS[name]
        args = self.bind(node, name, params)
        if name in _CONTEXT_PARAMS:
            if name != "config":
                return _ContextCall(name, col)
            if "key" not in args:
                raise self.error(node, "config() needs a key, e.g. config(\"staleness_bound\")")
            key = args["key"]
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value):
                raise self.error(key, "config() key must be a quoted string, e.g. config(\"k\", 8)")
            default = None
            if "default" in args:
                d = self.build(args["default"])
                if not isinstance(d, _Const):
                    raise self.error(args["default"], "config() default must be a number")
                default = d.value
            return _ContextCall("config", col, key.value, default)
        # window functions
        if "m" not in args:
            raise self.error(node, f"{name}() needs a metric name")
        pair = None
        m = args["m"]
        if isinstance(m, ast.BinOp) and isinstance(m.op, ast.Sub):
            if name in _SINGLE_METRIC:
                raise self.error(m, f"{name}() takes one metric, not a difference of two")
            pair = (self.metric_name(m.left), self.metric_name(m.right), "-")
        elif isinstance(m, ast.Call) and isinstance(m.func, ast.Name) and m.func.id == "at":
            if name in _SINGLE_METRIC:
                raise self.error(m, f"{name}() takes one metric, not at(...)")
            if len(m.args) != 2 or m.keywords:
                raise self.error(m, "at() takes two metrics: at(metric, the metric whose steps it is read at)")
            pair = (self.metric_name(m.args[0]), self.metric_name(m.args[1]), "at")
        else:
            metric = self.metric_name(m)
        n = 1
        if "n" in params:
            if "n" not in args:
                raise self.error(node, f"{name}() needs a window length: {name}(metric, n)")
            n = self.int_literal(args["n"], "window length", _MIN_WINDOW.get(name, 1))
        skip = 0
        if "skip" in args:
            skip = self.int_literal(args["skip"], "skip", 0)
        q = None
        if "q" in params:
            if "q" not in args:
                raise self.error(node, f"{name}() needs a quantile: {name}(metric, n, q), 0 <= q <= 1")
            qn = args["q"]
            qv = qn.value if isinstance(qn, ast.Constant) else None
            if isinstance(qv, bool) or not isinstance(qv, (int, float)) or not 0 <= qv <= 1:
                raise self.error(qn, "the quantile must be a number written out, between 0 and 1")
            q = float(qv)
        if pair is not None:
            if n + skip > PAIR_RIGHT_POINTS:
                raise self.error(node, f"a window over a pair reads at most {PAIR_RIGHT_POINTS} of its points (n + skip)")
            return _PairWindow(name, pair[0], pair[1], n, skip, _WINDOWS[name], col, q, op=pair[2])
        return _Window(name, metric, n, skip, _WINDOWS[name], col, q)

    def bind(self, node: ast.Call, name: str, params: tuple[str, ...]) -> dict[str, ast.expr]:
        if len(node.args) > len(params):
            raise self.error(node.args[len(params)], f"{name}() takes at most {len(params)} arguments")
        bound = dict(zip(params, node.args))
        for kw in node.keywords:
            if kw.arg not in params:
                raise self.error(kw.value, f"{name}() has no parameter {kw.arg!r} (parameters: {', '.join(params) or 'none'})")
            if kw.arg in bound:
                raise self.error(kw.value, f"{name}() got {kw.arg!r} twice")
            bound[kw.arg] = kw.value
        return bound

    def metric_name(self, node: ast.expr) -> str:
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        else:
            raise self.error(node, "expected a metric name (a bare name, or quoted: \"actor/entropy\")")
        if not METRIC_NAME.fullmatch(name):
            raise self.error(node, f"invalid metric name {name!r}: letters, digits and _ : . / @ -, 1 to 200 characters")
        return name

    def int_literal(self, node: ast.expr, what: str, minimum: int) -> int:
        value = node.value if isinstance(node, ast.Constant) else None
        if type(value) is not int:
            raise self.error(node, f"{what} must be a whole number written out, e.g. 10")
        if value < minimum or value > MAX_WINDOW:
            raise self.error(node, f"{what} must be between {minimum} and {MAX_WINDOW}")
        return value


def _suggest(name: str) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, sorted(FUNCTIONS), n=1, cutoff=0.6)
    return close[0] if close else None
