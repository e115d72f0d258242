"""The dashboard's callback endpoint under requests our renderer never sends: JSON errors, never Flask's HTML."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dashboard import ids
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
    (b'{"output": "page.children", "outputs": 3, "inputs": []}', "'outputs' must be an object or a list"),
    (b'{"output": "page.children", "outputs": {}, "inputs": {}}', "'inputs' must be a list"),
    (b'{"output": "page.children", "outputs": {}, "inputs": [7]}', "'inputs[0]' must be an object with 'id' and 'property'"),
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
