"""Figures as pure functions of plain data (store entities, alert dicts): testable without a browser.

An indicator panel holds, for each of its metrics, three traces in this order:
the envelope's lower edge (bucket minimum), its upper edge (bucket maximum,
filled down to the lower edge) and the value line. The live refresh appends to
all three with ``extendData``, so the trace indices are fixed:
``3 * metric_index + {0, 1, 2}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import plotly.graph_objects as go
import plotly.io as pio

from parallax.ingest.aliases import DEFAULT_K, FRAMEWORKS
from parallax.ingest.files import spreadsheet_text

#: Past this many points in a figure, a run page's traces are WebGL (Scattergl) instead of SVG. A run
#: page's panels hold at most pages.FIRST_LOAD_POINTS (1,000) per metric, four metrics at most, and draw
#: faster as SVG (eight WebGL contexts cost ~0.6 s of the first render on a software GPU). The dashboard
#: loads the basic plotly.js bundle (assets/plotly_early.js), which draws a scattergl trace as SVG scatter;
#: the compare page's overlays are SVG whatever their size (compare_figure).
GL_THRESHOLD = 3000
#: The live refresh keeps at most this many points per trace (extendData's maxPoints).
MAX_POINTS_PER_TRACE = 5000


def _lean_template(name: str) -> dict[str, Any]:
    """A named plotly template as a plain dict, cut to its layout and the two trace types drawn here.

    The full plotly_white is 7 kB of defaults for ~25 trace types, sent with every figure (8 per run page);
    the cut one looks the same for scatter and scattergl at 3 kB.
    """
    t = pio.templates[name].to_plotly_json()
    return {"layout": t["layout"], "data": {k: v for k, v in t["data"].items() if k in ("scatter", "scattergl")}}


#: Every figure's template (plotly_white). It must be a dict, not the name: figures are built unvalidated
#: (see _figure), and only validation resolves a template's name.
TEMPLATE = _lean_template("plotly_white")


def _figure(data: list[dict[str, Any]], layout: dict[str, Any]) -> go.Figure:
    """A figure from plain trace and layout dicts, without plotly.py's validation.

    Validating (go.Scatter(...), update_layout: each value checked one by one, the template deep-copied per
    figure) made building a run page's 8 panels of 1,000-point traces ~290 ms instead of ~120 ms, inside the
    router callback the browser waits on before it can draw. The dicts here are fixed by this module, and the
    tests check them against plotly's schema (a validated copy of each kind of figure is built there).
    """
    return go.Figure({"data": data, "layout": layout}, _validate=False)


def plotly_text(text: Any) -> str:
    """Text for a figure's names, titles and hover labels, shown as written.

    plotly.js renders a subset of HTML in every text it draws (legends, hover labels, titles): ``<a href>`` makes
    a live link, ``<b>``, ``<span style>`` restyle. It splits the text at tags first and decodes entities in what
    lies between, so ``&lt;``, ``&gt;`` and ``&amp;`` come out as the characters and never as markup. Every string
    a user chose (run names, metric names with their labels, rule names, event messages) goes through here.
    """
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


FIRING = "#d62728"  # red
PENDING = "#ff9f0a"  # amber
RESOLVED = "#8c8c8c"  # grey
STATE_COLOURS = {"firing": FIRING, "pending": PENDING, "resolved": RESOLVED}
METRIC_COLOURS = ("#1f77b4", "#9467bd", "#2ca02c", "#8c564b")
RUN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


@dataclass(frozen=True, slots=True)
class Panel:
    key: str  # stable id part: panel-<key>
    title: str
    metrics: tuple[str, ...]  # the first is the indicator; the others are drawn beside it
    reference: float | None = None  # a horizontal line (the healthy value), if any
    hint: str = ""  # what a bad sign looks like
    unit: str = ""  # the y axis' title
    #: metrics whose values are whole numbers (a lag in policy versions): drawn as steps of their bucket maxima,
    #: without an envelope, so that thousands of steps swinging between two values read as a line, not a band
    discrete: tuple[str, ...] = ()


#: The eight indicator panels of DESIGN §1, in order.
PANELS: tuple[Panel, ...] = (
    Panel("importance_weight_max", "Importance weight max", ("importance_weight_max",), 1.0, "spikes far above 1",
          unit="ratio"),
    Panel("staleness", "Staleness", ("staleness_mean", "staleness_max"), None, "above the run's bound, or rising",
          unit="policy versions", discrete=("staleness_max",)),
    Panel("stall", "Timing / stall", ("stall_s", "rollout_s", "train_s", "step_s"), 0.0, "stall > 0", unit="seconds"),
    Panel("trainer_mfu", "Trainer MFU", ("trainer_mfu",), None, "low", unit="ratio"),
    Panel("pass_at_k", "pass@k", ("pass_at_k",), None, "falling", unit="fraction solved"),
    Panel("pass_at_1", "pass@1", ("pass_at_1",), None, "rising while pass@k falls", unit="fraction solved"),
    Panel("entropy", "Entropy", ("entropy",), None, "collapsing", unit="nats"),
    Panel("reward", "Reward vs held-out", ("reward_train", "reward_heldout"), None, "train up while held-out down",
          unit="reward"),
)
#: Line styles of a panel's metrics, in order: told apart without colour too (rollout_s vs train_s).
METRIC_DASHES = ("solid", "dot", "dash", "dashdot")
PANEL_METRICS: tuple[str, ...] = tuple(m for p in PANELS for m in p.metrics)

#: Which panels an alert of each default rule concerns (its span is shaded there).
_RULE_PANELS: dict[str, tuple[str, ...]] = {
    "importance_weight_spike": ("importance_weight_max", "staleness"),
    "token_mismatch_metrics": ("importance_weight_max",),
    "staleness_high": ("staleness", "importance_weight_max"),
    "rollout_stall": ("stall",),
    "trainer_mfu_low": ("trainer_mfu", "stall"),
    "exploration_collapse": ("pass_at_k", "pass_at_1", "entropy"),
    "entropy_collapse": ("entropy",),
    "reward_hacking": ("reward",),
}
_CAUSE_PANELS: dict[str, tuple[str, ...]] = {
    "stale_rollouts": ("importance_weight_max", "staleness"),
    "token_mismatch": ("importance_weight_max",),
    "unbalanced_groups": ("stall",),
    "padding_imbalance": ("trainer_mfu",),
    "exploration_collapse": ("pass_at_k", "pass_at_1", "entropy"),
    "reward_hacking": ("reward",),
}


def panel_title(panel: Panel, config: Mapping[str, Any] | None = None) -> str:
    if panel.key == "pass_at_k":
        k = (config or {}).get("k", DEFAULT_K)
        return f"pass@{k if type(k) is int and k >= 1 else DEFAULT_K}"
    return panel.title


_MODE_SUFFIX = {"sync": " (synchronous runs)", "async": " (asynchronous runs)"}


def feeders(metric: str) -> list[str]:
    """The trainer keys that feed a canonical metric (besides the canonical name itself), as 'framework: key'."""
    out = []
    for fw in FRAMEWORKS:
        for rule in fw.rules:
            if metric in (rule.target, rule.sequence_target):
                out.append(f"{fw.name}: {rule.key}" + _MODE_SUFFIX.get(rule.mode or "", ""))
        for d in fw.derived:
            if d.target == metric:
                out.append(f"{fw.name}: derived from " + " and ".join("/".join(keys) for keys in d.inputs) + _MODE_SUFFIX.get(d.mode or "", ""))
    return out


def alert_panels(alert: Mapping[str, Any]) -> tuple[str, ...]:
    """The panels an alert concerns: by rule name, else by its causes, else every panel (non-finite, silent)."""
    rule = alert.get("rule") or ""
    labelled = (alert.get("labels") or {}).get("panel")
    for p in PANELS:
        if labelled in (p.key, *p.metrics):
            return (p.key,)
    if rule in _RULE_PANELS:
        return _RULE_PANELS[rule]
    keys: list[str] = []
    for cause in alert.get("causes") or []:
        for k in _CAUSE_PANELS.get(cause.get("id", ""), ()):
            if k not in keys:
                keys.append(k)
    text = f"{rule} {alert.get('summary') or ''}"
    for p in PANELS:
        if p.key not in keys and any(m in text for m in p.metrics):
            keys.append(p.key)
    return tuple(keys) or tuple(p.key for p in PANELS)


def alert_span(alert: Mapping[str, Any], last_step: int | None) -> tuple[int, int] | None:
    """The step range an alert covers: from when its condition began to when it ended (or the last step, if open)."""
    start = alert.get("started_step")
    if start is None:
        start = alert.get("fired_step")
    if start is None:
        return None
    end = alert.get("ended_step")
    if end is None:
        end = alert.get("last_active_step") if alert.get("state") == "resolved" else None
    if end is None:
        end = last_step if last_step is not None else start
    return int(start), int(max(end, start))


def has_envelope(series: Any) -> bool:
    """Whether any bucket of a series spans a range (its min differs from its max)."""
    return series is not None and any(lo != hi for lo, hi in zip(series.vmin, series.vmax))


def _points(series: Any) -> int:
    return len(series.steps) if series is not None else 0


def _finite(values: Iterable[float | None]) -> list[float | None]:
    return [v if v is not None and math.isfinite(v) else None for v in values]


def raw_index(panel: Panel, i: int) -> int:
    """Trace index of a metric's raw line, drawn faintly behind its smoothed one (empty when not smoothing)."""
    return 3 * len(panel.metrics) + i


def nonfinite_index(panel: Panel) -> int:
    """Trace index of the panel's non-finite markers (NaN, ±Infinity: a cross where a point is not a number)."""
    return 4 * len(panel.metrics)


_NONFINITE_NAMES = {1: "NaN", 2: "+Infinity", 3: "-Infinity"}
#: Where the marker rows sit on the panel's hidden 0..1 axis (yaxis2): events at the top, non-finite points at the
#: bottom, alert spans as a bar along the top edge.
_TOP, _BOTTOM, _SPAN = 0.93, 0.04, 0.995


def _config_number(config: Mapping[str, Any] | None, *keys: str) -> float | None:
    """The first of these config keys that holds a finite number (a numeric string counts)."""
    for key in keys:
        v = (config or {}).get(key)
        if isinstance(v, bool) or v is None:
            continue
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            return f
    return None


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _recent(series: Any, n: int, skip: int = 0) -> list[float]:
    """The finite values of the n points before the ``skip`` newest."""
    if series is None:
        return []
    values = series.values[: len(series.values) - skip] if skip else series.values
    return [v for v in values[-n:] if v is not None and math.isfinite(v)]


def thresholds(panel: Panel, series: Mapping[str, Any], config: Mapping[str, Any] | None) -> list[tuple[float, str]]:
    """The lines the built-in rules compare a panel against, as they stand at its newest points: the staleness
    bound the config gives; the importance weight's 1.5 floor and the multiple of its baseline (median of the 40
    points before the 10 newest) it must pass; the stall a step may have (10% of a step: median of the last 20
    step_s, else train_s + stall_s); the MFU floor the config sets."""
    out: list[tuple[float, str]] = []
    if panel.key == "staleness":
        bound = _config_number(config, "staleness_bound", "max_staleness")
        if bound is not None:
            out.append((bound, "bound"))
    elif panel.key == "importance_weight_max":
        out.append((1.5, "alert floor"))
        ratio = _config_number(config, "importance_weight_ratio") or 2.0
        base = _recent(series.get("importance_weight_max"), 40, 10)
        if len(base) >= 20:
            line = ratio * _median(base)
            if line > 1.5:
                out.append((line, f"{ratio:g}× baseline"))
    elif panel.key == "stall":
        fraction = _config_number(config, "stall_min_fraction")
        fraction = 0.1 if fraction is None else fraction
        floor = _config_number(config, "stall_min_s")
        floor = 0.1 if floor is None else floor
        step = _median(_recent(series.get("step_s"), 20))
        if step is None:
            train, stall = _median(_recent(series.get("train_s"), 20)), _median(_recent(series.get("stall_s"), 20))
            step = train + stall if train is not None and stall is not None else None
        if step is not None:
            out.append((max(floor, fraction * step), f"{fraction * 100:g}% of a step"))
    elif panel.key == "trainer_mfu":
        mfu_min = _config_number(config, "mfu_min")
        if mfu_min:
            out.append((mfu_min, "mfu_min"))
    return out


def _nonfinite_points(panel: Panel, series: Mapping[str, Any]) -> tuple[list[int], list[str]]:
    xs, texts = [], []
    for metric in panel.metrics:
        s = series.get(metric)
        for step, marker in (s.non_finite if s is not None else ()):
            xs.append(step)
            texts.append(f"{metric} = {_NONFINITE_NAMES.get(marker, 'not a number')} at step {step}")
    return xs, texts


def _alert_hover(alert: Mapping[str, Any], span: tuple[int, int]) -> str:
    causes = alert.get("causes") or []
    top = causes[0].get("id") if causes and isinstance(causes[0], Mapping) else None
    end = "now" if alert.get("ended_step") is None and alert.get("state") != "resolved" else span[1]
    return (f"alert {alert.get('rule')} ({alert.get('state')}, {alert.get('severity')}), steps {span[0]}–{end}"
            + (f": {top}" if top else ""))


def indicator_figure(
    panel: Panel,
    series: Mapping[str, Any],
    *,
    alerts: Sequence[Mapping[str, Any]] = (),
    events: Sequence[Any] = (),
    last_step: int | None = None,
    config: Mapping[str, Any] | None = None,
    uirevision: str = "run",
    smoothing: float = 0.0,
    log_y: bool = False,
    x_range: tuple[float, float] | None = None,
) -> go.Figure:
    """One indicator panel.

    Traces, in this fixed order (the live refresh appends to them by index): per metric the envelope's lower edge
    (bucket minimum), its upper edge (bucket maximum, filled down to the lower edge) and the value line
    (``3 * metric_index + {0, 1, 2}``; EMA-smoothed when ``smoothing``); per metric its raw line, drawn faintly
    behind a smoothed one (``raw_index``); the non-finite markers (``nonfinite_index``); then the events' and the
    alert spans' hover markers. Axes: step, and the panel's unit (``log_y``: logarithmic); the thresholds the
    built-in rules use are dotted lines; ``x_range`` opens the panel zoomed to those steps.

    ``series`` maps metric names to store ``Series`` (a missing one draws empty traces, ready for live points).
    """
    total = sum(_points(series.get(m)) for m in panel.metrics)
    kind = "scattergl" if total > GL_THRESHOLD else "scatter"
    smoothing = smoothing if 0 < smoothing < 1 else 0.0
    data: list[dict[str, Any]] = []
    raws: list[dict[str, Any]] = []
    for i, metric in enumerate(panel.metrics):
        s = series.get(metric)
        colour = METRIC_COLOURS[i % len(METRIC_COLOURS)]
        steps = list(s.steps) if s is not None else []
        discrete = metric in panel.discrete
        # The edges are drawn (thin, translucent), not just filled: a one-bucket spike is narrower than a pixel.
        band = dict(mode="lines", line=dict(width=1, color=_rgba(colour, 0.35)), hoverinfo="skip", showlegend=False,
                    legendgroup=metric)
        # Raw points have no envelope (min = max = value): the band traces stay empty rather than triple the data.
        # A discrete metric draws its bucket maxima as steps instead.
        bx = steps if has_envelope(s) and not discrete else []
        data.append(dict(type=kind, x=bx, y=_finite(s.vmin) if bx else [], name=plotly_text(f"{metric} min"), **band))
        data.append(dict(type=kind, x=bx, y=_finite(s.vmax) if bx else [], name=plotly_text(f"{metric} max"), fill="tonexty",
                         fillcolor=_rgba(colour, 0.12), **band))
        values = _finite((s.vmax if discrete else s.values) if s else [])
        line = dict(color=colour, width=1.4, dash=METRIC_DASHES[i % len(METRIC_DASHES)])
        if discrete:
            line["shape"] = "hv"
        data.append(dict(type=kind, x=steps, y=ema(values, smoothing) if smoothing else values, name=plotly_text(metric),
                         mode="lines", line=line, legendgroup=metric, showlegend=len(panel.metrics) > 1))
        raws.append(dict(type=kind, x=steps if smoothing else [], y=values if smoothing else [], name=plotly_text(f"{metric} raw"),
                         mode="lines", line=dict(color=_rgba(colour, 0.3), width=1), hoverinfo="skip",
                         showlegend=False, legendgroup=metric))
    data += raws
    nx, ntext = _nonfinite_points(panel, series)
    data.append(dict(type="scatter", x=nx, y=[_BOTTOM] * len(nx), yaxis="y2", name="not a number", mode="markers",
                     marker=dict(symbol="x", size=9, color=FIRING, line=dict(width=1, color=FIRING)),
                     hovertext=[plotly_text(t) for t in ntext], hovertemplate="%{hovertext}<extra></extra>", showlegend=False))
    shapes = []
    if panel.reference is not None:
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=panel.reference, y1=panel.reference,
                           line=dict(color="#999", width=1, dash="dot")))
    for y, label in thresholds(panel, series, config):
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=y, y1=y, name=plotly_text(f"threshold {label}"),
                           line=dict(color="#c0392b", width=1, dash="dot"),
                           label=dict(text=plotly_text(f"{label} ({value_label(y)})"), textposition="start", yanchor="top",
                                      font=dict(size=9, color="#a33"))))
    # Events: a dashed line each, and a marker at its top that names it on hover.
    ev_steps = [ev.step for ev in events]
    for ev in events:
        shapes.append(dict(type="line", xref="x", yref="paper", x0=ev.step, x1=ev.step, y0=0, y1=1,
                           line=dict(color="#555", width=1, dash="dash"), name=plotly_text(f"{ev.kind} {ev.message}".strip())))
    data.append(dict(type="scatter", x=ev_steps, y=[_TOP] * len(ev_steps), yaxis="y2", name="events", mode="markers",
                     marker=dict(symbol="triangle-down", size=8, color="#555"),
                     hovertext=[plotly_text(f"{ev.kind} at step {ev.step}" + (f": {ev.message}" if ev.message else ""))
                                for ev in events],
                     hovertemplate="%{hovertext}<extra></extra>", showlegend=False))
    # Alert spans: shaded, and a bar along the top edge that names the alert wherever the pointer is over it.
    all_steps = sorted({x for m in panel.metrics for x in (series[m].steps if series.get(m) is not None else ())})
    for alert in alerts:
        if panel.key not in alert_panels(alert):
            continue
        span = alert_span(alert, last_step)
        if span is None:
            continue
        colour = STATE_COLOURS.get(alert.get("state", ""), RESOLVED)
        shapes.append(dict(type="rect", xref="x", yref="paper", x0=span[0], x1=span[1], y0=0, y1=1,
                           # An edge line too: a span of a few steps in a long run is narrower than a pixel.
                           fillcolor=colour, opacity=0.15, line=dict(width=1, color=colour), layer="below",
                           name=plotly_text(f"alert {alert.get('id')} {alert.get('rule')}")))
        xs = sorted({span[0], span[1], *(x for x in all_steps if span[0] <= x <= span[1])})
        text = _alert_hover(alert, span)
        data.append(dict(type="scatter", x=xs, y=[_SPAN] * len(xs), yaxis="y2", mode="lines",
                         name=plotly_text(f"alert {alert.get('rule')}"), line=dict(color=colour, width=5),
                         hovertemplate=plotly_text(text).replace("%", "%%") + "<extra></extra>", showlegend=False))
    annotations = []
    if total == 0:
        names = ", ".join(panel.metrics)
        annotations.append(dict(text=plotly_text(f"no data yet for {names}"), xref="paper", yref="paper", x=0.5, y=0.5,
                                showarrow=False, font=dict(color="#888")))
    xaxis: dict[str, Any] = dict(title=dict(text="step", font=dict(size=10), standoff=2), type="linear")
    if x_range is not None:
        xaxis.update(range=list(x_range), autorange=False)
    return _figure(data, dict(
        title=dict(text=plotly_text(panel_title(panel, config)), x=0, xref="paper", y=1, yref="container", yanchor="top",
                   pad=dict(t=4), font=dict(size=13)),
        margin=dict(l=52, r=30, t=26, b=32),
        autosize=True,
        uirevision=uirevision,
        shapes=shapes,
        annotations=annotations,
        template=TEMPLATE,
        # Above the plot, right-aligned: the modebar stands vertically in the right margin, clear of it.
        legend=dict(orientation="h", x=1, xanchor="right", y=1, yanchor="bottom", font=dict(size=10),
                    bgcolor="rgba(255,255,255,0)"),
        modebar=dict(orientation="v"),
        # Stated, not detected: plotly.js otherwise scans every value of every trace for dates and categories
        # before drawing (~40 ms in a profile of a run page's first render).
        xaxis=xaxis,
        yaxis=dict(type="log" if log_y else "linear", title=dict(text=panel.unit, font=dict(size=10), standoff=4)),
        yaxis2=dict(overlaying="y", range=[0, 1], visible=False, fixedrange=True),
        hovermode="x unified",
        hoverlabel=dict(namelength=-1, font=dict(size=11)),
    ))


def value_label(v: float) -> str:
    return f"{v:.3g}"


def last_steps(series: Mapping[str, Any]) -> dict[str, int]:
    """The last step shown per metric (what the next live refresh fetches after)."""
    return {m: s.steps[-1] for m, s in series.items() if s is not None and s.steps}


def ema_state(panel: Panel, series: Mapping[str, Any], smoothing: float) -> dict[str, list[float]]:
    """Where each metric's smoothed line stands after the points drawn: ``{metric: [accumulator, points]}``, so that
    the live refresh carries the same EMA on over new points."""
    out = {}
    if not 0 < smoothing < 1:
        return out
    for metric in panel.metrics:
        s = series.get(metric)
        if s is None or not s.steps:
            continue
        values = _finite(s.vmax if metric in panel.discrete else s.values)
        out[metric] = list(ema_continue(values, smoothing, 0.0, 0)[1:])
    return out


def extend_payload(
    panel: Panel, new: Mapping[str, Any], max_points: int = MAX_POINTS_PER_TRACE, *, smoothing: float = 0.0,
    ema_at: dict[str, list[float]] | None = None,
) -> Any:
    """extendData for a panel from the new points of its metrics: ``(data, trace_indices, max_points)``, or None.
    With ``smoothing``, the value line carries the EMA on from ``ema_at`` (updated in place) and the raw line
    behind it gets the raw values."""
    xs, ys, idx = [], [], []
    smoothing = smoothing if 0 < smoothing < 1 else 0.0
    for i, metric in enumerate(panel.metrics):
        s = new.get(metric)
        if s is None or not s.steps:
            continue
        discrete = metric in panel.discrete
        if has_envelope(s) and not discrete:
            for offset, values in enumerate((s.vmin, s.vmax)):
                xs.append(list(s.steps))
                ys.append(_finite(values))
                idx.append(3 * i + offset)
        values = _finite(s.vmax if discrete else s.values)
        if smoothing:
            acc, n = (ema_at or {}).get(metric, (0.0, 0))
            smoothed, acc, n = ema_continue(values, smoothing, acc, int(n))
            if ema_at is not None:
                ema_at[metric] = [acc, n]
            xs += [list(s.steps), list(s.steps)]
            ys += [smoothed, values]
            idx += [3 * i + 2, raw_index(panel, i)]
        else:
            xs.append(list(s.steps))
            ys.append(values)
            idx.append(3 * i + 2)
    nx, _ = _nonfinite_points(panel, new)
    if nx:
        xs.append(nx)
        ys.append([_BOTTOM] * len(nx))
        idx.append(nonfinite_index(panel))
    if not idx:
        return None
    return dict(x=xs, y=ys), idx, max_points


def ema_continue(values: Sequence[float | None], weight: float, acc: float, n: int) -> tuple[list[float | None], float, int]:
    """:func:`ema` carried on from an accumulator and a count of points already smoothed."""
    out: list[float | None] = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(None)
            continue
        acc = acc * weight + (1 - weight) * v
        n += 1
        out.append(float(f"{acc / (1 - weight**n):.12g}"))
    return out, acc, n


def ema(values: Sequence[float | None], weight: float) -> list[float | None]:
    """Exponential moving average as TensorBoard/W&B smooth (debiased); ``weight`` in [0, 1), 0 = raw."""
    if weight <= 0:
        return list(values)
    # Rounded to 12 digits (in ema_continue): float noise on a flat line would make a 1e-16-wide autorange.
    return ema_continue(values, weight, 0.0, 0)[0]


#: How each metric's line style reads in a compare panel's title (the run is the colour, see compare_legend).
DASH_SIGNS = {"solid": "——", "dot": "···", "dash": "– –", "dashdot": "–·–"}


def compare_title(panel: Panel) -> str:
    """A compare panel's title, with the line style of each of its metrics when it has several."""
    if len(panel.metrics) == 1:
        return panel.title
    styles = ", ".join(f"{m} {DASH_SIGNS[METRIC_DASHES[i % len(METRIC_DASHES)]]}" for i, m in enumerate(panel.metrics))
    return f"{panel.title}: {styles}"


def compare_figure(
    panel: Panel,
    runs: Sequence[Any],
    series_by_run: Mapping[int, Mapping[str, Any]],
    *,
    smoothing: float = 0.0,
    xaxis: str = "step",
    alerts_by_run: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
) -> go.Figure:
    """A panel with several runs overlaid: one colour per run, one line style per metric (``rollout_s`` dotted,
    ``train_s`` dashed, ...), named in the title; with ``smoothing``, each smoothed line has its raw line faint
    behind it. No legend inside the plot (the page shows one for all panels), so every panel's plot has the
    same width and their x axes line up.

    ``xaxis`` is ``step``, ``time`` (wall clock) or ``relative`` (seconds since the run's first point).
    """
    smoothing = smoothing if 0 < smoothing < 1 else 0.0
    # SVG: at pages.COMPARE_POINTS per run and metric a panel holds 16,000 points at most, one path per trace,
    # drawn faster than in a software WebGL context (and the basic plotly.js bundle has no WebGL traces).
    kind = "scatter"
    data: list[dict[str, Any]] = []
    for ri, run in enumerate(runs):
        colour = RUN_COLOURS[ri % len(RUN_COLOURS)]
        for mi, metric in enumerate(panel.metrics):
            s = series_by_run.get(run.id, {}).get(metric)
            if s is None:
                continue
            if xaxis == "time":
                x: list[Any] = [_iso(t) for t in s.times]
            elif xaxis == "relative":
                t0 = s.times[0] if s.times else 0.0
                x = [t - t0 for t in s.times]
            else:
                x = list(s.steps)
            label = f"{run.name}" + (f" · {metric}" if len(panel.metrics) > 1 else "")
            # A "max" metric downsampled is drawn by its bucket maxima, so a one-step spike survives here too.
            values = _finite(s.vmax if metric.endswith("_max") else s.values)
            dash = METRIC_DASHES[mi % len(METRIC_DASHES)]
            if smoothing:
                data.append(dict(type=kind, x=x, y=values, name=plotly_text(f"{label} (raw)"), mode="lines", hoverinfo="skip",
                                 legendgroup=str(run.id), showlegend=False,
                                 line=dict(color=_rgba(colour, 0.25), width=1, dash=dash)))
            data.append(dict(type=kind, x=x, y=ema(values, smoothing) if smoothing else values, name=plotly_text(label),
                             mode="lines", legendgroup=str(run.id), showlegend=False,
                             line=dict(color=colour, width=1.6 if mi == 0 else 1.4, dash=dash)))
    shapes = []
    if xaxis == "step" and alerts_by_run:
        for ri, run in enumerate(runs):
            for alert in alerts_by_run.get(run.id, ()):
                if panel.key not in alert_panels(alert):
                    continue
                span = alert_span(alert, run.last_step)
                if span is not None:
                    shapes.append(dict(type="rect", xref="x", yref="paper", x0=span[0], x1=span[1], y0=0, y1=1,
                                       fillcolor=RUN_COLOURS[ri % len(RUN_COLOURS)], opacity=0.10,
                                       line=dict(width=0), layer="below",
                                       name=plotly_text(f"alert {alert.get('rule')} of {run.name}")))
    return _figure(data, dict(
        title=dict(text=plotly_text(compare_title(panel)), x=0, xref="paper", y=1, yref="container", yanchor="top",
                   pad=dict(t=4), font=dict(size=13)),
        margin=dict(l=52, r=30, t=26, b=34),
        height=260,
        uirevision=f"compare-{xaxis}",
        template=TEMPLATE,
        shapes=shapes,
        showlegend=False,
        modebar=dict(orientation="v"),
        hovermode="x unified",
        hoverlabel=dict(namelength=-1, font=dict(size=11)),
        xaxis=dict(title=dict(text={"step": "step", "time": "time (UTC)", "relative": "seconds since start"}.get(
            xaxis, "step"), font=dict(size=10), standoff=2)),
        yaxis=dict(title=dict(text=panel.unit, font=dict(size=10), standoff=4)),
    ))


def config_diff(configs: Mapping[str, Mapping[str, Any]], missing: Any = None) -> list[tuple[str, list[Any]]]:
    """The flattened config keys whose values differ between runs: ``[(key, [value per run])]``, sorted by key;
    a run that does not set a key gets ``missing`` there."""
    flat = {name: _flatten(cfg) for name, cfg in configs.items()}
    keys = sorted(set().union(*[f.keys() for f in flat.values()])) if flat else []
    out = []
    absent = object()
    for key in keys:
        values = [f.get(key, absent) for f in flat.values()]
        if any(v != values[0] for v in values[1:]):
            out.append((key, [missing if v is absent else v for v in values]))
    return out


def _flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _iso(t: float) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def metrics_figure(series: Sequence[Any], *, uirevision: str = "extra") -> go.Figure:
    """Any logged metrics on one chart, one line each (the run page's on-demand chart).

    Always SVG: the run page's plotly.js bundle (the basic one, see assets/plotly_early.js) has no WebGL traces.
    """
    data = [dict(type="scatter", x=list(s.steps), y=_finite(s.values), name=plotly_text(s.metric), mode="lines",
                 line=dict(color=RUN_COLOURS[i % len(RUN_COLOURS)], width=1.6)) for i, s in enumerate(series)]
    return _figure(data, dict(margin=dict(l=45, r=10, t=20, b=30), height=260, uirevision=uirevision,
                              template=TEMPLATE, showlegend=True, legend=dict(orientation="h", y=1.1)))


def series_csv(series: Sequence[Any]) -> str:
    """Series as CSV, one row per point (or bucket): metric, step, value, min, max, time. A metric name that
    would start a spreadsheet formula (``-x``, ``@x``) is written with a leading single quote."""
    import csv
    import io

    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(["metric", "step", "value", "min", "max", "time"])
    for s in series:
        for row in zip(s.steps, s.values, s.vmin, s.vmax, s.times):
            out.writerow([spreadsheet_text(s.metric), *("" if v is None else v for v in row)])
    return buf.getvalue()
