"""A condition compiled once into straight-line Python, run over the steps of one engine batch.

``Expr.evaluate_many`` walks the tree node by node over a batch's contexts; for a big condition most of that time
is the walk itself (a list per node, the contexts still undecided picked out for each operand). ``compile_batch``
turns a tree into one function that, for each context, evaluates the nodes as ``Node.ev`` does (the same
three-valued logic, the same short-circuits, the same arithmetic in the same order), reading the window values
from the batch's columns (``Batch.values``: each window computed once for all the batch's steps).

Evaluating a window at a step changes nothing another step reads, except for a pair window (``left - right``,
``at(...)``): its points are computed and cached (the run's ``pair_cache``) in the order the steps ask for them, and
the tree asks node by node, the compiled function step by step. So a condition with pair windows runs compiled only
for a batch where that order cannot matter (``Batch.order_free``: no step's left window cuts off a point it needs,
and the cache cannot be pruned during the batch), checked for each pair series at its first read (a series no step
reaches is not checked); the tree otherwise, from the batch's first step (the points of the series read so far, all
order-free, are what the tree computes too).
A window's column and a context call's values (``absent_for()``, ``config(...)``) are fetched for every context at
their first read, and not at all when no step reaches them (a condition whose first test fails everywhere reads one
column); if one raises (a math overflow), the caller evaluates with the tree instead, which gives the values ``ev``
gives.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from parallax.alerts.expr import nodes as N
from parallax.alerts.expr.windows import num

_INF = math.inf


def _judge(ops: Sequence[Callable], values: list) -> bool | None:  # Compare._judge, for chains (a < b < c)
    unknown = False
    for op, a, b in zip(ops, values, values[1:]):
        if a is None or b is None:
            unknown = True
        elif not op(a, b):
            return False
    return None if unknown else True


def _col(batch: N.Batch, node: N.Window) -> list:
    """The batch's column of this window (created, and filled for every step where it can be, at the first read)."""
    col = batch.columns.get(node.key)
    if col is None:
        batch.values(node, ())
        col = batch.columns[node.key]
    return col


class _NotOrderFree(Exception):
    """A pair window read by the compiled function whose series the batch's steps could compute in another order."""


def _pair_col(batch: N.Batch, node: N.PairWindow) -> list:
    """A pair window's column at its first read: only once its series is order-free for the batch (checked there,
    not before the run, so that a pair series no step reaches - a branch behind a test that fails everywhere - costs
    nothing); otherwise the whole batch goes to the tree, before any of that series' points is computed."""
    if not batch.order_free(node):
        raise _NotOrderFree
    return _col(batch, node)


def _fill(batch: N.Batch, node: N.Window, ctx) -> object:
    """The window's value at a step its column does not hold yet (computed as ``Batch.values`` does)."""
    return batch.values(node, (ctx,))[0]


#: scalar functions the generated code computes inline (the same builtins, on the same numbers, as nodes._f_*)
_INLINE = frozenset({"max", "min", "clamp", "abs", "log"})


class _Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, object] = {"_num": num, "_judge": _judge, "_INF": _INF, "_MISSING": N._MISSING,
                                       "_col": _col, "_pair_col": _pair_col, "_fill": _fill, "_log": math.log}
        self.windows: list[N.Window] = []
        self.calls: list[N.ContextCall] = []
        self.pairs: list[N.PairWindow] = []
        self.keys: dict[tuple, str] = {}
        self.n = 0

    def tmp(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def const(self, value: object) -> str:
        name = f"K{len(self.env)}"
        self.env[name] = value
        return name

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def num(self, depth: int, var: str) -> None:
        # windows.num: None stays None, everything else float() (a bool becomes 0.0/1.0)
        self.emit(depth, f"if {var} is not None and {var}.__class__ is not float: {var} = float({var})")

    def node(self, node: N.Node, depth: int) -> str:
        """Lines computing ``node.ev(ctx)`` into a new variable; returns its name."""
        t = type(node)
        out = self.tmp()
        if t is N.Const:
            self.emit(depth, f"{out} = {self.const(node.value)}")
        elif t is N.Window or t is N.PairWindow:
            if t is N.PairWindow:
                self.pairs.append(node)
            key = node.key
            col = self.keys.get(key)
            if col is None:
                col = self.keys[key] = f"W{len(self.windows)}"
                self.windows.append(node)
            node_name = f"N{col[1:]}"
            self.env[node_name] = node
            col_fn = "_pair_col" if t is N.PairWindow else "_col"
            self.emit(depth, f"if {col} is None: {col} = {col_fn}(batch, {node_name})")
            self.emit(depth, f"{out} = {col}[b]")
            fill = f"batch.pair_value({node_name}, c)" if t is N.PairWindow else f"_fill(batch, {node_name}, c)"
            self.emit(depth, f"if {out} is _MISSING: {out} = {fill}")
        elif t is N.ContextCall:
            col = f"X{len(self.calls)}"
            name = f"C{len(self.calls)}"
            self.calls.append(node)
            self.env[name] = node
            self.emit(depth, f"if {col} is None: {col} = {name}.evs(ctxs)")  # at its first read, for every context
            self.emit(depth, f"{out} = {col}[i]")
        elif t is N.Arith:
            a = self.node(node.left, depth)
            self.num(depth, a)
            self.emit(depth, f"if {a} is None: {out} = None")
            self.emit(depth, "else:")
            b = self.node(node.right, depth + 1)
            self.num(depth + 1, b)
            self.emit(depth + 1, f"if {b} is None: {out} = None")
            if node.op == "/":
                self.emit(depth + 1, f"elif {b} == 0: {out} = None")
            self.emit(depth + 1, "else:")
            self.emit(depth + 2, f"{out} = {a} {node.op} {b}")
            self.emit(depth + 2, f"if not (-_INF < {out} < _INF): {out} = None")
            if node.op not in "+-*/":
                raise ValueError(node.op)
        elif t is N.Neg:
            v = self.node(node.operand, depth)
            self.num(depth, v)
            self.emit(depth, f"{out} = None if {v} is None else -{v}")
        elif t is N.Not:
            v = self.node(node.operand, depth)
            self.emit(depth, f"{out} = None if {v} is None else not {v}")
        elif t is N.And or t is N.Or:
            decisive = t.DECISIVE
            self.emit(depth, f"{out} = {not decisive}")
            d = depth
            for k, operand in enumerate(node.values):
                v = self.node(operand, d)
                # _truth(v) is decisive: stop; unknown: remember it
                test = f"{v} is not None and {'' if decisive else 'not '}{v}"
                self.emit(d, f"if {test}: {out} = {decisive}")
                if k + 1 < len(node.values):
                    self.emit(d, "else:")
                    d += 1
                    self.emit(d, f"if {v} is None: {out} = None")
                else:
                    self.emit(d, f"elif {v} is None: {out} = None")
        elif t is N.Compare:
            ops = node.ops
            vals = []
            for operand in node.operands:
                v = self.node(operand, depth)
                self.num(depth, v)
                vals.append(v)
            if len(vals) == 2:
                op = self.const(ops[0])
                a, b = vals
                self.emit(depth, f"{out} = None if {a} is None or {b} is None else not not {op}({a}, {b})")
            else:
                self.emit(depth, f"{out} = _judge({self.const(list(ops))}, [{', '.join(vals)}])")
        elif t is N.IfElse:
            v = self.node(node.test, depth)
            self.emit(depth, f"if {v} is None: {out} = None")
            self.emit(depth, f"elif {v}:")
            body = self.node(node.body, depth + 1)
            self.emit(depth + 1, f"{out} = {body}")
            self.emit(depth, "else:")
            other = self.node(node.orelse, depth + 1)
            self.emit(depth + 1, f"{out} = {other}")
        elif t is N.Apply:
            if node.name == "coalesce":  # the first known value; the others not read
                self.emit(depth, f"{out} = None")
                d = depth
                for k, arg in enumerate(node.args):
                    v = self.node(arg, d)
                    if k + 1 < len(node.args):
                        self.emit(d, f"if {v} is not None: {out} = {v}")
                        self.emit(d, "else:")
                        d += 1
                    else:
                        self.emit(d, f"{out} = {v}")
            else:
                vals = [self.node(arg, depth) for arg in node.args]
                if node.name in _INLINE and node.fn is N.SCALARS[node.name][2]:
                    # the scalar inline (nodes._f_*): its arguments as numbers, unknown if one is
                    for v in vals:
                        self.num(depth, v)
                    unknown = " or ".join(f"{v} is None" for v in vals)
                    if node.name == "clamp":
                        x, lo, hi = vals
                        value = f"min(max({x}, {lo}), {hi})"
                    elif node.name == "log":
                        value = f"_log({vals[0]}) if {vals[0]} > 0 else None"
                    else:
                        value = f"{node.name}({', '.join(vals)})"
                    self.emit(depth, f"{out} = None if {unknown} else {value}")
                else:
                    self.emit(depth, f"{out} = {self.const(node.fn)}([{', '.join(vals)}])")
        else:
            raise TypeError(f"not compiled: {t.__name__}")
        return out


class Compiled:
    """``run(ctxs)``: ``[root.ev(c) for c in ctxs]`` for contexts of one batch; None when a value it reads raises or
    a pair series it reads is not order-free for the batch (the caller then evaluates with the tree)."""

    __slots__ = ("fn", "windows", "calls", "pairs")

    def __init__(self, fn: Callable, windows: list[N.Window], calls: list[N.ContextCall],
                 pairs: Sequence[N.PairWindow] = ()) -> None:
        self.fn, self.windows, self.calls = fn, windows, calls
        #: one pair window per pair series the condition reads (each checked order-free at its first read, _pair_col)
        self.pairs = list({p.pkey: p for p in pairs}.values())

    def run(self, ctxs: Sequence, batch: N.Batch) -> list | None:
        # each pair series is checked order-free at its first read (_pair_col): its points computed step by step, in
        # any order, are those the steps' order gives; the points of a series checked so far are then the tree's too
        try:
            return self.fn(ctxs, batch)
        except (ArithmeticError, ValueError, _NotOrderFree):
            return None


MAX_LINES = 20_000


def compile_batch(root: N.Node) -> Compiled | None:
    """The tree as one function over a batch's contexts, or None when it cannot be compiled (a pair window, a node
    this does not know, a tree too deep for Python's parser)."""
    for n in N._walk(root):
        if type(n) not in (N.Const, N.Window, N.PairWindow, N.ContextCall, N.Arith, N.Neg, N.Not, N.And, N.Or, N.Compare,
                           N.IfElse, N.Apply):
            return None
    g = _Gen()
    try:
        g.lines.append("")  # the body, indented below
        result = g.node(root, 2)
    except (TypeError, ValueError, RecursionError):
        return None
    if len(g.lines) > MAX_LINES:
        return None
    src = "\n".join(
        ["def _compiled(ctxs, batch):",
         "    out = []"]
        + [f"    W{k} = None" for k in range(len(g.windows))]
        + [f"    X{k} = None" for k in range(len(g.calls))]
        + [
         "    append = out.append",
         "    for i, c in enumerate(ctxs):",
         "        b = c.bidx"]
        + g.lines[1:]
        + [f"        append({result})", "    return out"]
    )
    env = dict(g.env)
    try:
        exec(compile(src, "<alerts.expr.compiled>", "exec"), env)  # noqa: S102 - generated from the parsed tree
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return None
    return Compiled(env["_compiled"], g.windows, g.calls, g.pairs)
