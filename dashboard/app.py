"""The Dash app: a router over the page layouts of ``dashboard.pages``, and the callbacks that act inside pages.

One module owns the app object; pages and figures never import it. Routing is a
``dcc.Location`` callback rather than ``dash.register_page``: the app factory
builds a Dash app per FastAPI app (tests build several in one process), and
Dash's page registry is global.
"""

from __future__ import annotations

import hmac
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode

import flask
from dash import ALL, ClientsideFunction, Dash, Input, Output, State, ctx, dcc, html, no_update

from alerts.verdict import verdict
from dashboard import ids, pages
from dashboard.figures import PANEL_METRICS, PANELS, extend_payload, metrics_figure, series_csv

__all__ = ["build_dash", "route"]

_STYLE = {"fontFamily": "system-ui, -apple-system, 'Segoe UI', sans-serif", "fontSize": "14px", "margin": "0 16px 24px",
          "color": "#222"}


def route(
    store: Any, pathname: str | None, search: str | None, *, refresh_s: float = pages.DEFAULT_REFRESH_S,
    token_required: bool = False,
) -> Any:
    """The page for a URL (path under /dashboard/, query string): a pure function of the store and the URL."""
    path = pathname if isinstance(pathname, str) and pathname else "/"
    search = search if isinstance(search, str) else None
    if path.startswith(pages.PREFIX):
        path = path[len(pages.PREFIX):]
    path = path.strip("/")
    query = dict(parse_qsl((search or "").lstrip("?")))
    list_refresh_s = pages.refresh_seconds(query, refresh_s)
    if path == "":
        return pages.runs_page(store, query, refresh_s=list_refresh_s)
    if path == "alerts":
        return pages.alerts_page(store, query, token_required=token_required, refresh_s=list_refresh_s)
    if path == "compare":
        return pages.compare_page(store, query, refresh_s=list_refresh_s)
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "runs":
        if parts[1].isascii() and parts[1].isdigit() and len(parts[1]) <= 18:  # ids fit the database's integers
            return pages.run_page(store, int(parts[1]), query, default_refresh_s=refresh_s)
        if parts[1].isascii() and parts[1].isdigit():
            return pages.not_found(f"There is no run {parts[1]}.")
        return pages.not_found(f"'{parts[1]}' is not a run id.")
    return pages.not_found(f"No page at /dashboard/{path}.")


def list_refresh(store: Any, pathname: str | None, search: str | None, drawn: Any) -> tuple[Any, Any]:
    """One refresh of a list page (runs, alerts, compare): its body and what it was drawn from, both no_update
    when nothing it shows changed since ``drawn`` (a few aggregates compared, nothing redrawn)."""
    path = (pathname or "/").removeprefix(pages.PREFIX).strip("/")
    query = dict(parse_qsl((search or "").lstrip("?")))
    if path == "compare":
        runs = pages.compare_runs(store, query)
        marks = pages.compare_marks(store, runs)
        if marks == drawn or len(runs) < 2:
            return no_update, no_update
        return pages.compare_body(store, runs, *pages.compare_options(query)), marks
    if path not in ("", "alerts"):
        return no_update, no_update
    marks = store.change_marks()
    if marks == drawn:
        return no_update, no_update
    return (pages.runs_body(store, query) if path == "" else pages.alerts_body(store, query)), marks


def live_update(store: Any, state: dict | None) -> tuple[list[Any], list[Any], Any, Any, Any, Any]:
    """One live refresh of a run page: extendData for each panel, figures for each panel, the new state, the
    status line, the diagnosis and the tab title (no_update where nothing changed).

    Only points after the last step already shown are fetched, per metric, and appended. When an alert of the run
    was opened, moved or closed since the last refresh, the panels are drawn anew instead (their alert spans and
    thresholds with them, the user's zoom kept), and the diagnosis and title are redrawn.
    """
    nothing = [no_update] * len(PANELS)
    if not state or "run" not in state:
        return nothing, nothing, no_update, no_update, no_update, no_update
    run_id = int(state["run"])
    alerts = store.list_alerts(run_id=run_id)
    signature = pages.alerts_signature(alerts)
    run = store.get_run(run_id)
    status = pages.run_status(run)
    view = {"smooth": state.get("smooth") or 0.0, "log": bool(state.get("log")), "range": state.get("range")}
    if signature != state.get("alerts"):
        series = {s.metric: s for s in store.series(run_id, list(PANEL_METRICS), max_points=pages.FIRST_LOAD_POINTS)}
        figures = pages.run_figures(run, series, alerts, store.list_events(run_id), view)
        diagnosis = pages.diagnosis(alerts, verdict(store.fired_alerts([run_id]).get(run_id, ()))).children
        title = pages.page_title(*pages.run_title(run, alerts))
        return nothing, figures, pages.run_state(run, series, alerts, view), status, diagnosis, title
    since: dict[str, int] = dict(state.get("since") or {})
    metrics = [m for p in PANELS for m in p.metrics]
    groups: dict[int | None, list[str]] = {}
    for m in metrics:
        groups.setdefault(since.get(m), []).append(m)
    new: dict[str, Any] = {}
    for after, names in groups.items():
        for s in store.series(run_id, names, max_points=pages.FIRST_LOAD_POINTS, since_step=after):
            if s.steps:
                new[s.metric] = s
                since[s.metric] = s.steps[-1]
    if not new:
        return nothing, nothing, no_update, status, no_update, no_update
    ema_at = {k: dict(v) for k, v in (state.get("ema") or {}).items()}
    out = []
    for p in PANELS:
        payload = extend_payload(p, new, smoothing=view["smooth"], ema_at=ema_at.setdefault(p.key, {}))
        out.append(no_update if payload is None else payload)
    new_state = {**state, "since": since, "ema": ema_at if view["smooth"] else {}}
    return out, nothing, new_state, status, no_update, no_update


def build_dash(
    store: Any, *, write_token: str | None = None, refresh_s: float = pages.DEFAULT_REFRESH_S, **dash_kwargs: Any
) -> Dash:
    """The dashboard over ``store``. With ``write_token``, acknowledging and silencing from the alerts page need it
    (the server lets every dashboard request through as a read)."""
    app = Dash(
        __name__,
        title="Parallax",
        update_title=None,  # not "Updating..." at every live refresh: each page names its tab (ids.TITLE)
        requests_pathname_prefix=pages.PREFIX,
        routes_pathname_prefix="/",
        suppress_callback_exceptions=True,  # page components appear with the page
        # assets/vendor/ is fetched on demand (plotly_early.js), not put in every page.
        assets_path_ignore=["^vendor$"],
        **dash_kwargs,
    )
    def layout() -> html.Div:
        # The router callback fills the page; until then, with no runs at all, every page is the first-run help.
        first = pages.empty_runs() if not store.has_runs() else html.P("Loading…", style={"color": "#888"})
        return html.Div(
            [dcc.Location(id=ids.URL, refresh="callback-nav"), pages.nav(), html.Div(first, id=ids.PAGE),
             html.Div(id=ids.TITLE_SINK, hidden=True)],
            style=_STYLE,
        )

    app.layout = layout

    app.clientside_callback(
        "function (title) { if (title) { document.title = title; } return window.dash_clientside.no_update; }",
        Output(ids.TITLE_SINK, "children"), Input(ids.TITLE, "data"),
    )

    @app.callback(
        Output(ids.LIST_BODY, "children"), Output(ids.LIST_MARKS, "data"),
        Input(ids.LIST_TICK, "n_intervals"),
        State(ids.LIST_MARKS, "data"), State(ids.URL, "pathname"), State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def _list_live(_n: int, drawn: Any, pathname: str | None, search: str | None) -> Any:
        return list_refresh(store, pathname, search, drawn)

    @app.callback(Output(ids.PAGE, "children"), Input(ids.URL, "pathname"), Input(ids.URL, "search"))
    def _route(pathname: str | None, search: str | None) -> Any:
        return route(store, pathname, search, refresh_s=refresh_s, token_required=write_token is not None)

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.FILTER_SEARCH, "value"), Input(ids.FILTER_PROJECT, "value"), Input(ids.FILTER_TAG, "value"),
        Input(ids.FILTER_STATUS, "value"), Input(ids.FILTER_VERDICT, "value"),
        State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def _filter_runs(text: str | None, project: str | None, tag: str | None, status: str | None,
                     verdict_: str | None, search: str | None) -> Any:
        q = pages.runs_search(text, project, tag, status, verdict_)
        # the same filters (the page kept): nothing to do
        kept = dict(parse_qsl((search or "").lstrip("?")))
        kept.pop("page", None)
        return no_update if q.lstrip("?") == urlencode(kept, safe=",") else q

    @app.callback(
        Output(ids.COMPARE_PICK, "options"),
        Input(ids.COMPARE_PICK, "search_value"), State(ids.COMPARE_PICK, "value"),
        prevent_initial_call=True,
    )
    def _compare_options(text: str | None, picked: list | None) -> Any:
        if not text:
            return no_update
        return pages.compare_pick_options(store, text, picked)

    # The eight panels zoom together (assets/panels.js); the steps shown go to RUN_XRANGE and the address bar.
    app.clientside_callback(
        ClientsideFunction("parallax", "syncZoom"),
        Output(ids.RUN_XRANGE, "data"), [Input(ids.panel(p.key), "relayoutData") for p in PANELS],
        prevent_initial_call=True,
    )

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.RUN_SMOOTHING, "value"), Input(ids.RUN_LOG, "value"),
        State(ids.URL, "search"), State(ids.RUN_XRANGE, "data"),
        prevent_initial_call=True,
    )
    def _run_view(smooth: float | None, log: list | None, search: str | None, zoom: Any) -> Any:
        q = pages.run_search(search, smooth, bool(log), zoom)
        return no_update if q == (search or "") else q

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.ALERTS_SEVERITY, "value"), Input(ids.ALERTS_RUN, "value"), State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def _filter_alerts(severity: str | None, run: int | None, search: str | None) -> Any:
        q = pages.alerts_search(search, severity, run)
        return no_update if q == (search or "") else q

    @app.callback(Output(ids.COMPARE_LINK, "href"), Output(ids.COMPARE_LINK, "className"),
                  Output(ids.COMPARE_LINK, "children"), Input(ids.COMPARE_PICK, "value"))
    def _compare_link(run_ids: list[int] | None) -> tuple[str, str, str]:
        return pages.compare_link(run_ids)

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.COMPARE_SMOOTHING, "value"), Input(ids.COMPARE_XAXIS, "value"),
        State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def _compare_controls(smoothing: float | None, xaxis: str | None, search: str | None) -> Any:
        runs = dict(parse_qsl((search or "").lstrip("?"))).get("runs")
        q = pages.compare_search(runs, smoothing, xaxis)
        return no_update if q == (search or "") else q

    @app.callback(
        [Output(ids.panel(p.key), "extendData") for p in PANELS]
        + [Output(ids.panel(p.key), "figure") for p in PANELS]
        + [Output(ids.RUN_STATE, "data"), Output(ids.RUN_STATUS, "children"), Output(ids.DIAGNOSIS, "children"),
           Output(ids.TITLE, "data")],
        Input(ids.RUN_TICK, "n_intervals"),
        State(ids.RUN_STATE, "data"),
        prevent_initial_call=True,
    )
    def _live(_n: int, state: dict | None) -> list[Any]:
        extends, figures, new_state, status, diagnosis, title = live_update(store, state)
        return [*extends, *figures, new_state, status, diagnosis, title]

    @app.callback(
        Output(ids.EXTRA_GRAPH, "figure"), Output(ids.EXTRA_GRAPH, "style"),
        Input(ids.EXTRA_PICK, "value"), State(ids.RUN_STATE, "data"),
        prevent_initial_call=True,
    )
    def _extra(metrics: list[str] | None, state: dict | None) -> Any:
        if not metrics or not state:
            return no_update, {"display": "none"}
        return extra_chart(store, int(state["run"]), metrics), {"display": "block"}

    @app.callback(
        Output(ids.CSV_DOWNLOAD, "data"),
        Input(ids.CSV_BUTTON, "n_clicks"), State(ids.RUN_STATE, "data"), State(ids.EXTRA_PICK, "value"),
        prevent_initial_call=True,
    )
    def _csv(n: int | None, state: dict | None, extra: list[str] | None) -> Any:
        if not n or not state:
            return no_update
        run_id = int(state["run"])
        return {"content": csv_export(store, run_id, extra), "filename": f"parallax-run-{run_id}.csv",
                "type": "text/csv"}

    @app.callback(
        Output(ids.ALERTS_MESSAGE, "children"), Output(ids.ALERTS_TABLE, "children"),
        Input({"type": ids.ACK, "index": ALL}, "n_clicks"), Input({"type": ids.SILENCE, "index": ALL}, "n_clicks"),
        State(ids.URL, "search"), State(ids.ALERTS_TOKEN, "value"),
        prevent_initial_call=True,
    )
    def _alert_action(_acks: list, _silences: list, search: str | None, typed: str | None) -> Any:
        trigger = ctx.triggered_id
        if not isinstance(trigger, dict) or not any(t.get("value") for t in ctx.triggered):
            return no_update, no_update
        auth = flask.request.authorization
        # The header the server accepted, as HTTP basic (a browser) or Bearer (anything else).
        presented = None if auth is None else (auth.password if auth.type == "basic" else auth.token)
        if not may_write(write_token, typed, presented):
            return html.Span("Enter the server's write token to acknowledge or silence.", style={"color": "#d62728"}), no_update
        message = alert_action(store, trigger["type"], int(trigger["index"]))
        return message, pages.alerts_listing(store, dict(parse_qsl((search or "").lstrip("?"))))

    _answer_in_json(app)
    return app


def _callback_request_problem(app: Dash, body: Any) -> str | None:
    """What is wrong with a ``_dash-update-component`` body, in the shape Dash's renderer sends; None if nothing."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or output not in app.callback_map:
        return "'output' must name one of the dashboard's callbacks"
    if not isinstance(body.get("outputs"), (dict, list)):
        return "'outputs' must be an object or a list"
    for field in ("inputs", "state", "changedPropIds"):
        if field in body and not isinstance(body[field], list):
            return f"'{field}' must be a list"
    for field in ("inputs", "state"):
        for i, item in enumerate(body.get(field) or []):
            items = item if isinstance(item, list) else [item]  # pattern-matching (ALL) inputs come as lists
            if not all(isinstance(x, dict) and "id" in x and isinstance(x.get("property"), str) for x in items):
                return f"'{field}[{i}]' must be an object with 'id' and 'property'"
    return None


def _answer_in_json(app: Dash) -> None:
    """Errors of the dashboard's own endpoints as JSON ``{"detail": ...}``, like the API's, not Flask's HTML
    pages: a malformed callback request is a 400 naming what is wrong; anything else that fails is logged and
    answered with a 500 that shows no internals."""
    server = app.server

    @server.before_request
    def _check_callback_body() -> Any:
        if flask.request.method != "POST" or not flask.request.path.endswith("/_dash-update-component"):
            return None
        body = flask.request.get_json(silent=True)
        problem = "the body must be JSON" if body is None else _callback_request_problem(app, body)
        if problem is not None:
            return flask.jsonify(detail=f"bad dashboard callback request: {problem}"), 400
        return None

    @server.errorhandler(Exception)
    def _as_json(exc: Exception) -> Any:
        from werkzeug.exceptions import HTTPException

        if isinstance(exc, HTTPException):
            return flask.jsonify(detail=exc.description or exc.name), exc.code or 500
        server.logger.exception("dashboard request %s %s failed", flask.request.method, flask.request.path)
        return flask.jsonify(detail="the dashboard could not answer this request (see the server log)"), 500


def alert_action(store: Any, action: str, alert_id: int, *, now: float | None = None) -> str:
    """Acknowledge an alert, or silence its rule on its run for an hour; returns what was done."""
    alert = store.get_alert(alert_id)
    if alert is None:
        return f"Alert {alert_id} no longer exists."
    if action == ids.ACK:
        store.ack_alert(alert_id, "dashboard")
        return f"Acknowledged alert {alert_id} ({alert['rule']})."
    until = (now or time.time()) + 3600
    store.add_silence(alert["rule"], alert["run_id"], until, f"from the dashboard, alert {alert_id}")
    return f"Silenced {alert['rule']} on run {alert['run_id']} for 1 h."



def extra_chart(store: Any, run_id: int, metrics: list[str]) -> Any:
    """The on-demand chart of other logged metrics (downsampled like the panels)."""
    return metrics_figure(store.series(run_id, list(metrics), max_points=pages.FIRST_LOAD_POINTS),
                          uirevision=f"extra-{run_id}")


def csv_export(store: Any, run_id: int, extra: list[str] | None = None) -> str:
    """The series the run page shows (panel metrics, plus the picked extra ones) as CSV."""
    metrics = list(PANEL_METRICS) + [m for m in (extra or []) if m not in PANEL_METRICS]
    return series_csv([s for s in store.series(run_id, metrics, max_points=pages.FIRST_LOAD_POINTS) if s.steps])


def may_write(write_token: str | None, *presented: str | None) -> bool:
    """Whether a dashboard action may write: no write token is set, or one of the presented secrets is it."""
    if write_token is None:
        return True
    return any(p is not None and hmac.compare_digest(p.encode(), write_token.encode()) for p in presented)
