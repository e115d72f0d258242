"""Pushgateway protocol with the real prometheus_client against `parallax serve`; exposition parsing; the /metrics export."""

from __future__ import annotations

import base64
import gzip
import json
import re
import time
import urllib.error
from typing import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.exposition import (
    basic_auth_handler,
    default_handler,
    delete_from_gateway,
    push_to_gateway,
    pushadd_to_gateway,
)

from parallax.ingest.names import is_valid_name, labelled_name, split_name
from parallax.ingest.prometheus import PromInputError, parse_grouping_path, parse_text
from tests.conftest import new_run, write
from tests.servers import parallax_server

TOKEN = "prom-test-token-81c3"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("prom")
    with parallax_server(tmp, env={"PARALLAX_TOKEN": TOKEN}, args=["--database-url", f"sqlite:///{tmp}/x.db"]) as srv:
        yield srv.url


def gateway(base: str) -> str:
    return base.removeprefix("http://")  # prometheus_client adds the scheme itself


def auth_handler(url, method, timeout, headers, data):
    return basic_auth_handler(url, method, timeout, headers, data, "trainer", TOKEN)


def bearer_handler(url, method, timeout, headers, data):
    return default_handler(url, method, timeout, list(headers) + [("Authorization", f"Bearer {TOKEN}")], data)


def run_of(base: str, project: str, name: str) -> dict:
    runs = httpx.get(f"{base}/api/v1/runs", params={"project": project}).json()["runs"]
    return next(r for r in runs if r["name"] == name)


def series(base: str, run_id: int, *metrics: str) -> dict:
    return httpx.get(f"{base}/api/v1/runs/{run_id}/series", params={"metric": list(metrics)}).json()["series"]


def latest(base: str, run_id: int) -> dict:
    return {m["name"]: (m["step"], m["value"]) for m in httpx.get(f"{base}/api/v1/runs/{run_id}/metrics").json()["metrics"]}


def trainer_registry(step: int | None, entropy: float) -> CollectorRegistry:
    reg = CollectorRegistry()
    if step is not None:
        Gauge("step", "training step", registry=reg).set(step)
    Gauge("entropy", "policy entropy", registry=reg).set(entropy)
    g = Gauge("pass_at_k", "pass@k", ["k"], registry=reg)
    g.labels("8").set(0.5)
    g.labels("16").set(0.7)
    return reg


# -- real prometheus_client pushes ----------------------------------------------------------------


def test_push_with_basic_auth_step_gauge_and_labels(server):
    push_to_gateway(gateway(server), job="grpo", registry=trainer_registry(12, 1.5), grouping_key={"run": "r1"}, handler=auth_handler)
    run = run_of(server, "grpo", "r1")
    assert "pushgateway" in run["tags"] and run["last_step"] == 12
    got = latest(server, run["id"])
    assert got["entropy"] == (12, 1.5)
    assert got['pass_at_k{k="8"}'] == (12, 0.5) and got['pass_at_k{k="16"}'] == (12, 0.7)
    assert got["pass_at_k"] == (12, 0.5)  # the run's k (8 by default) feeds the pass@k panel
    assert got["step"] == (12, 12.0)


def test_push_with_a_bearer_handler_and_without_a_token(server):
    push_to_gateway(gateway(server), job="grpo", registry=trainer_registry(1, 2.0), grouping_key={"run": "bearer"}, handler=bearer_handler)
    assert latest(server, run_of(server, "grpo", "bearer")["id"])["entropy"] == (1, 2.0)
    with pytest.raises(urllib.error.HTTPError) as err:
        push_to_gateway(gateway(server), job="grpo", registry=trainer_registry(2, 2.0), grouping_key={"run": "bearer"})
    assert err.value.code == 401


def test_without_a_step_gauge_each_push_is_the_next_step(server):
    for i in range(3):
        pushadd_to_gateway(gateway(server), job="nostep", registry=trainer_registry(None, float(i)), handler=bearer_handler)
    run = run_of(server, "nostep", "nostep")  # no run label: the job is the run (and the project)
    s = series(server, run["id"], "entropy")["entropy"]
    assert s["steps"] == [0, 1, 2] and s["values"] == [0.0, 1.0, 2.0]
    # The response says where the step came from.
    r = httpx.post(f"{server}/metrics/job/nostep", content=b"entropy 9\n", headers=AUTH)
    assert r.status_code == 200 and r.json()["step"] == 3 and "next step" in r.json()["step_from"]


def test_counters_histograms_summaries_are_stored_as_their_samples(server):
    reg = CollectorRegistry()
    Counter("tokens", "tokens seen", registry=reg).inc(5)
    h = Histogram("latency_seconds", "latency", buckets=(0.1, 1.0), registry=reg)
    h.observe(0.5)
    Summary("reward", "reward", registry=reg).observe(0.25)
    Gauge("global_step", "step", registry=reg).set(7)
    push_to_gateway(gateway(server), job="kinds", registry=reg, handler=bearer_handler)
    got = latest(server, run_of(server, "kinds", "kinds")["id"])
    assert got["tokens_total"] == (7, 5.0)
    assert got['latency_seconds_bucket{le="0.1"}'] == (7, 0.0) and got['latency_seconds_bucket{le="+Inf"}'] == (7, 1.0)
    assert got["latency_seconds_sum"] == (7, 0.5) and got["latency_seconds_count"] == (7, 1.0)
    assert got["reward_sum"] == (7, 0.25) and got["reward_count"] == (7, 1.0)
    assert not [n for n in got if n.endswith("_created")]  # metadata, not measurements


def test_base64_grouping_values_gzip_and_delete(server):
    # A value with "/" goes as run@base64/...; prometheus_client does that itself.
    push_to_gateway(gateway(server), job="exp", registry=trainer_registry(3, 1.0), grouping_key={"run": "sweep/lr=1e-6"},
                    handler=bearer_handler, compression="gzip")
    run = run_of(server, "exp", "sweep/lr=1e-6")
    assert run["status"] == "running" and latest(server, run["id"])["entropy"] == (3, 1.0)
    delete_from_gateway(gateway(server), job="exp", grouping_key={"run": "sweep/lr=1e-6"}, handler=bearer_handler)
    assert run_of(server, "exp", "sweep/lr=1e-6")["status"] == "finished"
    assert latest(server, run["id"])["entropy"] == (3, 1.0)  # the history stays
    push_to_gateway(gateway(server), job="exp", registry=trainer_registry(4, 0.9), grouping_key={"run": "sweep/lr=1e-6"}, handler=bearer_handler)
    assert run_of(server, "exp", "sweep/lr=1e-6")["status"] == "running"
    # Deleting a group that was never pushed is accepted, as by the Pushgateway.
    delete_from_gateway(gateway(server), job="never", handler=bearer_handler)


def test_extra_grouping_labels_are_part_of_names_instance_is_not(server):
    push_to_gateway(gateway(server), job="ranks", registry=trainer_registry(1, 1.0),
                    grouping_key={"run": "r", "instance": "host-1:9000", "rank": "0"}, handler=bearer_handler)
    got = latest(server, run_of(server, "ranks", "r")["id"])
    assert got['entropy{rank="0"}'] == (1, 1.0) and got['pass_at_k{k="8",rank="0"}'] == (1, 0.5)
    # The step gauge still gives the step (rank is the grouping key's), and is stored like the rest.
    assert got['step{rank="0"}'] == (1, 1.0) and run_of(server, "ranks", "r")["last_step"] == 1


def test_framework_gauges_get_canonical_names(server):
    reg = CollectorRegistry()
    Gauge("trainer_step", "s", registry=reg).set(1)
    Gauge("step", "s", registry=reg).set(5)
    Gauge("trainer_mfu_percent", "prime-rl MFU in percent", registry=reg).set(42)
    Gauge("trainer_entropy", "e", registry=reg).set(0.8)
    push_to_gateway(gateway(server), job="prime", grouping_key={"run": "p1"}, registry=reg, handler=bearer_handler)
    got = latest(server, run_of(server, "prime", "p1")["id"])
    assert got["trainer_mfu"] == (5, pytest.approx(0.42)) and got["trainer_mfu_percent"] == (5, 42.0)
    assert got["entropy"] == (5, 0.8)


def test_the_finished_gauge_ends_a_pushed_run_and_a_later_push_resumes_it(server):
    reg = trainer_registry(5, 1.0)
    done = Gauge("parallax_run_finished", "1 when the trainer is done", registry=reg)
    push_to_gateway(gateway(server), job="fin", registry=reg, grouping_key={"run": "g"}, handler=bearer_handler)
    run = run_of(server, "fin", "g")
    assert run["status"] == "running"
    done.set(1)
    push_to_gateway(gateway(server), job="fin", registry=reg, grouping_key={"run": "g"}, handler=bearer_handler)
    assert run_of(server, "fin", "g")["status"] == "finished"
    ends = [e for e in httpx.get(f"{server}/api/v1/runs/{run['id']}/events").json()["events"] if e["kind"] == "end"]
    assert len(ends) == 1 and "parallax_run_finished" in ends[0]["message"] and ends[0]["step"] == 5
    done.set(0)
    push_to_gateway(gateway(server), job="fin", registry=reg, grouping_key={"run": "g"}, handler=bearer_handler)
    assert run_of(server, "fin", "g")["status"] == "running"


def test_empty_grouping_values_are_no_labels_and_any_content_type_is_text(server):
    # rank@base64/= is rank="": the Pushgateway's and Prometheus's no label at all.
    r = httpx.post(f"{server}/metrics/job/emp/run/e/rank@base64/=", content=b"step 2\nentropy 1.5\n",
                   headers={**AUTH, "content-type": "application/x-www-form-urlencoded"})  # curl --data-binary's
    assert r.status_code == 200, r.text
    got = latest(server, run_of(server, "emp", "e")["id"])
    assert got["entropy"] == (2, 1.5) and got["step"] == (2, 2.0)
    # An empty run value is no run label: the job is the run.
    assert httpx.post(f"{server}/metrics/job/emp2/run@base64/=", content=b"entropy 1\n", headers=AUTH).status_code == 200
    assert run_of(server, "emp2", "emp2")["last_step"] == 0


def test_parallax_own_series_pushed_back_are_skipped(server):
    body = b'step 3\nentropy 1\nparallax_metric{metric="entropy",run_id="1"} 9\nparallax_run_last_step{run_id="1"} 60\n'
    r = httpx.put(f"{server}/metrics/job/own/run/o", content=body, headers=AUTH)
    assert r.status_code == 200 and r.json()["skipped"] == 2
    assert set(latest(server, run_of(server, "own", "o")["id"])) == {"step", "entropy"}


@pytest.mark.parametrize(
    "body, headers, status, says",
    [
        (b"entropy{run=\"x} 1\n", {}, 400, "line 1"),
        (b"# TYPE entropy gauge\nentropy one\n", {}, 400, "line 2: 'one' is not a number"),
        (b"entropy 1 2 3\n", {}, 400, "line 1"),
        (b"entropy{a=\"1\",a=\"2\"} 1\n", {}, 400, "given twice"),
        (b"entropy{a=\"\xff\"} 1\n", {}, 400, "not valid UTF-8"),
        (b"step 1.5\nentropy 1\n", {}, 400, "non-negative integer"),
        (b"entropy 1\n", {"content-encoding": "br"}, 400, "Content-Encoding"),
        (b"not gzip at all", {"content-encoding": "gzip"}, 400, "gzip"),
        (b"entropy 1\n", {"content-type": "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"}, 415, "protobuf"),
        (b"entropy{job=\"other\"} 1\n", {}, 400, "contradicts the grouping key"),
        (b"x{v=\"" + b"a" * 300 + b"\"} 1\n", {}, 400, "longer than 200"),
    ],
    ids=["unclosed-quote", "not-a-number", "extra-fields", "label-twice", "non-utf8", "fractional-step", "brotli",
         "corrupt-gzip", "protobuf-exposition", "contradicts-grouping", "name-too-long"],
)
def test_bad_pushes_are_400_with_a_reason_and_store_nothing(server, body, headers, status, says):
    r = httpx.put(f"{server}/metrics/job/bad/run/b", content=body, headers={**AUTH, **headers})
    assert r.status_code == status, r.text
    assert says in r.json()["detail"][0]["msg"]
    assert not [x for x in httpx.get(f"{server}/api/v1/runs", params={"project": "bad"}).json()["runs"]]
    assert httpx.get(f"{server}/healthz").status_code == 200  # the server keeps serving


@pytest.mark.parametrize(
    "path, says",
    [("/metrics/job", None), ("/metrics/job/x/run", "odd number of components"), ("/metrics/jobs/x", "must start with"),
     ("/metrics/job/x/run@base64/%%%", "percent-escape"), ("/metrics/job/x/1bad/v", "label name"),
     ("/metrics/job/x/run@base64/!!!", "grouping label 'run' is not valid base64url: '!!!'"),
     ("/metrics/job/x/run@base64/_w", "'run' is not valid UTF-8")],
)
def test_bad_grouping_paths(server, path, says):
    r = httpx.put(server + path, content=b"entropy 1\n", headers=AUTH)
    assert r.status_code in (400, 404) and "detail" in r.json()
    if says:
        assert r.status_code == 400 and says in r.json()["detail"][0]["msg"], r.text


# -- parsing, without a server ----------------------------------------------------------------------


def test_grouping_path_decoding():
    assert parse_grouping_path("job/j/run/r") == {"job": "j", "run": "r"}
    enc = base64.urlsafe_b64encode(b"a/b c").decode().rstrip("=")
    assert parse_grouping_path(f"job@base64/{base64.urlsafe_b64encode(b'x/y').decode()}/run@base64/{enc}") == {"job": "x/y", "run": "a/b c"}
    # As the Pushgateway: an empty value is no label, a label given twice keeps its last value, the job is the path's.
    assert parse_grouping_path("job/j/run@base64/=") == {"job": "j"}
    assert parse_grouping_path("job/j/rank/") == {"job": "j"}
    assert parse_grouping_path("job/j/run/a%20b") == {"job": "j", "run": "a b"}
    assert parse_grouping_path("job/j/run/a/run/b/job/k") == {"job": "j", "run": "b"}
    assert parse_grouping_path("job/j/rank@base64/YQ%3D") == {"job": "j", "rank": "a"}  # padding optional
    for bad, says in [("job/j/rank@base64/!!!", "'rank' is not valid base64url: '!!!'"),
                      ("job/j/run@base64/Y", "'run' is not valid base64url"),
                      ("job/j/run@base64/YW+v", "not valid base64url"),  # + is base64, not base64url
                      ("job/j/run@base64/_w", "not valid UTF-8"),
                      ("job/j/rank/a%2Fb", "odd number of components"),
                      ("job/j/__r/x", "invalid grouping label name")]:
        with pytest.raises(PromInputError, match=re.escape(says)):
            parse_grouping_path(bad)


def test_exposition_parsing_is_strict_and_says_where():
    text = '# HELP x h\n# TYPE x gauge\nx{a="q\\"z",b="n\\\\l"} -Inf 1700000000000\ny NaN\n# EOF\n'
    samples = parse_text(text)
    assert [(s.name, s.labels, s.timestamp_ms) for s in samples] == [("x", {"a": 'q"z', "b": "n\\l"}, 1700000000000), ("y", {}, None)]
    for bad, where in [("x 1\ny{\n", "line 2"), ("x 1_000\n", "line 1"), ("# TYPE x nonsense\n", "unknown metric type"), ('x{a="\\t"} 1\n', "unknown escape")]:
        with pytest.raises(PromInputError, match=where):
            parse_text(bad)


def test_labelled_names_round_trip_and_are_valid():
    for labels in [{"k": "8"}, {"le": "+Inf", "b": 'q"\\\n'}, {"a": "with space/and:colon"}]:
        name = labelled_name("metric_x", labels)
        assert is_valid_name(name) and split_name(name) == ("metric_x", labels)
    assert not is_valid_name('x{b="1",a="2"}')  # labels must be sorted: one series, one name
    assert not is_valid_name("x{}") and not is_valid_name('x{a="1"') and not is_valid_name("x{a=1}")


# -- the /metrics export -------------------------------------------------------------------------


def test_metrics_export_drops_finished_runs_after_the_configured_time(store):
    from parallax.server.telemetry import Telemetry

    now = time.time()
    runs = {}
    for name in ("live", "done-recent", "done-old", "failed-old"):
        run, _ = store.create_run("p", name, {}, [])
        runs[name] = run.id
        seen = now - 7200 if name.endswith("old") else now - 60
        write(store, run.id, [("entropy", 1, 1.0, 0, seen), ("not_canonical", 1, 2.0, 0, seen)], now=seen)
    store.update_run(runs["done-recent"], status="finished")
    store.update_run(runs["done-old"], status="finished")
    store.update_run(runs["failed-old"], status="failed")
    text = Telemetry(store, finished_runs_for_s=3600).exposition().decode()
    shown = {line.split('run="')[1].split('"')[0] for line in text.splitlines() if line.startswith("parallax_metric{")}
    assert shown == {"live", "done-recent"}
    assert "not_canonical" not in text
    everything = Telemetry(store).exposition().decode()
    assert 'run="done-old"' in everything


def test_metrics_export_setting_is_used_by_the_app(sqlite_url):
    from tests.conftest import make_client

    with make_client(database_url=sqlite_url, export_finished_runs_for_s=0) as c:
        run = new_run(c, name="soon-gone")
        c.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": 1, "metrics": {"entropy": 1.0}, "time": time.time() - 10}]})
        assert 'run="soon-gone"' in c.get("/metrics").text
        c.patch(f"/api/v1/runs/{run}", json={"status": "finished"})
        assert 'run="soon-gone"' not in c.get("/metrics").text


def test_pushgateway_in_process(sqlite_client):
    """The same protocol through the in-process app (no subprocess), including a retried push."""
    body = gzip.compress(b"# TYPE step gauge\nstep 4\nentropy 2.5\n")
    for _ in range(2):
        r = sqlite_client.put("/metrics/job/j/run/r/project/proj", content=body, headers={"content-encoding": "gzip"})
        assert r.status_code == 200, r.text
    doc = r.json()
    assert (doc["project"], doc["run"], doc["step"], doc["replaced"]) == ("proj", "r", 4, 0)
    assert json.loads(json.dumps(doc))["step_from"] == "the pushed step gauge"
