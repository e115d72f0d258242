"""schemathesis against Parallax's own OpenAPI schema, and the hostile inputs it and hypothesis found (issue #8).

Every operation of /api/v1/openapi.json is called with data that fits the
schema (on a run that exists, and on random ids) and data that does not: no
answer may be a 5xx, and every 4xx carries a JSON ``detail`` message. Example
counts are bounded (PARALLAX_FUZZ_EXAMPLES per operation and mode) and the
inputs derandomized. The regression tests below each pin an input that once
made the server answer 500.
"""

from __future__ import annotations

import gzip
import os
import time

import orjson
import pytest
from starlette.testclient import TestClient

from bench import fuzz
from parallax.ingest import remote_write
from parallax.server.app import create_app
from parallax.server.config import Settings
from tests.conftest import TEST_HOSTS, make_client, new_run
from tests.fuzz_report import fuzz_report, tally  # noqa: F401 (fuzz_report: an autouse fixture)

EXAMPLES = int(os.environ.get("PARALLAX_FUZZ_EXAMPLES", "8"))
JSON = {"content-type": "application/json"}
RW_HEADERS = {"content-type": "application/x-protobuf", "content-encoding": "snappy"}


@pytest.mark.timeout(600)
def test_no_operation_answers_5xx(db_url):
    app = create_app(Settings(database_url=db_url, alert_timer_seconds=0, allowed_hosts=TEST_HOSTS))
    # PostgreSQL runs the same operations with half the examples: the store paths differ, the validation does not.
    n = EXAMPLES if db_url.startswith("sqlite") else max(1, EXAMPLES // 2)
    before = tally.server_errors, len(tally.failures), sum(tally.examples.values())
    fuzz.fuzz_api(app, tally, n)
    assert sum(tally.examples.values()) - before[2] >= 40 * n  # every operation ran (those without parameters once or twice)
    assert tally.server_errors == before[0] and len(tally.failures) == before[1], "\n".join(tally.failures[before[1] :])


@pytest.fixture
def raw_client(db_url):
    """A client that sees a 500 as a client would (the app's exception is not raised into the test)."""
    with TestClient(create_app(Settings(database_url=db_url, alert_timer_seconds=0, allowed_hosts=TEST_HOSTS)), raise_server_exceptions=False) as c:
        yield c


def _detail(r) -> list:
    assert r.headers["content-type"].startswith("application/json")
    detail = r.json()["detail"]
    assert detail and all(d["msg"] for d in detail)
    return detail


# -- regressions: each of these was a 500 --------------------------------------------------------------


def test_errors_that_echo_what_json_cannot_hold(raw_client):
    c = raw_client
    run = new_run(c)
    # A 422 echoes the offending input: a lone surrogate and an integer past 64 bits once broke its encoding.
    r = c.post("/api/v1/runs", content=b'{"project": "p", "name": "\\ud800"}', headers=JSON)
    assert r.status_code == 422 and _detail(r)[0]["loc"] == ["body", "name"]
    r = c.post(f"/api/v1/runs/{run}/events", content=b'{"events": [{"step": 99999999999999999999999, "kind": "note"}]}', headers=JSON)
    assert r.status_code == 422 and _detail(r)[0]["input"] == "99999999999999999999999"
    r = c.post("/api/v1/silences", content=b'{"until": 1, "run_id": [-181532231159611326464, "\\udb7b"]}', headers=JSON)
    assert r.status_code == 422 and _detail(r)
    for body in (b'{"notes": "\\ud800"}', b'{"tags": ["\\udfff"]}'):
        assert c.patch(f"/api/v1/runs/{run}", content=body, headers=JSON).status_code == 422
    # A lone surrogate in a metric name: malformed JSON, said so.
    r = c.post(f"/api/v1/runs/{run}/metrics", content=b'{"points": [{"step": 1, "metrics": {"\\ud800": 1}}]}', headers=JSON)
    assert r.status_code == 400 and "surrogate" in _detail(r)[0]["msg"]
    r = c.post(f"/api/v1/runs/{run}/trajectories", content=b'{"trajectories": [{"step": 1, "id": "\\ud800", "turns": []}]}', headers=JSON)
    assert r.status_code == 400


def test_a_config_that_could_not_be_served_back_is_refused(raw_client):
    c = raw_client
    for config, why in ((b'{"a": "\\ud800"}', "surrogate"), (b'{"\\udc00": 1}', "surrogate"),
                        (b'{"a": ' + b"[" * 300 + b"]" * 300 + b"}", "nested"), (b'{"a": ' + b"[" * 900 + b"]" * 900 + b"}", "nested")):
        r = c.post("/api/v1/runs", content=b'{"project": "p", "name": "x", "config": ' + config + b"}", headers=JSON)
        assert r.status_code == 422 and why in _detail(r)[0]["msg"], r.text
    # Nothing was stored, so the list still answers; a config 64 levels deep and big integers are fine.
    assert c.get("/api/v1/runs").json()["count"] == 0
    ok = c.post("/api/v1/runs", content=b'{"project": "p", "name": "y", "config": {"a": ' + b"[" * 63 + b"]" * 63 + b', "big": 99999999999999999999999}}', headers=JSON)
    assert ok.status_code == 201, ok.text
    assert c.get(f"/api/v1/runs/{ok.json()['id']}").json()["config"]["big"] == 99999999999999999999999
    assert c.get("/api/v1/runs").status_code == 200


def test_deeply_nested_bodies_are_4xx_everywhere(raw_client):
    c = raw_client
    run = new_run(c)
    deep = b"[" * 100_000 + b"]" * 100_000
    for method, path, body, ctype in (
        ("POST", "/api/v1/runs", b'{"project": "p", "name": "d", "config": {"a": ' + deep + b"}}", "application/json"),
        ("PATCH", f"/api/v1/runs/{run}", deep, "application/json"),
        ("POST", f"/api/v1/runs/{run}/events", b'{"events": ' + deep + b"}", "application/json"),
        ("POST", "/api/v1/silences", deep, "application/json"),
        ("POST", f"/api/v1/runs/{run}/metrics", deep, "application/x-ndjson"),
        ("POST", f"/api/v1/runs/{run}/trajectories", b'{"trajectories": ' + deep + b"}", "application/json"),
        ("POST", f"/api/v1/runs/{run}/trajectories", deep, "application/x-ndjson"),
    ):
        r = c.request(method, path, content=body, headers={"content-type": ctype})
        assert r.status_code == 400 and r.json()["detail"], (method, path, r.status_code)


def test_the_next_step_past_2_63_is_refused_on_the_prometheus_routes(db_url):
    with TestClient(create_app(Settings(database_url=db_url, alert_timer_seconds=0, prometheus_step_wait_s=0, allowed_hosts=TEST_HOSTS)), raise_server_exceptions=False) as c:
        assert c.post("/metrics/job/j", content=b"a 1\n").status_code == 200
        pushed = c.get("/api/v1/runs", params={"project": "j"}).json()["runs"][0]["id"]
        last = {"points": [{"step": 2**63 - 1, "metrics": {"a": 2.0}}]}
        assert c.post(f"/api/v1/runs/{pushed}/metrics", json=last).status_code == 200
        r = c.post("/metrics/job/j", content=b"a 1\n")  # no step gauge: the next step would be 2**63
        assert r.status_code == 400 and "push a step gauge" in _detail(r)[0]["msg"]
        assert c.post("/metrics/job/j", content=b"step 5\na 1\n").status_code == 200
        now = int(time.time() * 1000)
        body = remote_write.encode([({"__name__": "x", "run": "rw"}, [(1.0, now - 5000)])])
        assert c.post("/api/v1/prom/write", content=body, headers=RW_HEADERS).status_code == 200
        written = c.get("/api/v1/runs", params={"project": "prometheus"}).json()["runs"][0]["id"]
        assert c.post(f"/api/v1/runs/{written}/metrics", json=last).status_code == 200
    # A restarted server reads the run's last step back: a newer timestamp would be step 2**63.
    with TestClient(create_app(Settings(database_url=db_url, alert_timer_seconds=0, prometheus_step_wait_s=0, allowed_hosts=TEST_HOSTS)), raise_server_exceptions=False) as c:
        body = remote_write.encode([({"__name__": "x", "run": "rw"}, [(1.0, now)])])
        r = c.post("/api/v1/prom/write", content=body, headers=RW_HEADERS)
        assert r.status_code == 400 and "highest step" in _detail(r)[0]["msg"]


def test_pushed_timestamps_past_int64_are_a_400(raw_client):
    for ts in (b"9" * 400, b"-99999999999999", b"100000000000000"):
        r = raw_client.post("/metrics/job/j", content=b"a 1 " + ts + b"\n")
        assert r.status_code == 400 and "timestamp" in _detail(r)[0]["msg"]


# -- huge steps, unicode names, oversized bodies ---------------------------------------------------------


def test_steps_up_to_2_63_minus_1_on_every_path_and_no_further(db_url):
    top = 2**63 - 1
    with make_client(database_url=db_url, alert_timer_seconds=0) as c:
        run = new_run(c)
        assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": 0, "metrics": {"a": 0.0}}, {"step": top, "metrics": {"a": 1.0}}]}).status_code == 200
        s = c.get(f"/api/v1/runs/{run}/series", params={"metric": "a", "max_points": 3}).json()["series"]["a"]
        assert s["steps"] == [0, top]
        assert c.get(f"/api/v1/runs/{run}").json()["last_step"] == top
        for step in (top + 1, 2**64, 10**30):
            r = c.post(f"/api/v1/runs/{run}/metrics", content=orjson.dumps({"points": [{"step": 1, "metrics": {"a": 1.0}}]}).replace(b'"step":1', b'"step":%d' % step), headers=JSON)
            assert r.status_code == 422 and "below 2**63" in _detail(r)[0]["msg"]
        assert c.post(f"/api/v1/runs/{run}/events", json={"events": [{"step": top, "kind": "note"}]}).status_code == 201
        assert c.post(f"/api/v1/runs/{run}/events", json={"events": [{"step": top + 1, "kind": "note"}]}).status_code == 422
        assert c.get(f"/api/v1/runs/{run}/series", params={"metric": "a", "since_step": top - 1}).status_code == 200
        assert c.get(f"/api/v1/runs/{run}/series", params={"metric": "a", "since_step": top}).status_code == 422
        doc = {"trajectories": [{"step": top, "turns": [{"prompt_ids": [1], "completion_ids": [2]}]}]}
        assert c.post(f"/api/v1/runs/{run}/trajectories", json=doc).status_code == 200
        doc["trajectories"][0]["step"] = top + 1
        assert c.post(f"/api/v1/runs/{run}/trajectories", json=doc).status_code == 422


def test_unicode_names_are_treated_alike_on_every_path(db_url):
    with make_client(database_url=db_url, alert_timer_seconds=0, prometheus_step_wait_s=0) as c:
        # Run and project names, config and tags: any Unicode text round-trips.
        created = c.post("/api/v1/runs", json={"project": "проект", "name": "运行 🚀", "config": {"ключ": "значение 🚀", "emoji": ["🧪"]}, "tags": ["标签", "é"]})
        assert created.status_code == 201
        run = created.json()["id"]
        again = c.get(f"/api/v1/runs/{run}").json()
        assert (again["project"], again["name"], again["config"]["ключ"], again["tags"]) == ("проект", "运行 🚀", "значение 🚀", ["标签", "é"])
        assert c.get("/api/v1/runs", params={"project": "проект", "tag": "标签"}).json()["count"] == 1
        assert c.patch(f"/api/v1/runs/{run}", json={"notes": "заметка 🚀"}).json()["notes"] == "заметка 🚀"
        # A metric's base name is ASCII on every path (Prometheus's rule), refused with a message that says so ...
        r = c.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": 1, "metrics": {"entropía": 1.0}}]})
        assert r.status_code == 422 and "invalid metric name" in _detail(r)[0]["msg"]
        r = c.post("/metrics/job/j/run/u", content="entropía 1\n".encode())
        assert r.status_code == 400 and "metric name" in _detail(r)[0]["msg"]
        body = remote_write.encode([({"__name__": "entropía", "run": "u"}, [(1.0, int(time.time() * 1000))])])
        r = c.post("/api/v1/prom/write", content=body, headers=RW_HEADERS)
        assert r.status_code == 400 and "not a name Parallax can store" in _detail(r)[0]["msg"]
        # ... while label values may be any text, and are stored the same way whichever path they came by.
        labelled = 'pass_at_k{k="é🚀"}'
        assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": 1, "metrics": {labelled: 1.0}}]}).status_code == 200
        assert c.post("/metrics/job/j/run/u", content='pass_at_k{k="é🚀"} 1\n'.encode()).status_code == 200
        body = remote_write.encode([({"__name__": "pass_at_k", "k": "é🚀", "run": "ü"}, [(1.0, int(time.time() * 1000))])])
        assert c.post("/api/v1/prom/write", content=body, headers=RW_HEADERS).status_code == 200
        for project, name in (("проект", "运行 🚀"), ("j", "u"), ("prometheus", "ü")):
            rid = c.get("/api/v1/runs", params={"project": project}).json()["runs"][0]["id"]
            assert [m for m in c.get(f"/api/v1/runs/{rid}/metrics").json()["metrics"] if m["name"] == labelled], (project, name)


def test_oversized_prometheus_bodies_are_413(sqlite_url):
    with make_client(database_url=sqlite_url, max_body_bytes=4096) as c:
        r = c.post("/metrics/job/j", content=b"a 1\n" * 2000)
        assert r.status_code == 413 and "PARALLAX_MAX_BODY_BYTES" in r.text
        bomb = gzip.compress(b"a 1\n" * 100_000)  # small on the wire, 400 kB inflated
        assert len(bomb) < 4096
        r = c.post("/metrics/job/j", content=bomb, headers={"content-encoding": "gzip"})
        assert r.status_code == 413 and "uncompressed" in _detail(r)[0]["msg"]

        def chunks():
            for _ in range(10):
                yield b"a 1\n" * 250

        assert c.post("/api/v1/prom/write", content=chunks(), headers=RW_HEADERS).status_code == 413
        assert c.post("/metrics/job/j", content=chunks()).status_code == 413
        assert c.get("/api/v1/runs").json()["count"] == 0
