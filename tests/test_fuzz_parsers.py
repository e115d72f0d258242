"""Hypothesis against the Prometheus inputs and the JSON ingest parser (issue #8, hostile input).

The only allowed outcomes are a parsed result or the module's own error type
(PromInputError, InvalidInput: the routes turn those into 4xx), never another
exception; through the routes, never a 5xx and every 4xx with a message.
Example counts are bounded and the inputs derandomized, so CI sees the same
inputs every time. The strategies live in bench/fuzz.py, which runs the same
properties with larger counts for ``make bench``.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from bench import fuzz
from parallax.ingest import remote_write
from parallax.ingest.points import Batch, InvalidInput, parse_json, parse_ndjson
from parallax.ingest.prometheus import PromInputError, PromSample, decode_text, parse_grouping_path, parse_text
from parallax.server.app import create_app
from parallax.server.config import Settings
from tests.fuzz_report import fuzz_report, tally  # noqa: F401 (fuzz_report: an autouse fixture)

N = 100  # examples per property (the parsers take microseconds each)
ROUTE_N = 60  # examples per route (a request through the app takes milliseconds)
SETTINGS = fuzz.hypothesis_settings(N)


def _counted(source: str, outcome: int) -> None:
    tally.record(source, outcome, None, "")


@given(st.one_of(fuzz.exposition_texts, st.text(max_size=200)))
@SETTINGS
def test_text_format_parser(text):
    try:
        samples = parse_text(text)
    except PromInputError as exc:
        assert str(exc)
        _counted("hypothesis parse_text", 400)
        return
    assert all(type(s) is PromSample and type(s.value) is float for s in samples)
    _counted("hypothesis parse_text", 200)


@given(st.binary(max_size=300))
@SETTINGS
def test_text_decoding_of_any_bytes(body):
    try:
        parse_text(decode_text(body))
    except PromInputError:
        _counted("hypothesis decode_text", 400)
        return
    _counted("hypothesis decode_text", 200)


@given(fuzz.grouping_paths)
@SETTINGS
def test_grouping_key_parser(path):
    try:
        key = parse_grouping_path(path)
    except PromInputError:
        _counted("hypothesis parse_grouping_path", 400)
        return
    assert key["job"] and all(type(k) is str and type(v) is str for k, v in key.items())
    _counted("hypothesis parse_grouping_path", 200)


@given(fuzz.remote_write_bodies(int(time.time() * 1000)))
@SETTINGS
def test_remote_write_decoder(request):
    body, _ = request
    try:
        series = remote_write.parse(remote_write.decompress(body, 1 << 20))
    except PromInputError as exc:
        assert str(exc)
        _counted("hypothesis remote_write.decompress+parse", 400)
        return
    assert all(len(s.timestamps) == len(s.values) for s in series)
    _counted("hypothesis remote_write.decompress+parse", 200)


@given(st.binary(max_size=400))
@SETTINGS
def test_remote_write_protobuf_of_any_bytes(data):
    try:
        remote_write.parse(data)
    except PromInputError:
        _counted("hypothesis remote_write.parse", 400)
        return
    _counted("hypothesis remote_write.parse", 200)


@given(fuzz.json_bodies())
@SETTINGS
def test_json_and_ndjson_ingest_parsers(body):
    for parse in (parse_json, parse_ndjson):
        try:
            batch = parse(body, now=1_764_000_000.0)
        except InvalidInput as exc:
            assert exc.errors and all(e["msg"] for e in exc.errors)
            _counted(f"hypothesis points.{parse.__name__}", 400)
            continue
        assert type(batch) is Batch
        assert all(0 <= s[0] < 2**63 for samples in batch.groups.values() for s in samples)
        _counted(f"hypothesis points.{parse.__name__}", 200)


# -- through the routes: never a 5xx, every 4xx with a message --------------------------------------


@pytest.fixture(scope="module")
def route_client(tmp_path_factory):
    settings = Settings(database_url=f"sqlite:///{tmp_path_factory.mktemp('fuzz')}/parallax.db", alert_timer_seconds=0,
                        allowed_hosts=["testserver"])
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:  # a 500 is what a client would see
        c.post("/metrics/job/fuzz/run/push", content=b"step 0\nentropy 1\n")
        yield c


def _check(source: str, r, shown: str) -> None:
    problem = fuzz.problem_with(r.status_code, r.content, r.headers.get("content-type"))
    tally.record(source, r.status_code, problem, shown)
    assert problem is None, f"{problem}: {shown}"


def test_pushgateway_route(route_client):

    @given(fuzz.push_requests())
    @fuzz.hypothesis_settings(ROUTE_N)
    def push(request):
        method, path, body, headers = request
        r = route_client.request(method, path, content=body if method != "DELETE" else None, headers=headers)
        _check("hypothesis Pushgateway route", r, f"{method} {path!r} {headers} {body[:300]!r}")

    push()


def test_remote_write_route(route_client):

    @given(fuzz.remote_write_bodies(int(time.time() * 1000)))
    @fuzz.hypothesis_settings(ROUTE_N)
    def write(request):
        body, headers = request
        r = route_client.post("/api/v1/prom/write", content=body, headers=headers)
        _check("hypothesis remote-write route", r, f"{headers} {body[:300]!r}")

    write()


def test_json_ingest_route(route_client):
    run = route_client.post("/api/v1/runs", json={"project": "fuzz", "name": "json"}).json()["id"]

    @given(fuzz.json_bodies(), st.sampled_from(["application/json", "application/x-ndjson"]))
    @fuzz.hypothesis_settings(ROUTE_N)
    def post(body, ctype):
        r = route_client.post(f"/api/v1/runs/{run}/metrics", content=body, headers={"content-type": ctype})
        _check("hypothesis JSON ingest route", r, f"{ctype} {body[:300]!r}")

    post()


# -- regressions: inputs that once raised ------------------------------------------------------------


def test_a_timestamp_past_int64_is_a_parse_error_not_an_overflow():
    for ts in ("9" * 400, "-1", str(10**14)):
        with pytest.raises(PromInputError, match="timestamp"):
            parse_text(f"a 1 {ts}\n")
    assert parse_text("a 1 99999999999999\n")[0].timestamp_ms == 99_999_999_999_999


def test_a_lone_surrogate_escape_is_malformed_json():
    for body in (b'{"points": [{"step": 1, "metrics": {"\\ud800": 1}}]}', b'{"points": [{"step": 1, "metrics": {"a": NaN}}], "\\udfff": 1}'):
        with pytest.raises(InvalidInput) as exc:
            parse_json(body)
        assert exc.value.status_code == 400 and "surrogate" in exc.value.errors[0]["msg"]
    # A surrogate pair is one character (not a valid metric name, but a clean 422).
    with pytest.raises(InvalidInput) as exc:
        parse_json(b'{"points": [{"step": 1, "metrics": {"\\ud83d\\ude80": 1}}]}')
    assert exc.value.status_code == 422


def test_a_step_past_64_bits_says_so():
    with pytest.raises(InvalidInput) as exc:
        parse_json(b'{"points": [{"step": 99999999999999999999999, "metrics": {"a": 1}}]}')
    assert exc.value.errors[0]["msg"] == "step must be a non-negative integer below 2**63"
