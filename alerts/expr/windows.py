"""The window statistics of the rule language: last, mean_over, noise, slope, quantile_over, baseline, ...

Each takes the window's points (step, value or None for a non-finite one), the most recent last, and the call
node (its ``n``, ``skip``, ``q``); non-finite points are skipped by every statistic and counted by
``count_nonfinite``. ``ON_FINITE`` holds the same statistics computed from the values alone when all of them are
finite (the engine's batch fast path). The README's "Rules" section is the reference for the functions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Iterable

if TYPE_CHECKING:
    from parallax.alerts.expr.nodes import Window

_INF = math.inf


Point = tuple[int, "float | None"]


def num(v: float | bool | None) -> float | None:
    return None if v is None else float(v)


def finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def finite_values(points: Iterable[Point]) -> list[float]:
    # -inf < v < inf is False for NaN and the infinities, and cheaper than math.isfinite here
    return [v for _, v in points if v is not None and -_INF < v < _INF]


def median(xs: list[float]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def _w_last(points: list[Point], node: Window):
    if not points:
        return None
    v = points[-1][1]
    return v if v is not None and math.isfinite(v) else None


def _w_stat(reduce: Callable[[list[float]], float], minimum: int = 1):
    def fn(points: list[Point], node: Window):
        return on_finite(finite_values(points), node)

    def on_finite(xs: list[float], node: Window):
        return finite(reduce(xs)) if len(xs) >= minimum else None

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
    md = median(d)
    r = sorted(abs(x - md) for x in d)
    keep = r[: max(1, math.ceil(0.8 * len(r)))]
    return (sum(keep) / len(keep)) / _TRIMMED_ABS_MEAN / math.sqrt(2.0)


def _finite_points(points: list[Point]) -> list[tuple[float, float]]:
    """The window's finite points, their steps as floats (x for the slopes)."""
    return [(float(s), v) for s, v in points if v is not None and math.isfinite(v)]


def _w_slope(points: list[Point], node: Window):
    pts = _finite_points(points)
    if len(pts) < 2:
        return None
    fit = _least_squares(pts)
    return None if fit is None else finite(fit[0])


def _least_squares(pts: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The least-squares line through the points: (slope, intercept), None when their steps are all one."""
    n = len(pts)
    mx = sum(s for s, _ in pts) / n
    my = sum(v for _, v in pts) / n
    sxx = sum((s - mx) ** 2 for s, _ in pts)
    if sxx == 0:
        return None
    slope = sum((s - mx) * (v - my) for s, v in pts) / sxx
    return slope, my - slope * mx


#: robust_slope: residuals are held within this many sigmas of the window's point-to-point noise; the refits.
ROBUST_SIGMAS = 5.0
ROBUST_REFITS = 3


def _w_robust_slope(points: list[Point], node: Window):
    """The least-squares slope per step with every point's residual from the line held within 5 sigma of the
    window's own point-to-point noise (``noise``), refitted 3 times (Huber's winsorized residuals). One heavy-tailed
    point far off the line (a dip at the window's start) no longer tilts it by its leverage; points within 5 sigma
    of the line count in full, so a Gaussian series, or a climb that began within the window, reads its
    least-squares slope (``trend``'s median slopes, robust too, weigh such a climb by a rule of their own)."""
    pts = _finite_points(points)
    if len(pts) < 3:
        return None
    fit = _least_squares(pts)
    if fit is None:
        return None
    c = ROBUST_SIGMAS * _noise([v for _, v in pts])
    if c > 0:
        for _ in range(ROBUST_REFITS):
            slope, icept = fit
            held = [(s, icept + slope * s + max(-c, min(c, v - icept - slope * s))) for s, v in pts]
            fit = _least_squares(held)
            if fit is None:
                return None
    return finite(fit[0])


def _w_trend(points: list[Point], node: Window):
    """The Theil-Sen slope per step: the median of the slopes between every two points (x = their steps). A few
    points off the line (an onset's own jump at the window's end, a spike) do not tilt it, where they pull the
    least-squares ``slope`` by their leverage; a steady line gives the same slope."""
    pts = _finite_points(points)
    slopes = [(vb - va) / (sb - sa) for i, (sa, va) in enumerate(pts) for sb, vb in pts[i + 1:] if sb != sa]
    return finite(median(slopes)) if slopes else None


def _w_delta(points: list[Point], node: Window):
    xs = finite_values(points)
    if len(points) < node.n + 1 or len(xs) < 2:
        return None
    return finite(xs[-1] - xs[0])


def _quantile(xs: list[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    ys = sorted(xs)
    pos = q * (len(ys) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def _w_quantile(points: list[Point], node: Window):
    return _on_finite_quantile(finite_values(points), node)


def _on_finite_quantile(xs: list[float], node: Window):
    return finite(_quantile(xs, node.q)) if xs else None


_w_quantile.on_finite = _on_finite_quantile  # type: ignore[attr-defined]


def _w_baseline(points: list[Point], node: Window):
    return _median_of_enough(finite_values(points[: max(0, len(points) - node.skip)][-node.n :]), node)


def _median_of_enough(xs: list[float], node: Window) -> float | None:
    """A baseline: the median of the finite values of its window, if they are at least half of it."""
    return median(xs) if len(xs) >= max(1, math.ceil(node.n / 2)) else None


def _w_count_nonfinite(points: list[Point], node: Window):
    return float(sum(1 for _, v in points if v is None or not math.isfinite(v)))


def _w_count_over(points: list[Point], node: Window):
    return float(len(finite_values(points)))


def _w_last_step(points: list[Point], node: Window):
    return float(points[-1][0]) if points else None


def _w_spacing(points: list[Point], node: Window):
    """The median number of steps between consecutive points (an evaluation's cadence)."""
    gaps = [b[0] - a[0] for a, b in zip(points, points[1:])]
    return float(median(gaps)) if gaps else None


def _w_exists(points: list[Point], node: Window):
    return bool(points)


WINDOWS: dict[str, Callable] = {
    "last": _w_last,
    "mean_over": _w_stat(lambda xs: sum(xs) / len(xs)),
    "max_over": _w_stat(max),
    "min_over": _w_stat(min),
    "median_over": _w_stat(median),
    "sum_over": _w_stat(sum),
    "std_over": _w_stat(_std, minimum=2),
    "noise": _w_stat(_noise, minimum=3),
    "slope": _w_slope,
    "trend": _w_trend,
    "robust_slope": _w_robust_slope,
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
# what ``Window.evs`` uses with a context that has ``finite_windows``. ``slope``, ``trend`` and ``robust_slope`` read
# the steps: not here.
ON_FINITE: dict[str, Callable[[list[float], Window], float | bool | None]] = {
    name: fn.on_finite for name, fn in WINDOWS.items() if hasattr(fn, "on_finite")
}
ON_FINITE.update({
    "last": lambda xs, node: xs[-1] if xs else None,
    "delta": lambda xs, node: finite(xs[-1] - xs[0]) if len(xs) >= max(node.n + 1, 2) else None,
    "baseline": lambda xs, node: _median_of_enough(xs[: max(0, len(xs) - node.skip)][-node.n :], node),
    "count_nonfinite": lambda xs, node: 0.0,
    "count_over": lambda xs, node: float(len(xs)),
    "exists": lambda xs, node: bool(xs),
})

#: Window functions over one metric only (no pair series). ``slope`` reads a pair's points at their steps (the
#: sparse metric's), so a trend of the train/held-out gap per step is ``slope(reward_train - reward_heldout, n)``.
SINGLE_METRIC = frozenset({"exists", "count_nonfinite", "delta", "last_step", "spacing"})

# minimum n per window function
MIN_WINDOW = {"slope": 2, "trend": 2, "robust_slope": 3, "std_over": 2, "noise": 3, "spacing": 2}
