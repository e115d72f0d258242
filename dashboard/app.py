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
from urllib.parse import parse_qsl

import flask
import orjson
from dash import ALL, Dash, Input, Output, State, ctx, dcc, html, no_update

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
    if path == "":
        return pages.runs_page(store, query)
    if path == "alerts":
        return pages.alerts_page(store, query, token_required=token_required)
    if path == "compare":
        return pages.compare_page(store, query)
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "runs":
        if parts[1].isascii() and parts[1].isdigit() and len(parts[1]) <= 18:  # ids fit the database's integers
            return pages.run_page(store, int(parts[1]), query, default_refresh_s=refresh_s)
        if parts[1].isascii() and parts[1].isdigit():
            return pages.not_found(f"There is no run {parts[1]}.")
        return pages.not_found(f"'{parts[1]}' is not a run id.")
    return pages.not_found(f"No page at /dashboard/{path}.")


class BadCallbackValue(ValueError):
    """A value in a callback request that the dashboard's pages never send (answered 400, naming it)."""


#: Run ids and steps as the store keeps them.
_MAX_RUN_ID = 2**31 - 1
_MAX_STEP = 2**63 - 1


def run_state(state: Any) -> tuple[int, dict[str, int]] | None:
    """The run page's ``dcc.Store`` data, ``{"run": id, "since": {metric: last step shown}}``, checked; None when
    the page holds none. Anything else came from outside the page: BadCallbackValue."""
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
    return run, since


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


def live_update(store: Any, state: dict | None) -> tuple[list[Any], Any, Any, Any]:
    """One live refresh: extendData for each panel (or no_update), the new state, the status line and the
    diagnosis (no_update unless an alert of the run was opened, moved or closed since the last refresh).

    Only points after the last step already shown are fetched, per metric.
    """
    checked = run_state(state)
    if checked is None:
        return [no_update] * len(PANELS), no_update, no_update, no_update
    run_id, since = checked[0], dict(checked[1])
    alerts = store.list_alerts(run_id=run_id)
    signature = pages.alerts_signature(alerts)
    diagnosis = no_update
    if signature != state.get("alerts"):
        diagnosis = pages.diagnosis(alerts, verdict(store.fired_alerts([run_id]).get(run_id, ()))).children
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
    run = store.get_run(run_id)
    status = (f"{run.status} · last step {run.last_step if run.last_step is not None else '—'} · "
              f"last seen {pages.age(run.last_seen_at)} · refreshed {time.strftime('%H:%M:%S')} ")
    new_state = {"run": run_id, "since": since, "alerts": signature}
    if not new:
        return [no_update] * len(PANELS), (new_state if diagnosis is not no_update else no_update), status, diagnosis
    out = []
    for p in PANELS:
        payload = extend_payload(p, new)
        out.append(no_update if payload is None else payload)
    return out, new_state, status, diagnosis


def build_dash(
    store: Any, *, write_token: str | None = None, refresh_s: float = pages.DEFAULT_REFRESH_S, **dash_kwargs: Any
) -> Dash:
    """The dashboard over ``store``. With ``write_token``, acknowledging and silencing from the alerts page need it
    (the server lets every dashboard request through as a read)."""
    app = Dash(
        __name__,
        title="Parallax",
        requests_pathname_prefix=pages.PREFIX,
        routes_pathname_prefix="/",
        suppress_callback_exceptions=True,  # page components appear with the page
        # assets/vendor/ is fetched on demand (plotly_early.js), not put in every page.
        assets_path_ignore=["^vendor$"],
        **dash_kwargs,
    )
    def layout() -> html.Div:
        # The router callback fills the page; until then, with no runs at all, every page is the first-run help.
        first = pages.empty_runs() if not store.list_runs() else html.P("Loading…", style={"color": "#888"})
        return html.Div(
            [dcc.Location(id=ids.URL, refresh="callback-nav"), pages.nav(), html.Div(first, id=ids.PAGE)],
            style=_STYLE,
        )

    app.layout = layout

    @app.callback(Output(ids.PAGE, "children"), Input(ids.URL, "pathname"), Input(ids.URL, "search"))
    def _route(pathname: str | None, search: str | None) -> Any:
        return route(store, pathname, search, refresh_s=refresh_s, token_required=write_token is not None)

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.FILTER_PROJECT, "value"), Input(ids.FILTER_TAG, "value"), Input(ids.FILTER_STATUS, "value"),
        State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    def _filter_runs(project: str | None, tag: str | None, status: str | None, search: str | None) -> Any:
        q = pages.href("", project=project, tag=tag, status=status)[len(pages.PREFIX):]
        return no_update if q == (search or "") else q

    @app.callback(Output(ids.COMPARE_LINK, "href"), Input(ids.COMPARE_PICK, "value"))
    def _compare_link(run_ids: list[int] | None) -> str:
        return pages.compare_href(run_ids)

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
        + [Output(ids.RUN_STATE, "data"), Output(ids.RUN_STATUS, "children"), Output(ids.DIAGNOSIS, "children")],
        Input(ids.RUN_TICK, "n_intervals"),
        State(ids.RUN_STATE, "data"),
        prevent_initial_call=True,
    )
    def _live(_n: int, state: dict | None) -> list[Any]:
        extends, new_state, status, diagnosis = live_update(store, state)
        return [*extends, new_state, status, diagnosis]

    @app.callback(
        Output(ids.EXTRA_GRAPH, "figure"), Output(ids.EXTRA_GRAPH, "style"),
        Input(ids.EXTRA_PICK, "value"), State(ids.RUN_STATE, "data"),
        prevent_initial_call=True,
    )
    def _extra(metrics: list[str] | None, state: dict | None) -> Any:
        metrics, checked = metric_names(metrics), run_state(state)
        if not metrics or checked is None:
            return no_update, {"display": "none"}
        return extra_chart(store, checked[0], metrics), {"display": "block"}

    @app.callback(
        Output(ids.CSV_DOWNLOAD, "data"),
        Input(ids.CSV_BUTTON, "n_clicks"), State(ids.RUN_STATE, "data"), State(ids.EXTRA_PICK, "value"),
        prevent_initial_call=True,
    )
    def _csv(n: int | None, state: dict | None, extra: list[str] | None) -> Any:
        extra, checked = metric_names(extra), run_state(state)
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
        state = dict(parse_qsl((search or "").lstrip("?"))).get("state")
        return message, pages.alerts_table(store, state)

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
