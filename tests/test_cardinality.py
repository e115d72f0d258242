"""The metric limit per run (PARALLAX_MAX_METRICS_PER_RUN) on every ingest path, both backends.

A batch that would take a run past the limit is refused whole with a message
naming the limit, the run's count and the setting; nothing of it is stored,
and the run keeps accepting points of the metrics it has.
"""

from __future__ import annotations

import time

import orjson
import pytest

from parallax.ingest import remote_write
from parallax.server.config import Settings
from tests.conftest import make_client, new_run

RW_HEADERS = {"content-type": "application/x-protobuf", "content-encoding": "snappy"}


def _points(names, step: int = 0) -> dict:
    return {"points": [{"step": step, "metrics": {n: 1.0 for n in names}}]}


def _latest_names(c, run: int) -> set[str]:
    return {m["name"] for m in c.get(f"/api/v1/runs/{run}/metrics").json()["metrics"]}


def test_the_default_limit_and_its_variable(monkeypatch):
    assert Settings().max_metrics_per_run == 10_000
    monkeypatch.setenv("PARALLAX_MAX_METRICS_PER_RUN", "25")
    assert Settings().max_metrics_per_run == 25


def test_100000_distinct_names_in_one_run_are_refused_and_the_run_still_works(db_url):
    with make_client(database_url=db_url) as c:
        run = new_run(c)
        assert c.post(f"/api/v1/runs/{run}/metrics", json=_points(["entropy", "loss"])).status_code == 200
        body = orjson.dumps(_points([f"m{i:06d}" for i in range(100_000)], step=1))
        r = c.post(f"/api/v1/runs/{run}/metrics", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        err = r.json()["detail"][0]
        assert err["type"] == "too_many_metrics" and err["loc"] == ["body"]
        assert (err["limit"], err["current"], err["new"]) == (10_000, 2, 100_000)
        assert "PARALLAX_MAX_METRICS_PER_RUN" in err["msg"] and "10,000" in err["msg"] and "100,000" in err["msg"]
        # Nothing of it stored; the run goes on.
        assert c.get(f"/api/v1/runs/{run}").json()["last_step"] == 0
        ok = c.post(f"/api/v1/runs/{run}/metrics", json=_points(["entropy", "loss", "kl"], step=2))
        assert ok.status_code == 200 and ok.json()["accepted"] == 3
        assert _latest_names(c, run) == {"entropy", "loss", "kl"}
        # Another run is not affected by this one's count.
        other = new_run(c, "run-2")
        assert c.post(f"/api/v1/runs/{other}/metrics", json=_points([f"x{i}" for i in range(500)])).status_code == 200


def test_json_and_ndjson_up_to_the_limit_then_refused(db_url):
    with make_client(database_url=db_url, max_metrics_per_run=10) as c:
        run = new_run(c)
        assert c.post(f"/api/v1/runs/{run}/metrics", json=_points([f"a{i}" for i in range(6)])).status_code == 200
        ndjson = b"\n".join(orjson.dumps({"step": s, "metrics": {f"a{i}": 1.0 for i in range(10)}}) for s in (1, 2))
        r = c.post(f"/api/v1/runs/{run}/metrics", content=ndjson, headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 200, r.text  # exactly at the limit
        refused = c.post(f"/api/v1/runs/{run}/metrics", json=_points(["a0", "a1", "a10"], step=3))
        assert refused.status_code == 422
        err = refused.json()["detail"][0]
        assert (err["current"], err["new"], err["limit"]) == (10, 1, 10)
        assert c.get(f"/api/v1/runs/{run}").json()["last_step"] == 2  # a0 and a1 at step 3 were not stored either
        assert c.post(f"/api/v1/runs/{run}/metrics", json=_points(["a0", "a9"], step=3)).status_code == 200


def test_the_count_survives_a_restart(db_url):
    with make_client(database_url=db_url, max_metrics_per_run=5) as c:
        run = new_run(c)
        assert c.post(f"/api/v1/runs/{run}/metrics", json=_points(["a", "b", "c", "d"])).status_code == 200
    with make_client(database_url=db_url, max_metrics_per_run=5) as c:
        assert c.post(f"/api/v1/runs/{run}/metrics", json=_points(["e", "f"], step=1)).status_code == 422
        assert c.post(f"/api/v1/runs/{run}/metrics", json=_points(["a", "e"], step=1)).status_code == 200


def test_canonical_copies_count_too(sqlite_url):
    with make_client(database_url=sqlite_url, max_metrics_per_run=3) as c:
        run = new_run(c, config={"framework": "verl"})
        # actor/entropy is also stored as entropy: two names.
        assert c.post(f"/api/v1/runs/{run}/metrics", json=_points(["actor/entropy"])).status_code == 200
        assert _latest_names(c, run) == {"actor/entropy", "entropy"}
        assert c.post(f"/api/v1/runs/{run}/metrics", json=_points(["a", "b"], step=1)).status_code == 422


def test_pushgateway_over_the_limit_is_a_400_and_creates_no_run(db_url):
    with make_client(database_url=db_url, max_metrics_per_run=3) as c:
        r = c.post("/metrics/job/j/run/r1", content=b"a 1\nb 2\nc 3\nd 4\n")
        assert r.status_code == 400, r.text
        assert r.json()["detail"][0]["type"] == "too_many_metrics"
        assert c.get("/api/v1/runs", params={"project": "j"}).json()["count"] == 0
        assert c.post("/metrics/job/j/run/r1", content=b"step 0\na 1\n").status_code == 200
        assert c.post("/metrics/job/j/run/r1", content=b"step 1\nb 1\nc 1\n").status_code == 400
        assert c.post("/metrics/job/j/run/r1", content=b"step 1\nb 1\n").status_code == 200


def test_remote_write_over_the_limit_stores_nothing_of_the_request(db_url):
    now = int(time.time() * 1000)
    with make_client(database_url=db_url, max_metrics_per_run=4, prometheus_step_wait_s=0) as c:  # timestamp order at once
        first = remote_write.encode([({"__name__": "a", "run": "ok"}, [(1.0, now - 5000)]), ({"__name__": "a", "run": "full"}, [(1.0, now - 5000)])])
        assert c.post("/api/v1/prom/write", content=first, headers=RW_HEADERS).status_code == 200
        # Run "ok" stays under the limit, run "full" goes past it: the whole request is refused.
        series = [({"__name__": "b", "run": "ok"}, [(1.0, now - 4000)])]
        series += [({"__name__": f"x{i}", "run": "full"}, [(1.0, now - 4000)]) for i in range(5)]
        r = c.post("/api/v1/prom/write", content=remote_write.encode(series), headers=RW_HEADERS)
        assert r.status_code == 400, r.text
        assert r.json()["detail"][0]["type"] == "too_many_metrics"
        runs = {x["name"]: x["id"] for x in c.get("/api/v1/runs", params={"project": "prometheus"}).json()["runs"]}
        assert _latest_names(c, runs["ok"]) == {"a", "step"}
        # A new run whose first request is over the limit is not created.
        series = [({"__name__": f"y{i}", "run": "new"}, [(1.0, now - 3000)]) for i in range(5)]
        assert c.post("/api/v1/prom/write", content=remote_write.encode(series), headers=RW_HEADERS).status_code == 400
        assert "new" not in {x["name"] for x in c.get("/api/v1/runs").json()["runs"]}
        # Both runs go on.
        again = remote_write.encode([({"__name__": "b", "run": "ok"}, [(2.0, now - 2000)]), ({"__name__": "a", "run": "full"}, [(2.0, now - 2000)])])
        assert c.post("/api/v1/prom/write", content=again, headers=RW_HEADERS).status_code == 200


@pytest.mark.parametrize("limit", [7])
def test_trajectory_metrics_count_too(sqlite_url, limit):
    with make_client(database_url=sqlite_url, max_metrics_per_run=limit) as c:
        run = new_run(c)
        assert c.post(f"/api/v1/runs/{run}/metrics", json=_points([f"a{i}" for i in range(limit)])).status_code == 200
        doc = {"trajectories": [{"step": 1, "turns": [{"prompt_ids": [1, 2], "completion_ids": [3]}]}]}
        r = c.post(f"/api/v1/runs/{run}/trajectories", json=doc)
        assert r.status_code == 422 and r.json()["detail"][0]["type"] == "too_many_metrics"
        assert c.get(f"/api/v1/runs/{run}/audit").json()["trajectories"] == 0
