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

#: Past this many points in a figure, traces are WebGL (Scattergl) instead of SVG. A run page's
#: panels hold at most pages.FIRST_LOAD_POINTS (1,000) per metric, four metrics at most, and draw
#: faster as SVG (eight WebGL contexts cost ~0.6 s of the first render on a software GPU);
#: overlays of several runs go WebGL. Only the compare page has the plotly.js bundle that draws WebGL
#: (assets/plotly_early.js): elsewhere plotly.js would draw a scattergl trace as SVG scatter.
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


#: The eight indicator panels of DESIGN §1, in order.
PANELS: tuple[Panel, ...] = (
    Panel("importance_weight_max", "Importance weight max", ("importance_weight_max",), 1.0, "spikes far above 1"),
    Panel("staleness", "Staleness", ("staleness_mean", "staleness_max"), None, "above the run's bound, or rising"),
    Panel("stall", "Timing / stall", ("stall_s", "rollout_s", "train_s", "step_s"), 0.0, "stall > 0"),
    Panel("trainer_mfu", "Trainer MFU", ("trainer_mfu",), None, "low"),
    Panel("pass_at_k", "pass@k", ("pass_at_k",), None, "falling"),
    Panel("pass_at_1", "pass@1", ("pass_at_1",), None, "rising while pass@k falls"),
    Panel("entropy", "Entropy", ("entropy",), None, "collapsing"),
    Panel("reward", "Reward vs held-out", ("reward_train", "reward_heldout"), None, "train up while held-out down"),
)
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


def indicator_figure(
    panel: Panel,
    series: Mapping[str, Any],
    *,
    alerts: Sequence[Mapping[str, Any]] = (),
    events: Sequence[Any] = (),
    last_step: int | None = None,
    config: Mapping[str, Any] | None = None,
    uirevision: str = "run",
) -> go.Figure:
    """One indicator panel: per metric an envelope band (bucket min..max) and the value line, with alert spans shaded.

    ``series`` maps metric names to store ``Series`` (a missing one draws empty traces, ready for live points).
    """
    total = sum(_points(series.get(m)) for m in panel.metrics)
    kind = "scattergl" if total > GL_THRESHOLD else "scatter"
    data: list[dict[str, Any]] = []
    for i, metric in enumerate(panel.metrics):
        s = series.get(metric)
        colour = METRIC_COLOURS[i % len(METRIC_COLOURS)]
        steps = list(s.steps) if s is not None else []
        # The edges are drawn (thin, translucent), not just filled: a one-bucket spike is narrower than a pixel.
        band = dict(mode="lines", line=dict(width=1, color=_rgba(colour, 0.45)), hoverinfo="skip", showlegend=False,
                    legendgroup=metric)
        # Raw points have no envelope (min = max = value): the band traces stay empty rather than triple the data.
        bx = steps if has_envelope(s) else []
        data.append(dict(type=kind, x=bx, y=_finite(s.vmin) if bx else [], name=plotly_text(f"{metric} min"), **band))
        data.append(dict(type=kind, x=bx, y=_finite(s.vmax) if bx else [], name=plotly_text(f"{metric} max"), fill="tonexty",
                         fillcolor=_rgba(colour, 0.18), **band))
        data.append(dict(type=kind, x=steps, y=_finite(s.values) if s else [], name=plotly_text(metric), mode="lines",
                         line=dict(color=colour, width=1.6), legendgroup=metric,
                         showlegend=len(panel.metrics) > 1))
    shapes = []
    if panel.reference is not None:
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=panel.reference, y1=panel.reference,
                           line=dict(color="#999", width=1, dash="dot")))
    for alert in alerts:
        if panel.key not in alert_panels(alert):
            continue
        span = alert_span(alert, last_step)
        if span is None:
            continue
        colour = STATE_COLOURS.get(alert.get("state", ""), RESOLVED)
        shapes.append(dict(type="rect", xref="x", yref="paper", x0=span[0], x1=span[1], y0=0, y1=1,
                           # An edge line too: a span of a few steps in a long run is narrower than a pixel.
                           fillcolor=colour, opacity=0.2, line=dict(width=1, color=colour), layer="below",
                           name=plotly_text(f"alert {alert.get('id')} {alert.get('rule')}")))
    for ev in events:
        shapes.append(dict(type="line", xref="x", yref="paper", x0=ev.step, x1=ev.step, y0=0, y1=1,
                           line=dict(color="#555", width=1, dash="dash"), name=plotly_text(f"{ev.kind} {ev.message}".strip())))
    annotations = []
    if total == 0:
        names = ", ".join(panel.metrics)
        annotations.append(dict(text=plotly_text(f"no data yet for {names}"), xref="paper", yref="paper", x=0.5, y=0.5,
                                showarrow=False, font=dict(color="#888")))
    return _figure(data, dict(
        title=dict(text=plotly_text(panel_title(panel, config)), x=0.01, font=dict(size=14)),
        margin=dict(l=45, r=10, t=32, b=30),
        height=240,
        uirevision=uirevision,
        shapes=shapes,
        annotations=annotations,
        template=TEMPLATE,
        legend=dict(orientation="h", y=1.12, x=1, xanchor="right", font=dict(size=10)),
        # Stated, not detected: plotly.js otherwise scans every value of every trace for dates and categories
        # before drawing (~40 ms in a profile of a run page's first render).
        xaxis=dict(title=None, type="linear"),
        yaxis=dict(type="linear"),
        hovermode="x unified",
    ))


def last_steps(series: Mapping[str, Any]) -> dict[str, int]:
    """The last step shown per metric (what the next live refresh fetches after)."""
    return {m: s.steps[-1] for m, s in series.items() if s is not None and s.steps}


def extend_payload(panel: Panel, new: Mapping[str, Any], max_points: int = MAX_POINTS_PER_TRACE) -> Any:
    """extendData for a panel from the new points of its metrics: ``(data, trace_indices, max_points)``, or None."""
    xs, ys, idx = [], [], []
    for i, metric in enumerate(panel.metrics):
        s = new.get(metric)
        if s is None or not s.steps:
            continue
        for offset, values in enumerate((s.vmin, s.vmax, s.values)):
            if offset < 2 and not has_envelope(s):
                continue
            xs.append(list(s.steps))
            ys.append(_finite(values))
            idx.append(3 * i + offset)
    if not idx:
        return None
    return dict(x=xs, y=ys), idx, max_points


def ema(values: Sequence[float | None], weight: float) -> list[float | None]:
    """Exponential moving average as TensorBoard/W&B smooth (debiased); ``weight`` in [0, 1), 0 = raw."""
    if weight <= 0:
        return list(values)
    out: list[float | None] = []
    acc, n = 0.0, 0
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(None)
            continue
        acc = acc * weight + (1 - weight) * v
        n += 1
        # Rounded to 12 digits: float noise on a flat line would make a 1e-16-wide autorange.
        out.append(float(f"{acc / (1 - weight**n):.12g}"))
    return out


def compare_figure(
    panel: Panel,
    runs: Sequence[Any],
    series_by_run: Mapping[int, Mapping[str, Any]],
    *,
    smoothing: float = 0.0,
    xaxis: str = "step",
    alerts_by_run: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
) -> go.Figure:
    """A panel with several runs overlaid, one colour per run (dashed for a panel's secondary metrics).

    ``xaxis`` is ``step``, ``time`` (wall clock) or ``relative`` (seconds since the run's first point).
    """
    total = sum(_points(series_by_run.get(r.id, {}).get(m)) for r in runs for m in panel.metrics)
    kind = "scattergl" if total > GL_THRESHOLD else "scatter"
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
            values = s.vmax if metric.endswith("_max") else s.values
            data.append(dict(type=kind, x=x, y=ema(_finite(values), smoothing), name=plotly_text(label), mode="lines",
                             legendgroup=str(run.id), line=dict(color=colour, width=1.6,
                                                                dash="solid" if mi == 0 else "dash")))
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
                                       line=dict(width=0), layer="below"))
    return _figure(data, dict(
        title=dict(text=plotly_text(panel.title), x=0.01, font=dict(size=14)),
        margin=dict(l=45, r=10, t=32, b=30),
        height=260,
        uirevision=f"compare-{xaxis}",
        template=TEMPLATE,
        shapes=shapes,
        legend=dict(font=dict(size=10)),
        xaxis=dict(title={"step": "step", "time": "time", "relative": "seconds since start"}.get(xaxis, "step")),
    ))


def config_diff(configs: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, list[Any]]]:
    """The flattened config keys whose values differ between runs: ``[(key, [value per run])]``, sorted by key."""
    flat = {name: _flatten(cfg) for name, cfg in configs.items()}
    keys = sorted(set().union(*[f.keys() for f in flat.values()])) if flat else []
    out = []
    missing = object()
    for key in keys:
        values = [f.get(key, missing) for f in flat.values()]
        if any(v != values[0] for v in values[1:]):
            out.append((key, [None if v is missing else v for v in values]))
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
