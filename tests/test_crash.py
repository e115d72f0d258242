"""Crash safety (issue #8): `parallax serve` SIGKILLed at random moments while writers stream batches.

The server is started again on the same port and database after each kill.
Writers post JSON batches, two more push through the Pushgateway route. Every
batch it acknowledged (2xx) is there afterwards with its values, nothing
is stored twice (the rollup counts equal the points'), a batch cut off by the
kill is stored whole or not at all, and a batch sent again after a kill
replaces nothing. bench/soak.py drives the load and does the checking; `make
soak` runs the same for a minute per backend.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from sqlalchemy import create_engine, text

from bench.soak import SentBatch, Soak, SoakConfig, WriterStats, body_of, check, failures, soak
from tests.conftest import make_client

KILLS = 3


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(db_url, tmp_path, record_property):
    cfg = SoakConfig(database_url=db_url, seconds=3, writers=8, runs=4, kills=KILLS, seed=8, push_writers=2)
    report = soak(cfg, tmp_path)
    print(json.dumps(report))
    record_property("soak", json.dumps(report))
    assert failures(report, KILLS) == {}
    assert report["acknowledged_points"] > 0 and report["pushes"] > 0
    assert report["stored_points"] >= report["acknowledged_points"]
    assert report["retried_batches"] + report["abandoned_batches"] > 0  # the kills did cut requests off


def test_the_check_finds_lost_partial_and_duplicated_points(sqlite_url):
    """The oracle itself: a database tampered with after the fact is caught on every count."""
    cfg = SoakConfig(database_url=sqlite_url, writers=1, runs=1, metrics=2, steps_per_batch=5)
    sent = [SentBatch(run=0, steps=list(range(i * 5, i * 5 + 5)), acked=True, attempts=1) for i in range(3)]
    with make_client(database_url=sqlite_url) as client:
        run_id = client.post("/api/v1/runs", json={"project": "p", "name": "r"}).json()["id"]
        for b in sent:
            r = client.post(f"/api/v1/runs/{run_id}/metrics", content=body_of(0, b.steps, cfg.metrics), headers={"content-type": "application/json"})
            assert r.json() == {"accepted": 10, "replaced": 0, "non_finite": 1 if b.steps[0] == 0 else 0}
    load = Soak(cfg, [SimpleNamespace(output=lambda: "ok")])
    load.run_ids = [run_id]
    load.stats = [WriterStats(batches=sent)]
    clean = check(load, sqlite_url)
    assert clean["acknowledged_points"] == clean["stored_points"] == 30
    assert {k: v for k, v in clean.items() if v and k not in ("acknowledged_batches", "acknowledged_points", "stored_points")} == {}

    sent[2].acked, sent[2].abandoned = False, True  # in flight at a kill: all or nothing
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM points WHERE run_id = :r AND step = 7"), {"r": run_id})  # acked: 2 points lost
        conn.execute(text("DELETE FROM points WHERE run_id = :r AND step = 14"), {"r": run_id})  # the last step: partial
        conn.execute(text("INSERT INTO points SELECT run_id, key_id, 99, value, nonfinite, time FROM points WHERE run_id = :r AND step = 1"), {"r": run_id})
        conn.execute(text("UPDATE points SET value = value + 1 WHERE run_id = :r AND step = 3"), {"r": run_id})
    engine.dispose()
    load.servers = [SimpleNamespace(output=lambda: "sqlite3.OperationalError: database is locked")]
    found = check(load, sqlite_url)
    assert found["lost"] == 2
    assert found["partial_batches"] == 1
    assert found["unexpected_points"] == 2 and found["duplicated"] >= 2
    assert found["wrong_values"] == 2
    assert found["latest_mismatches"] == 2  # step 99 is newer than what latest holds
    assert found["rollup_mismatches"] > 0
    assert found["last_step_mismatches"] == 1
    assert found["database_locked"] == 1
