"""Page layouts: one function per page, each a function of the store and the URL's query (so any view can be shared).

The router in ``dashboard.app`` picks the function from the path; the callbacks
that act inside a page also live in ``dashboard.app``. Nothing here imports the
Dash app object.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlencode

from dash import dcc, html

from parallax.alerts.render import advice_lines, evidence_text, evidence_words, value_text  # noqa: F401 (evidence_text)
from parallax.alerts.verdict import verdict
from parallax.dashboard import ids
from parallax.dashboard.figures import (
    PANEL_METRICS,
    PANELS,
    RUN_COLOURS,
    STATE_COLOURS,
    compare_figure,
    config_diff,
    ema_state,
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


def duration(secs: float) -> str:
    """A length of time as a person says it: ``45 s``, ``18 min``, ``2 h 5 min``, ``3 d 4 h``."""
    secs = max(0, int(secs))
    if secs < 60:
        return f"{secs} s"
    if secs < 3600:
        return f"{secs // 60} min"
    if secs < 86400:
        h, m = divmod(secs // 60, 60)
        return f"{h} h" + (f" {m} min" if m else "")
    d, h = divmod(secs // 3600, 24)
    return f"{d} d" + (f" {h} h" if h else "")


#: A running run that has sent nothing for this long says so ("no data for 18 min") wherever its status shows.
SILENT_AFTER_S = 120.0


def silent_for(run: Any, now: float) -> float | None:
    """How long a running run has sent nothing, once that is past SILENT_AFTER_S; None otherwise."""
    if run.status != "running" or run.last_seen_at is None:
        return None
    quiet = now - run.last_seen_at
    return quiet if quiet >= SILENT_AFTER_S else None


def status_badge(run: Any, now: float) -> html.Span:
    """A run's status; a running run that went quiet reads "running · no data for 18 min" (amber)."""
    quiet = silent_for(run, now)
    if quiet is None:
        return html.Span(run.status, className=f"run-status status-{run.status}")
    text = f"running · no data for {duration(quiet)}"
    if run.heartbeat_at is not None:
        text += f" (last heartbeat {age(run.heartbeat_at, now)})"
    return html.Span(text, className="run-status status-silent",
                     title="the trainer may have died or its logging broken: see trainer_silent in the diagnosis")


def run_status(run: Any, now: float | None = None) -> list:
    """The run page's status line (rewritten by each live refresh)."""
    now = time.time() if now is None else now
    step = run.last_step if run.last_step is not None else "—"
    return [status_badge(run, now), f" · last step {step} · last seen {age(run.last_seen_at, now)} ",
            html.Span(f"· refreshed {time.strftime('%H:%M:%S', time.localtime(now))}", className="refreshed")]


def page_title(*parts: Any) -> str:
    """A browser tab's title: the page (and run) first, then the app."""
    return " · ".join([*(str(p) for p in parts if p not in (None, "")), "Parallax"])


def title_store(*parts: Any) -> dcc.Store:
    return dcc.Store(id=ids.TITLE, data=page_title(*parts))


def list_live(marks: Any, refresh_s: float) -> list:
    """What makes a list page (runs, alerts, compare) live: the interval, and what its body was drawn from."""
    return [dcc.Store(id=ids.LIST_MARKS, data=marks), dcc.Interval(id=ids.LIST_TICK, interval=int(refresh_s * 1000))]


def refresh_seconds(query: Mapping[str, str], default: float) -> float:
    try:
        value = float(query.get("refresh", default))
    except ValueError:
        return default
    return max(0.5, value) if value == value else default  # NaN: the default


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


#: Runs per page of the runs list: the list is paged in SQL, so 10,000 runs draw as fast as 50.
RUNS_PAGE_SIZE = 50
VERDICTS = ("healthy", "faulty")


def runs_query(query: Mapping[str, str]) -> dict[str, Any]:
    """The runs list's filters and page from its URL: ``q`` (a substring of the name or project), project, tag,
    status, verdict, page (from 1)."""
    page = query.get("page") or "1"
    search = (query.get("q") or "").strip()[:200]
    return {
        "search": search or None,
        "project": query.get("project") or None,
        "tag": query.get("tag") or None,
        "status": query.get("status") if query.get("status") in STATUSES else None,
        "verdict": query.get("verdict") if query.get("verdict") in VERDICTS else None,
        "page": max(1, int(page)) if page.isascii() and page.isdigit() and len(page) <= 9 else 1,
    }


def runs_search(search: str | None, project: str | None, tag: str | None, status: str | None,
                verdict: str | None) -> str:
    """The runs list's query string for these filters (back to the first page)."""
    return href("", q=(search or "").strip() or None, project=project, tag=tag, status=status,
                verdict=verdict)[len(PREFIX):]


def _run_option(r: Any) -> dict[str, Any]:
    return {"label": f"{r.id} · {r.project}/{r.name}", "value": r.id}


def compare_pick_options(store: Any, search: str | None, picked: list | None) -> list[dict[str, Any]]:
    """The compare picker's options: the runs picked, then the runs whose name or project contains ``search``
    (found in SQL among all runs, 20 at most)."""
    chosen = store.get_runs(picked or [])
    found, _ = store.query_runs(search=search, limit=20) if search else ([], 0)
    out = [_run_option(chosen[i]) for i in (picked or []) if i in chosen]
    return out + [_run_option(r) for r in found if r.id not in chosen]


def runs_page(store: Any, query: Mapping[str, str], refresh_s: float = DEFAULT_REFRESH_S) -> html.Div:
    if not store.has_runs():
        return html.Div([html.H2("Runs"), empty_runs(), title_store("Runs")])
    q = runs_query(query)
    facets = store.run_facets()
    filters = html.Div(
        [
            dcc.Input(id=ids.FILTER_SEARCH, type="search", value=q["search"] or "", debounce=True,
                      placeholder="search name or project", className="runs-search"),
            dcc.Dropdown(id=ids.FILTER_PROJECT, options=facets["projects"], value=q["project"], placeholder="project",
                         style={"width": "200px"}),
            dcc.Dropdown(id=ids.FILTER_TAG, options=facets["tags"], value=q["tag"], placeholder="tag",
                         style={"width": "160px"}),
            dcc.Dropdown(id=ids.FILTER_STATUS, options=list(STATUSES), value=q["status"], placeholder="status",
                         style={"width": "130px"}),
            dcc.Dropdown(id=ids.FILTER_VERDICT, options=list(VERDICTS), value=q["verdict"], placeholder="verdict",
                         style={"width": "130px"}),
        ],
        style={"display": "flex", "flexWrap": "wrap", "gap": "8px", "marginBottom": "10px"},
    )
    first, _ = store.query_runs(limit=RUNS_PAGE_SIZE)
    compare = html.Div(
        [
            dcc.Dropdown(id=ids.COMPARE_PICK, options=[_run_option(r) for r in first], multi=True,
                         placeholder="select 2–8 runs to compare (type to search all runs)",
                         style={"width": "480px", "maxWidth": "100%"}),
            dcc.Link(compare_link(None)[2], id=ids.COMPARE_LINK, href=href("compare"),
                     className=compare_link(None)[1], style={"marginLeft": "10px"}),
        ],
        style={"display": "flex", "flexWrap": "wrap", "gap": "6px", "alignItems": "center", "marginTop": "12px"},
    )
    return html.Div([html.H2("Runs"), filters, html.Div(runs_body(store, query), id=ids.LIST_BODY), compare,
                     *list_live(store.change_marks(), refresh_s), title_store("Runs")])


def _pager(q: Mapping[str, Any], total: int, shown: int) -> html.Div:
    page, size = q["page"], RUNS_PAGE_SIZE
    pages = max(1, -(-total // size))
    keep = {"q": q["search"], "project": q["project"], "tag": q["tag"], "status": q["status"], "verdict": q["verdict"]}

    def to(p: int, text: str) -> Any:
        return dcc.Link(text, href=href("", **keep, page=p if p > 1 else None), className="page-link")

    first = (page - 1) * size + 1
    return html.Div(
        [html.Span(f"runs {first:,}–{first + shown - 1:,} of {total:,}" if shown else f"{total:,} runs",
                   className="page-count"),
         *([to(1, "« first"), to(page - 1, "‹ previous")] if page > 1 else []),
         html.Span(f"page {page:,} of {pages:,}", className="page-of") if pages > 1 else None,
         *([to(page + 1, "next ›"), to(pages, "last »")] if page < pages else [])],
        className="pager", id=ids.RUNS_PAGER,
    )


def runs_body(store: Any, query: Mapping[str, str]) -> Any:
    """A page of the runs table for the page's filters, filtered and paged in SQL (what the live refresh redraws)."""
    q = runs_query(query)
    runs, total = store.query_runs(project=q["project"], tag=q["tag"], status=q["status"], search=q["search"],
                                   verdict=q["verdict"], limit=RUNS_PAGE_SIZE, offset=(q["page"] - 1) * RUNS_PAGE_SIZE)
    if not runs:
        return [html.P("No run matches these filters." if total == 0 else "No runs on this page."),
                _pager(q, total, 0) if total else None]
    fired = store.fired_alerts([r.id for r in runs])
    verdicts = {r.id: verdict(fired.get(r.id, ())) for r in runs}
    wide = "col-wide"  # left out on a phone
    header = html.Tr([html.Th(h, className=wide if h in ("id", "project", "framework", "last seen") else None)
                      for h in ("id", "project", "name", "status", "framework", "last step", "last seen", "verdict")])
    now = time.time()
    rows = [
        html.Tr(
            [
                html.Td(r.id, className=wide),
                html.Td(r.project, className=wide),
                html.Td(dcc.Link(r.name, href=href(f"runs/{r.id}"), className="run-link")),
                html.Td(status_badge(r, now)),
                html.Td(str((r.config or {}).get("framework", "")), className=wide),
                html.Td("" if r.last_step is None else r.last_step),
                html.Td(age(r.last_seen_at, now), className=wide),
                html.Td(verdict_badges(verdicts[r.id]), className="verdict"),
            ],
            className="run-row",
        )
        for r in runs
    ]
    return [html.Div(html.Table(id=ids.RUNS_TABLE, children=[html.Thead(header), html.Tbody(rows)],
                                style={"borderCollapse": "collapse", "width": "100%"}), className="table-scroll"),
            _pager(q, total, len(runs))]


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


SCORE_HELP = ("A cause's score is computed by its rule from the evidence listed under it (0 to 1 in the built-in "
              "rules): the causes are ranked by it, and 0 means that evidence rules the cause out.")


def score_words(score: float | None) -> str:
    """A cause's score as its support: likely, possible, unlikely, ruled out."""
    if score is None:
        return "unscored"
    if score <= 0:
        return "ruled out"
    return "likely" if score >= 0.67 else "possible" if score >= 0.34 else "unlikely"


def _cause_item(rank: int | None, cause: Mapping[str, Any], *, advice: bool) -> html.Li:
    score = cause.get("score")
    support = f"{score_words(score)}, score {value_text(score)}" if score is not None else "unscored"
    return html.Li(
        [
            html.B(cause.get("id", "?")),
            html.Span(f"  {support}", className="score", title=SCORE_HELP),
            html.Ul([html.Li(evidence_words(e), className="evidence", title=e.get("expr") if isinstance(e, Mapping) else None)
                     for e in cause.get("evidence") or []]),
            *([html.Div("→ " + a, className="advice") for a in advice_lines(cause)] if advice else []),
        ],
        className="cause" if rank is not None else "cause cause-ruled-out",
    )


def values_caption(alert: Mapping[str, Any]) -> str:
    """Which step the summary's and the evidence's numbers are from: the engine stores them when the alert moves
    (fires, resolves), not at every step."""
    state = alert.get("state")
    if state == "resolved" and alert.get("last_active_step") is not None:
        return f"values at step {alert['last_active_step']}, the last step it held"
    if alert.get("fired_step") is not None:
        return f"values at step {alert['fired_step']}, when it fired"
    if alert.get("started_step") is not None:
        return f"values at step {alert['started_step']}, when its condition began"
    return ""


def alert_card(alert: Mapping[str, Any], *, focus: bool = False) -> html.Div:
    """One alert of the diagnosis: its rule, state and steps, its summary (with the step its numbers are from), the
    causes its evidence supports, best first, each with that evidence in words and what to check; the causes its
    evidence rules out (score 0), greyed and folded, without advice."""
    end = alert.get("ended_step")
    steps = f"steps {alert.get('started_step')}–{end if end is not None else 'now'}"
    causes = list(alert.get("causes") or [])
    supported = [c for c in causes if c.get("score") is None or c["score"] > 0]
    ruled_out = [c for c in causes if c.get("score") is not None and c["score"] <= 0]
    if not supported:  # nothing supported: every cause shown, none hidden away
        supported, ruled_out = causes, []
    state = alert.get("state", "")
    caption = values_caption(alert)
    return html.Div(
        [
            html.Div([badge(state, state), html.B(alert.get("rule")), html.Span(f" · {alert.get('severity')} · {steps}")]),
            html.P([alert.get("summary") or "", html.Span(f" ({caption})", className="values-at") if caption else None],
                   className="summary"),
            html.Ol([_cause_item(i, c, advice=True) for i, c in enumerate(supported, 1)], className="causes")
            if supported else None,
            html.Details([html.Summary("ruled out by their evidence: " + ", ".join(c.get("id", "?") for c in ruled_out)),
                          html.Ul([_cause_item(None, c, advice=False) for c in ruled_out])],
                         className="ruled-out") if ruled_out else None,
            html.Div(f"acknowledged by {alert.get('acked_by')}", style={"color": "#666"}) if alert.get("acked_at") else None,
        ],
        className=f"alert-card alert-{state}" + (" alert-focus" if focus else ""),
        id=f"alert-{alert.get('id')}",
        style={"borderLeft": f"4px solid {STATE_COLOURS.get(state, '#8c8c8c')}"},
    )


SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def alerts_signature(alerts: list[dict]) -> list:
    """What the diagnosis shows of a run's alerts that can change: the live refresh redraws it when this does."""
    return sorted([a["id"], a["state"], a.get("fired_step"), a.get("ended_step"), a.get("summary")] for a in alerts)


def diagnosis(alerts: list[dict], run_verdict: Mapping[str, Any] | None = None, focus: int | None = None) -> html.Div:
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
    help_line = html.P("Causes are ranked by how strongly the evidence under each supports them (score 0–1; "
                       "0 rules a cause out); the numbers are from the step named after each summary.",
                       className="diag-help") if ranked else None
    return html.Div(
        [html.H3("Diagnosis"), head, help_line,
         *([alert_card(a, focus=a.get("id") == focus) for a in ranked]
           or [html.P("No alerts: every rule is quiet for this run.")])],
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


#: The run page's smoothing choices (EMA weight, as the compare page's slider and TensorBoard read it).
SMOOTHING_CHOICES = (0.0, 0.6, 0.9, 0.99)
#: What the panels' modebar keeps: the image, zoom, pan and reset (fits the vertical bar in a short panel).
GRAPH_CONFIG = {"displaylogo": False,
                "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d", "zoomIn2d", "zoomOut2d"]}


def _number(text: str | None) -> float | None:
    try:
        v = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return v if v is not None and math.isfinite(v) else None


def run_view(query: Mapping[str, str]) -> dict[str, Any]:
    """How the URL asks to show a run: ``smooth`` (EMA weight), ``log`` (y axes logarithmic), ``from``/``to`` (the
    steps the panels open zoomed to, as an alert's link gives them)."""
    smooth = _number(query.get("smooth")) or 0.0
    smooth = min(0.99, max(0.0, smooth))
    lo, hi = _number(query.get("from")), _number(query.get("to"))
    x_range = [lo, hi] if lo is not None and hi is not None and lo < hi else None
    focus = query.get("alert")
    return {"smooth": smooth, "log": query.get("log") in ("1", "true", "y"), "range": x_range,
            "focus": int(focus) if focus and focus.isdigit() and len(focus) <= 18 else None}


def run_figures(run: Any, series: Mapping[str, Any], alerts: list, events: list, view: Mapping[str, Any]) -> list:
    """The eight panels' figures of a run as ``view`` asks for them."""
    rng = view.get("range")
    rev = f"run-{run.id}-{rng}-{view.get('log')}"  # a new zoom or scale from the URL applies; a live redraw keeps the user's
    return [indicator_figure(p, series, alerts=alerts, events=events, last_step=run.last_step, config=run.config,
                             uirevision=rev, smoothing=view.get("smooth") or 0.0, log_y=bool(view.get("log")),
                             x_range=tuple(rng) if rng else None)
            for p in PANELS]


def run_state(run: Any, series: Mapping[str, Any], alerts: list, view: Mapping[str, Any]) -> dict[str, Any]:
    """What the live refresh works from: the run, the last step shown per metric, the alerts drawn, and how the
    panels are drawn (smoothing carries on from where each line stands)."""
    smooth = view.get("smooth") or 0.0
    return {"run": run.id, "since": last_steps(series), "alerts": alerts_signature(alerts), "smooth": smooth,
            "log": bool(view.get("log")), "range": view.get("range"),
            "ema": {p.key: ema_state(p, series, smooth) for p in PANELS} if smooth else {}}


def run_controls(view: Mapping[str, Any], run_id: int) -> html.Div:
    rng = view.get("range")
    return html.Div(
        [
            html.Span(["smoothing ",
                       dcc.RadioItems(id=ids.RUN_SMOOTHING, value=view["smooth"], inline=True,
                                      options=[{"label": " none" if w == 0 else f" {w:g}", "value": w}
                                               for w in sorted({*SMOOTHING_CHOICES, view["smooth"]})])],
                      className="control", title="EMA smoothing of the value lines (the raw line stays, faint)"),
            dcc.Checklist(id=ids.RUN_LOG, options=[{"label": " log y", "value": "log"}],
                          value=["log"] if view.get("log") else [], className="control"),
            html.Span([f"steps {rng[0]:g}–{rng[1]:g} · ", dcc.Link("all steps", href=href(f"runs/{run_id}"))],
                      className="control zoomed") if rng else None,
        ],
        className="run-controls",
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
    refresh_s = refresh_seconds(query, default_refresh_s)
    view = run_view(query)
    panels = [
        html.Div([dcc.Graph(id=ids.panel(p.key), figure=fig, config=GRAPH_CONFIG, className="panel-graph",
                            responsive=True, style={"height": "var(--panel-height, 240px)"}),
                  missing_note(p, series)], className="panel")
        for p, fig in zip(PANELS, run_figures(run, series, alerts, events, view))
    ]
    other = sorted(v.metric for v in store.latest(run_id) if v.metric not in PANEL_METRICS)
    firing = [a for a in alerts if a.get("state") == "firing"]
    header = html.Div(
        [
            html.H2([f"{run.project} / {run.name} ", html.Small(f"#{run.id}", style={"color": "#888"})]),
            html.Div([html.Div([html.Span(run_status(run), id=ids.RUN_STATUS),
                                *[badge(a["rule"], "firing") for a in firing],
                                *[html.Span(t, className="tag") for t in run.tags]], className="run-status-line"),
                      run_controls(view, run_id)], className="run-meta"),
        ],
        className="run-header",
    )
    side = html.Div(
        [
            diagnosis(alerts, verdict(store.fired_alerts([run_id]).get(run_id, ())), focus=view.get("focus")),
            harness_audit(audit),
            html.H3("Config"),
            html.Pre(json.dumps(run.config, indent=2, sort_keys=True, default=str), id=ids.RUN_CONFIG,
                     className="run-config"),
            html.H3("Other metrics"),
            dcc.Dropdown(id=ids.EXTRA_PICK, options=other, multi=True,
                         placeholder=f"plot any of the {len(other)} other logged metrics" if other
                         else "this run logs no other metrics"),
            dcc.Graph(id=ids.EXTRA_GRAPH, style={"display": "none"}, config={"displaylogo": False}),
            html.Button("Download CSV", id=ids.CSV_BUTTON, style={"marginTop": "8px"}),
            dcc.Download(id=ids.CSV_DOWNLOAD),
            html.P(run.notes) if run.notes else None,
        ],
        className="run-side",
    )
    grid = html.Div(panels, className="panel-grid", id=ids.PANEL_GRID)
    return html.Div(
        [
            header,
            html.Div([grid, side], className="run-body"),
            dcc.Store(id=ids.RUN_STATE, data=run_state(run, series, alerts, view)),
            dcc.Store(id=ids.RUN_XRANGE),
            dcc.Interval(id=ids.RUN_TICK, interval=int(refresh_s * 1000)),
            title_store(*run_title(run, alerts)),
        ]
    )


def run_search(search: str | None, smooth: float | None, log: bool, zoom: Any = None) -> str:
    """The run page's query string with these view settings, the rest of it kept (refresh, alert). ``zoom`` is what
    the panels' shared zoom reported (``{"range": [from, to]}``, or ``{"auto": true}`` once reset); None keeps the
    query's own from/to."""
    query = dict(parse_qsl((search or "").lstrip("?")))
    for key in ("smooth", "log"):
        query.pop(key, None)
    if smooth:
        query["smooth"] = f"{smooth:g}"
    if log:
        query["log"] = "1"
    if isinstance(zoom, Mapping):
        rng = zoom.get("range")
        query.pop("from", None)
        query.pop("to", None)
        if isinstance(rng, (list, tuple)) and len(rng) == 2 and all(isinstance(v, (int, float)) for v in rng):
            query["from"], query["to"] = f"{math.floor(rng[0]):d}", f"{math.ceil(rng[1]):d}"
    return ("?" + urlencode(query, safe=",")) if query else ""


def run_title(run: Any, alerts: list[dict]) -> tuple[str, ...]:
    """The run page's tab title parts: the run, with how many of its alerts fire."""
    firing = sum(1 for a in alerts if a.get("state") == "firing")
    return (f"{run.name} (#{run.id})" + (f" · {firing} firing" if firing else ""), run.project)


# -- alerts ------------------------------------------------------------------------------


SEVERITIES = ("critical", "warning", "info")


def alert_steps(alert: Mapping[str, Any], run_last_step: int | None) -> tuple[int, int] | None:
    """The steps an alert covers: where its condition began to where it ended (the run's last step while open)."""
    start = alert.get("started_step")
    if start is None:
        start = alert.get("fired_step")
    if start is None:
        return None
    end = alert.get("ended_step")
    if end is None:
        end = alert.get("last_active_step") if alert.get("state") == "resolved" else run_last_step
    end = max(int(end if end is not None else start), int(start))
    return int(start), end


def alert_href(alert: Mapping[str, Any], run_last_step: int | None = None) -> str:
    """The run page of an alert, zoomed to its steps (with a margin of a quarter of its length, 10 steps at least,
    on each side) and with the alert picked out in the diagnosis."""
    steps = alert_steps(alert, run_last_step)
    if steps is None:
        return href(f"runs/{alert['run_id']}", alert=alert.get("id"))
    pad = max(10, (steps[1] - steps[0]) // 4)
    return href(f"runs/{alert['run_id']}", **{"from": max(0, steps[0] - pad), "to": steps[1] + pad,
                                              "alert": alert.get("id")})


def silence_of(silences: list[dict], alert: Mapping[str, Any]) -> dict | None:
    """The active silence that mutes this alert's rule on its run, if any."""
    for sil in silences:
        if ((sil["rule"] is None or sil["rule"] == alert.get("rule"))
                and (sil["run_id"] is None or sil["run_id"] == alert.get("run_id"))):
            return sil
    return None


def _clock(ts: float, now: float) -> html.Span:
    return html.Span(time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts)) + " UTC", title=age(ts, now))


def alerts_query(query: Mapping[str, str]) -> dict[str, Any]:
    """The alerts page's filters from its URL: state, severity, run."""
    state = query.get("state") if query.get("state") in ALERT_STATES else None
    severity = query.get("severity") if query.get("severity") in SEVERITIES else None
    run = query.get("run") or ""
    return {"state": state, "severity": severity,
            "run": int(run) if run.isascii() and run.isdigit() and len(run) <= 18 else None}


def alerts_table(store: Any, query: Mapping[str, str] | str | None) -> html.Div:
    """Alerts across runs, newest first, for the page's filters: each with its run zoomed to its steps, its top
    cause, when it fired, and the silence that mutes it, if one does."""
    q = alerts_query(query if isinstance(query, Mapping) else {"state": query or ""})
    alerts = store.list_alerts(state=q["state"], severity=q["severity"], run_id=q["run"])
    if not alerts:
        what = " ".join(x for x in (q["state"], q["severity"]) if x)
        on = f" on run {q['run']}" if q["run"] is not None else ""
        return html.P(f"No {what} alerts{on}." if what else f"No alerts{on}.")
    now = time.time()
    silences = store.list_silences(active_at=now)
    open_runs = store.get_runs({a["run_id"] for a in alerts if a["state"] in ("firing", "pending")})
    header = html.Tr([html.Th(h) for h in ("state", "severity", "rule", "run · steps", "top cause", "fired", "summary",
                                           "")])
    rows = []
    for a in alerts:
        run = open_runs.get(a["run_id"])
        last = run.last_step if run is not None else None
        steps = alert_steps(a, last)
        open_ = a["state"] in ("firing", "pending")
        span = "" if steps is None else f"steps {steps[0]}–{'now' if open_ else steps[1]}"
        causes = a.get("causes") or []
        top = causes[0] if causes and isinstance(causes[0], Mapping) else None
        muted = silence_of(silences, a)
        actions: list[Any] = []
        if open_:
            actions.append(html.Button("Acknowledged" if a.get("acked_at") else "Acknowledge",
                                       id={"type": ids.ACK, "index": a["id"]}, disabled=bool(a.get("acked_at"))))
            if muted is None:
                actions.append(html.Button("Silence 1 h", id={"type": ids.SILENCE, "index": a["id"]},
                                           style={"marginLeft": "4px"}))
        if muted is not None:
            actions.append(html.Span(f"silenced until {utc_minute(muted['until'])}",
                                     className="silenced", title=muted.get("comment") or ""))
        rows.append(html.Tr(
            [
                html.Td(badge(a["state"], a["state"])),
                html.Td(a.get("severity"), className=f"severity severity-{a.get('severity')}"),
                html.Td(a["rule"]),
                html.Td(dcc.Link([f"{a.get('project')}/{a.get('run_name')}", html.Br(), span],
                                 href=alert_href(a, last), className="alert-link")),
                html.Td([html.B(top.get("id")), html.Span(f" {score_words(top.get('score'))}", className="score")]
                        if top else "—", className="top-cause"),
                html.Td(_clock(a["fired_at"], now) if a.get("fired_at") is not None else "not fired"),
                html.Td(a.get("summary") or "", className="alert-summary"),
                html.Td(actions),
            ],
            className=f"alert-row alert-{a['state']}" + (" alert-silenced" if muted is not None else ""),
        ))
    return html.Div(html.Table([html.Thead(header), html.Tbody(rows)], style={"width": "100%", "borderCollapse": "collapse"}),
                    className="table-scroll")


def alerts_page(store: Any, query: Mapping[str, str], *, token_required: bool = False,
                refresh_s: float = DEFAULT_REFRESH_S) -> html.Div:
    q = alerts_query(query)
    state = q["state"]
    keep = {"severity": q["severity"], "run": q["run"]}
    tabs = [dcc.Link("all", href=href("alerts", **keep),
                     style={"marginRight": "10px", "fontWeight": "bold" if not state else None})]
    for s in ALERT_STATES:
        tabs.append(dcc.Link(s, href=href("alerts", state=s, **keep),
                             style={"marginRight": "10px", "color": STATE_COLOURS[s],
                                    "fontWeight": "bold" if s == state else None}))
    runs = store.alert_runs()
    run_options = [{"label": f"{rid} · {project}/{name}", "value": rid} for rid, project, name in runs]
    if q["run"] is not None and q["run"] not in {r[0] for r in runs}:
        run_options.insert(0, {"label": f"run {q['run']}", "value": q["run"]})
    filters = html.Div(
        [dcc.Dropdown(id=ids.ALERTS_SEVERITY, options=list(SEVERITIES), value=q["severity"], placeholder="severity",
                      style={"width": "160px"}),
         dcc.Dropdown(id=ids.ALERTS_RUN, options=run_options, value=q["run"], placeholder="run",
                      style={"width": "320px", "maxWidth": "100%"})],
        style={"display": "flex", "flexWrap": "wrap", "gap": "8px", "marginBottom": "8px"},
    )
    return html.Div(
        [
            html.H2("Alerts"),
            html.Div(tabs, id=ids.ALERTS_STATE, style={"marginBottom": "8px"}),
            filters,
            html.Div(
                [html.Span("Acknowledging and silencing are writes: the server's write token ",
                           style={"marginRight": "6px"}),
                 dcc.Input(id=ids.ALERTS_TOKEN, type="password", placeholder="write token", debounce=False)],
                style={"display": "block" if token_required else "none", "marginBottom": "6px"},
            ),
            html.Div(id=ids.ALERTS_MESSAGE, style={"color": "#2a7", "minHeight": "1.2em"}),
            html.Div(alerts_body(store, query), id=ids.LIST_BODY),
            *list_live(store.change_marks(), refresh_s),
            title_store(f"{state.capitalize()} alerts" if state else "Alerts"),
        ]
    )


def alerts_search(search: str | None, severity: str | None, run: int | None) -> str:
    """The alerts page's query string with these filters (the state kept)."""
    query = dict(parse_qsl((search or "").lstrip("?")))
    query.pop("severity", None)
    query.pop("run", None)
    if severity in SEVERITIES:
        query["severity"] = severity
    if run is not None:
        query["run"] = str(run)
    return ("?" + urlencode(query)) if query else ""


def alerts_body(store: Any, query: Mapping[str, str]) -> html.Div:
    """What the live refresh redraws of the alerts page."""
    return html.Div(alerts_listing(store, query), id=ids.ALERTS_TABLE)


def alerts_listing(store: Any, query: Mapping[str, str]) -> list:
    """The alerts table and the active silences (what an acknowledgement or a silence redraws at once)."""
    silences = store.list_silences(active_at=time.time())
    return [
        alerts_table(store, query),
        html.H3("Active silences"),
        html.Ul([html.Li(f"{s['rule'] or 'every rule'} on {('run ' + str(s['run_id'])) if s['run_id'] else 'every run'}"
                         f" until {utc_minute(s['until'])}"
                         + (f" — {s['comment']}" if s.get("comment") else ""))
                 for s in silences], id=ids.SILENCES) if silences else html.P("None.", id=ids.SILENCES),
    ]


# -- compare -----------------------------------------------------------------------------


def parse_run_ids(text: str | None) -> list[int]:
    out: list[int] = []
    for part in (text or "").split(","):
        part = part.strip()
        if part.isdigit() and int(part) not in out:
            out.append(int(part))
    return out[:MAX_COMPARE]


def compare_runs(store: Any, query: Mapping[str, str]) -> list:
    """The runs the compare page's URL names that exist, in its order."""
    runs = []
    for rid in parse_run_ids(query.get("runs")):
        try:
            runs.append(store.get_run(rid))
        except RunNotFound:
            pass
    return runs


def compare_options(query: Mapping[str, str]) -> tuple[float, str]:
    try:
        smoothing = min(0.99, max(0.0, float(query.get("smooth", 0))))
    except ValueError:
        smoothing = 0.0
    if smoothing != smoothing:  # NaN
        smoothing = 0.0
    xaxis = query.get("x") if query.get("x") in ("step", "time", "relative") else "step"
    return smoothing, xaxis


def compare_marks(store: Any, runs: list) -> list:
    """What the compare page's body is drawn from: each run's progress and status, and the alerts' marks."""
    return [[r.id, r.last_step, r.status] for r in runs] + [store.change_marks()[5:8]]


def compare_page(store: Any, query: Mapping[str, str], refresh_s: float = DEFAULT_REFRESH_S) -> html.Div:
    runs = compare_runs(store, query)
    smoothing, xaxis = compare_options(query)
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
        style={"display": "flex", "flexWrap": "wrap", "gap": "6px", "alignItems": "center", "marginBottom": "8px"},
    )
    if len(runs) < 2:
        return html.Div([html.H2("Compare runs"),
                         html.P("Pick 2–8 runs on the runs page, or put their ids in the URL: "
                                "/dashboard/compare?runs=1,2"),
                         dcc.Link("Runs", href=PREFIX), title_store("Compare")], id="compare-empty")
    labels = [f"{r.project}/{r.name} (#{r.id})" for r in runs]
    diff_table = config_diff_view(runs, labels)
    return html.Div(
        [
            html.H2("Compare: " + " vs ".join(labels)),
            controls,
            compare_legend(runs),
            html.Div(compare_body(store, runs, smoothing, xaxis), id=ids.LIST_BODY),
            html.H3("Config diff"), diff_table,
            *list_live(compare_marks(store, runs), refresh_s),
            title_store("Compare " + " vs ".join(r.name for r in runs)),
        ]
    )


_NOT_SET = object()
#: Where a run's config comes from when it has none (what the diff says of an empty one).
NO_CONFIG = "runs sent through the Pushgateway or remote write carry none unless one is set"


def config_diff_view(runs: list, labels: list[str]) -> html.Div:
    """The config keys whose values differ, or why there is nothing to compare: every config identical, or none
    of the runs has one. A run without a config says so in its column, and a key a run does not set reads
    "not set", never a null that looks like a value."""
    empty = [label for label, r in zip(labels, runs) if not r.config]
    if len(empty) == len(runs):
        return html.P(f"None of these runs has a config ({NO_CONFIG}): there is nothing to compare.",
                      id=ids.CONFIG_DIFF, className="config-diff-empty")
    diff = config_diff({label: r.config or {} for label, r in zip(labels, runs)}, missing=_NOT_SET)
    note = html.P(f"No config for {', '.join(empty)} ({NO_CONFIG}).", className="config-diff-note") if empty else None
    if not diff:
        return html.Div([html.P("The configs are identical."), note], id=ids.CONFIG_DIFF)

    def cell(v: Any) -> html.Td:
        if v is _NOT_SET:
            return html.Td("not set", className="not-set")
        return html.Td(json.dumps(v, default=str))

    table = html.Table(
        [html.Thead(html.Tr([html.Th("config key"),
                             *[html.Th([l, html.Br(), html.Small("(no config)")] if l in empty else l) for l in labels]])),
         html.Tbody([html.Tr([html.Td(k), *[cell(v) for v in vals]]) for k, vals in diff])],
    )
    return html.Div([note, html.Div(table, className="table-scroll")], id=ids.CONFIG_DIFF)


def compare_legend(runs: list) -> html.Div:
    """One legend for the eight compare panels: each run's colour (the line styles are in the panels' titles)."""
    return html.Div(
        [html.Span([html.Span(className="swatch", style={"background": RUN_COLOURS[i % len(RUN_COLOURS)]}),
                    f"{r.name} (#{r.id})"], className="legend-item")
         for i, r in enumerate(runs)],
        className="compare-legend", id=ids.COMPARE_LEGEND,
    )


def compare_link(run_ids: list | None) -> tuple[str, str, str]:
    """The runs page's Compare link for the runs picked: href, class (disabled until 2 are picked) and text."""
    picked = list(run_ids or [])[:MAX_COMPARE]
    if len(picked) < 2:
        return href("compare"), "compare-link disabled", ("Compare (pick 2–8 runs)" if not picked
                                                          else "Compare (pick one more run)")
    return compare_href(picked), "compare-link", f"Compare {len(picked)} runs"


#: Points per metric and run on the compare page: up to 8 runs share a panel about 560 px wide.
COMPARE_POINTS = 500


def compare_series(store: Any, runs: list) -> dict[int, dict[str, Any]]:
    """Each run's panel metrics, downsampled, read for several runs at once (the store's reads run in parallel)."""
    def one(r: Any) -> dict[str, Any]:
        return {s.metric: s for s in store.series(r.id, list(PANEL_METRICS), max_points=COMPARE_POINTS)}

    if len(runs) < 2:
        return {r.id: one(r) for r in runs}
    with ThreadPoolExecutor(max_workers=min(4, len(runs)), thread_name_prefix="parallax-compare") as pool:
        return dict(zip((r.id for r in runs), pool.map(one, runs)))


def compare_body(store: Any, runs: list, smoothing: float, xaxis: str) -> list:
    """The overlaid panels and each run's alerts (what the live refresh redraws)."""
    series_by_run = compare_series(store, runs)
    alerts_by_run = {r.id: store.list_alerts(run_id=r.id) for r in runs}
    graphs = [
        dcc.Graph(id=f"compare-{p.key}", className="compare-panel",
                  figure=compare_figure(p, runs, series_by_run, smoothing=smoothing, xaxis=xaxis,
                                        alerts_by_run=alerts_by_run),
                  config=GRAPH_CONFIG, responsive=True, style={"height": "260px"})
        for p in PANELS
    ]
    labels = [f"{r.project}/{r.name} (#{r.id})" for r in runs]
    timeline = html.Ul([
        html.Li([html.B(label + ": "), *([badge(f"{a['rule']} {a.get('started_step')}–"
                                               f"{a.get('ended_step') if a.get('ended_step') is not None else 'now'}",
                                               a["state"]) for a in alerts_by_run[r.id]] or ["no alerts"])])
        for label, r in zip(labels, runs)
    ], id=ids.COMPARE_ALERTS)
    return [html.Div(graphs, className="compare-grid"),
            html.H3("Alerts"), timeline]


def compare_search(runs: str | None, smoothing: float | None, xaxis: str | None) -> str:
    q: dict[str, Any] = {"runs": runs}
    if smoothing:
        q["smooth"] = f"{smoothing:g}"
    if xaxis and xaxis != "step":
        q["x"] = xaxis
    return "?" + urlencode({k: v for k, v in q.items() if v}, safe=",")
