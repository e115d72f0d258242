"""Prometheus remote write 1.0: bodies built with protobuf + cramjam from the remote-write schema."""

from __future__ import annotations

import time
from typing import Iterator

import cramjam
import httpx
import pytest
from starlette.testclient import TestClient

from parallax.ingest import remote_write as rw
from tests.conftest import make_client
from tests.servers import parallax_server

HEADERS = {"content-type": "application/x-protobuf", "content-encoding": "snappy", "x-prometheus-remote-write-version": "0.1.0"}
NOW = int(time.time() * 1000) - 600_000  # ms: all test samples are in the recent past
T = [NOW + i * 15_000 for i in range(30)]  # a scrape every 15 s
STALE = rw.STALE_NAN  # Prometheus's staleness marker


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    """Runs without a step series are read in timestamp order at once (the default waits for one up to 30 s)."""
    with make_client(database_url=db_url, prometheus_step_wait_s=0) as c:
        yield c


@pytest.fixture
def default_client(db_url: str) -> Iterator[TestClient]:
    """The default settings: a run this process has not seen a step series of waits up to 30 s for one."""
    with make_client(database_url=db_url) as c:
        yield c


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def waiting_client(sqlite_url: str) -> Iterator[tuple[TestClient, FakeClock]]:
    """The default wait for a step series, on a clock the test moves (the background sweep is stopped)."""
    clock = FakeClock()
    with make_client(database_url=sqlite_url) as c:
        prom = c.app.state.prom
        prom.stop()
        prom._clock = clock
        yield c, clock


def body(*series: tuple[dict, list[tuple[float, int]]]) -> bytes:
    return rw.encode(list(series))


def target(name: str, run: str = "r1", **labels: str) -> dict:
    return {"__name__": name, "run": run, "job": "trainer", "instance": "10.0.0.5:8000", **labels}


def post(client, data: bytes, headers: dict | None = None) -> httpx.Response:
    return client.post("/api/v1/prom/write", content=data, headers=headers or HEADERS)


def run_id(client, name: str, project: str = "trainer") -> int:
    return next(r["id"] for r in client.get("/api/v1/runs", params={"project": project}).json()["runs"] if r["name"] == name)


def values(client, run: int, metric: str) -> list[tuple[int, float]]:
    s = client.get(f"/api/v1/runs/{run}/series", params={"metric": metric}).json()["series"][metric]
    return list(zip(s["steps"], s["values"]))


def test_steps_come_from_the_step_series_at_the_same_timestamp(client):
    r = post(client, body(
        (target("step"), [(100, T[0]), (101, T[1]), (102, T[2])]),
        (target("entropy"), [(1.5, T[0]), (1.4, T[1]), (1.3, T[2])]),
        (target("pass_at_k", k="8"), [(0.5, T[0]), (0.6, T[2])]),
        ({"__name__": "node_load1", "job": "node"}, [(0.3, T[0])]),  # no run label: not a trainer's, skipped
    ))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["accepted"] == 8 and doc["skipped_series"] == 1
    run = run_id(client, "r1")  # project = the job label (no project label)
    assert values(client, run, "entropy") == [(100, 1.5), (101, 1.4), (102, 1.3)]
    assert values(client, run, 'pass_at_k{k="8"}') == [(100, 0.5), (102, 0.6)]
    assert values(client, run, "step") == [(100, 100.0), (101, 101.0), (102, 102.0)]
    run_doc = client.get(f"/api/v1/runs/{run}").json()
    assert "remote-write" in run_doc["tags"] and run_doc["last_step"] == 102
    # A companion that arrives in a later request (another shard) finds its step.
    assert post(client, body((target("loss"), [(0.9, T[1])]))).status_code == 200
    assert values(client, run, "loss") == [(101, 0.9)]


def test_without_a_step_series_timestamps_are_steps_in_order(client):
    post(client, body((target("entropy", run="ts", project="p"), [(1.0, T[2]), (2.0, T[3])]),
                      (target("kl", run="ts", project="p"), [(0.1, T[1]), (0.2, T[3])])))
    run = run_id(client, "ts", "p")
    assert values(client, run, "kl") == [(0, 0.1), (2, 0.2)]
    assert values(client, run, "entropy") == [(1, 1.0), (2, 2.0)]
    # The next request goes on from there; the step of each timestamp is kept as the `step` metric.
    post(client, body((target("entropy", run="ts", project="p"), [(3.0, T[5])])))
    assert values(client, run, "entropy")[-1] == (3, 3.0)
    assert values(client, run, "step") == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0)]


def test_a_retried_request_changes_nothing(client):
    data = body((target("step", run="retry"), [(1, T[0]), (2, T[1])]), (target("entropy", run="retry"), [(1.0, T[0]), (0.9, T[1])]))
    assert post(client, data).json()["accepted"] == 4
    again = post(client, data)
    assert again.status_code == 200, again.text
    doc = again.json()
    assert (doc["accepted"], doc["replaced"]) == (0, 0) and doc["runs"][0]["duplicates_dropped"] == 4


@pytest.mark.parametrize(
    "late, says",
    [
        ((target("entropy", run="ooo"), [(5.0, T[0])]), "out of order"),  # older than the newest, another value
        ((target("entropy", run="ooo"), [(7.0, T[1])]), "duplicate sample for timestamp"),  # same timestamp, another value
        ((target("entropy", run="ooo"), [(1.0, T[3]), (2.0, T[2])]), "out of order"),  # backwards within the series
        ((target("entropy", run="ooo"), [(1.0, int(time.time() * 1000) + 3_600_000)]), "future"),
    ],
    ids=["older", "same-timestamp-other-value", "backwards-in-series", "future"],
)
def test_out_of_order_and_conflicting_duplicates_are_refused_whole(client, late, says):
    post(client, body((target("entropy", run="ooo"), [(1.0, T[0]), (2.0, T[1])])))
    run = run_id(client, "ooo")
    before = values(client, run, "entropy")
    # A good sample of another run rides along: nothing of the request is stored.
    r = post(client, body((target("entropy", run="bystander"), [(1.0, T[4])]), late))
    assert r.status_code == 400 and says in r.json()["detail"][0]["msg"]
    assert values(client, run, "entropy") == before
    assert "bystander" not in [x["name"] for x in client.get("/api/v1/runs").json()["runs"]]


def test_identical_duplicate_of_the_newest_is_dropped_silently(client):
    post(client, body((target("entropy", run="dup"), [(1.0, T[0]), (2.0, T[1])])))
    r = post(client, body((target("entropy", run="dup"), [(2.0, T[1]), (3.0, T[2])])))
    assert r.status_code == 200 and r.json()["accepted"] == 2  # 3.0 and the `step` of its new timestamp
    assert values(client, run_id(client, "dup"), "entropy") == [(0, 1.0), (1, 2.0), (2, 3.0)]


def test_framework_gauges_are_aliased_and_non_finite_values_kept(client):
    post(client, body(
        (target("step", run="prime"), [(1, T[0])]),
        (target("trainer_mfu_percent", run="prime"), [(40.0, T[0])]),
        (target("trainer_loss", run="prime"), [(float("nan"), T[0])]),
    ))
    run = run_id(client, "prime")
    got = {m["name"]: m for m in client.get(f"/api/v1/runs/{run}/metrics").json()["metrics"]}
    assert got["trainer_mfu"]["value"] == pytest.approx(0.4)
    assert got["trainer_loss"]["non_finite"] == "NaN" and got["loss"]["non_finite"] == "NaN"


def test_a_restarted_server_keeps_the_step_of_each_timestamp(sqlite_url):
    first = body((target("entropy", run="restart"), [(1.0, T[0]), (2.0, T[1])]))
    with make_client(database_url=sqlite_url, prometheus_step_wait_s=0) as c:
        assert post(c, first).json()["accepted"] == 4
    with make_client(database_url=sqlite_url, prometheus_step_wait_s=0) as c:
        again = post(c, first)
        assert again.status_code == 200 and again.json()["accepted"] == 0  # a retry after the restart: duplicates
        assert post(c, body((target("entropy", run="restart"), [(3.0, T[2])]))).status_code == 200
        assert values(c, run_id(c, "restart"), "entropy") == [(0, 1.0), (1, 2.0), (2, 3.0)]


def _non_utf8_label() -> bytes:
    req = rw._LENIENT["WriteRequest"]()
    ts = req.timeseries.add()
    for name, value in ((b"__name__", b"entropy"), (b"run", b"r\xff1")):
        ts.labels.add(name=name, value=value)
    ts.samples.add(value=1.0, timestamp=T[0])
    return bytes(cramjam.snappy.compress_raw(req.SerializeToString()))


@pytest.mark.parametrize(
    "data, headers, status, says",
    [
        (body((target("x"), [(1.0, T[0])])), {**HEADERS, "content-encoding": "gzip"}, 400, "Content-Encoding"),
        (b"\x00\x01garbage", HEADERS, 400, "snappy"),
        (bytes(cramjam.snappy.compress_raw(b"\x0a\xff\xff\xff\xff")), HEADERS, 400, "corrupt protobuf"),
        (_non_utf8_label(), HEADERS, 400, "label 'run' is not valid UTF-8"),
        (body(({"run": "r"}, [(1.0, T[0])])), HEADERS, 400, "no __name__"),
        (body(({"__name__": "a b", "run": "r"}, [(1.0, T[0])])), HEADERS, 400, "not a name Parallax can store"),
        (body((target("step"), [(-1.0, T[0])])), HEADERS, 400, "non-negative integer"),
        (b"", HEADERS, 400, "empty body"),
        (body((target("x"), [(1.0, T[0])])), {**HEADERS, "content-type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"}, 415, "remote write 1.0"),
        (body((target("x"), [(1.0, T[0])])), {**HEADERS, "content-type": "application/json"}, 415, "application/x-protobuf"),
    ],
    ids=["gzip-encoding", "corrupt-snappy", "corrupt-protobuf", "non-utf8-label", "no-name", "bad-name", "negative-step",
         "empty", "remote-write-2.0", "json"],
)
def test_bad_requests_say_what_was_wrong_and_store_nothing(sqlite_client, data, headers, status, says):
    r = post(sqlite_client, data, headers)
    assert r.status_code == status, r.text
    assert says in r.json()["detail"][0]["msg"]
    assert sqlite_client.get("/api/v1/runs").json()["runs"] == []
    assert sqlite_client.get("/healthz").status_code == 200


def test_a_body_that_inflates_past_the_limit_is_413(sqlite_url):
    big = body((target("x"), [(1.0, T[0])] * 20_000))  # repetitive: compresses far below the limit
    with make_client(database_url=sqlite_url, max_body_bytes=64 * 1024) as c:
        assert len(big) < 64 * 1024
        r = post(c, big)
        assert r.status_code == 413 and "PARALLAX_MAX_BODY_BYTES" in r.json()["detail"][0]["msg"]


def test_against_the_real_server_with_a_token(tmp_path):
    with parallax_server(tmp_path, env={"PARALLAX_TOKEN": "rw-token"}, args=["--database-url", f"sqlite:///{tmp_path}/x.db"]) as server:
        data = body((target("step", run="real"), [(1, T[0])]), (target("entropy", run="real"), [(1.25, T[0])]))
        with httpx.Client(base_url=server.url, timeout=10) as c:
            assert post(c, data).status_code == 401  # writes need the token
            assert post(c, b"\x00corrupt", {**HEADERS, "authorization": "Bearer rw-token"}).status_code == 400
            ok = post(c, data, {**HEADERS, "authorization": "Bearer rw-token"})
            assert ok.status_code == 200 and ok.json()["accepted"] == 2
            assert values(c, run_id(c, "real"), "entropy") == [(1, 1.25)]


# -- staleness markers, several shards, how a run ends -----------------------------------------------------------


def run_doc(client, name: str, project: str = "trainer") -> dict:
    return client.get(f"/api/v1/runs/{run_id(client, name, project)}").json()


def events(client, run: int) -> list[dict]:
    return client.get(f"/api/v1/runs/{run}/events").json()["events"]


def alerts_of(client, run: int) -> list[dict]:
    return client.get("/api/v1/alerts", params={"run_id": run}).json()["alerts"]


def test_staleness_markers_end_the_run_and_are_never_stored(client):
    """The trainer exits: Prometheus writes its last scrape and staleness markers, here in one request."""
    steps = [(float(i), T[i]) for i in range(3)]
    r = post(client, body(
        (target("step", run="exits"), steps + [(STALE, T[3])]),
        (target("entropy", run="exits"), [(1.5, T[0]), (1.4, T[1]), (1.3, T[2]), (STALE, T[3])]),
        (target("loss", run="exits"), [(0.5, T[2]), (STALE, T[3])]),
    ))
    assert r.status_code == 200, r.text
    run = run_id(client, "exits")
    assert values(client, run, "entropy") == [(0, 1.5), (1, 1.4), (2, 1.3)]
    doc = client.get(f"/api/v1/runs/{run}").json()
    assert doc["status"] == "finished" and doc["last_step"] == 2
    assert [(e["kind"], e["step"]) for e in events(client, run)] == [("end", 2)]
    assert "staleness markers" in events(client, run)[0]["message"]
    got = {m["name"]: m for m in client.get(f"/api/v1/runs/{run}/metrics").json()["metrics"]}
    assert got["loss"]["non_finite"] is None and got["loss"]["step"] == 2 and not any(m["non_finite"] for m in got.values())
    assert not alerts_of(client, run)  # no nonfinite_values from a marker
    # A retry of the same request changes nothing, and ends nothing twice.
    again = post(client, r.request.content)
    assert again.status_code == 200 and again.json()["accepted"] == 0 and len(events(client, run)) == 1


def test_markers_alone_store_nothing_and_a_run_short_of_its_total_steps_stays_running(client):
    """A crash: the step series ends before the configured total. The run stays running for trainer_silent to page."""
    created = client.post("/api/v1/runs", json={"project": "trainer", "name": "crash", "config": {"total_steps": 100}})
    assert created.status_code == 201
    post(client, body((target("step", run="crash"), [(0.0, T[0]), (1.0, T[1])]),
                      (target("entropy", run="crash"), [(2.0, T[0]), (1.9, T[1])])))
    # A companion's marker first (another shard): not the end of the step series, and never a NaN point.
    r = post(client, body((target("entropy", run="crash"), [(STALE, T[2])])))
    assert r.status_code == 200, r.text
    run = run_id(client, "crash")
    assert values(client, run, "entropy") == [(0, 2.0), (1, 1.9)]
    assert client.get(f"/api/v1/runs/{run}").json()["last_step"] == 1
    assert post(client, body((target("step", run="crash"), [(STALE, T[2])]))).status_code == 200
    assert client.get(f"/api/v1/runs/{run}").json()["status"] == "running"
    assert not events(client, run) and not alerts_of(client, run)


def test_markers_of_a_run_never_seen_create_nothing(client):
    r = post(client, body((target("step", run="ghost"), [(STALE, T[0])]), (target("kl", run="ghost"), [(STALE, T[0])])))
    assert r.status_code == 200 and r.json()["runs"] == []
    assert "ghost" not in [x["name"] for x in client.get("/api/v1/runs").json()["runs"]]


def test_a_trainer_that_comes_back_makes_its_run_running_again(client):
    post(client, body((target("step", run="back"), [(0.0, T[0]), (1.0, T[1]), (STALE, T[2])]),
                      (target("kl", run="back"), [(0.1, T[0]), (0.2, T[1]), (STALE, T[2])])))
    run = run_id(client, "back")
    assert client.get(f"/api/v1/runs/{run}").json()["status"] == "finished"
    post(client, body((target("step", run="back"), [(2.0, T[4])]), (target("kl", run="back"), [(0.3, T[4])])))
    assert client.get(f"/api/v1/runs/{run}").json()["status"] == "running"
    assert values(client, run, "kl") == [(0, 0.1), (1, 0.2), (2, 0.3)]


def test_several_shards_a_companion_waits_for_its_step(default_client):
    """Shards send a scrape's series in separate requests, in any order: nothing is invented, nothing refused."""
    shard_a = [(target("entropy", run="shards"), [(1.0, T[0]), (0.9, T[1]), (0.8, T[2])])]
    shard_b = [(target("step", run="shards"), [(100.0, T[0]), (105.0, T[1])]), (target("kl", run="shards"), [(0.1, T[0])])]
    r = post(default_client, body(*shard_a))  # no step yet for these timestamps: they wait
    assert r.status_code == 200 and r.json()["accepted"] == 0 and r.json()["runs"][0]["waiting"] == 3
    run = run_id(default_client, "shards")
    assert values(default_client, run, "entropy") == [] and values(default_client, run, "step") == []
    r = post(default_client, body(*shard_b))
    assert r.status_code == 200, r.text
    assert values(default_client, run, "entropy") == [(100, 1.0), (105, 0.9)]  # T[2] still waits for its step
    assert r.json()["runs"][0]["waiting"] == 1
    assert post(default_client, body((target("step", run="shards"), [(110.0, T[2])]))).status_code == 200
    assert values(default_client, run, "entropy") == [(100, 1.0), (105, 0.9), (110, 0.8)]
    assert values(default_client, run, "step") == [(100, 100.0), (105, 105.0), (110, 110.0)]  # as sent: none invented
    # A companion whose step never came (the step series moved past its timestamp) is dropped, not placed.
    post(default_client, body((target("kl", run="shards"), [(0.5, T[4])])))
    r = post(default_client, body((target("step", run="shards"), [(120.0, T[5])])))
    assert r.json()["runs"][0]["unplaced"] == 1
    assert values(default_client, run, "kl") == [(100, 0.1)]


def test_without_a_step_series_samples_wait_then_timestamps_are_steps(waiting_client):
    c, clock = waiting_client
    r = post(c, body((target("entropy", run="nostep"), [(1.0, T[0]), (2.0, T[1])])))
    assert r.status_code == 200 and r.json()["runs"][0]["waiting"] == 2
    run = run_id(c, "nostep")
    clock.now += 10
    post(c, body((target("entropy", run="nostep"), [(3.0, T[2])])))
    assert values(c, run, "entropy") == []  # still waiting for a step series
    clock.now += 25  # 35 s since the first: past the 30 s wait
    assert c.app.state.prom.sweep() == 1
    assert values(c, run, "entropy") == [(0, 1.0), (1, 2.0), (2, 3.0)]
    assert values(c, run, "step") == [(0, 0.0), (1, 1.0), (2, 2.0)]
    post(c, body((target("entropy", run="nostep"), [(4.0, T[3])])))  # the run is known now: no more waiting
    assert values(c, run, "entropy")[-1] == (3, 4.0)


def test_a_step_series_ends_the_wait_at_once(waiting_client):
    c, clock = waiting_client
    post(c, body((target("entropy", run="soon"), [(1.0, T[0])])))
    post(c, body((target("global_step", run="soon"), [(7.0, T[0])])))
    assert values(c, run_id(c, "soon"), "entropy") == [(7, 1.0)]


def test_parallax_own_series_and_prometheus_scrape_series_are_never_a_runs_data(client):
    """Prometheus scraping Parallax's /metrics with the README's `keep run=.+` relabelling sends these back."""
    own = {"job": "parallax", "instance": "127.0.0.1:8050", "run": "own", "project": "trainer", "run_id": "1"}
    r = post(client, body(
        (target("step", run="own"), [(60.0, T[0])]),
        ({"__name__": "parallax_metric", "metric": "entropy", **own}, [(1.0, T[1])]),
        ({"__name__": "parallax_run_last_step", **own}, [(60.0, T[1])]),
        ({"__name__": "parallax_alert", "rule": "x", "state": "firing", "severity": "critical", **own}, [(1.0, T[1])]),
        ({"__name__": "up", **own}, [(1.0, T[1])]),
        (target("scrape_duration_seconds", run="own"), [(0.01, T[0])]),
    ))
    assert r.status_code == 200 and r.json()["skipped_series"] == 5
    run = run_id(client, "own")
    assert client.get(f"/api/v1/runs/{run}").json()["last_step"] == 60
    names = {m["name"] for m in client.get(f"/api/v1/runs/{run}/metrics").json()["metrics"]}
    assert names == {"step"}


def test_labelled_pass_at_k_feeds_the_canonical_panels(client):
    created = client.post("/api/v1/runs", json={"project": "trainer", "name": "k16", "config": {"k": 16}})
    assert created.status_code == 201
    for run in ("k8", "k16"):
        post(client, body((target("step", run=run), [(3.0, T[0])]),
                          (target("pass_at_k", run=run, k="8"), [(0.5, T[0])]),
                          (target("pass_at_k", run=run, k="16"), [(0.7, T[0])]),
                          (target("pass_at_k", run=run, k="1"), [(0.2, T[0])])))
    latest_of = lambda run: {m["name"]: m["value"] for m in client.get(f"/api/v1/runs/{run_id(client, run)}/metrics").json()["metrics"]}  # noqa: E731
    k8, k16 = latest_of("k8"), latest_of("k16")
    assert k8["pass_at_k"] == 0.5 and k8['pass_at_k{k="8"}'] == 0.5 and k8["pass_at_1"] == 0.2
    assert k16["pass_at_k"] == 0.7 and k16['pass_at_k{k="16"}'] == 0.7
    # A canonical name the trainer sends itself wins.
    post(client, body((target("step", run="own-k"), [(1.0, T[0])]), (target("pass_at_k", run="own-k"), [(0.9, T[0])]),
                      (target("pass_at_k", run="own-k", k="8"), [(0.1, T[0])])))
    assert latest_of("own-k")["pass_at_k"] == 0.9


def test_the_finished_gauge_ends_the_run_and_zero_makes_it_running_again(client):
    post(client, body((target("step", run="says"), [(0.0, T[0]), (1.0, T[1])]),
                      (target("parallax_run_finished", run="says"), [(0.0, T[0]), (1.0, T[1])])))
    run = run_id(client, "says")
    assert client.get(f"/api/v1/runs/{run}").json()["status"] == "finished"
    assert [e["kind"] for e in events(client, run)] == ["end"]
    # Prometheus keeps scraping the finished trainer: nothing changes, no second end.
    post(client, body((target("step", run="says"), [(1.0, T[2])]), (target("parallax_run_finished", run="says"), [(1.0, T[2])])))
    assert client.get(f"/api/v1/runs/{run}").json()["status"] == "finished" and len(events(client, run)) == 1
    post(client, body((target("step", run="says"), [(2.0, T[3])]), (target("parallax_run_finished", run="says"), [(0.0, T[3])])))
    assert client.get(f"/api/v1/runs/{run}").json()["status"] == "running"


def test_empty_label_values_are_no_labels(client):
    post(client, body((target("step", run="empty"), [(1.0, T[0])]), (target("entropy", run="empty", rank=""), [(1.0, T[0])])))
    assert values(client, run_id(client, "empty"), "entropy") == [(1, 1.0)]


def test_without_a_step_series_the_first_marker_that_ends_a_series_ends_the_run(client):
    post(client, body((target("entropy", run="tsend"), [(1.0, T[0]), (2.0, T[1])]),
                      (target("kl", run="tsend"), [(0.1, T[0]), (0.2, T[1])])))
    run = run_id(client, "tsend")
    r = post(client, body((target("kl", run="tsend"), [(0.3, T[2])]), (target("entropy", run="tsend"), [(STALE, T[2])])))
    assert r.status_code == 200, r.text
    doc = client.get(f"/api/v1/runs/{run}").json()
    assert doc["status"] == "finished" and [e["step"] for e in events(client, run)] == [2]
    assert values(client, run, "entropy") == [(0, 1.0), (1, 2.0)] and values(client, run, "kl")[-1] == (2, 0.3)


def test_a_marker_followed_by_samples_in_the_same_request_ends_nothing(client):
    """The target flapped: a failed scrape's markers, then the next scrape's samples, all in one request."""
    post(client, body((target("step", run="flap"), [(0.0, T[0]), (STALE, T[1]), (1.0, T[2])]),
                      (target("kl", run="flap"), [(0.1, T[0]), (STALE, T[1]), (0.2, T[2])])))
    run = run_id(client, "flap")
    assert client.get(f"/api/v1/runs/{run}").json()["status"] == "running" and not events(client, run)
    assert values(client, run, "kl") == [(0, 0.1), (1, 0.2)]
