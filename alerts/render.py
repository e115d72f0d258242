"""How an alert's evidence, values and advice read: one wording for notifications and the dashboard.

A leaf module (standard library only): :mod:`parallax.alerts.notify` and :mod:`parallax.dashboard.pages` both use it.
"""

from __future__ import annotations

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
