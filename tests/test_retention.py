"""Retention: finished runs silent for N days lose their points, a bounded chunk at a time, on both backends."""

import random
import threading
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from parallax.server.retention import DAY, RetentionService
from tests.conftest import make_client, write

T = 1_000_000.0  # "now" of the writes; sweeps run days later


def settings(days=1.0):
    return SimpleNamespace(retention_days=days, retention_interval_seconds=3600.0)


def run_with_points(store, name, steps, metrics=("a", "b", "c"), status="finished", now=T, seed=0):
    rng = random.Random(seed)
    run, _ = store.create_run("p", name, {"lr": 1e-6}, ["t"])
    rows = [(m, s, rng.uniform(-5, 5), 0, now) for s in steps for m in metrics]
    for i in range(0, len(rows), 3000):
        write(store, run.id, rows[i : i + 3000], now=now)
    if status != "running":
        store.update_run(run.id, status=status)
    return run.id


def count(store, table, run_id):
    with store.engine.connect() as conn:
        return conn.execute(text(f"SELECT count(*) FROM {table} WHERE run_id = :r"), {"r": run_id}).scalar_one()


def assert_derived_match_points(store, run_id):
    """Rollup blocks and latest rows are exactly what the remaining points give."""
    with store.engine.connect() as conn:
        pts = conn.execute(text("SELECT key_id, step, value FROM points WHERE run_id = :r"), {"r": run_id}).all()
        for level, size in ((1, 64), (2, 4096)):
            got = {
                (r.key_id, r.block): (r.n, r.vmin, r.vmax, r.last_step)
                for r in conn.execute(
                    text("SELECT key_id, block, n, vmin, vmax, last_step FROM rollups WHERE run_id = :r AND level = :l"),
                    {"r": run_id, "l": level},
                )
            }
            want: dict = {}
            for k, s, v in pts:
                want.setdefault((k, s // size), []).append((s, v))
            assert got == {
                b: (len(m), min(v for _, v in m), max(v for _, v in m), max(s for s, _ in m)) for b, m in want.items()
            }
        latest = dict(conn.execute(text("SELECT key_id, step FROM latest WHERE run_id = :r"), {"r": run_id}).all())
        top: dict = {}
        for k, s, _ in pts:
            top[k] = max(top.get(k, s), s)
        assert latest == top


def test_only_finished_runs_silent_for_longer_than_the_setting_lose_their_points(store):
    old_done = run_with_points(store, "old-finished", range(300))
    old_failed = run_with_points(store, "old-failed", range(300), status="failed")
    old_running = run_with_points(store, "old-running", range(300), status="running")
    recent = run_with_points(store, "recent-finished", range(300), now=T + 1.5 * DAY)
    service = RetentionService(store, settings(days=1))
    assert service.sweep(now=T + 2 * DAY) == 2 * 900
    for run_id in (old_done, old_failed):
        assert [count(store, t, run_id) for t in ("points", "rollups", "latest")] == [0, 0, 0]
        run = store.get_run(run_id)  # the run itself stays, as it was
        assert (run.config, run.tags, run.last_step) == ({"lr": 1e-6}, ["t"], 299)
        assert store.series(run_id, ["a"], max_points=100)[0].steps == []
        [event] = store.list_events(run_id)
        assert event.kind == "retention" and event.step == 299 and "1 days" in event.message
    for run_id in (old_running, recent):
        assert count(store, "points", run_id) == 900 and len(store.latest(run_id)) == 3
        assert store.list_events(run_id) == []
    assert service.deleted_points._value.get() == 1800 and service.purged_runs._value.get() == 2
    assert service.sweep(now=T + 2 * DAY) == 0  # nothing left to do, and no second event
    assert len(store.list_events(old_done)) == 1


def test_every_chunk_is_bounded_and_leaves_rollups_and_latest_consistent(store):
    rng = random.Random(3)
    run_id = run_with_points(store, "r", sorted(rng.sample(range(12_000), 2_500)), metrics=("a", "b", "c", "d"))
    total = count(store, "points", run_id)
    deleted = []
    while True:
        chunk = store.purge_points_chunk(run_id, T + DAY, 777, message="gone", now=T + 2 * DAY)
        deleted.append(chunk.deleted)
        assert_derived_match_points(store, run_id)
        if chunk.done:
            break
    assert max(deleted) == 777 and sum(deleted) == total == 10_000
    assert len(deleted) == -(-total // 777)


def test_a_run_that_comes_back_is_left_alone(store):
    run_id = run_with_points(store, "r", range(2_000))
    assert not store.purge_points_chunk(run_id, T + 1, 1_000, message="gone", now=T + DAY).done
    # The trainer resumes: new points after the cutoff. The rest stays, consistent.
    write(store, run_id, [("a", 5_000, 1.0, 0, T + DAY)], now=T + DAY)
    chunk = store.purge_points_chunk(run_id, T + 1, 1_000, message="gone", now=T + DAY)
    assert (chunk.deleted, chunk.done) == (0, True)
    assert count(store, "points", run_id) == 5_001
    assert_derived_match_points(store, run_id)
    assert store.retention_candidates(T + 1) == []
    # A finished run switched back to running is left alone too.
    other = run_with_points(store, "other", range(100))
    store.update_run(other, status="running")
    assert store.purge_points_chunk(other, T + 1, 10, message="gone", now=T + DAY).done
    assert count(store, "points", other) == 300


def test_ingest_completes_while_a_deletion_is_under_way(db_url, monkeypatch):
    monkeypatch.setattr(RetentionService, "start", lambda self: None)  # this test sweeps by itself
    with make_client(database_url=db_url, retention_days=1) as c:
        store, service = c.app.state.store, c.app.state.retention
        old = run_with_points(store, "old", range(4_000), metrics=("a", "b", "c", "d", "e"))  # silent since T
        live = c.post("/api/v1/runs", json={"project": "p", "name": "live"}).json()["id"]
        service.chunk = 1_000
        real = store.purge_points_chunk
        deleted: list[int] = []
        between_chunks, go_on = threading.Event(), threading.Event()

        def purge_then_pause(*args, **kwargs):
            chunk = real(*args, **kwargs)
            deleted.append(chunk.deleted)
            if len(deleted) == 3:
                between_chunks.set()
                go_on.wait(30)
            return chunk

        monkeypatch.setattr(store, "purge_points_chunk", purge_then_pause)
        sweep = threading.Thread(target=service.sweep)
        sweep.start()
        try:
            assert between_chunks.wait(30)
            r = c.post(f"/api/v1/runs/{live}/metrics", json={"points": [{"step": s, "metrics": {"a": s}} for s in range(50)]})
            assert r.status_code == 200 and r.json()["accepted"] == 50
            assert count(store, "points", old) == 20_000 - 3_000  # the deletion is still under way
        finally:
            go_on.set()
            sweep.join(30)
        assert not sweep.is_alive()
        assert sum(deleted) == 20_000 and max(deleted) == 1_000
        assert count(store, "points", old) == 0 and count(store, "points", live) == 50
        exposition = c.get("/metrics").text
        assert "parallax_retention_deleted_points_total 20000.0" in exposition
        assert "parallax_retention_purged_runs_total 1.0" in exposition


def test_the_background_thread_sweeps_at_start(sqlite_url, caplog):
    from parallax.server.app import open_store
    from parallax.server.config import Settings

    store = open_store(Settings(database_url=sqlite_url))
    run_id = run_with_points(store, "old", range(100))  # last seen at T, long ago
    store.close()
    with caplog.at_level("INFO", logger="parallax.server.retention"):
        with make_client(database_url=sqlite_url, retention_days=0.5) as c:
            service = c.app.state.retention
            for _ in range(500):
                if service.deleted_points._value.get() == 300:
                    break
                threading.Event().wait(0.02)
            assert c.app.state.store.series(run_id, ["a"], max_points=10)[0].steps == []
    assert "deleted 300 points of run" in caplog.text


def test_only_the_leader_sweeps(store):
    """Several processes on one PostgreSQL database: a follower's thread leaves the runs to the leader's."""
    run_id = run_with_points(store, "old", range(100))
    leading = threading.Event()
    service = RetentionService(store, SimpleNamespace(retention_days=1.0, retention_interval_seconds=0.05),
                               leading=leading.is_set)
    service.start()
    try:
        threading.Event().wait(0.3)  # several intervals as a follower
        assert service.deleted_points._value.get() == 0
        leading.set()  # elected
        for _ in range(250):
            if service.deleted_points._value.get() == 300:
                break
            threading.Event().wait(0.02)
        assert service.deleted_points._value.get() == 300  # 100 steps x 3 metrics
        assert store.series(run_id, ["a"], max_points=10)[0].steps == []
    finally:
        service.stop()


@pytest.mark.parametrize("days", [None, 0])
def test_retention_is_off_by_default(sqlite_url, days):
    with make_client(database_url=sqlite_url, retention_days=days) as c:
        service = c.app.state.retention
        assert not service.enabled and service._thread is None and service.sweep() == 0
        assert "parallax_retention_deleted_points_total 0.0" in c.get("/metrics").text


def test_ingest_interleaves_with_an_unpaused_deletion(store):
    """No pause this time: batches sent while a sweep runs land between its chunks, not after it."""
    old = run_with_points(store, "old", range(10_000), metrics=("a", "b", "c", "d", "e", "f", "g", "h"))
    live, _ = store.create_run("p", "live", {}, [])
    service = RetentionService(store, settings(days=1), chunk=500)
    sweep = threading.Thread(target=service.sweep, kwargs={"now": T + 2 * DAY})
    during = 0
    sweep.start()
    step = 0
    while sweep.is_alive() and step < 10_000:
        write(store, live.id, [("a", step, 1.0, 0, T + 2 * DAY)])
        step += 1
        if sweep.is_alive() and count(store, "points", old) > 0:
            during += 1  # this batch was stored while the deletion still had points to go
    sweep.join(60)
    assert during >= 1 and count(store, "points", old) == 0
    assert count(store, "points", live.id) == step
