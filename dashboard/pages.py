"""Page layouts: one function per page, each a function of the store and the URL's query (so any view can be shared).

The router in ``dashboard.app`` picks the function from the path; the callbacks
that act inside a page also live in ``dashboard.app``. Nothing here imports the
Dash app object.
"""

from __future__ import annotations

import json
import time
from typing import Any, Mapping
from urllib.parse import urlencode

from dash import dcc, html

from parallax.alerts.render import advice_lines, evidence_text, value_text
from parallax.alerts.verdict import verdict
from parallax.dashboard import ids
from parallax.dashboard.figures import (
    PANEL_METRICS,
    PANELS,
    STATE_COLOURS,
    compare_figure,
    config_diff,
    feeders,
    indicator_figure,
    last_steps,
)
from parallax.server.store import RunNotFound

PREFIX = "/dashboard/"
#: Points per metric on a first load; the store downsamples past it, keeping each bucket's min and max.
FIRST_LOAD_POINTS = 1000  # a panel is ~420 px wide at 1280x800: more would not show
DEFAULT_REFRESH_S = 5.0
STATUSES = ("running", "finished", "failed")
MAX_COMPARE = 8
ALERT_STATES = ("firing", "pending", "resolved")


def href(path: str = "", **query: Any) -> str:
    q = {k: v for k, v in query.items() if v not in (None, "", [])}
    return PREFIX + path.lstrip("/") + (f"?{urlencode(q, safe=',')}" if q else "")


def age(ts: float | None, now: float | None = None) -> str:
    if ts is None:
        return "never"
    secs = max(0, int((now or time.time()) - ts))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit} ago"
    return f"{secs}s ago"


def utc_minute(ts: float) -> str:
    """``2025-11-29 19:52 UTC``; a time no calendar can write (a silence stored before its ``until`` was bounded:
    1e300, Infinity) says so instead of failing the page."""
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))
    except (OverflowError, ValueError, OSError, TypeError):
        return "the far future" if isinstance(ts, (int, float)) and ts > 0 else "an unreadable time"


HEALTHY_COLOUR = "#2a9d4b"


def badge(text: str, state: str) -> html.Span:
    return html.Span(text, className=f"badge badge-{state}",
                     style={"background": STATE_COLOURS.get(state, HEALTHY_COLOUR if state == "healthy" else "#8c8c8c"),
                            "color": "white", "borderRadius": "8px",
                            "padding": "1px 7px", "marginRight": "4px", "fontSize": "12px"})


def nav() -> html.Nav:
    return html.Nav(
        [html.A("Parallax", href=PREFIX, style={"fontWeight": "bold", "marginRight": "18px"}),
         dcc.Link("Runs", href=PREFIX, style={"marginRight": "12px"}),
         dcc.Link("Alerts", href=href("alerts"), style={"marginRight": "12px"})],
        style={"padding": "8px 0", "borderBottom": "1px solid #ddd", "marginBottom": "12px"},
    )


def not_found(message: str) -> html.Div:
    return html.Div([html.H2("Not found"), html.P(message), dcc.Link("All runs", href=PREFIX)], id="not-found")


# -- runs ------------------------------------------------------------------------------

FIRST_METRICS_HELP = """\
curl -s -X POST http://127.0.0.1:8050/api/v1/runs -H 'content-type: application/json' \\
  -d '{"project": "demo", "name": "run-1", "config": {"framework": "verl", "k": 8}}'
curl -s -X POST http://127.0.0.1:8050/api/v1/runs/1/metrics -H 'content-type: application/json' \\
  -d '{"points": [{"step": 1, "metrics": {"entropy": 1.9, "importance_weight_max": 1.3}}]}'"""

PYTHON_HELP = """\
from parallax.client import ParallaxClient
with ParallaxClient("http://127.0.0.1:8050", project="demo", run="run-1", config={}) as px:
    px.log({"entropy": 1.9, "importance_weight_max": 1.3}, step=1)"""

PUSHGATEWAY_HELP = """\
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway
reg = CollectorRegistry(); Gauge("step", "", registry=reg).set(1); Gauge("entropy", "", registry=reg).set(1.9)
push_to_gateway("127.0.0.1:8050", job="run-1", registry=reg)"""


def empty_runs() -> html.Div:
    return html.Div(
        id=ids.EMPTY_RUNS,
        children=[
            html.H3("No runs yet"),
            html.P("Send the first metrics from your trainer; the run appears here and its panels fill in live."),
            html.P("With curl:"), html.Pre(FIRST_METRICS_HELP),
            html.P("With the Python client:"), html.Pre(PYTHON_HELP),
            html.P("Or from an existing Prometheus setup (Pushgateway protocol):"), html.Pre(PUSHGATEWAY_HELP),
        ],
    )


def runs_page(store: Any, query: Mapping[str, str]) -> html.Div:
    project, tag, status = query.get("project") or None, query.get("tag") or None, query.get("status") or None
    all_runs = store.list_runs()
    if not all_runs:
        return html.Div([html.H2("Runs"), empty_runs()])
    runs = store.list_runs(project=project, tag=tag, status=status)
    fired = store.fired_alerts([r.id for r in runs]) if runs else {}
    verdicts = {r.id: verdict(fired.get(r.id, ())) for r in runs}
    projects = sorted({r.project for r in all_runs})
    tags = sorted({t for r in all_runs for t in r.tags})
    filters = html.Div(
        [
            dcc.Dropdown(id=ids.FILTER_PROJECT, options=projects, value=project, placeholder="project",
                         style={"width": "200px"}),
            dcc.Dropdown(id=ids.FILTER_TAG, options=tags, value=tag, placeholder="tag", style={"width": "200px"}),
            dcc.Dropdown(id=ids.FILTER_STATUS, options=list(STATUSES), value=status, placeholder="status",
                         style={"width": "160px"}),
        ],
        style={"display": "flex", "gap": "8px", "marginBottom": "10px"},
    )
    header = html.Tr([html.Th(h) for h in ("id", "project", "name", "status", "framework", "last step", "last seen",
                                           "verdict")])
    now = time.time()
    rows = [
        html.Tr(
            [
                html.Td(r.id),
                html.Td(r.project),
                html.Td(dcc.Link(r.name, href=href(f"runs/{r.id}"), className="run-link")),
                html.Td(r.status),
                html.Td(str((r.config or {}).get("framework", ""))),
                html.Td("" if r.last_step is None else r.last_step),
                html.Td(age(r.last_seen_at, now)),
                html.Td(verdict_badges(verdicts[r.id]), className="verdict"),
            ],
            className="run-row",
        )
        for r in runs
    ]
    table = html.Table(id=ids.RUNS_TABLE, children=[html.Thead(header), html.Tbody(rows)],
                       style={"borderCollapse": "collapse", "width": "100%"})
    compare = html.Div(
        [
            dcc.Dropdown(id=ids.COMPARE_PICK, options=[{"label": f"{r.id} · {r.project}/{r.name}", "value": r.id}
                                                       for r in runs],
                         multi=True, placeholder="select 2–8 runs to compare", style={"width": "480px"}),
            # A page load, not client-side routing: the compare page's WebGL overlays need the full plotly.js
            # bundle, and the other pages get the basic one (assets/plotly_early.js).
            dcc.Link("Compare", id=ids.COMPARE_LINK, href=href("compare"), refresh=True, style={"marginLeft": "10px"}),
        ],
        style={"display": "flex", "alignItems": "center", "marginTop": "12px"},
    )
    return html.Div([html.H2("Runs"), filters, table if runs else html.P("No run matches these filters."), compare])


def verdict_badges(v: Mapping[str, Any]) -> list:
    """A run's verdict as badges: "healthy", or each fault's cause (firing while ongoing, resolved once over)."""
    if v.get("state") != "faulty":
        return [badge("healthy", "healthy")]
    return [html.Span(badge(f["cause"] or f["rules"][0], "firing" if f["ongoing"] else "resolved"),
                      title=f"{f['severity']}, steps {f['first_step']}–{f['last_step']}"
                            + (", ongoing" if f["ongoing"] else "") + f" ({', '.join(f['rules'])})")
            for f in v.get("faults", [])]


def compare_href(run_ids: list[int] | None) -> str:
    return href("compare", runs=",".join(str(i) for i in (run_ids or [])[:MAX_COMPARE]))


# -- one run -----------------------------------------------------------------------------


def alert_card(alert: Mapping[str, Any]) -> html.Div:
    end = alert.get("ended_step")
    steps = f"steps {alert.get('started_step')}–{end if end is not None else 'now'}"
    causes = []
    for rank, cause in enumerate(alert.get("causes") or [], 1):
        score = cause.get("score")
        causes.append(
            html.Li(
                [
                    html.B(cause.get("id", "?")),
                    html.Span(f"  score {value_text(score)}" if score is not None else "", style={"color": "#666"}),
                    html.Ul([html.Li(evidence_text(e), className="evidence") for e in cause.get("evidence") or []]),
                    *[html.Div("→ " + a, className="advice", style={"color": "#334"}) for a in advice_lines(cause)],
                ],
                className="cause",
            )
        )
    state = alert.get("state", "")
    return html.Div(
        [
            html.Div([badge(state, state), html.B(alert.get("rule")), html.Span(f" · {alert.get('severity')} · {steps}")]),
            html.P(alert.get("summary") or "", style={"margin": "4px 0"}),
            html.Ol(causes, style={"paddingLeft": "18px"}) if causes else None,
            html.Div(f"acknowledged by {alert.get('acked_by')}", style={"color": "#666"}) if alert.get("acked_at") else None,
        ],
        className=f"alert-card alert-{state}",
        style={"borderLeft": f"4px solid {STATE_COLOURS.get(state, '#8c8c8c')}", "padding": "4px 8px",
               "marginBottom": "10px", "background": "#fafafa"},
    )


SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def alerts_signature(alerts: list[dict]) -> list:
    """What the diagnosis shows of a run's alerts that can change: the live refresh redraws it when this does."""
    return sorted([a["id"], a["state"], a.get("fired_step"), a.get("ended_step"), a.get("summary")] for a in alerts)


def diagnosis(alerts: list[dict], run_verdict: Mapping[str, Any] | None = None) -> html.Div:
    """The run's verdict, then its alerts: open ones first, critical before warning before info, and within that
    the earliest first (a root cause such as a NaN or a dead trainer before what followed from it)."""
    order = {"firing": 0, "pending": 1, "resolved": 2}
    ranked = sorted(alerts, key=lambda a: (order.get(a.get("state"), 3), SEVERITY_ORDER.get(a.get("severity"), 3),
                                           a.get("started_step") or 0, a.get("id") or 0))
    head = None
    if run_verdict is not None:
        faulty = run_verdict.get("state") == "faulty"
        head = html.P([html.B("Verdict: "), html.Span(run_verdict.get("summary", "")), " ",
                       *verdict_badges(run_verdict)],
                      className=f"verdict verdict-{'faulty' if faulty else 'healthy'}", id=ids.VERDICT)
    return html.Div(
        [html.H3("Diagnosis"), head,
         *([alert_card(a) for a in ranked] or [html.P("No alerts: every rule is quiet for this run.")])],
        id=ids.DIAGNOSIS,
    )


AUDIT_LABELS = {"prefix": "Exact prefix", "template": "Template keeps reasoning", "tokens": "Tokens in, tokens out"}
AUDIT_VERBS = {"prefix": "broke", "template": "broke", "tokens": "differ"}
AUDIT_HELP = """\
curl -s -X POST http://127.0.0.1:8050/api/v1/runs/{run}/trajectories -H 'content-type: application/json' \\
  -d '{{"trajectories": [{{"step": 1, "turns": [{{"prompt_ids": [1, 2], "completion_ids": [3]}},
                                          {{"prompt_ids": [1, 2, 3, 4], "completion_ids": [5]}}]}}]}}'"""
AUDIT_OFFLINE_HELP = "parallax audit FILE.jsonl"


def token_window(ids_: list[int] | None, at: int | None, *, side: str) -> html.Div:
    """A window of token ids, the ones from the first difference on marked ``tok-diff``."""
    toks = [html.Span(str(t), className="tok tok-diff" if at is not None and i >= at else "tok")
            for i, t in enumerate(ids_ or [])]
    return html.Div([html.Span(side, className="tok-side"), *(toks or [html.Span("—", className="tok-none")])],
                    className=f"tok-window tok-{side}")


def audit_example(ex: Mapping[str, Any]) -> html.Div:
    """One worst example: where (step, trajectory, turn), what (kind, title, detail), and the two token windows."""
    pos, start = ex.get("position"), ex.get("window_start")
    at = pos - start if pos is not None and start is not None else None
    traj = ex.get("trajectory_id") if ex.get("trajectory_id") is not None else ex.get("trajectory")
    where = f"step {ex.get('step')} · trajectory {traj} · turn {ex.get('turn')}"
    if pos is not None:
        where += f" · first difference at token {pos}"
    text = ex.get("text") or {}
    return html.Div(
        [
            html.Div([html.B(ex.get("title") or ex.get("kind", "")),
                      html.Code(ex.get("kind", ""), className="audit-kind")]),
            html.Div(where, className="audit-where"),
            html.Div(ex.get("detail") or "", className="audit-detail"),
            *([token_window(ex.get("expected"), at, side="expected"), token_window(ex.get("actual"), at, side="actual")]
              if ex.get("expected") is not None or ex.get("actual") is not None else []),
            *([html.Div([html.Span(k, className="tok-side"), html.Code(repr(text[k]))], className="audit-text")
               for k in ("expected", "actual") if k in text]),
        ],
        className=f"audit-example audit-{ex.get('check', '')}",
    )


def audit_check(check: str, c: Mapping[str, Any], examples: list[Mapping[str, Any]]) -> html.Div:
    checked, failed = c.get("checked", 0), c.get("failed", 0)
    passed = bool(c.get("passed", failed == 0))
    if not checked:
        count = "nothing to check yet" if check == "tokens" else "no multi-turn trajectories to check"
    elif passed:
        count = f"0 of {checked} turns {AUDIT_VERBS[check]}"
    else:
        count = f"{failed} of {checked} turns {AUDIT_VERBS[check]}"
    state = "pass" if passed else "fail"
    head = html.Div(
        [html.Span(state.upper(), className=f"audit-badge audit-badge-{state}"),
         html.B(AUDIT_LABELS.get(check, check)), html.Span(f" — {count}", className="audit-count")],
        title=c.get("title", ""),
    )
    body = [audit_example(e) for e in examples] if not passed else []
    return html.Div([head, html.Div(c.get("title", ""), className="audit-title"), *body],
                    className=f"audit-check audit-check-{state}", id=f"audit-{check}")


def harness_audit(summary: Mapping[str, Any]) -> html.Div:
    """The run page's "Harness audit" section from ``store.audit_summary``: the three checks pass/fail with counts and,
    for a failing check, its worst examples with the tokens from the first difference on highlighted."""
    run_id = summary.get("run_id")
    if not summary.get("steps"):
        return html.Div(
            [html.H3("Harness audit"),
             html.P("No trajectories yet. Send the rollouts' token ids to check that the harness keeps the exact "
                    "prefix, that the template keeps earlier reasoning and that rollouts travel as tokens:",
                    className="audit-hint"),
             html.Pre(AUDIT_HELP.format(run=run_id if run_id is not None else "{id}"), className="audit-hint-code"),
             html.P(["Or check a dump offline, before a run: ", html.Code(AUDIT_OFFLINE_HELP)])],
            id=ids.AUDIT, className="harness-audit audit-empty",
        )
    checks = summary.get("checks") or {}
    examples = summary.get("examples") or []
    steps = summary["steps"]
    span = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}–{steps[-1]}"
    caption = (f"{summary.get('trajectories', 0)} trajectories, {summary.get('turns', 0)} turns, {span}")
    return html.Div(
        [html.H3("Harness audit"), html.Div(caption, className="audit-caption"),
         *[audit_check(c, checks[c], [e for e in examples if e.get("check") == c]) for c in checks]],
        id=ids.AUDIT, className="harness-audit",
    )


def missing_note(panel: Any, series: Mapping[str, Any]) -> html.Div | None:
    """For a panel whose indicator the run does not log: which trainer keys would feed it."""
    missing = [m for m in panel.metrics if not series.get(m) or not series[m].steps]
    if panel.metrics[0] not in missing:
        return None
    keys = feeders(panel.metrics[0])
    return html.Details(
        [html.Summary(f"This run logs no {panel.metrics[0]}; these keys would feed it"),
         html.Ul([html.Li(html.Code(panel.metrics[0]) if i == 0 else k)
                  for i, k in enumerate([panel.metrics[0], *keys])])],
        className="missing-metric",
        style={"fontSize": "12px", "color": "#555"},
    )


def run_page(store: Any, run_id: int, query: Mapping[str, str], default_refresh_s: float = DEFAULT_REFRESH_S) -> html.Div:
    try:
        run = store.get_run(run_id)
    except RunNotFound:
        return not_found(f"There is no run {run_id}.")
    series = {s.metric: s for s in store.series(run_id, list(PANEL_METRICS), max_points=FIRST_LOAD_POINTS)}
    alerts = store.list_alerts(run_id=run_id)
    events = store.list_events(run_id)
    audit = store.audit_summary(run_id)
    try:
        refresh_s = max(0.5, float(query.get("refresh", default_refresh_s)))
    except ValueError:
        refresh_s = default_refresh_s
    panels = []
    for p in PANELS:
        fig = indicator_figure(p, series, alerts=alerts, events=events, last_step=run.last_step, config=run.config,
                               uirevision=f"run-{run_id}")
        panels.append(html.Div(
            [dcc.Graph(id=ids.panel(p.key), figure=fig, config={"displaylogo": False}), missing_note(p, series)],
            className="panel",
        ))
    other = sorted(v.metric for v in store.latest(run_id) if v.metric not in PANEL_METRICS)
    firing = [a for a in alerts if a.get("state") == "firing"]
    header = html.Div(
        [
            html.H2([f"{run.project} / {run.name} ", html.Small(f"#{run.id}", style={"color": "#888"})]),
            html.Div([html.Span(f"{run.status} · last step {run.last_step if run.last_step is not None else '—'} · "
                                f"last seen {age(run.last_seen_at)} ", id=ids.RUN_STATUS),
                      *[badge(a["rule"], "firing") for a in firing],
                      *[html.Span(t, className="tag", style={"border": "1px solid #ccc", "borderRadius": "6px",
                                                             "padding": "0 5px", "marginLeft": "4px"})
                        for t in run.tags]]),
        ]
    )
    side = html.Div(
        [
            diagnosis(alerts, verdict(store.fired_alerts([run_id]).get(run_id, ()))),
            harness_audit(audit),
            html.H3("Config"),
            html.Pre(json.dumps(run.config, indent=2, sort_keys=True, default=str), id=ids.RUN_CONFIG,
                     style={"fontSize": "12px", "maxHeight": "300px", "overflow": "auto", "background": "#f6f6f6"}),
            html.H3("Other metrics"),
            dcc.Dropdown(id=ids.EXTRA_PICK, options=other, multi=True,
                         placeholder=f"plot any of the {len(other)} other logged metrics" if other
                         else "this run logs no other metrics"),
            dcc.Graph(id=ids.EXTRA_GRAPH, style={"display": "none"}, config={"displaylogo": False}),
            html.Button("Download CSV", id=ids.CSV_BUTTON, style={"marginTop": "8px"}),
            dcc.Download(id=ids.CSV_DOWNLOAD),
            html.P(run.notes) if run.notes else None,
        ],
        style={"flex": "0 0 340px", "minWidth": "0"},
    )
    grid = html.Div(panels, style={"flex": "1", "display": "grid", "gridTemplateColumns": "repeat(2, minmax(0, 1fr))",
                                   "gap": "6px", "minWidth": "0"})
    return html.Div(
        [
            header,
            html.Div([grid, side], style={"display": "flex", "gap": "14px"}),
            dcc.Store(id=ids.RUN_STATE, data={"run": run_id, "since": last_steps(series),
                                               "alerts": alerts_signature(alerts)}),
            dcc.Interval(id=ids.RUN_TICK, interval=int(refresh_s * 1000)),
        ]
    )


# -- alerts ------------------------------------------------------------------------------


def alerts_table(store: Any, state: str | None) -> html.Div:
    alerts = store.list_alerts(state=state) if state in ALERT_STATES else store.list_alerts()
    if not alerts:
        return html.P("No alerts." if not state else f"No {state} alerts.")
    header = html.Tr([html.Th(h) for h in ("state", "rule", "run", "severity", "steps", "summary", "")])
    rows = []
    for a in alerts:
        end = a.get("ended_step")
        actions = []
        if a["state"] in ("firing", "pending"):
            actions.append(html.Button("Acknowledged" if a.get("acked_at") else "Acknowledge",
                                       id={"type": ids.ACK, "index": a["id"]}, disabled=bool(a.get("acked_at"))))
            actions.append(html.Button("Silence 1 h", id={"type": ids.SILENCE, "index": a["id"]},
                                       style={"marginLeft": "4px"}))
        rows.append(html.Tr(
            [
                html.Td(badge(a["state"], a["state"])),
                html.Td(a["rule"]),
                html.Td(dcc.Link(f"{a.get('project')}/{a.get('run_name')}", href=href(f"runs/{a['run_id']}"))),
                html.Td(a.get("severity")),
                html.Td(f"{a.get('started_step')}–{end if end is not None else 'now'}"),
                html.Td(a.get("summary") or ""),
                html.Td(actions),
            ],
            className=f"alert-row alert-{a['state']}",
        ))
    return html.Table([html.Thead(header), html.Tbody(rows)], style={"width": "100%", "borderCollapse": "collapse"})


def alerts_page(store: Any, query: Mapping[str, str], *, token_required: bool = False) -> html.Div:
    state = query.get("state") or None
    tabs = [dcc.Link("all", href=href("alerts"), style={"marginRight": "10px", "fontWeight": "bold" if not state else None})]
    for s in ALERT_STATES:
        tabs.append(dcc.Link(s, href=href("alerts", state=s),
                             style={"marginRight": "10px", "color": STATE_COLOURS[s],
                                    "fontWeight": "bold" if s == state else None}))
    silences = store.list_silences(active_at=time.time())
    return html.Div(
        [
            html.H2("Alerts"),
            html.Div(tabs, id=ids.ALERTS_STATE, style={"marginBottom": "8px"}),
            html.Div(
                [html.Span("Acknowledging and silencing are writes: the server's write token ",
                           style={"marginRight": "6px"}),
                 dcc.Input(id=ids.ALERTS_TOKEN, type="password", placeholder="write token", debounce=False)],
                style={"display": "block" if token_required else "none", "marginBottom": "6px"},
            ),
            html.Div(id=ids.ALERTS_MESSAGE, style={"color": "#2a7", "minHeight": "1.2em"}),
            html.Div(alerts_table(store, state), id=ids.ALERTS_TABLE),
            html.H3("Active silences"),
            html.Ul([html.Li(f"{s['rule'] or 'every rule'} on {('run ' + str(s['run_id'])) if s['run_id'] else 'every run'}"
                             f" until {utc_minute(s['until'])}"
                             + (f" — {s['comment']}" if s.get("comment") else ""))
                     for s in silences]) if silences else html.P("None."),
        ]
    )


# -- compare -----------------------------------------------------------------------------


def parse_run_ids(text: str | None) -> list[int]:
    out: list[int] = []
    for part in (text or "").split(","):
        part = part.strip()
        if part.isdigit() and int(part) not in out:
            out.append(int(part))
    return out[:MAX_COMPARE]


def compare_page(store: Any, query: Mapping[str, str]) -> html.Div:
    run_ids = parse_run_ids(query.get("runs"))
    runs = []
    for rid in run_ids:
        try:
            runs.append(store.get_run(rid))
        except RunNotFound:
            pass
    try:
        smoothing = min(0.99, max(0.0, float(query.get("smooth", 0))))
    except ValueError:
        smoothing = 0.0
    xaxis = query.get("x") if query.get("x") in ("step", "time", "relative") else "step"
    controls = html.Div(
        [
            html.Span("EMA smoothing", style={"marginRight": "6px"}),
            html.Div(dcc.Slider(id=ids.COMPARE_SMOOTHING, min=0, max=0.99, step=0.01, value=smoothing,
                                marks={0: "0", 0.5: "0.5", 0.9: "0.9", 0.99: "0.99"}), style={"width": "300px"}),
            html.Span("x axis", style={"margin": "0 6px 0 20px"}),
            dcc.RadioItems(id=ids.COMPARE_XAXIS, options=[{"label": " step", "value": "step"},
                                                          {"label": " wall time", "value": "time"},
                                                          {"label": " relative time", "value": "relative"}],
                           value=xaxis, inline=True),
        ],
        style={"display": "flex", "alignItems": "center", "marginBottom": "8px"},
    )
    if len(runs) < 2:
        return html.Div([html.H2("Compare runs"),
                         html.P("Pick 2–8 runs on the runs page, or put their ids in the URL: "
                                "/dashboard/compare?runs=1,2"),
                         dcc.Link("Runs", href=PREFIX)], id="compare-empty")
    series_by_run = {
        r.id: {s.metric: s for s in store.series(r.id, list(PANEL_METRICS), max_points=FIRST_LOAD_POINTS)}
        for r in runs
    }
    alerts_by_run = {r.id: store.list_alerts(run_id=r.id) for r in runs}
    graphs = [
        dcc.Graph(id=f"compare-{p.key}", className="compare-panel",
                  figure=compare_figure(p, runs, series_by_run, smoothing=smoothing, xaxis=xaxis,
                                        alerts_by_run=alerts_by_run),
                  config={"displaylogo": False})
        for p in PANELS
    ]
    labels = [f"{r.project}/{r.name} (#{r.id})" for r in runs]
    diff = config_diff({label: r.config or {} for label, r in zip(labels, runs)})
    diff_table = html.Table(
        [html.Thead(html.Tr([html.Th("config key"), *[html.Th(l) for l in labels]])),
         html.Tbody([html.Tr([html.Td(k), *[html.Td(json.dumps(v, default=str)) for v in vals]]) for k, vals in diff])],
        id=ids.CONFIG_DIFF,
    ) if diff else html.P("The configs are identical.", id=ids.CONFIG_DIFF)
    timeline = html.Ul([
        html.Li([html.B(label + ": "), *([badge(f"{a['rule']} {a.get('started_step')}–"
                                               f"{a.get('ended_step') if a.get('ended_step') is not None else 'now'}",
                                               a["state"]) for a in alerts_by_run[r.id]] or ["no alerts"])])
        for label, r in zip(labels, runs)
    ])
    return html.Div(
        [
            html.H2("Compare: " + " vs ".join(labels)),
            controls,
            html.Div(graphs, style={"display": "grid", "gridTemplateColumns": "repeat(2, minmax(0, 1fr))", "gap": "6px"}),
            html.H3("Alerts"), timeline,
            html.H3("Config diff"), diff_table,
        ]
    )


def compare_search(runs: str | None, smoothing: float | None, xaxis: str | None) -> str:
    q: dict[str, Any] = {"runs": runs}
    if smoothing:
        q["smooth"] = f"{smoothing:g}"
    if xaxis and xaxis != "step":
        q["x"] = xaxis
    return "?" + urlencode({k: v for k, v in q.items() if v}, safe=",")
