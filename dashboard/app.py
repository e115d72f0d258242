"""The Dash app: a router over the page layouts of ``dashboard.pages``, and the callbacks that act inside pages.

One module owns the app object; pages and figures never import it. Routing is a
``dcc.Location`` callback rather than ``dash.register_page``: the app factory
builds a Dash app per FastAPI app (tests build several in one process), and
Dash's page registry is global.
"""

from __future__ import annotations

import hmac
import json
import time
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlencode

import flask
import orjson
from dash import ALL, ClientsideFunction, Dash, Input, Output, State, ctx, dcc, html, no_update

from parallax.alerts.verdict import verdict
from parallax.dashboard import ids, pages
from parallax.dashboard.figures import PANEL_METRICS, PANELS, extend_payload, metrics_figure, series_csv
from parallax.server.store import RunNotFound
from parallax.server.store.health import storage_failure

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


class BadCallbackValue(ValueError):
    """A value in a callback request that the dashboard's pages never send (answered 400, naming it)."""


#: Run ids and steps as the store keeps them.
_MAX_RUN_ID = 2**31 - 1
_MAX_STEP = 2**63 - 1


def checked_run_state(state: Any) -> tuple[int, dict[str, int]] | None:
    """The run page's ``dcc.Store`` data (``pages.run_state``: the run, the last step shown per metric, the alerts
    drawn, the view), checked; None when the page holds none. Anything else came from outside the page:
    BadCallbackValue."""
    if state is None or state == {}:
        return None
    if not isinstance(state, dict) or "run" not in state:
        raise BadCallbackValue("the run page's state must be an object with 'run'")
    run = state["run"]
    if type(run) is not int or not 1 <= run <= _MAX_RUN_ID:
        raise BadCallbackValue("the run page's state.run must be a run id (an integer from 1)")
    since = state.get("since") or {}
    if not isinstance(since, dict) or not all(
        type(v) is int and -1 <= v <= _MAX_STEP for v in since.values()
    ):
        raise BadCallbackValue("the run page's state.since must map metric names to steps")
    smooth = state.get("smooth")
    if smooth is not None and (type(smooth) not in (int, float) or not 0 <= smooth < 1):
        raise BadCallbackValue("the run page's state.smooth must be a smoothing weight from 0 to 1")
    if state.get("log") is not None and not isinstance(state["log"], bool):
        raise BadCallbackValue("the run page's state.log must be true or false")
    rng = state.get("range")
    if rng is not None and not _two_steps(rng):
        raise BadCallbackValue("the run page's state.range must be two steps")
    ema = state.get("ema")
    if ema is not None and not (isinstance(ema, dict) and all(isinstance(v, dict) for v in ema.values())):
        raise BadCallbackValue("the run page's state.ema must map panels to their smoothing state")
    return run, since


def _two_steps(value: Any) -> bool:
    """Whether ``value`` is a range of steps as the panels' zoom gives it: ``[from, to]``, numbers."""
    return isinstance(value, list) and len(value) == 2 and all(type(x) in (int, float) and abs(x) <= _MAX_STEP
                                                               for x in value)


def zoom_value(value: Any) -> dict | None:
    """What the panels' shared zoom reported (assets/panels.js, syncZoom): ``{"range": [from, to]}``, or
    ``{"auto": true}`` once reset; None before any zoom."""
    if value is not None and not (isinstance(value, dict) and (
            value == {"auto": True} or (set(value) == {"range"} and _two_steps(value["range"])))):
        raise BadCallbackValue('the steps shown must be {"range": [from, to]} or {"auto": true}')
    return value


def metric_names(value: Any) -> list[str]:
    """The other-metrics picker's value (a list of names; None when empty)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise BadCallbackValue("the metrics picked must be a list of names")
    return value


def text_value(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise BadCallbackValue(f"{what} must be text")
    return value


def number_value(value: Any, what: str, lo: float, hi: float) -> float | None:
    if value is not None and (type(value) not in (int, float) or not lo <= value <= hi):
        raise BadCallbackValue(f"{what} must be a number from {lo:g} to {hi:g}")
    return value


def run_ids_value(value: Any, what: str = "the runs picked") -> list[int] | None:
    """A picker's run ids (one id for a single picker)."""
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    if not all(type(v) is int and 1 <= v <= _MAX_RUN_ID for v in items):
        raise BadCallbackValue(f"{what} must be run ids")
    return items


def text_list(value: Any, what: str) -> list[str] | None:
    if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        raise BadCallbackValue(f"{what} must be a list of texts")
    return value




def live_update(store: Any, state: dict | None) -> tuple[list[Any], list[Any], Any, Any, Any, Any]:
    """One live refresh of a run page: extendData for each panel, figures for each panel, the new state, the
    status line, the diagnosis and the tab title (no_update where nothing changed).

    Only points after the last step already shown are fetched, per metric, and appended. When an alert of the run
    was opened, moved or closed since the last refresh, the panels are drawn anew instead (their alert spans and
    thresholds with them, the user's zoom kept), and the diagnosis and title are redrawn.
    """
    nothing = [no_update] * len(PANELS)
    checked = checked_run_state(state)
    if checked is None:
        return nothing, nothing, no_update, no_update, no_update, no_update
    run_id, since = checked[0], dict(checked[1])
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
        return list_refresh(store, text_value(pathname, "the page's path"), text_value(search, "the page's query string"),
                            drawn)

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
        text, project, tag = (text_value(v, what) for v, what in ((text, "the search"), (project, "the project"), (tag, "the tag")))
        status, verdict_, search = (text_value(v, what) for v, what in
                                    ((status, "the status"), (verdict_, "the verdict"), (search, "the page's query string")))
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
        text, picked = text_value(text, "the search"), run_ids_value(picked)
        if not text:
            return no_update
        return pages.compare_pick_options(store, text, picked)

    # The eight panels zoom together (assets/panels.js); the steps shown go to RUN_XRANGE and the address bar.
    app.clientside_callback(
        ClientsideFunction("parallax", "syncZoom"),
        Output(ids.RUN_XRANGE, "data"), [Input(ids.panel(p.key), "relayoutData") for p in PANELS],
        prevent_initial_call=True,
    )

    # The address is set whole (href): the shared zoom wrote from=/to= into the address bar behind dcc.Location's
    # back (assets/panels.js), and a new search alone would let dcc.Location put back the address it last knew.
    @app.callback(
        Output(ids.URL, "href", allow_duplicate=True),
        Input(ids.RUN_SMOOTHING, "value"), Input(ids.RUN_LOG, "value"),
        State(ids.URL, "pathname"), State(ids.URL, "search"), State(ids.RUN_XRANGE, "data"),
        prevent_initial_call=True,
    )
    def _run_view(smooth: float | None, log: list | None, pathname: str | None, search: str | None, zoom: Any) -> Any:
        smooth, log = number_value(smooth, "the smoothing", 0, 0.999), text_list(log, "the log scale choice")
        pathname, search = text_value(pathname, "the page's path"), text_value(search, "the page's query string")
        zoom = zoom_value(zoom)
        q = pages.run_search(search, smooth, bool(log), zoom)
        same = sorted(parse_qsl(q.lstrip("?"))) == sorted(parse_qsl((search or "").lstrip("?")))
        return no_update if same else f"{pathname or ''}{q}"

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.ALERTS_SEVERITY, "value"), Input(ids.ALERTS_RUN, "value"), State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def _filter_alerts(severity: str | None, run: int | None, search: str | None) -> Any:
        severity, search = text_value(severity, "the severity"), text_value(search, "the page's query string")
        run = (run_ids_value(run, "the run picked") or [None])[0]
        q = pages.alerts_search(search, severity, run)
        return no_update if q == (search or "") else q

    @app.callback(Output(ids.COMPARE_LINK, "href"), Output(ids.COMPARE_LINK, "className"),
                  Output(ids.COMPARE_LINK, "children"), Input(ids.COMPARE_PICK, "value"))
    def _compare_link(run_ids: list[int] | None) -> tuple[str, str, str]:
        return pages.compare_link(run_ids_value(run_ids))

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.COMPARE_SMOOTHING, "value"), Input(ids.COMPARE_XAXIS, "value"),
        State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def _compare_controls(smoothing: float | None, xaxis: str | None, search: str | None) -> Any:
        smoothing, xaxis = number_value(smoothing, "the smoothing", 0, 0.999), text_value(xaxis, "the x axis")
        search = text_value(search, "the page's query string")
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
        metrics, checked = metric_names(metrics), checked_run_state(state)
        if not metrics or checked is None:
            return no_update, {"display": "none"}
        return extra_chart(store, checked[0], metrics), {"display": "block"}

    @app.callback(
        Output(ids.CSV_DOWNLOAD, "data"),
        Input(ids.CSV_BUTTON, "n_clicks"), State(ids.RUN_STATE, "data"), State(ids.EXTRA_PICK, "value"),
        prevent_initial_call=True,
    )
    def _csv(n: int | None, state: dict | None, extra: list[str] | None) -> Any:
        extra, checked = metric_names(extra), checked_run_state(state)
        if not n or checked is None:
            return no_update
        run_id = checked[0]
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
        index = trigger.get("index")
        if trigger.get("type") not in (ids.ACK, ids.SILENCE) or type(index) is not int or not 1 <= index <= _MAX_RUN_ID:
            raise BadCallbackValue("the button clicked must be an alert's acknowledge or silence button")
        search, typed = text_value(search, "the page's query string"), text_value(typed, "the write token")
        auth = flask.request.authorization
        # The header the server accepted, as HTTP basic (a browser) or Bearer (anything else).
        presented = None if auth is None else (auth.password if auth.type == "basic" else auth.token)
        if not may_write(write_token, typed, presented):
            return html.Span("Enter the server's write token to acknowledge or silence.", style={"color": "#d62728"}), no_update
        message = alert_action(store, trigger["type"], index)
        return message, pages.alerts_listing(store, dict(parse_qsl((search or "").lstrip("?"))))

    _answer_in_json(app)
    return app


#: A callback body nested deeper than this is refused before Dash reads it: the renderer's bodies nest about six
#: levels (a pattern-matching input's value in its list), and Python's json recursion fails past ~1,000.
MAX_CALLBACK_DEPTH = 32


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (1 for a flat one), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        stack.extend((x, d + 1) for x in v)
    return deepest


def _spec_id(component_id: Any) -> str:
    """A component id as the callback map writes it: a pattern-matching (dict) id as sorted compact JSON."""
    if isinstance(component_id, dict):
        return json.dumps(component_id, sort_keys=True, separators=(",", ":"))
    return str(component_id)


def _is_item(x: Any, spec: Mapping[str, Any], *, pattern: bool) -> bool:
    """Whether ``x`` is an ``{"id", "property"}`` item for ``spec``; a pattern's items have dict ids."""
    if not isinstance(x, dict) or not isinstance(x.get("property"), str):
        return False
    if x["property"].split("@")[0] != spec["property"].split("@")[0]:
        return False
    return isinstance(x.get("id"), dict) if pattern else x.get("id") == spec["id"]


def _items_problem(field: str, got: Any, specs: list[Mapping[str, Any]]) -> str | None:
    """What is wrong with a body's ``inputs``, ``state`` or ``outputs`` list against the callback's own."""
    if not isinstance(got, list) or len(got) != len(specs):
        return f"'{field}' must be a list of {len(specs)}, one per {field[:-1] if field != 'state' else 'state'} of the callback"
    for i, (item, spec) in enumerate(zip(got, specs)):
        pattern = spec["id"].startswith("{")
        ok = (isinstance(item, list) and all(_is_item(x, spec, pattern=True) for x in item)) if pattern \
            else _is_item(item, spec, pattern=False)
        if not ok:
            return f"'{field}[{i}]' must be {spec['id']}.{spec['property']}" + (" (a list)" if pattern else "")
    return None


def _callback_request_problem(app: Dash, body: Any) -> str | None:
    """What is wrong with a ``_dash-update-component`` body, against the callback it names, in the shape Dash's
    renderer sends; None if nothing. Dash itself trusts the shape and fails with a 500 on anything else."""
    if _depth(body) > MAX_CALLBACK_DEPTH:
        return f"the body nests more than {MAX_CALLBACK_DEPTH} levels"
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or output not in app.callback_map:
        return "'output' must name one of the dashboard's callbacks"
    cb = app.callback_map[output]
    declared = cb["output"]
    outputs = [{"id": _spec_id(o.component_id), "property": o.component_property}
               for o in (declared if isinstance(declared, (list, tuple)) else [declared])]
    if isinstance(declared, (list, tuple)):
        problem = _items_problem("outputs", body.get("outputs"), outputs)
    elif not _is_item(body.get("outputs"), outputs[0], pattern=False):
        problem = f"'outputs' must be {outputs[0]['id']}.{outputs[0]['property']}"
    else:
        problem = None
    if problem:
        return problem
    for field in ("inputs", "state"):
        problem = _items_problem(field, body.get(field, []), cb[field])
        if problem:
            return problem
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(isinstance(c, str) for c in changed):
        return "'changedPropIds' must be a list of names"
    return None


def _answer_in_json(app: Dash) -> None:
    """Errors of the dashboard's own endpoints as JSON ``{"detail": ...}``, like the API's, not Flask's HTML
    pages: a malformed callback request, or one carrying a value the pages never send, is a 400 naming what is
    wrong; a run that no longer exists a 404; anything else that fails is logged and answered with a 500 that
    shows no internals."""
    server = app.server

    @server.before_request
    def _check_callback_body() -> Any:
        if flask.request.method != "POST" or not flask.request.path.endswith("/_dash-update-component"):
            return None
        # orjson, which refuses nesting past 1,024 levels with an error, where json recursed into a RecursionError
        # (a 500); past the depth check, Dash's own json parse of the same body is shallow.
        try:
            body = orjson.loads(flask.request.get_data(cache=True))
        except orjson.JSONDecodeError as exc:
            deep = "depth" in str(exc).lower() or "recursion" in str(exc).lower()
            problem = f"the body nests more than {MAX_CALLBACK_DEPTH} levels" if deep else "the body must be JSON"
        else:
            problem = _callback_request_problem(app, body)
        if problem is not None:
            return flask.jsonify(detail=f"bad dashboard callback request: {problem}"), 400
        return None

    @server.errorhandler(Exception)
    def _as_json(exc: Exception) -> Any:
        from werkzeug.exceptions import HTTPException

        if isinstance(exc, HTTPException):
            return flask.jsonify(detail=exc.description or exc.name), exc.code or 500
        if isinstance(exc, BadCallbackValue):
            return flask.jsonify(detail=f"bad dashboard callback request: {exc}"), 400
        if isinstance(exc, RunNotFound):
            return flask.jsonify(detail=str(exc)), 404
        failure = storage_failure(exc)
        if failure is not None:  # an acknowledgement or silence on a full disk, say
            return flask.jsonify(detail=f"{failure.reason}: retry later"), 507 if failure.full else 503
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
