"""Parsing: source text to an ``Expr``, through Python's ``ast`` (never ``eval``/``compile``).

Only the whitelisted nodes are built; anything else is refused with an ``ExprError`` that names the 0-based
column where it starts and, for an unknown function, the closest known one.
"""

from __future__ import annotations

import ast
import copy
import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from parallax.alerts.expr.nodes import (
    PAIR_RIGHT_POINTS,
    SCALARS,
    And,
    Apply,
    Arith,
    Compare,
    Const,
    ContextCall,
    Expr,
    IfElse,
    Neg,
    Node,
    Not,
    Or,
    PairWindow,
    Window,
)
from parallax.alerts.expr.windows import MIN_WINDOW, SINGLE_METRIC, WINDOWS


MAX_SOURCE_CHARS = 4000
MAX_WINDOW = 10_000
METRIC_NAME = re.compile(r"[A-Za-z0-9_:./@-]{1,200}")  # parallax.ingest.names.NAME_PATTERN


class ExprError(ValueError):
    """An expression that cannot be parsed or uses something not allowed."""

    def __init__(self, message: str, column: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.column = column  # 0-based offset in the expression source

    def __str__(self) -> str:
        return f"column {self.column}: {self.message}"


_COMPARE: dict[type, tuple[str, Callable[[float, float], bool]]] = {
    ast.Lt: ("<", lambda a, b: a < b),
    ast.LtE: ("<=", lambda a, b: a <= b),
    ast.Gt: (">", lambda a, b: a > b),
    ast.GtE: (">=", lambda a, b: a >= b),
    ast.Eq: ("==", lambda a, b: a == b),
    ast.NotEq: ("!=", lambda a, b: a != b),
}


# Parameters of the window functions: "m" metric, "n" window length, "skip" newest points left out, "q" quantile.
_WINDOW_PARAMS: dict[str, tuple[str, ...]] = {name: ("m", "n", "skip") for name in WINDOWS}
_WINDOW_PARAMS.update({"last": ("m",), "exists": ("m",), "last_step": ("m",), "delta": ("m", "n"), "spacing": ("m", "n"),
                       "quantile_over": ("m", "n", "q", "skip")})

_CONTEXT_PARAMS: dict[str, tuple[str, ...]] = {
    "absent_for": (),
    "step": (),
    "steps_since_resume": (),
    "report_interval": (),
    "longest_pause": (),
    "longest_pause_outside_evals": (),
    "heartbeat_age": (),
    "config": ("key", "default"),
}

#: Every function name the language knows.
FUNCTIONS: frozenset[str] = frozenset(WINDOWS) | frozenset(SCALARS) | frozenset(_CONTEXT_PARAMS)


#: How deep definitions may call definitions, and how large an expression may grow once they are written in
#: (definitions that each call the next twice would double it at every level).
MAX_DEFINITION_DEPTH = 16
MAX_EXPANDED_NODES = 50_000
SIGNATURE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]{0,63})\s*\(\s*([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)?\s*\)\s*")


@dataclass(frozen=True)
class Definition:
    """A named sub-expression of a pack (``define: {"step_time(n)": ...}``), called like a function.

    A call is replaced by the body with each parameter replaced by the call's argument as written, so a
    parameter may stand for a window length, a metric name or any expression.
    """

    name: str
    params: tuple[str, ...]
    source: str
    body: ast.expr


def parse_signature(signature: str) -> tuple[str, tuple[str, ...]]:
    """``name(p, q)`` to its name and parameters; raise :class:`ExprError` for a malformed or reserved one."""
    m = SIGNATURE.fullmatch(signature) if isinstance(signature, str) else None
    if m is None:
        raise ExprError(f"a definition is named like a call: name(), or name(n, metric), not {signature!r}", 0)
    name = m.group(1)
    params = tuple(p.strip() for p in m.group(2).split(",")) if m.group(2) else ()
    if name in FUNCTIONS or name == "at":
        raise ExprError(f"{name} is a built-in function; a definition needs another name", 0)
    if len(set(params)) != len(params):
        raise ExprError(f"{name}() names a parameter twice", 0)
    for p in params:
        if p in FUNCTIONS:
            raise ExprError(f"parameter {p!r} of {name}() is a built-in function's name", 0)
    return name, params


def parse_definition(signature: str, source: str) -> Definition:
    """A definition from its signature and body; raise :class:`ExprError` (a syntax error's column is in the body).

    The body is checked where it is called, with the call's arguments in place.
    """
    name, params = parse_signature(signature)
    return Definition(name, params, source, _parse_tree(source)[1].body)


def _parse_tree(source: str) -> tuple[str, ast.Expression]:
    if not isinstance(source, str):
        raise ExprError(f"an expression must be a string, not {type(source).__name__}", 0)
    if not source.strip():
        raise ExprError("empty expression", 0)
    if len(source) > MAX_SOURCE_CHARS:
        raise ExprError(f"expression longer than {MAX_SOURCE_CHARS} characters", MAX_SOURCE_CHARS)
    # The parentheses let an expression span lines (YAML block scalars); offsets are shifted back by one.
    wrapped = "(" + source + "\n)"
    try:
        return wrapped, ast.parse(wrapped, mode="eval")
    except SyntaxError as exc:
        col = _offset(wrapped, exc.lineno or 1, (exc.offset or 1) - 1, chars=True) - 1
        raise ExprError(f"syntax error: {exc.msg}", _clamp_col(col, source)) from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise ExprError(f"expression cannot be parsed ({type(exc).__name__})", 0) from None


def parse_expr(source: str, definitions: Mapping[str, Definition] | None = None,
               used: set[str] | None = None) -> Expr:
    """Parse ``source`` into an :class:`Expr`; raise :class:`ExprError` with the column.

    ``definitions`` are the pack's named sub-expressions, callable in ``source``; the names of those it calls
    (directly or through another definition) are added to ``used``.
    """
    wrapped, tree = _parse_tree(source)
    builder = _Builder(source, wrapped, definitions or {}, used)
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


class _Relocate(ast.NodeTransformer):
    """A definition's body moved to its call: errors in it point at the call."""

    def __init__(self, at: ast.AST) -> None:
        self.at = at

    def generic_visit(self, node: ast.AST) -> ast.AST:
        ast.copy_location(node, self.at)
        return super().generic_visit(node)


class _Substitute(ast.NodeTransformer):
    """Each parameter of a definition replaced by the argument written at the call."""

    def __init__(self, args: dict[str, ast.expr]) -> None:
        self.args = args

    def visit_Name(self, node: ast.Name) -> ast.AST:
        arg = self.args.get(node.id)
        return copy.deepcopy(arg) if arg is not None else node

    def visit_Call(self, node: ast.Call) -> ast.AST:  # a function's own name is not a parameter
        node.args = [self.visit(a) for a in node.args]
        for kw in node.keywords:
            kw.value = self.visit(kw.value)
        return node


class _Builder:
    def __init__(self, source: str, wrapped: str, definitions: Mapping[str, Definition],
                 used: set[str] | None) -> None:
        self.source = source
        self.wrapped = wrapped
        self.definitions = definitions
        self.used = used if used is not None else set()
        self.expanding: list[str] = []
        self.expanded = 0  # syntax nodes the calls of definitions wrote in so far

    def col(self, node: ast.AST) -> int:
        lineno = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 1)
        return _clamp_col(_offset(self.wrapped, lineno, col, chars=False) - 1, self.source)

    def error(self, node: ast.AST, message: str) -> ExprError:
        return ExprError(message, self.col(node))

    def build(self, node: ast.AST) -> Node:
        col = self.col(node)
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return Const(v, col)
            if isinstance(v, (int, float)):
                f = float(v)
                if not math.isfinite(f):
                    raise self.error(node, "number out of range")
                return Const(f, col)
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
            if isinstance(left, Const) and isinstance(right, Const):
                v = Arith(op, left, right, col).ev(None)  # type: ignore[arg-type]
                if v is None:
                    raise self.error(node, "constant expression has no finite value (division by zero?)")
                return Const(v, col)
            return Arith(op, left, right, col)
        if isinstance(node, ast.UnaryOp):
            operand = self.build(node.operand)
            if isinstance(node.op, ast.Not):
                return Not(operand, col)
            if isinstance(node.op, ast.UAdd):
                return operand
            if isinstance(node.op, ast.USub):
                if isinstance(operand, Const) and not isinstance(operand.value, bool):
                    return Const(-operand.value, col)
                return Neg(operand, col)
            raise self.error(node, "operator ~ is not allowed")
        if isinstance(node, ast.BoolOp):
            values = [self.build(v) for v in node.values]
            return And(values, col) if isinstance(node.op, ast.And) else Or(values, col)
        if isinstance(node, ast.Compare):
            ops = []
            for op in node.ops:
                entry = _COMPARE.get(type(op))
                if entry is None:
                    raise self.error(node, f"comparison {type(op).__name__} is not allowed (use < <= > >= == !=)")
                ops.append(entry[1])
            operands = [self.build(node.left)] + [self.build(c) for c in node.comparators]
            return Compare(operands, ops, col)
        if isinstance(node, ast.IfExp):
            return IfElse(self.build(node.test), self.build(node.body), self.build(node.orelse), col)
        if isinstance(node, ast.Call):
            return self.call(node)
        for kind, message in _NOT_ALLOWED.items():
            if isinstance(node, kind):
                raise self.error(node, message)
        raise self.error(node, f"{type(node).__name__} is not allowed")

    def metric_last(self, name: str, col: int) -> Node:
        if name in FUNCTIONS:
            raise ExprError(f"{name} is a function; call it: {name}(...)", col)
        return Window("last", name, 1, 0, WINDOWS["last"], col)

    def call(self, node: ast.Call) -> Node:
        col = self.col(node)
        if not isinstance(node.func, ast.Name):
            raise self.error(node.func, "only the built-in functions can be called")
        name = node.func.id
        if name in self.definitions:
            return self.expand(node, self.definitions[name])
        if name not in FUNCTIONS:
            hint = _suggest(name, self.definitions)
            raise self.error(node.func, f"unknown function {name!r}" + (f" (did you mean {hint}?)" if hint else ""))
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.error(a, "*args is not allowed")
        for kw in node.keywords:
            if kw.arg is None:
                raise self.error(kw.value, "**kwargs is not allowed")
        if name in SCALARS:
            lo, hi, fn = SCALARS[name]
            if node.keywords:
                raise self.error(node.keywords[0].value, f"{name}() takes no keyword arguments")
            n = len(node.args)
            if n < lo or (hi is not None and n > hi):
                want = f"{lo}" if hi == lo else (f"{lo} to {hi}" if hi else f"at least {lo}")
                raise self.error(node, f"{name}() takes {want} arguments, got {n}")
            return Apply(name, [self.build(a) for a in node.args], fn, col)
        params = _WINDOW_PARAMS.get(name) or _CONTEXT_PARAMS[name]
        args = self.bind(node, name, params)
        if name in _CONTEXT_PARAMS:
            if name != "config":
                return ContextCall(name, col)
            if "key" not in args:
                raise self.error(node, "config() needs a key, e.g. config(\"staleness_bound\")")
            key = args["key"]
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value):
                raise self.error(key, "config() key must be a quoted string, e.g. config(\"k\", 8)")
            default = None
            if "default" in args:
                d = self.build(args["default"])
                if not isinstance(d, Const):
                    raise self.error(args["default"], "config() default must be a number")
                default = d.value
            return ContextCall("config", col, key.value, default)
        # window functions
        if "m" not in args:
            raise self.error(node, f"{name}() needs a metric name")
        pair = None
        m = args["m"]
        if isinstance(m, ast.BinOp) and isinstance(m.op, ast.Sub):
            if name in SINGLE_METRIC:
                raise self.error(m, f"{name}() takes one metric, not a difference of two")
            pair = (self.metric_name(m.left), self.metric_name(m.right), "-")
        elif isinstance(m, ast.Call) and isinstance(m.func, ast.Name) and m.func.id == "at":
            if name in SINGLE_METRIC:
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
            n = self.int_literal(args["n"], "window length", MIN_WINDOW.get(name, 1))
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
            return PairWindow(name, pair[0], pair[1], n, skip, WINDOWS[name], col, q, op=pair[2])
        return Window(name, metric, n, skip, WINDOWS[name], col, q)

    def expand(self, node: ast.Call, d: Definition) -> Node:
        if d.name in self.expanding:
            raise self.error(node, f"{d.name}() calls itself (through {' -> '.join(self.expanding)})")
        if len(self.expanding) >= MAX_DEFINITION_DEPTH:
            raise self.error(node, f"definitions nested more than {MAX_DEFINITION_DEPTH} deep")
        if node.keywords:
            raise self.error(node.keywords[0].value, f"{d.name}() takes its arguments by position")
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise self.error(a, "*args is not allowed")
        if len(node.args) != len(d.params):
            want = ", ".join(d.params) or "none"
            raise self.error(node, f"{d.name}() takes {len(d.params)} argument{'' if len(d.params) == 1 else 's'} ({want}), got {len(node.args)}")
        body = _Relocate(node).visit(copy.deepcopy(d.body))
        body = _Substitute(dict(zip(d.params, node.args))).visit(body)
        self.expanded += sum(1 for _ in ast.walk(body))
        if self.expanded > MAX_EXPANDED_NODES:
            raise self.error(node, f"more than {MAX_EXPANDED_NODES:,} syntax nodes once its definitions are written in")
        self.used.add(d.name)
        self.expanding.append(d.name)
        try:
            return self.build(body)
        except ExprError as exc:
            raise ExprError(f"in {d.name}(): {exc.message}", exc.column) from None
        finally:
            self.expanding.pop()

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


def _suggest(name: str, definitions: Iterable[str] = ()) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, sorted(FUNCTIONS | set(definitions)), n=1, cutoff=0.6)
    return close[0] if close else None
