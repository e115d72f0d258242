"""The parsed expression: a tree of whitelisted nodes, evaluated against a run's context (``Expr``).

``None`` is "unknown" and propagates through arithmetic and comparisons; ``and``/``or``/``not`` use
three-valued (Kleene) logic. ``evaluate_many`` walks the tree once for the steps of a batch.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from itertools import chain
from typing import Callable, Iterable, Protocol, Sequence

from parallax.alerts.expr.windows import ON_FINITE, Point, finite, median, num


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
    # Optional: ``longest_pause_outside_evals() -> float | None``, the longest of those where neither report carried
    # an evaluation's metric (checkpoints, restarts); read by the longest_pause_outside_evals() function.
    # Optional: ``heartbeat_age() -> float | None``, seconds since the trainer's process last said it is alive.


def _truth(v: float | bool | None) -> bool | None:
    return None if v is None else bool(v)


_INF = math.inf
_MISSING = object()


class Node:
    __slots__ = ("col",)

    def ev(self, ctx: EvalContext) -> float | bool | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def evs(self, ctxs: Sequence[EvalContext]) -> list:
        """``[self.ev(c) for c in ctxs]``, each node once for all contexts (see ``Expr.evaluate_many``)."""
        return [self.ev(c) for c in ctxs]

    def children(self) -> Sequence["Node"]:
        return ()


class Const(Node):
    __slots__ = ("value",)

    def __init__(self, value: float | bool, col: int) -> None:
        self.value, self.col = value, col

    def ev(self, ctx):
        return self.value

    def evs(self, ctxs):
        return [self.value] * len(ctxs)


class Arith(Node):
    __slots__ = ("op", "left", "right")

    def __init__(self, op: str, left: Node, right: Node, col: int) -> None:
        self.op, self.left, self.right, self.col = op, left, right, col

    def children(self):
        return (self.left, self.right)

    def ev(self, ctx):
        a = num(self.left.ev(ctx))
        if a is None:
            return None
        b = num(self.right.ev(ctx))
        if b is None:
            return None
        return _arith(self.op, a, b)

    def evs(self, ctxs):
        op = self.op
        left = list(map(num, self.left.evs(ctxs)))
        if None not in left:  # known everywhere: the right side at every context
            return [None if b is None else _arith(op, a, b) for a, b in zip(left, map(num, self.right.evs(ctxs)))]
        out: list = [None] * len(ctxs)
        known = [i for i, a in enumerate(left) if a is not None]  # the right side only where ev would read it
        for i, b in zip(known, map(num, self.right.evs(_pick(ctxs, known)))):
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
    return finite(r)


class Neg(Node):
    __slots__ = ("operand",)

    def __init__(self, operand: Node, col: int) -> None:
        self.operand, self.col = operand, col

    def children(self):
        return (self.operand,)

    def ev(self, ctx):
        v = num(self.operand.ev(ctx))
        return None if v is None else -v

    def evs(self, ctxs):
        return [None if v is None else -v for v in map(num, self.operand.evs(ctxs))]


class Not(Node):
    __slots__ = ("operand",)

    def __init__(self, operand: Node, col: int) -> None:
        self.operand, self.col = operand, col

    def children(self):
        return (self.operand,)

    def ev(self, ctx):
        t = _truth(self.operand.ev(ctx))
        return None if t is None else not t

    def evs(self, ctxs):
        return [None if t is None else not t for t in map(_truth, self.operand.evs(ctxs))]


class _Junction(Node):
    """``and`` / ``or`` over operands, three-valued: ``DECISIVE`` is the truth value that settles it (False for
    ``and``, True for ``or``); unknown when no operand settles it and one is unknown."""

    __slots__ = ("values",)
    DECISIVE: bool

    def __init__(self, values: list[Node], col: int) -> None:
        self.values, self.col = values, col

    def children(self):
        return self.values

    def ev(self, ctx):
        decisive = self.DECISIVE
        unknown = False
        for node in self.values:
            t = _truth(node.ev(ctx))
            if t is decisive:
                return decisive
            if t is None:
                unknown = True
        return None if unknown else not decisive

    def evs(self, ctxs):
        return _junction(self.values, ctxs, decisive=self.DECISIVE)


class And(_Junction):
    __slots__ = ()
    DECISIVE = False


class Or(_Junction):
    __slots__ = ()
    DECISIVE = True


def _junction(values: list[Node], ctxs: Sequence, *, decisive: bool) -> list:
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


class Compare(Node):
    __slots__ = ("operands", "ops")

    def __init__(self, operands: list[Node], ops: list[Callable[[float, float], bool]], col: int) -> None:
        self.operands, self.ops, self.col = operands, ops, col

    def children(self):
        return self.operands

    def ev(self, ctx):
        return self._judge([num(o.ev(ctx)) for o in self.operands])

    def _judge(self, values: list) -> bool | None:
        unknown = False
        for op, a, b in zip(self.ops, values, values[1:]):
            if a is None or b is None:
                unknown = True
            elif not op(a, b):
                return False
        return None if unknown else True

    def evs(self, ctxs):
        if len(self.operands) == 2:  # one comparison (the most common): _judge inline
            op = self.ops[0]
            left, right = self.operands
            return [None if a is None or b is None else not not op(a, b)
                    for a, b in zip(map(num, left.evs(ctxs)), map(num, right.evs(ctxs)))]
        columns = [list(map(num, o.evs(ctxs))) for o in self.operands]
        return [self._judge(list(row)) for row in zip(*columns)]


class IfElse(Node):
    __slots__ = ("test", "body", "orelse")

    def __init__(self, test: Node, body: Node, orelse: Node, col: int) -> None:
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


class Apply(Node):
    """A scalar function of expression arguments: abs, log, min, max, clamp, coalesce."""

    __slots__ = ("name", "args", "fn")

    def __init__(self, name: str, args: list[Node], fn: Callable[[list], float | bool | None], col: int) -> None:
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


class Window(Node):
    """A statistic over the n most recent points of one metric (leaving out the ``skip`` newest)."""

    __slots__ = ("name", "metric", "n", "skip", "fn", "need", "key", "q", "on_finite", "reads")

    def __init__(self, name: str, metric: str, n: int, skip: int, fn: Callable, col: int, q: float | None = None) -> None:
        self.name, self.metric, self.n, self.skip, self.col, self.q = name, metric, n, skip, col, q
        #: most recent points this call reads
        self.need = n + 1 if name == "delta" else n + skip
        self.key = (name, metric, n, skip, q)
        on_finite = ON_FINITE.get(name)
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
            batch = getattr(ctx, "batch", None)  # the step of a batch whose conditions computed this window already
            col = batch.columns.get(self.key) if batch is not None else None
            v = col[ctx.bidx] if col is not None else _MISSING
            if v is _MISSING:
                v = self.fn(self.window(ctx), self)
            memo[self.key] = v
            return v

    def evs(self, ctxs):
        batch = getattr(ctxs[0], "batch", None) if ctxs else None
        if batch is not None:
            return batch.values(self, ctxs)
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


class Batch:
    """The window values of the contexts of one batch's steps (the engine's), each window call computed once for
    all of them: a column of values, one per context (``ctx.batch`` is this, ``ctx.bidx`` its place here). A
    window over one metric is computed for every context at once (its values are a function of the series and the
    step alone, whichever context asks first); a pair window for the contexts asked for only, in the order asked,
    as without a batch (its points are computed once and cached with the run's windows). ``evaluate`` of one of
    these contexts (a step whose condition holds) reads the values computed here instead of computing them again."""

    __slots__ = ("ctxs", "columns", "finite", "pairs", "free", "tables", "vtables", "ranges", "filled", "same", "ends",
                 "fin", "spans", "repeats")

    def __init__(self, ctxs: Sequence) -> None:
        self.ctxs = list(ctxs)
        #: a pair series' points computed for the batch's steps so far: ([steps], [points]) (PairWindow._series)
        self.pairs: dict[tuple, tuple[list[int], list] | None] = {}
        self.columns: dict[tuple, list] = {}
        self.finite: dict[tuple[str, int], list | None] = {}
        #: per pair series, whether its points are the same whatever order the steps ask for them (order_free)
        self.free: dict[tuple, bool] = {}
        #: per order-free pair series, its points by the right metric's index, computed once (pair_value), and
        #: their values
        self.tables: dict[tuple, list[Point | None]] = {}
        self.vtables: dict[tuple, list] = {}
        #: per order-free pair series, each step's window in its table ({bidx: (begin, end)}), and the span of the
        #: table known to be filled (every entry computed)
        self.ranges: dict[tuple, dict[int, tuple[int, int]]] = {}
        self.filled: dict[tuple, tuple[int, int]] = {}
        #: for the contexts' finite_windows: whether they share one series (None: not known yet), and per metric
        #: where each context's window ends in it
        self.same: bool | None = None
        self.ends: dict[str, list[int]] = {}
        #: per metric, (lo, bad): its values from lo up to the last context's window end are all finite floats,
        #: and a span reaching down to bad or below was found not to be (Batch._all_finite)
        self.fin: dict[str, tuple[int, int]] = {}
        #: a pair window's value per span of its series' table ((key, begin, end)), a window's over one metric
        #: computed from its points per end of its window in the series ((key, end)): the steps between two points
        #: of a sparse metric read the same points, so the same value
        self.spans: dict[tuple, object] = {}
        #: per metric, where each context's window ends in its series when some end repeats (a sparse metric's),
        #: else None
        self.repeats: dict[str, list[int] | None] = {}
        for i, c in enumerate(self.ctxs):
            c.batch, c.bidx = self, i

    def values(self, node: "Window", ctxs: Sequence) -> list:
        col = self.columns.get(node.key)
        if col is None:
            col = self.columns[node.key] = [_MISSING] * len(self.ctxs)
            if node.on_finite is not None:
                try:
                    self._fill_all(node, col)
                except (ArithmeticError, ValueError):  # left to the contexts asked for (they raise as alone)
                    col[:] = [_MISSING] * len(self.ctxs)
        out = [col[c.bidx] for c in ctxs]
        if _MISSING in out:
            fn = node.fn
            # a window over one metric is a function of where it ends in the series the contexts share: the
            # steps between two points of a sparse metric read the same points (computed once for the batch)
            ends = self.repeats.get(node.metric, _MISSING) if type(node) is Window else None
            if ends is _MISSING:
                span_of = getattr(self.ctxs[0], "batch_span", None) if self.ctxs else None
                span = span_of(node.metric) if span_of is not None else None
                ends = span[1] if span is not None else None
                if ends and ends[-1] - ends[0] >= len(ends) - 1:  # (ascending by at most 1 a step) no end repeats
                    ends = None
                self.repeats[node.metric] = ends
            spans, key = self.spans, node.key
            for j, c in enumerate(ctxs):
                if out[j] is _MISSING:
                    if ends:
                        at = (key, ends[c.bidx])
                        v = spans.get(at, _MISSING)
                        if v is _MISSING:
                            v = spans[at] = fn(node.window(c), node)
                    else:
                        v = fn(node.window(c), node)
                    out[j] = col[c.bidx] = v
        return out

    def release(self) -> None:
        """The batch is judged: its contexts let go of it (a context and its batch refer to each other, a cycle that
        only the garbage collector would free otherwise, with every column and window the batch computed)."""
        for c in self.ctxs:
            c.batch = None
        self.ctxs = []

    def order_free(self, node: "PairWindow") -> bool:
        """Whether the pair series' points that the batch's steps compute (``PairWindow._series``) are the same,
        and leave the run's ``pair_cache`` the same, whatever order the steps ask for them in: every point a step
        computes is the mean of the left metric's points of its interval (at most its last PAIR_SPAN), the same for
        every step, when no step's left window (its last PAIR_LEFT_POINTS points) begins after the first point the
        earliest step needs; and the cache is pruned at no call of the batch when its points so far plus every
        point of the batch's windows stay within the limit. (A cached point then is what any step finds there,
        and a point missing is added by whichever step asks first, with the one value all compute.) Decided
        once per batch and series, before any of its points is computed in an order other than the steps'."""
        pkey = node.pkey
        got = self.free.get(pkey)
        if got is None:
            got = self.free[pkey] = _order_free(self.ctxs, node, pkey)
        return got

    def pair_value(self, node: "PairWindow", ctx) -> object:
        """``node.fn(node.window(ctx))`` for a step of the batch whose pair series is ``order_free``, kept in its
        column: the step's pair points as ``PairWindow._series`` gives them (a point the run's ``pair_cache``
        holds for the same previous step and value is read from it, any other is computed from the whole left
        series and cached), each point computed once for the batch in the series' table, and each window read
        from it by its place there; the statistic from their values alone when they are all finite
        (``values_fn``, as a window of one metric is computed)."""
        pkey = node.pkey
        ranges = self.ranges.get(pkey)
        if ranges is None:
            ranges = self.ranges[pkey] = {}
        got = ranges.get(ctx.bidx)
        if got is None:
            got = ranges[ctx.bidx] = self._pair_range(ctx, node, pkey)
        begin, end = got
        a = end - node.need
        if a < begin:
            a = begin
        span = (node.key, a, end)
        v = self.spans.get(span, _MISSING)
        if v is _MISSING:
            values_fn = node.values_fn
            if a >= end:
                v = values_fn([], node) if values_fn is not None else node.fn([], node)
            else:
                values = self.vtables[pkey][a:end]
                if values_fn is not None and None not in values:  # (a point is a tuple: never None)
                    v = values_fn(values, node)
                else:
                    v = node.fn(self.tables[pkey][a:end], node)
            self.spans[span] = v
        self.columns[node.key][ctx.bidx] = v
        return v

    def pair_points(self, node: "PairWindow", ctx) -> list[Point] | None:
        """The step's pair points (``PairWindow._series``) when ``pair_value`` computed them for it, else None."""
        ranges = self.ranges.get(node.pkey)
        got = ranges.get(ctx.bidx) if ranges is not None else None
        if got is None:
            return None
        begin, end = got
        return self.tables[node.pkey][begin:end] if end > begin else []

    def _pair_range(self, ctx, node: "PairWindow", pkey: tuple) -> tuple[int, int]:
        """Where the step's pair points lie in the series' table (filled there first, as ``_series`` computes
        them): the right metric's points up to the step, at most PAIR_RIGHT_POINTS of them."""
        series = ctx._series
        right = series.get(node.right)
        if not right:
            return 0, 0
        rsteps, rvals = right
        end = bisect_right(rsteps, ctx.step)
        if not end:
            return 0, 0
        begin = end - (PAIR_RIGHT_POINTS + 1) if end > PAIR_RIGHT_POINTS + 1 else 0
        if end - begin > PAIR_RIGHT_POINTS:  # the window's first point is where the second one's interval begins
            begin += 1
        table = self.tables.get(pkey)
        if table is None:
            table = self.tables[pkey] = [None] * len(rsteps)
            vtable = self.vtables[pkey] = [None] * len(rsteps)
        else:
            vtable = self.vtables[pkey]
        lo, hi = self.filled.get(pkey, (0, 0))
        if lo <= begin and end <= hi:
            return begin, end
        cache = ctx.pair_cache
        known = None
        if cache is not None:
            known = cache.get(pkey)
            if known is None:
                known = cache[pkey] = {}
        left = series.get(node.left)
        lsteps, lvals = left if left else ((), ())
        at = node.op == "at"
        meets = hi > lo and begin <= hi and end >= lo  # the filled span: only the entries beyond it are computed
        for j in (chain(range(begin, lo), range(hi, end)) if meets else range(begin, end)):
            if table[j] is not None:
                continue
            step = rsteps[j]
            prev = rsteps[j - 1] if j else None
            b = rvals[j]
            hit = known.get(step) if known is not None else None
            if hit is not None and hit[0] == prev and hit[1] == b:
                value = hit[2]
            else:
                value = _pair_value_all(lsteps, lvals, step, prev, b, at)
                if known is not None:
                    known[step] = (prev, b, value)
            table[j] = (step, value)
            vtable[j] = value
        # every entry of both spans is filled: one span when they meet
        self.filled[pkey] = (min(lo, begin), max(hi, end)) if meets else (begin, end)
        return begin, end

    def _all_finite(self, metric: str, values: list, lo: int, hi: int) -> bool:
        """Whether ``values[lo:hi]`` (``hi`` the last context's window end) are all finite floats: one sum over the
        part not checked yet (in C: a None raises, a NaN or an infinity never sums back to finite; a sum that
        overflows says no, and the slow path gives the same values)."""
        have, bad = self.fin.get(metric, (hi, -1))
        if lo >= have:
            return True
        if lo <= bad:
            return False
        try:
            total = sum(values[lo:have])
        except TypeError:
            total = _INF
        if -_INF < total < _INF:
            self.fin[metric] = (lo, bad)
            return True
        self.fin[metric] = (have, lo)
        return False

    def _fill_all(self, node: "Window", col: list) -> None:
        if node.name in _DIRECT and type(node) is Window:
            span_of = getattr(self.ctxs[0], "batch_span", None)
            span = span_of(node.metric) if span_of is not None else None
            if span is not None:
                values, ends = span
                if not values:  # a metric the run never sent: one value for every step
                    col[:] = [node.on_finite(EMPTY_WINDOW, node)] * len(col)
                    return
                lo = min(ends) - node.need
                if self._all_finite(node.metric, values, lo if lo > 0 else 0, max(ends)):
                    _direct(node, values, ends, col)
                    return
        fkey = (node.metric, node.need)
        if fkey in self.finite:
            values = self.finite[fkey]
        else:
            windows = getattr(self.ctxs[0], "finite_windows", None)
            values = self.finite[fkey] = windows(self.ctxs, node.metric, node.need) if windows is not None else None
        on_finite, fn = node.on_finite, node.fn
        if values is None:
            for i, c in enumerate(self.ctxs):
                col[i] = fn(node.window(c), node)
            return
        name = node.name
        if name in _MEDIANS and type(node) is Window:
            _medians(node, values, col)
        elif name in _SIMPLE and type(node) is Window:
            _simple(node, values, col)
        else:
            for i, xs in enumerate(values):
                if xs is not None:
                    col[i] = on_finite(xs, node)
        for i, xs in enumerate(values):
            if xs is None:
                col[i] = fn(node.window(self.ctxs[i]), node)


#: The window of a metric the run never sent, as ``finite_windows`` hands it over for every step (never mutated).
EMPTY_WINDOW: list = []

#: Window functions ``_direct`` computes.
_DIRECT = frozenset({"last", "count_over", "count_nonfinite", "exists", "max_over", "min_over", "mean_over",
                     "sum_over", "median_over", "baseline", "quantile_over", "std_over", "noise"})
#: Windows longer than this take their max/min from the part every step's window shares, computed once.
_SHARED_SPAN = 24


def _direct(node: "Window", values: list, ends: list[int], col: list) -> None:
    """``node.on_finite`` of each step's window, straight from the metric's values (all finite floats over the
    windows) and where each step's window ends in them (ascending): step i's window is ``values[a:b]``, its last
    ``n`` points before the ``skip`` newest. The same slices and expressions as ``windows.ON_FINITE`` and the
    ``skip`` wrapper of ``Window``, without copying a window where its count or its last value is the answer;
    max/min of a long window from the part the steps' windows share plus each one's own ends (the same value)."""
    name, n, skip = node.name, node.n, node.skip
    spans = []
    for e in ends:
        a = e - n - skip
        if a < 0:
            a = 0
        b = e - skip
        spans.append((a, b if b > a else a))
    if name == "last":
        col[:] = [values[b - 1] if b > a else None for a, b in spans]
    elif name == "count_over":
        col[:] = [float(b - a) for a, b in spans]
    elif name == "count_nonfinite":
        col[:] = [0.0] * len(spans)
    elif name == "exists":
        col[:] = [b > a for a, b in spans]
    elif name == "max_over" or name == "min_over":
        pick = max if name == "max_over" else min
        a_last, b_first = spans[-1][0], spans[0][1]
        if n > _SHARED_SPAN and len(spans) > 1 and a_last < b_first:
            shared = pick(values[a_last:b_first])
            for i, (a, b) in enumerate(spans):
                v = pick(values[a:a_last]) if a < a_last else None
                v = shared if v is None else pick(v, shared)  # (the first of equal values, as over the window)
                col[i] = pick(v, pick(values[b_first:b])) if b_first < b else v
        else:
            col[:] = [pick(values[a:b]) if b > a else None for a, b in spans]
    elif name == "mean_over" or name == "sum_over":
        mean = name == "mean_over"
        for i, (a, b) in enumerate(spans):
            if b > a:
                v = sum(values[a:b])
                if mean:
                    v = v / (b - a)
                col[i] = v if -_INF < v < _INF else None
            else:
                col[i] = None
    elif name == "median_over" or name == "baseline":
        # windows.median; median_over is finite-checked (windows._w_stat), a baseline is not (_median_of_enough)
        # (the spans ascend: the steps between two points of a sparse metric have the same one, computed once)
        minimum, check = (max(1, math.ceil(n / 2)), False) if name == "baseline" else (1, True)
        last = None
        for i, span in enumerate(spans):
            if span == last:
                col[i] = col[i - 1]
                continue
            last = span
            a, b = span
            k = b - a
            if k < minimum:
                col[i] = None
                continue
            xs = sorted(values[a:b])
            mid = k // 2
            v = xs[mid] if k % 2 else (xs[mid - 1] + xs[mid]) / 2.0
            col[i] = v if not check or -_INF < v < _INF else None
    else:  # quantile_over, std_over, noise: windows.ON_FINITE over the window (the skip already left out)
        stat = ON_FINITE[name]
        last = None
        for i, span in enumerate(spans):
            if span == last:
                col[i] = col[i - 1]
            else:
                last = span
                col[i] = stat(values[span[0]:span[1]], node)


_MEDIANS = frozenset({"median_over", "baseline"})


def _medians(node: "Window", values: list, col: list) -> None:
    """``node.on_finite`` of median_over and baseline for each window of ``values`` (the finite ones), without
    their closures: the same slices, the same minimum count, the same median (and median_over's ``finite``)."""
    n, skip = node.n, node.skip
    if node.name == "baseline":
        minimum, check = max(1, math.ceil(n / 2)), False
    else:
        minimum, check = 1, True
    for i, xs in enumerate(values):
        if xs is None:
            continue
        if skip:
            xs = xs[: max(0, len(xs) - skip)]
        if len(xs) > n:
            xs = xs[-n:]
        k = len(xs)
        if k < minimum:
            col[i] = None
            continue
        s = sorted(xs)  # windows.median
        mid = k // 2
        v = s[mid] if k % 2 else (s[mid - 1] + s[mid]) / 2.0
        col[i] = v if not check or -_INF < v < _INF else None


_SIMPLE = frozenset({"last", "max_over", "min_over", "count_over", "count_nonfinite", "mean_over", "sum_over",
                     "exists"})


def _simple(node: "Window", values: list, col: list) -> None:
    """``node.on_finite`` (windows.ON_FINITE, after the ``skip`` newest values are left out) of these statistics
    for each window of ``values`` (the finite ones), without their closures: the same expressions."""
    name, skip = node.name, node.skip
    for i, xs in enumerate(values):
        if xs is None:
            continue
        if skip:
            xs = xs[: max(0, len(xs) - skip)]
        if name == "last":
            col[i] = xs[-1] if xs else None
        elif name == "max_over":
            col[i] = finite(max(xs)) if xs else None
        elif name == "min_over":
            col[i] = finite(min(xs)) if xs else None
        elif name == "count_over":
            col[i] = float(len(xs))
        elif name == "count_nonfinite":
            col[i] = 0.0
        elif name == "mean_over":
            col[i] = finite(sum(xs) / len(xs)) if xs else None
        elif name == "sum_over":
            col[i] = finite(sum(xs)) if xs else None
        else:
            col[i] = bool(xs)


#: A pair series' left (denser) metric is averaged over at most this many of its points before each point of the
#: right one, and this many of its points are kept for it (evaluations up to ~50 steps apart over ~16 evaluations).
PAIR_SPAN = 10
PAIR_LEFT_POINTS = 1000
#: A window over a pair reads at most this many of its points (n + skip).
PAIR_RIGHT_POINTS = 64


class PairWindow(Window):
    """A statistic over a series of one point at each of the right metric's steps, where the left one's value
    is the mean of its points since the right one's previous point (at most its last PAIR_SPAN, at or before
    the step): ``left - right`` is their difference there (``reward_train - reward_heldout``: the train/held-out
    gap at each evaluation), ``at(left, right)`` the left one's value alone (the training reward at each
    evaluation)."""

    __slots__ = ("left", "right", "op", "values_fn", "pkey")

    def __init__(self, name: str, left: str, right: str, n: int, skip: int, fn: Callable, col: int,
                 q: float | None = None, op: str = "-") -> None:
        label = f"{left} - {right}" if op == "-" else f"at({left}, {right})"
        super().__init__(name, label, n, skip, fn, col, q)
        self.left, self.right, self.op = left, right, op
        self.pkey = (left, right, op)
        #: the statistic from the points' values when all are finite (Batch.pair_value)
        self.values_fn = self.on_finite
        self.on_finite = None  # the pair series is built per context: no fast path of Batch.values
        self.reads = ((right, PAIR_RIGHT_POINTS + 1), (left, PAIR_LEFT_POINTS))

    def window(self, ctx) -> list[Point]:
        # One pair series per context (step), however many calls read it: built for the longest window a pair
        # may have, then sliced.
        memo = getattr(ctx, "memo", None)
        key = ("pair", self.left, self.right, self.op)
        out = memo.get(key) if memo is not None else None
        if out is None:
            batch = getattr(ctx, "batch", None)  # the step's points as the batch's order-free windows computed them
            out = batch.pair_points(self, ctx) if batch is not None else None
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
        pkey = self.pkey
        batch = None
        build = False  # the first of a batch's steps: keep its points for the others
        if cache is not None:
            known = cache.get(pkey)
            if known is None:
                known = cache[pkey] = {}
            batch = getattr(ctx, "batch", None)  # the steps of one batch: the points one of them computed
            if batch is not None:
                acc = batch.pairs.get(pkey, _MISSING)
                if acc is _MISSING:
                    build = True
                elif acc is not None:
                    found = self._batch_series(ctx, right, known, acc)
                    if found is not None:
                        return found
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
                value = _pair_value(left, lsteps, step, prev, b, at)
                out.append((step, value))
                if known is not None:
                    known[step] = (prev, b, value)
            prev = step
        if known is not None and len(known) > 4 * PAIR_RIGHT_POINTS:
            _prune(known)
            if batch is not None:
                batch.pairs[pkey] = None  # the points computed no longer all stay cached: each step on its own
        elif build and all(b == b for _, b in right):  # (a NaN never matches its cached point)
            batch.pairs[pkey] = ([p[0] for p in out], list(out))
        return out

    def _batch_series(self, ctx, right: list[Point], known: dict, acc: tuple[list[int], list[Point]]):
        """``_series`` for a context of a batch after another one of it: the points the batch computed already are
        each what ``known`` holds for them (none was pruned since: else no ``acc``), so they are sliced from
        ``acc``, and only the newer ones are computed (and added to ``known``), as ``_series`` would. None when
        this context's window begins before the batch's points."""
        steps_acc, out_acc = acc
        rel = right if len(right) <= PAIR_RIGHT_POINTS else right[1:]
        first_step = rel[0][0]
        a = bisect_left(steps_acc, first_step)
        if a == len(steps_acc) or steps_acc[a] != first_step:
            return None
        have = len(steps_acc) - a
        if have >= len(rel):
            return out_acc[a:a + len(rel)]
        new = rel[have:]
        if not all(b == b for _, b in new):  # a NaN never matches its cached point: _series recomputes it
            return None
        prev = steps_acc[-1]
        at = self.op == "at"
        left: list[Point] | None = None
        lsteps: list[int] = []
        for step, b in new:
            hit = known.get(step)
            if hit is not None and hit[0] == prev and hit[1] == b:
                value = hit[2]
            else:
                if left is None:
                    n = PAIR_SPAN + 1 if len(new) == 1 and step == ctx.step else PAIR_LEFT_POINTS
                    left = ctx.points(self.left, n)
                    lsteps = [p[0] for p in left]
                value = _pair_value(left, lsteps, step, prev, b, at)
                known[step] = (prev, b, value)
            steps_acc.append(step)
            out_acc.append((step, value))
            prev = step
        if len(known) > 4 * PAIR_RIGHT_POINTS:
            _prune(known)
            ctx.batch.pairs[self.pkey] = None
        return out_acc[a:]


def _order_free(ctxs: Sequence, node: PairWindow, pkey: tuple) -> bool:
    """Batch.order_free, from the series the batch's contexts share (False for any other kind of context)."""
    if not ctxs:
        return True
    series = getattr(ctxs[0], "_series", None)
    if series is None or any(getattr(c, "_series", None) is not series for c in ctxs):
        return False
    cache = getattr(ctxs[0], "pair_cache", None)
    if any(getattr(c, "pair_cache", None) is not cache for c in ctxs):
        return False
    if cache is None:  # nothing kept between steps: each step computes its own points
        return True
    right = series.get(node.right)
    if not right or not right[0]:
        return True  # no points (ctx.points gives none): nothing computed
    rsteps = right[0]
    lo = min(c.step for c in ctxs)
    hi = max(c.step for c in ctxs)
    first_end = bisect_right(rsteps, lo)  # the earliest step's window of the right metric ends here
    last_end = bisect_right(rsteps, hi)
    known = cache.get(pkey)
    # every point any step's window holds (the cache grows by some of them at most): no call prunes
    span = last_end - max(0, first_end - (PAIR_RIGHT_POINTS + 1))
    if (len(known) if known is not None else 0) + span > 4 * PAIR_RIGHT_POINTS:
        return False
    left = series.get(node.left)
    lsteps = left[0] if left else []
    if not lsteps:
        return True
    # the first point a step of the batch computes: the earliest step's window's (any later step's is later)
    e = max(first_end, 1)
    i1 = 0 if e <= PAIR_RIGHT_POINTS else e - PAIR_RIGHT_POINTS
    end1 = bisect_right(lsteps, rsteps[i1])
    need = end1 - PAIR_SPAN if end1 > PAIR_SPAN else 0
    if i1 > 0:
        need = max(need, bisect_right(lsteps, rsteps[i1 - 1], 0, end1))
    # the latest step's left window begins here (PairWindow._series reads at most PAIR_LEFT_POINTS of them)
    begin = max(0, bisect_right(lsteps, hi) - PAIR_LEFT_POINTS)
    return begin <= need


def _prune(known: dict) -> None:
    for step in sorted(known)[: len(known) - 2 * PAIR_RIGHT_POINTS]:
        del known[step]


def _pair_value(left: list[Point], lsteps: list[int], step: int, prev: int | None, b: float | None,
                at: bool) -> float | None:
    """A pair's point at ``step``: the mean of the left metric's points in (prev, step] (at most its last
    PAIR_SPAN), minus ``b`` (or alone, ``at``)."""
    start, end = _pair_span(lsteps, step, prev)
    return _pair_mean([v for _, v in left[start:end]], b, at)


def _pair_value_all(lsteps: Sequence[int], lvals: Sequence, step: int, prev: int | None, b: float | None,
                    at: bool) -> float | None:
    """``_pair_value`` over the left metric's whole series (its steps and values): the same points, summed in the
    same order, when the window it is given would hold them all."""
    start, end = _pair_span(lsteps, step, prev)
    return _pair_mean(lvals[start:end], b, at)


def _pair_span(lsteps: Sequence[int], step: int, prev: int | None) -> tuple[int, int]:
    """Where the left metric's points in (prev, step] lie among ``lsteps`` (at most its last PAIR_SPAN)."""
    end = bisect_right(lsteps, step)
    start = end - PAIR_SPAN if end > PAIR_SPAN else 0
    if prev is not None:
        start = max(start, bisect_right(lsteps, prev, 0, end))
    return start, end


def _pair_mean(values: Sequence, b: float | None, at: bool) -> float | None:
    """The mean of the finite ``values`` (summed in order), minus ``b`` or alone (``at``); None without any."""
    total, count = 0.0, 0
    for v in values:
        if v is not None and -_INF < v < _INF:
            total += v
            count += 1
    value = None
    if count and at:
        value = finite(total / count)
    elif count and b is not None and -_INF < b < _INF:
        value = finite(total / count - b)
    return value


#: The context calls a context answers by a method of the same name, when it has one.
_TIMING_CALLS = frozenset({"report_interval", "longest_pause", "longest_pause_outside_evals", "heartbeat_age"})


class ContextCall(Node):
    """absent_for(), step(), steps_since_resume(), report_interval(), longest_pause(), longest_pause_outside_evals(),
    heartbeat_age(), config(key, default)."""

    __slots__ = ("name", "key", "default")

    def __init__(self, name: str, col: int, key: str | None = None, default: float | bool | None = None) -> None:
        self.name, self.col, self.key, self.default = name, col, key, default

    def ev(self, ctx):
        if self.name == "absent_for":
            return finite(num(ctx.seconds_since_report()))
        if self.name == "step":
            return float(ctx.step)
        if self.name == "steps_since_resume":
            return num(ctx.steps_since_resume())
        if self.name in _TIMING_CALLS:
            method = getattr(ctx, self.name, None)
            return finite(num(method())) if callable(method) else None
        return _config_value(ctx.config, self.key, self.default)

    def evs(self, ctxs):
        if self.name == "config" and ctxs:  # the steps of one batch share the run's config: read it once
            config = ctxs[0].config
            # (an empty config, however many copies of it: the default; the engine gives each step its own {})
            if all(c.config is config for c in ctxs) or (not config and not any(c.config for c in ctxs)):
                return [_config_value(config, self.key, self.default)] * len(ctxs)
        name = self.name
        if name == "step":  # ev's branches, once for all the contexts
            return [float(c.step) for c in ctxs]
        if name == "absent_for":
            return [finite(num(c.seconds_since_report())) for c in ctxs]
        if name in _TIMING_CALLS:
            out = []
            for c in ctxs:
                method = getattr(c, name, None)
                out.append(finite(num(method())) if callable(method) else None)
            return out
        return [self.ev(c) for c in ctxs]


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
        return finite(float(value))
    if isinstance(value, str):
        try:
            return finite(float(value))
        except ValueError:
            return default
    return default


# -- scalar functions ---------------------------------------------------------------


def _f_abs(args):
    v = num(args[0])
    return None if v is None else abs(v)


def _f_log(args):
    v = num(args[0])
    return math.log(v) if v is not None and v > 0 else None


def _f_sqrt(args):
    v = num(args[0])
    return math.sqrt(v) if v is not None and v >= 0 else None


def _f_floor(args):
    v = num(args[0])
    return float(math.floor(v)) if v is not None and math.isfinite(v) else None


def _f_min(args):
    vs = [num(a) for a in args]
    return None if any(v is None for v in vs) else min(vs)


def _f_max(args):
    vs = [num(a) for a in args]
    return None if any(v is None for v in vs) else max(vs)


def _f_clamp(args):
    x, lo, hi = (num(a) for a in args)
    if x is None or lo is None or hi is None:
        return None
    return min(max(x, lo), hi)


SCALARS: dict[str, tuple[int, int | None, Callable]] = {
    # name: (min args, max args or None for any, implementation)
    "abs": (1, 1, _f_abs),
    "log": (1, 1, _f_log),
    "sqrt": (1, 1, _f_sqrt),
    "floor": (1, 1, _f_floor),
    "min": (2, None, _f_min),
    "max": (2, None, _f_max),
    "clamp": (3, 3, _f_clamp),
    "coalesce": (2, None, lambda args: next((a for a in args if a is not None), None)),
}


# -- the parsed expression ----------------------------------------------------------


class Expr:
    """A parsed, whitelisted expression. Immutable; compare and hash by source."""

    __slots__ = ("source", "metrics", "windows", "uses_time", "_root", "_headline", "_compiled")

    def __init__(self, source: str, root: Node) -> None:
        self.source = source
        self._root = root
        windows: dict[str, int] = {}
        uses_time = False
        for node in _walk(root):
            if isinstance(node, Window):
                for metric, need in node.reads:
                    windows[metric] = max(windows.get(metric, 0), need)
            elif isinstance(node, ContextCall) and node.name == "absent_for":
                uses_time = True
        self.windows = windows
        self.metrics = frozenset(windows)
        self.uses_time = uses_time
        self._headline = _headline(root)
        self._compiled = _MISSING  # alerts.expr.compiled, built at the first batch

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
        batch = getattr(ctxs[0], "batch", None) if ctxs else None
        values = None
        if batch is not None and all(getattr(c, "batch", None) is batch for c in ctxs):
            # the steps of one engine batch: the condition compiled once into one function over them (the same
            # values; None when it cannot be compiled, or a value it reads raised: then the tree, as before)
            compiled = self._compiled
            if compiled is _MISSING:
                from parallax.alerts.expr.compiled import compile_batch

                compiled = self._compiled = compile_batch(self._root)
            if compiled is not None:
                values = compiled.run(ctxs, batch)
        if values is not None:
            return [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]
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
        v = num(v)
        return v if v is not None and math.isfinite(v) else None

    @property
    def window_call(self) -> tuple[str, int] | None:
        """(metric, points read) when the whole expression is one window function call."""
        if isinstance(self._root, Window):
            return self._root.metric, self._root.need
        return None

    def __repr__(self) -> str:
        return f"Expr({self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and other.source == self.source

    def __hash__(self) -> int:
        return hash(("Expr", self.source))


def _walk(node: Node) -> Iterable[Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children())


def _headline(root: Node) -> Node:
    node = root
    while isinstance(node, (And, Or)):
        node = node.values[0]
    if isinstance(node, Compare):
        return node.operands[0]
    return node
