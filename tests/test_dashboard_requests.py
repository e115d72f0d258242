"""The dashboard's callback endpoint under requests our renderer never sends: JSON errors, never Flask's HTML."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parallax.dashboard import ids
from parallax.dashboard.figures import PANELS
from tests.conftest import make_client, new_run

URL = "/dashboard/_dash-update-component"


def route_body(pathname: Any, search: Any) -> dict:
    return {"output": f"{ids.PAGE}.children", "outputs": {"id": ids.PAGE, "property": "children"},
            "inputs": [{"id": ids.URL, "property": "pathname", "value": pathname},
                       {"id": ids.URL, "property": "search", "value": search}],
            "changedPropIds": [f"{ids.URL}.pathname"]}


@pytest.fixture(scope="module")
def app_client(tmp_path_factory):
    with make_client(database_url=f"sqlite:///{tmp_path_factory.mktemp('dashreq')}/p.db") as c:
        yield c


@pytest.mark.parametrize("body, problem", [
    (b"{oops", "the body must be JSON"),
    (b"[]", "the body must be a JSON object"),
    (b'{"output": 1}', "'output' must name one of the dashboard's callbacks"),
    (b'{"output": "nope.children", "outputs": {}, "inputs": []}', "'output' must name one of the dashboard's callbacks"),
    (b'{"output": "page.children", "outputs": 3, "inputs": []}', "'outputs' must be page.children"),
    (b'{"output": "page.children", "outputs": [{"id": "page", "property": "children"}], "inputs": []}',
     "'outputs' must be page.children"),
    (b'{"output": "page.children", "outputs": {"id": "page", "property": "children"}, "inputs": {}}',
     "'inputs' must be a list of 2, one per input of the callback"),
    (b'{"output": "page.children", "outputs": {"id": "page", "property": "children"}, "inputs": [7, 8]}',
     "'inputs[0]' must be url.pathname"),
    (b'{"output": "page.children", "outputs": {"id": "page", "property": "children"}, "inputs": [{"id": "url", '
     b'"property": "pathname"}, {"id": "url", "property": "search"}], "changedPropIds": [1]}',
     "'changedPropIds' must be a list of names"),
])
def test_a_malformed_callback_request_is_a_400_naming_the_problem(app_client, body, problem):
    r = app_client.post(URL, content=body.replace(b"page.", f"{ids.PAGE}.".encode()), headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    assert r.json() == {"detail": f"bad dashboard callback request: {problem}"}


@pytest.mark.parametrize("pathname, search, shows", [
    (123, None, "Runs"),  # not a string: the runs page
    (["x"], {"a": 1}, "Runs"),
    ("/dashboard/runs/99999999999999999999999", "?refresh=abc", "There is no run 99999999999999999999999."),
    ("/dashboard/runs/²", "", "'²' is not a run id."),
    ("/dashboard/runs/424242", "", "There is no run 424242."),
])
def test_odd_urls_get_a_page_not_an_error(app_client, pathname, search, shows):
    r = app_client.post(URL, json=route_body(pathname, search))
    assert r.status_code == 200, r.text
    assert shows in r.text


def test_a_failing_callback_answers_json_without_internals(app_client, caplog):
    run = new_run(app_client, "broken")
    store = app_client.app.state.store
    real = store.get_run

    def boom(run_id):
        raise RuntimeError("secret internal detail")

    store.get_run = boom
    try:
        with caplog.at_level(logging.ERROR):
            r = app_client.post(URL, json=route_body(f"/dashboard/runs/{run}", ""))
    finally:
        store.get_run = real
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert "secret" not in r.text and "see the server log" in r.json()["detail"]
    assert "secret internal detail" in caplog.text  # logged for the operator


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=JSON)
def test_any_json_body_gets_a_json_answer(app_client, body):
    r = app_client.post(URL, json=body)
    assert r.status_code in (200, 204, 400), r.text
    assert r.headers["content-type"] == "application/json"


# -- requests shaped like the renderer's, with values the pages never send ----------------------------------------

LIVE_OUTPUTS = ([{"id": ids.panel(p.key), "property": "extendData"} for p in PANELS]
                + [{"id": ids.panel(p.key), "property": "figure"} for p in PANELS]
                + [{"id": ids.RUN_STATE, "property": "data"}, {"id": ids.RUN_STATUS, "property": "children"},
                   {"id": ids.DIAGNOSIS, "property": "children"}, {"id": ids.TITLE, "property": "data"}])
LIVE = "...".join(f"{o['id']}.{o['property']}" for o in LIVE_OUTPUTS)


def live_body(state: Any, outputs: Any = None) -> dict:
    return {"output": f"..{LIVE}..", "outputs": LIVE_OUTPUTS if outputs is None else outputs,
            "inputs": [{"id": ids.RUN_TICK, "property": "n_intervals", "value": 1}],
            "state": [{"id": ids.RUN_STATE, "property": "data", "value": state}],
            "changedPropIds": [f"{ids.RUN_TICK}.n_intervals"]}


def extra_body(metrics: Any, state: Any) -> dict:
    return {"output": f"..{ids.EXTRA_GRAPH}.figure...{ids.EXTRA_GRAPH}.style..",
            "outputs": [{"id": ids.EXTRA_GRAPH, "property": "figure"}, {"id": ids.EXTRA_GRAPH, "property": "style"}],
            "inputs": [{"id": ids.EXTRA_PICK, "property": "value", "value": metrics}],
            "state": [{"id": ids.RUN_STATE, "property": "data", "value": state}],
            "changedPropIds": [f"{ids.EXTRA_PICK}.value"]}


def csv_body(clicks: Any, state: Any, extra: Any) -> dict:
    return {"output": f"{ids.CSV_DOWNLOAD}.data", "outputs": {"id": ids.CSV_DOWNLOAD, "property": "data"},
            "inputs": [{"id": ids.CSV_BUTTON, "property": "n_clicks", "value": clicks}],
            "state": [{"id": ids.RUN_STATE, "property": "data", "value": state},
                      {"id": ids.EXTRA_PICK, "property": "value", "value": extra}],
            "changedPropIds": [f"{ids.CSV_BUTTON}.n_clicks"]}


def action_body(kind: Any, index: Any, search: Any = "", typed: Any = None) -> dict:
    button = {"id": {"type": kind, "index": index}, "property": "n_clicks", "value": 1}
    return {"output": f"..{ids.ALERTS_MESSAGE}.children...{ids.ALERTS_TABLE}.children..",
            "outputs": [{"id": ids.ALERTS_MESSAGE, "property": "children"}, {"id": ids.ALERTS_TABLE, "property": "children"}],
            "inputs": [[button], []],
            "state": [{"id": ids.URL, "property": "search", "value": search},
                      {"id": ids.ALERTS_TOKEN, "property": "value", "value": typed}],
            "changedPropIds": [json.dumps({"index": index, "type": kind}, separators=(",", ":")) + ".n_clicks"]}


VIEW = f"{ids.URL}.href@"  # the run view's output; allow_duplicate adds a hash of the callback (see named())


def named(client, body: dict) -> dict:
    """``body`` with the run view's output named as the renderer names it (from the page's declared callbacks)."""
    if body["output"] != VIEW:
        return body
    output = next(d["output"] for d in client.get("/dashboard/_dash-dependencies").json() if d["output"].startswith(VIEW))
    return {**body, "output": output, "outputs": {"id": ids.URL, "property": output.split(".", 1)[1]}}


def view_body(smooth: Any, log: Any, search: Any = "", zoom: Any = None, pathname: Any = "/dashboard/runs/1") -> dict:
    return {"output": VIEW, "outputs": None,
            "inputs": [{"id": ids.RUN_SMOOTHING, "property": "value", "value": smooth},
                       {"id": ids.RUN_LOG, "property": "value", "value": log}],
            "state": [{"id": ids.URL, "property": "pathname", "value": pathname},
                      {"id": ids.URL, "property": "search", "value": search},
                      {"id": ids.RUN_XRANGE, "property": "data", "value": zoom}],
            "changedPropIds": [f"{ids.RUN_LOG}.value"]}


@pytest.mark.parametrize("search, zoom, smooth, log, href", [
    # The panels zoomed (the address bar has from/to that dcc.Location never saw): the zoom goes with the log scale.
    ("?refresh=2", {"range": [10.4, 20.2]}, 0, ["log"], "/dashboard/runs/1?refresh=2&log=1&from=10&to=21"),
    ("?from=1&to=9&refresh=2", {"auto": True}, 0, ["log"], "/dashboard/runs/1?refresh=2&log=1"),
    ("?from=1&to=9", None, 0.9, [], "/dashboard/runs/1?from=1&to=9&smooth=0.9"),
])
def test_the_run_view_sets_the_whole_address_with_the_zoom(app_client, search, zoom, smooth, log, href):
    r = app_client.post(URL, json=named(app_client, view_body(smooth, log, search, zoom)))
    assert r.status_code == 200, r.text
    assert r.json()["response"][ids.URL] == {"href": href}


def test_the_run_view_leaves_the_address_alone_when_nothing_changes(app_client):
    """A page drawn anew sends its controls' values once: the same query in another order is no change."""
    r = app_client.post(URL, json=named(app_client, view_body(0, ["log"], "?log=1&from=1&to=9")))
    assert r.status_code in (200, 204), r.text
    assert r.status_code == 204 or r.json()["response"] == {}, r.text


def test_the_bodies_here_are_the_renderers(app_client):
    run = new_run(app_client, "shapes")
    for body in (live_body({"run": run, "since": {}}), extra_body(["x"], {"run": run}), csv_body(1, {"run": run}, None)):
        r = app_client.post(URL, json=body)
        assert r.status_code in (200, 204), r.text


@pytest.mark.parametrize("body, problem", [
    (live_body({"run": 1}, [[o] for o in LIVE_OUTPUTS]), "'outputs[0]' must be panel-importance_weight_max.extendData"),
    (live_body({"run": 1}, [{"id": {"a": [1]}, "property": "x"}]), "'outputs' must be a list of 20, one per output of the callback"),
    (live_body("1"), "the run page's state must be an object with 'run'"),
    (live_body({"run": "1"}), "the run page's state.run must be a run id (an integer from 1)"),
    (live_body({"run": [1]}), "the run page's state.run must be a run id (an integer from 1)"),
    (live_body({"run": 2**70}), "the run page's state.run must be a run id (an integer from 1)"),
    (live_body({"run": 1, "since": [1]}), "the run page's state.since must map metric names to steps"),
    (live_body({"run": 1, "since": {"entropy": "x"}}), "the run page's state.since must map metric names to steps"),
    (extra_body("entropy", {"run": 1}), "the metrics picked must be a list of names"),
    (extra_body(["entropy"], {"run": True}), "the run page's state.run must be a run id (an integer from 1)"),
    (csv_body(1, {"run": 1}, [1]), "the metrics picked must be a list of names"),
    (action_body(ids.ACK, "abc"), "the button clicked must be an alert's acknowledge or silence button"),
    (action_body("delete", 1), "the button clicked must be an alert's acknowledge or silence button"),
    (action_body(ids.ACK, 1, typed=12), "the write token must be text"),
    (action_body(ids.ACK, 1, search=["x"]), "the page's query string must be text"),
    (view_body(0, [], zoom=[1, 9]), 'the steps shown must be {"range": [from, to]} or {"auto": true}'),
    (view_body(0, [], zoom={"range": [1, "9"]}), 'the steps shown must be {"range": [from, to]} or {"auto": true}'),
    (view_body(0, [], zoom={"auto": True, "range": [1, 9]}), 'the steps shown must be {"range": [from, to]} or {"auto": true}'),
    (view_body(0, [], pathname=3), "the page's path must be text"),
])
def test_a_value_the_pages_never_send_is_a_400_naming_it(app_client, body, problem):
    r = app_client.post(URL, json=named(app_client, body))
    assert r.status_code == 400 and r.headers["content-type"] == "application/json", r.text
    assert r.json() == {"detail": f"bad dashboard callback request: {problem}"}


def test_a_live_refresh_of_a_run_that_is_gone_is_a_404(app_client):
    r = app_client.post(URL, json=live_body({"run": 424242}))
    assert r.status_code == 404 and r.json() == {"detail": "run 424242 not found"}


@pytest.mark.parametrize("depth", [40, 1_100, 100_000])
def test_deep_json_is_a_400_not_a_recursion_error(app_client, depth):
    nested = "[" * depth + "]" * depth
    for body in (nested, json.dumps(route_body("/", "")).replace('"search", "value": ""', f'"search", "value": {nested}')):
        r = app_client.post(URL, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.headers["content-type"] == "application/json", r.text[:200]
        assert "nests more than 32 levels" in r.json()["detail"]


VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                      | st.text(max_size=20),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                      max_leaves=6)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["live", "extra", "csv", "action", "route"]), a=VALUES, b=VALUES, c=VALUES)
def test_any_value_in_a_well_shaped_request_gets_a_json_answer(app_client, which, a, b, c):
    """The renderer's exact shapes with any JSON values where the pages put theirs: never a 500."""
    body = {"live": lambda: live_body(a), "extra": lambda: extra_body(a, b), "csv": lambda: csv_body(a, b, c),
            "action": lambda: action_body(ids.ACK, a, b, c), "route": lambda: route_body(a, b)}[which]()
    r = app_client.post(URL, json=body)
    assert r.status_code in (200, 204, 400, 404), r.text
    assert r.status_code == 204 or r.headers["content-type"] == "application/json"


def _declared_callbacks(client) -> list[dict]:
    deps = client.get("/dashboard/_dash-dependencies").json()
    out = []
    for d in deps:
        if d.get("clientside_function") or any(isinstance(i["id"], dict) or i["id"].startswith("{")
                                               for i in d["inputs"] + d["state"]):
            continue  # run in the browser, or pattern-matching ids (the alert buttons: covered above)
        outputs = [dict(zip(("id", "property"), o.rsplit(".", 1))) for o in d["output"].strip(".").split("...")]
        out.append({"output": d["output"], "outputs": outputs if d["output"].startswith("..") else outputs[0],
                    "inputs": d["inputs"], "state": d["state"]})
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.integers(min_value=0, max_value=10_000), values=st.lists(VALUES, min_size=8, max_size=8))
def test_every_declared_callback_answers_any_value_without_a_500(app_client, pick, values):
    """Whatever a page's inputs and state hold (the renderer's shape, any JSON value), no callback fails."""
    callbacks = _declared_callbacks(app_client)
    cb = callbacks[pick % len(callbacks)]
    fill = iter(values * 4)
    body = {"output": cb["output"], "outputs": cb["outputs"],
            "inputs": [{**i, "value": next(fill)} for i in cb["inputs"]],
            "state": [{**s, "value": next(fill)} for s in cb["state"]],
            "changedPropIds": [f"{cb['inputs'][0]['id']}.{cb['inputs'][0]['property']}"]}
    r = app_client.post(URL, json=body)
    assert r.status_code in (200, 204, 400, 404), (cb["output"], r.text[:300])
