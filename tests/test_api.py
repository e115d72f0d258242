"""The HTTP API in-process (DESIGN §4): runs, ingest, series, events, health, /metrics."""

import json
import math
import time

import pytest

from tests.conftest import make_client, new_run


def post_points(client, run_id, points, **kw):
    return client.post(f"/api/v1/runs/{run_id}/metrics", json={"points": points}, **kw)


def test_run_lifecycle(client):
    r = client.post("/api/v1/runs", json={"project": "p", "name": "r", "config": {"framework": "verl", "k": 8}, "tags": ["base"]})
    assert r.status_code == 201
    run = r.json()
    assert run["status"] == "running" and run["config"] == {"framework": "verl", "k": 8}
    again = client.post("/api/v1/runs", json={"project": "p", "name": "r"})
    assert again.status_code == 200 and again.json()["id"] == run["id"]
    patched = client.patch(f"/api/v1/runs/{run['id']}", json={"status": "finished", "notes": "ok"})
    assert patched.status_code == 200 and patched.json()["status"] == "finished"
    assert client.get("/api/v1/runs", params={"status": "finished"}).json()["count"] == 1
    assert client.get("/api/v1/runs", params={"tag": "nope"}).json() == {"runs": [], "count": 0}
    assert client.get(f"/api/v1/runs/{run['id']}").json()["notes"] == "ok"


def test_ingest_is_idempotent_and_counts(client):
    run = new_run(client)
    points = [{"step": s, "metrics": {"entropy": 2.0 - s / 100, "importance_weight_max": 1.1}, "time": 1764000000.0 + s} for s in range(100)]
    first = post_points(client, run, points)
    assert first.status_code == 200 and first.json() == {"accepted": 200, "replaced": 0, "non_finite": 0}
    retry = post_points(client, run, points)
    assert retry.json() == {"accepted": 200, "replaced": 0, "non_finite": 0}
    later = post_points(client, run, [{"step": 99, "metrics": {"entropy": 5.0}}])
    assert later.json()["replaced"] == 1
    body = client.get(f"/api/v1/runs/{run}/series", params={"metric": ["entropy", "importance_weight_max"]}).json()
    assert body["series"]["entropy"]["steps"] == list(range(100))
    assert body["series"]["entropy"]["values"][-1] == 5.0
    latest = {m["name"]: m for m in client.get(f"/api/v1/runs/{run}/metrics").json()["metrics"]}
    assert latest["entropy"]["step"] == 99 and latest["entropy"]["value"] == 5.0
    assert client.get(f"/api/v1/runs/{run}").json()["last_step"] == 99


def test_nan_and_infinity_as_python_writes_them(client):
    run = new_run(client)
    raw = json.dumps({"points": [{"step": 1, "metrics": {"loss": math.nan, "grad_norm": math.inf, "kl": -math.inf, "entropy": 1.0}}]})
    r = client.post(f"/api/v1/runs/{run}/metrics", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json() == {"accepted": 4, "replaced": 0, "non_finite": 3}
    s = client.get(f"/api/v1/runs/{run}/series", params={"metric": ["loss", "grad_norm", "kl"]}).json()["series"]
    assert s["loss"]["values"] == [None] and s["loss"]["non_finite"] == {"steps": [1], "values": ["NaN"]}
    assert s["grad_norm"]["non_finite"]["values"] == ["Infinity"] and s["kl"]["non_finite"]["values"] == ["-Infinity"]
    latest = {m["name"]: m for m in client.get(f"/api/v1/runs/{run}/metrics").json()["metrics"]}
    assert latest["loss"]["non_finite"] == "NaN" and latest["loss"]["value"] is None


def test_ndjson_ingest(client):
    run = new_run(client)
    lines = "\n".join(json.dumps({"step": s, "metrics": {"pass_at_1": s / 10}}) for s in range(5)) + "\n"
    r = client.post(f"/api/v1/runs/{run}/metrics", content=lines, headers={"content-type": "application/x-ndjson"})
    assert r.json()["accepted"] == 5
    assert client.get(f"/api/v1/runs/{run}/series", params={"metric": "pass_at_1"}).json()["series"]["pass_at_1"]["steps"] == [0, 1, 2, 3, 4]


def test_a_bad_point_rejects_the_whole_batch(client):
    run = new_run(client)
    points = [{"step": s, "metrics": {"a": 1.0}} for s in range(10)] + [{"step": 10, "metrics": {"a": "oops"}}]
    r = post_points(client, run, points)
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"] == ["body", "points", 10, "metrics", "a"] and err["index"] == 10
    assert client.get(f"/api/v1/runs/{run}/series", params={"metric": "a"}).json()["series"]["a"]["steps"] == []


def test_series_downsampling_and_live_refresh(client):
    run = new_run(client)
    for base in range(0, 20_000, 5000):
        pts = [{"step": s, "metrics": {"importance_weight_max": 1.0}, "time": 1.7e9 + s} for s in range(base, base + 5000)]
        assert post_points(client, run, pts).status_code == 200
    assert post_points(client, run, [{"step": 12_345, "metrics": {"importance_weight_max": 80.0}}]).json()["replaced"] == 1
    s = client.get(f"/api/v1/runs/{run}/series", params={"metric": "importance_weight_max", "max_points": 300}).json()["series"]["importance_weight_max"]
    assert s["downsampled"] and len(s["steps"]) <= 300 and max(s["max"]) == 80.0
    assert s["steps"][0] == 0 and s["steps"][-1] == 19_999
    newer = client.get(f"/api/v1/runs/{run}/series", params={"metric": "importance_weight_max", "since_step": 19_995, "x": "time"}).json()
    assert newer["x"] == "time"
    assert newer["series"]["importance_weight_max"]["steps"] == [19_996, 19_997, 19_998, 19_999]
    assert newer["series"]["importance_weight_max"]["times"] == [1.7e9 + s for s in range(19_996, 20_000)]


def test_events(client):
    run = new_run(client)
    r = client.post(f"/api/v1/runs/{run}/events", json={"events": [{"step": 50, "kind": "resume", "message": "ckpt 50"}]})
    assert r.status_code == 201
    events = client.get(f"/api/v1/runs/{run}/events").json()["events"]
    assert [(e["step"], e["kind"]) for e in events] == [(50, "resume")]
    bad = client.post(f"/api/v1/runs/{run}/events", json={"events": [{"step": 1, "kind": "Bad Kind"}]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "events", 0, "kind"]


def test_an_event_is_stored_once(client):
    """A client's retried request (or a resume announced twice) does not draw two markers."""
    run = new_run(client)
    batch = {"events": [{"step": 50, "kind": "resume", "message": "ckpt 50", "time": 1.0},
                        {"step": 60, "kind": "checkpoint", "message": "", "time": 2.0},
                        {"step": 60, "kind": "checkpoint", "message": "", "time": 2.5}]}  # twice in one request
    assert client.post(f"/api/v1/runs/{run}/events", json=batch).json() == {"accepted": 2, "duplicates": 1}
    batch["events"][0]["time"] = 9.0  # the retry carries another time: still the same event
    assert client.post(f"/api/v1/runs/{run}/events", json=batch).json() == {"accepted": 0, "duplicates": 3}
    other = {"events": [{"step": 50, "kind": "resume", "message": "ckpt 49"}, {"step": 50, "kind": "note", "message": "ckpt 50"},
                        {"step": 51, "kind": "resume", "message": "ckpt 50"}]}
    assert client.post(f"/api/v1/runs/{run}/events", json=other).json() == {"accepted": 3, "duplicates": 0}
    events = client.get(f"/api/v1/runs/{run}/events").json()["events"]
    assert [(e["step"], e["kind"], e["message"], e["time"]) for e in events] == [
        (50, "resume", "ckpt 50", 1.0), (50, "resume", "ckpt 49", events[1]["time"]), (50, "note", "ckpt 50", events[2]["time"]),
        (51, "resume", "ckpt 50", events[3]["time"]), (60, "checkpoint", "", 2.0)]
    other_run = new_run(client, "other")  # events are per run
    assert client.post(f"/api/v1/runs/{other_run}/events", json=batch).json() == {"accepted": 2, "duplicates": 1}


def test_healthz_and_prometheus_metrics(client):
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["database"]["reachable"] and h["database"]["at_head"]
    run = new_run(client)
    post_points(client, run, [{"step": 3, "metrics": {"entropy": 1.25, "not_canonical": 2.0}}])
    text = client.get("/metrics").text
    assert 'parallax_ingest_points_total{outcome="accepted"} 2.0' in text
    assert 'parallax_http_requests_total{method="POST",route="/api/v1/runs/{run_id}/metrics",status="200"} 1.0' in text
    assert f'parallax_metric{{metric="entropy",project="proj",run="run-1",run_id="{run}"}} 1.25' in text
    assert "not_canonical" not in text
    assert f'parallax_run_last_step{{project="proj",run="run-1",run_id="{run}"}} 3.0' in text


def test_root_redirects_to_the_dashboard(client):
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/dashboard/"
    page = client.get("/dashboard/")
    assert page.status_code == 200 and "/dashboard/_dash-component-suites/" in page.text
    layout = client.get("/dashboard/_dash-layout")
    assert layout.status_code == 200 and "No runs yet" in layout.text


# -- bad input: a clear 4xx, never a 500, never a partial write ---------------------------


@pytest.mark.parametrize(
    "content, ctype, status, loc",
    [
        (b"{nope", "application/json", 400, ["body"]),
        (b'{"points": {"step": 1}}', "application/json", 422, ["body", "points"]),
        (b'{"points": [{"step": -3, "metrics": {"a": 1}}]}', "application/json", 422, ["body", "points", 0, "step"]),
        (b'{"points": [{"step": 2.5, "metrics": {"a": 1}}]}', "application/json", 422, ["body", "points", 0, "step"]),
        (b'{"points": [{"step": 1, "metrics": {"bad name!": 1}}]}', "application/json", 422, ["body", "points", 0, "metrics", "bad name!"]),
        (b'{"points": [{"step": 1, "metrics": {"a": [1]}}]}', "application/json", 422, ["body", "points", 0, "metrics", "a"]),
        (b'{"step": 1, "metrics": {"a": 1}}\n{"step": "x", "metrics": {}}', "application/x-ndjson", 422, ["body", 1, "step"]),
    ],
)
def test_bad_ingest_bodies(sqlite_client, content, ctype, status, loc):
    run = new_run(sqlite_client)
    r = sqlite_client.post(f"/api/v1/runs/{run}/metrics", content=content, headers={"content-type": ctype})
    assert r.status_code == status, r.text
    assert r.json()["detail"][0]["loc"] == loc
    assert sqlite_client.get(f"/api/v1/runs/{run}").json()["last_step"] is None


def test_bad_requests_elsewhere(sqlite_client):
    c = sqlite_client
    run = new_run(c)
    assert c.post("/api/v1/runs/999/metrics", json={"points": [{"step": 1, "metrics": {"a": 1}}]}).status_code == 404
    assert c.get("/api/v1/runs/999").status_code == 404
    assert c.get("/api/v1/runs/abc").status_code == 422
    assert c.get(f"/api/v1/runs/{2**40}").status_code == 422
    assert c.post(f"/api/v1/runs/{run}/metrics", content=b"a=1", headers={"content-type": "text/plain"}).status_code == 415
    assert c.post("/api/v1/runs", json={"project": "", "name": "x"}).json()["detail"][0]["loc"] == ["body", "project"]
    assert c.post("/api/v1/runs", json={"project": "p", "name": "x", "config": "no"}).status_code == 422
    nan_config = c.post("/api/v1/runs", content=b'{"project": "p", "name": "x", "config": {"lr": NaN}}', headers={"content-type": "application/json"})
    assert nan_config.status_code == 422
    assert c.patch(f"/api/v1/runs/{run}", json={"status": "exploded"}).status_code == 422
    assert c.get(f"/api/v1/runs/{run}/series").status_code == 422  # metric is required
    assert c.get(f"/api/v1/runs/{run}/series", params={"metric": "a", "max_points": 10**9}).json()["detail"][0]["loc"] == ["query", "max_points"]
    assert c.get(f"/api/v1/runs/{run}/series", params={"metric": "bad name"}).status_code == 422
    assert c.get(f"/api/v1/runs/{run}/series", params={"metric": "a", "x": "wall"}).status_code == 422


def test_body_size_limit(sqlite_url):
    with make_client(database_url=sqlite_url, max_body_bytes=4096) as c:
        run = new_run(c)
        big = {"points": [{"step": s, "metrics": {"a": 1.0}} for s in range(500)]}
        r = c.post(f"/api/v1/runs/{run}/metrics", json=big)
        assert r.status_code == 413 and "4096" in r.json()["detail"]

        def chunks():  # no Content-Length: the limit applies while streaming
            for _ in range(10):
                yield b" " * 1000

        streamed = c.post(f"/api/v1/runs/{run}/metrics", content=chunks(), headers={"content-type": "application/json"})
        assert streamed.status_code == 413
        assert c.get(f"/api/v1/runs/{run}").json()["last_step"] is None


def test_nul_characters_are_a_4xx_on_both_backends(client):
    run = new_run(client)
    assert client.patch(f"/api/v1/runs/{run}", json={"notes": "a\x00b"}).status_code == 422
    r = client.post(f"/api/v1/runs/{run}/events", json={"events": [{"step": 1, "kind": "note", "message": "x\x00"}]})
    assert r.status_code == 422
    assert client.get("/api/v1/runs", params={"project": "p\x00"}).status_code in (200, 422)
    nested = b'{"points": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    deep = client.post(f"/api/v1/runs/{run}/metrics", content=nested, headers={"content-type": "application/json"})
    assert deep.status_code == 400


def _ingest_counts(client) -> dict[str, float]:
    out = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("parallax_ingest_points_total{"):
            out[line.split('outcome="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
    return out


def _delta(before: dict, after: dict) -> dict:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("accepted", "aliased", "replaced", "non_finite")}


def test_every_ingest_path_counts_points_the_same(sqlite_client):
    """A framework key (prime-rl's trainer_mfu_percent, aliased to trainer_mfu) by JSON, Pushgateway and remote
    write: on each path the counters grow by the stored points, alias copies included, as the answer reports them."""
    from parallax.ingest import remote_write as rw

    c = sqlite_client
    run = new_run(c)
    json_body = '{"points": [{"step": 1, "metrics": {"trainer_mfu_percent": 40.0, "loss": NaN}}]}'
    push_body = "# TYPE trainer_mfu_percent gauge\ntrainer_mfu_percent 40\n# TYPE loss gauge\nloss NaN\n# TYPE step gauge\nstep 1\n"
    t = int(time.time() * 1000)
    rw_body = rw.encode([
        ({"__name__": "step", "run": "rw"}, [(1.0, t)]),
        ({"__name__": "trainer_mfu_percent", "run": "rw"}, [(40.0, t)]),
        ({"__name__": "loss", "run": "rw"}, [(float("nan"), t)]),
    ])
    sends = [
        lambda: c.post(f"/api/v1/runs/{run}/metrics", content=json_body, headers={"content-type": "application/json"}),
        lambda: c.put("/metrics/job/trainer/run/pushed", content=push_body),
        lambda: c.post("/api/v1/prom/write", content=rw_body, headers={
            "content-type": "application/x-protobuf", "content-encoding": "snappy",
            "x-prometheus-remote-write-version": "0.1.0"}),
    ]
    for send in sends:
        before = _ingest_counts(c)
        r = send()
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["aliased"] == 1 and doc["non_finite"] == 1
        assert _delta(before, _ingest_counts(c)) == {
            "accepted": doc["accepted"] + doc["aliased"], "aliased": 1.0, "replaced": 0.0, "non_finite": 1.0}
