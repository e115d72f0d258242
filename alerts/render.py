"""How an alert's evidence, values and advice read: one wording for notifications and the dashboard.

A leaf module (standard library only): :mod:`parallax.alerts.notify` and :mod:`parallax.dashboard.pages` both use it.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from typing import Any


def value_text(v: Any) -> str:
    """A rule value: 4 significant digits, ``n/a`` when unknown, NaN and ±Infinity spelled out."""
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return f"{v:.4g}"
    return str(v)


def evidence_text(item: Any) -> str:
    """One piece of evidence as a line: ``median_over(stall_s, 5) = 30 (steps 45–49)``; a bare metric with a
    window reads ``kl over 3 steps = 0.5``; other keys follow as ``key=value``."""
    if not isinstance(item, Mapping):
        return str(item)
    what = item.get("expr") or item.get("metric") or item.get("name")
    text = str(what) if what is not None else ""
    if not item.get("expr") and item.get("window") is not None:
        window = item["window"]
        text += f" over {window} steps" if isinstance(window, int) else f" over {window}"
    if "value" in item:
        text += f" = {value_text(item['value'])}" if text else value_text(item["value"])
    steps = item.get("steps")
    if isinstance(steps, (list, tuple)) and len(steps) == 2:
        text += f" (steps {steps[0]}–{steps[1]})"
    extra = [f"{k}={value_text(v)}" for k, v in item.items() if k not in ("metric", "expr", "name", "window", "value", "steps")]
    return ", ".join([text, *extra] if text else extra) or "{}"


def advice_lines(cause: Mapping[str, Any]) -> list[str]:
    """A ranked cause's advice as lines (a rule gives one text; a list is kept as it is)."""
    advice = cause.get("advice")
    if not advice:
        return []
    if isinstance(advice, str):
        return [advice]
    if isinstance(advice, (list, tuple)):
        return [str(a) for a in advice if a]
    return [str(advice)]


# -- evidence in words ------------------------------------------------------------------------------------------

#: Window statistics, as a person names them (alerts.expr's window functions).
_STATS = {
    "max_over": "highest", "min_over": "lowest", "median_over": "median", "mean_over": "mean", "sum_over": "total",
    "std_over": "standard deviation", "noise": "point-to-point noise", "slope": "slope per step",
    "trend": "median slope per step",
}
#: Statistics that keep the metric's unit (a count or a slope does not).
_KEEPS_UNIT = frozenset({"last", "max_over", "min_over", "median_over", "mean_over", "std_over", "noise", "baseline",
                         "quantile_over", "delta"})
_CONTEXT = {
    "absent_for": "seconds since the run last reported",
    "heartbeat_age": "seconds since the trainer's last heartbeat",
    "longest_pause": "longest pause between two reports (s)",
    "longest_pause_outside_evals": "longest pause between two reports outside evaluations (s)",
    "report_interval": "seconds between reports",
    "step": "the step",
    "steps_since_resume": "steps since the last resume",
}
_OPS = {ast.Add: "+", ast.Sub: "−", ast.Mult: "×", ast.Div: "÷"}
_RANKS = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2}


def _points(n: int) -> str:
    return f"{n} point" if n == 1 else f"{n} points"


class _Words:
    """An evidence expression (the rule language's source) read out in words; ValueError where it cannot."""

    def __init__(self) -> None:
        self.metric: str | None = None  # the one metric the whole expression is a statistic of, if so
        self.unit_kept = False

    def top(self, source: str) -> str:
        tree = ast.parse("(" + source + "\n)", mode="eval").body
        if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id in _WINDOWED:
            args = tree.args
            metric = self.series(args[0]) if args else "?"
            if isinstance(args[0], (ast.Constant, ast.Name)):
                self.metric = metric
                self.unit_kept = tree.func.id in _KEEPS_UNIT
            return f"{metric}: {self.window(tree.func.id, args[1:], metric, head=False)}"
        if isinstance(tree, ast.Name):
            self.metric, self.unit_kept = tree.id, True
            return f"{tree.id}: latest value"
        return self.phrase(tree)

    def series(self, node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:  # a pair series: at each point of the right one
            left, right = self.series(node.left), self.series(node.right)
            return f"{left} {_OPS[type(node.op)]} {right} (at each {right} point)"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "at" and len(node.args) == 2:
            left, right = self.series(node.args[0]), self.series(node.args[1])
            return f"{left} at each {right} point"
        raise ValueError("not a series")

    @staticmethod
    def number(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -_Words.number(node.operand)
        raise ValueError("not a number")

    def window(self, name: str, rest: list, metric: str, *, head: bool = True) -> str:
        nums = [self.number(a) for a in rest]
        n = int(nums[0]) if nums else 1
        if name == "quantile_over":
            skip = int(nums[2]) if len(nums) > 2 else 0
        else:
            skip = int(nums[1]) if len(nums) > 1 else 0
        back = (f", leaving out the newest {skip}" if skip > 1 else ", leaving out the newest one") if skip else ""
        of = f" of {metric}" if head else ""
        if name == "last":
            return f"latest value{of}"
        if name == "baseline":
            newest = f"the newest {skip}" if skip > 1 else "the newest one"
            return (f"baseline{of}: median of the {_points(n)} before {newest}" if skip
                    else f"baseline{of}: median of the last {_points(n)}")
        if name == "delta":
            return f"change{of} over the last {_points(n)}"
        if name == "count_nonfinite":
            return f"non-finite values{of} in the last {_points(n)}"
        if name == "count_over":
            return f"points{of} logged in the last {n}{back}"
        if name == "quantile_over":
            q = nums[1] if len(nums) > 1 else 0.5
            return f"{value_text(q * 100)}th percentile{of} over the last {_points(n)}{back}"
        if name == "exists":
            return f"logged{of}"
        if name == "last_step":
            return f"step of the latest point{of}"
        if name == "spacing":
            return f"steps between points{of} (median over the last {_points(n)})"
        return f"{_STATS[name]}{of} over the last {_points(n)}{back}"

    def paren(self, node: ast.AST, wrap: bool) -> str:
        text = self.phrase(node, True) if not isinstance(node, ast.BinOp) else self.phrase(node)
        return f"({text})" if wrap else text

    def phrase(self, node: ast.AST, nested: bool = False) -> str:
        if isinstance(node, ast.Name):
            return f"latest {node.id}"
        if isinstance(node, (ast.Constant, ast.UnaryOp)):
            return value_text(self.number(node))
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            rank = _RANKS[type(node.op)]
            left, right = node.left, node.right
            # parenthesised only where the order is not the reading order: a lower-ranked operand, or a right one
            # of the same rank (a - (b - c))
            lp = isinstance(left, ast.BinOp) and _RANKS.get(type(left.op), 9) < rank
            rp = isinstance(right, ast.BinOp) and _RANKS.get(type(right.op), 9) <= rank
            text = (f"{self.paren(left, lp)} {_OPS[type(node.op)]} {self.paren(right, rp)}")
            return text
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            raise ValueError("not something read out")
        name, args = node.func.id, node.args
        if name in _WINDOWED:
            return self.window(name, args[1:], self.series(args[0]))
        if name in _CONTEXT:
            return _CONTEXT[name]
        if name == "config":
            key = args[0].value if args and isinstance(args[0], ast.Constant) else "?"
            default = f" (default {value_text(self.number(args[1]))})" if len(args) > 1 else ""
            return f"config {key}{default}"
        if name == "coalesce":
            if all(isinstance(a, ast.Call) and getattr(a.func, "id", None) == "config" for a in args):
                return "config " + ", else ".join(str(a.args[0].value) for a in args if a.args)
            text = ", else ".join(self.phrase(a, True) for a in args)
            return f"({text})" if nested else text
        if name == "abs" and len(args) == 1:
            return f"|{self.phrase(args[0])}|"
        if name == "log" and len(args) == 1:
            return f"ln {self.phrase(args[0], True)}"
        if name in ("min", "max") and args:
            return f"{'smallest' if name == 'min' else 'largest'} of " + ", ".join(self.phrase(a, True) for a in args)
        if name == "clamp" and len(args) == 3:
            return f"{self.phrase(args[0], True)} kept within {self.phrase(args[1])}–{self.phrase(args[2])}"
        raise ValueError(f"no words for {name}")


_WINDOWED = frozenset({*_STATS, "last", "baseline", "delta", "count_nonfinite", "count_over", "quantile_over", "exists",
                       "last_step", "spacing"})


def unit_of(metric: str | None) -> str:
    """The unit a canonical metric's name carries (``stall_s``: seconds), or ''."""
    if metric and metric.endswith("_s"):
        return "s"
    return ""


def evidence_words(item: Any) -> str:
    """One piece of evidence read out: the metric, the statistic in words and its window, the value with its unit,
    the steps it covers: ``stall_s: median over the last 5 points = 30 s (steps 45–49)``; a config value reads
    ``config staleness_bound, else max_staleness = 4``. What has no words (an unknown function) falls back to
    :func:`evidence_text`."""
    if not isinstance(item, Mapping) or not isinstance(item.get("expr"), str):
        return evidence_text(item)
    words = _Words()
    try:
        label = words.top(item["expr"])
    except (SyntaxError, ValueError, AttributeError, IndexError, TypeError, RecursionError):
        return evidence_text(item)
    text = label
    if "value" in item:
        value = item["value"]
        unit = unit_of(words.metric) if words.unit_kept else ""
        shown = value_text(value)
        text += f" = {shown}" + (f" {unit}" if unit and isinstance(value, (int, float)) and not isinstance(value, bool)
                                 else "")
    steps = item.get("steps")
    if isinstance(steps, (list, tuple)) and len(steps) == 2:
        text += f" (steps {steps[0]}–{steps[1]})" if steps[0] != steps[1] else f" (step {steps[0]})"
    return text
