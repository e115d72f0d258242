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

A pack may name sub-expressions (``define: {"step_time(n)": "coalesce(median_over(step_s, n), 60)"}``) and call
them like functions: a call is replaced by the body with each parameter replaced by the argument as written.

Three modules: ``parse`` (source to tree, and what is refused), ``nodes`` (the tree and its evaluation,
``Expr``), ``windows`` (the window statistics).
"""

from parallax.alerts.expr.nodes import EvalContext, Expr
from parallax.alerts.expr.parse import FUNCTIONS, Definition, ExprError, parse_definition, parse_expr, parse_signature

__all__ = ["Definition", "EvalContext", "Expr", "ExprError", "FUNCTIONS", "parse_definition", "parse_expr", "parse_signature"]
