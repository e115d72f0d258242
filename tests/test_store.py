"""The store contract, on SQLite and PostgreSQL alike."""

import math
import threading

import pytest
from sqlalchemy import text

from parallax.ingest.points import NAN, POS_INF
from parallax.server.store import RunNotFound
from tests.conftest import write


def rows_for(steps, metrics=("a", "b"), value=lambda m, s: s * 0.5, t=100.0):
    return [(m, s, value(m, s), 0, t) for s in steps for m in metrics]


def test_create_run_is_idempotent_on_project_and_name(store):
    run, created = store.create_run("p", "r", {"lr": 1e-6, "framework": "verl"}, ["a", "b", "a"])
    again, created_again = store.create_run("p", "r", {"other": 1}, [])
    assert created and not created_again
    assert again.id == run.id and again.config == {"lr": 1e-6, "framework": "verl"}
    assert run.tags == ["a", "b"] and run.status == "running"
    other, created_other = store.create_run("p2", "r", {}, [])
    assert created_other and other.id != run.id
    assert store.find_run("p2", "r").id == other.id and store.find_run("p2", "nope") is None


def test_list_filter_and_update(store):
    a, _ = store.create_run("p", "a", {}, ["x"])
    b, _ = store.create_run("p", "b", {}, ["y"])
    c, _ = store.create_run("q", "c", {}, ["x"])
    store.update_run(b.id, status="finished", notes="done", tags=["y", "z"])
    assert [r.id for r in store.list_runs(project="p")] == [a.id, b.id]
    assert [r.id for r in store.list_runs(tag="x")] == [a.id, c.id]
    assert [r.id for r in store.list_runs(status="finished")] == [b.id]
    got = store.get_run(b.id)
    assert (got.status, got.notes, got.tags) == ("finished", "done", ["y", "z"])
    with pytest.raises(RunNotFound):
        store.get_run(9999)
    with pytest.raises(RunNotFound):
        store.update_run(9999, status="failed")


def test_change_marks_move_with_what_the_dashboard_lists_show(store):
    marks = [store.change_marks(now=100.0)]
    a, _ = store.create_run("p", "a", {}, [])
    marks.append(store.change_marks(now=100.0))
    write(store, a.id, [("entropy", 1, 1.0, 0, 50.0)], now=50.0)
    marks.append(store.change_marks(now=100.0))
    store.update_run(a.id, status="failed")
    marks.append(store.change_marks(now=100.0))
    store.add_silence("rollout_stall", a.id, 200.0, "test")
    marks.append(store.change_marks(now=100.0))
    marks.append(store.change_marks(now=300.0))  # the silence ran out
    assert all(x != y for x, y in zip(marks, marks[1:])), marks
    assert store.change_marks(now=300.0) == marks[-1]  # nothing changed: the same marks
    store.update_run(a.id, notes="a note")  # what no list shows
    assert store.change_marks(now=300.0) == marks[-1]


def test_alerts_by_severity_runs_with_alerts_and_runs_by_id(store):
    from parallax.alerts.lifecycle import advance

    a, _ = store.create_run("p", "a", {}, [])
    b, _ = store.create_run("p", "b", {}, [])
    store.create_run("p", "quiet", {}, [])
    moves = []
    for run, rule, severity in ((a, "r1", "critical"), (a, "r2", "warning"), (b, "r1", "warning")):
        _, taken = advance(None, True, rule=rule, run_id=run.id, step=1, time=1.0, for_steps=0, keep_firing_for=0,
                           severity=severity)
        moves += taken
    store.save_transitions(moves)
    assert [(x["rule"], x["run_id"]) for x in store.list_alerts(severity="critical")] == [("r1", a.id)]
    assert {(x["rule"], x["run_id"]) for x in store.list_alerts(severity="warning")} == {("r2", a.id), ("r1", b.id)}
    assert store.alert_runs() == [(b.id, "p", "b"), (a.id, "p", "a")]
    assert sorted(store.get_runs([a.id, b.id, 999])) == [a.id, b.id] and store.get_runs([])  == {}


def test_runs_are_filtered_searched_and_paged_in_sql(store):
    from parallax.alerts.lifecycle import advance

    made = []
    for i in range(30):
        run, _ = store.create_run("vision" if i % 3 == 0 else "text", f"Run_{i:02d}" + ("-50%" if i == 7 else ""),
                                  {}, ["base", "x"] if i % 2 else ["other"])
        made.append(run)
    store.update_run(made[4].id, status="finished")
    _, moves = advance(None, True, rule="r", run_id=made[5].id, step=1, time=1.0, for_steps=0, keep_firing_for=0,
                       severity="critical")
    _, info = advance(None, True, rule="i", run_id=made[6].id, step=1, time=1.0, for_steps=0, keep_firing_for=0,
                      severity="info")
    store.save_transitions(moves + info)
    page, total = store.query_runs(limit=10)
    assert total == 30 and [r.id for r in page] == [r.id for r in made[::-1][:10]]  # newest first
    page, total = store.query_runs(limit=10, offset=25)
    assert total == 30 and [r.id for r in page] == [r.id for r in made[4::-1]]
    assert store.query_runs(project="vision", limit=100)[1] == 10
    assert {r.id for r in store.query_runs(tag="base", limit=100)[0]} == {r.id for r in made[1::2]}
    assert store.query_runs(tag="bas", limit=100)[1] == 0  # a tag, not a substring of one
    assert [r.id for r in store.query_runs(status="finished")[0]] == [made[4].id]
    assert [r.id for r in store.query_runs(search="run_1")[0]] == [r.id for r in made[19:9:-1]]  # case-insensitive
    assert [r.id for r in store.query_runs(search="50%")[0]] == [made[7].id]  # % and _ are literal
    assert store.query_runs(search="VISION", limit=100)[1] == 10  # the project too
    assert [r.id for r in store.query_runs(verdict="faulty")[0]] == [made[5].id]  # info alerts do not page
    assert store.query_runs(verdict="healthy", limit=100)[1] == 29
    both, total = store.query_runs(project="text", tag="base", search="run_1", verdict="healthy", limit=2)
    expect = [r for r in made[::-1] if r.project == "text" and "base" in r.tags and "Run_1" in r.name]
    assert total == len(expect) and [r.id for r in both] == [r.id for r in expect[:2]]
    assert store.run_facets() == {"projects": ["text", "vision"], "tags": ["base", "other", "x"]}
    assert store.has_runs() and [r.id for r in store.list_runs(tag="base")] == [r.id for r in made[1::2]]


def test_write_points_counts_and_retry_changes_nothing(store):
    run, _ = store.create_run("p", "r", {}, [])
    rows = rows_for(range(10))
    first = write(store, run.id, rows, now=1.0)
    assert (first.accepted, first.replaced, first.non_finite) == (20, 0, 0)
    retry = write(store, run.id, rows, now=2.0)
    assert (retry.accepted, retry.replaced) == (20, 0)
    series = store.series(run.id, ["a"], max_points=100)[0]
    assert series.steps == list(range(10))
    assert series.times == [100.0] * 10
    changed = write(store, run.id, [("a", 3, 99.0, 0, 200.0), ("a", 4, 2.0, 0, 200.0), ("a", 10, 7.0, 0, 200.0)], now=3.0)
    assert (changed.accepted, changed.replaced) == (3, 1)  # step 4 already held 2.0
    series = store.series(run.id, ["a"], max_points=100)[0]
    assert series.values[3] == 99.0 and series.values[4] == 2.0 and series.steps[-1] == 10
    run = store.get_run(run.id)
    assert run.last_step == 10 and run.last_seen_at == 3.0


def test_non_finite_values_are_stored_with_their_kind(store):
    run, _ = store.create_run("p", "r", {}, [])
    res = write(store, run.id, [("x", 1, None, NAN, 1.0), ("x", 2, None, POS_INF, 1.0), ("x", 3, 4.0, 0, 1.0)])
    assert res.non_finite == 2
    s = store.series(run.id, ["x"], max_points=10)[0]
    assert s.values == [None, None, 4.0]
    assert s.non_finite == [(1, NAN), (2, POS_INF)]
    # NaN replaced by a number is a change; the same NaN again is not.
    assert write(store, run.id, [("x", 1, None, NAN, 1.0)]).replaced == 0
    assert write(store, run.id, [("x", 1, 0.5, 0, 1.0)]).replaced == 1


def test_latest_follows_the_highest_step_not_the_last_write(store):
    run, _ = store.create_run("p", "r", {}, [])
    write(store, run.id, rows_for([5, 6]))
    write(store, run.id, [("a", 2, -1.0, 0, 1.0)])  # late, out of order
    latest = {lv.metric: lv for lv in store.latest(run.id)}
    assert latest["a"].step == 6 and latest["a"].value == 3.0
    write(store, run.id, [("a", 6, 42.0, 0, 1.0)])  # replaced at the newest step
    assert {lv.metric: lv.value for lv in store.latest(run.id)}["a"] == 42.0
    pairs = store.latest_all(frozenset({"a"}))
    assert [(r.id, lv.metric, lv.value) for r, lv in pairs] == [(run.id, "a", 42.0)]


def test_writes_to_an_unknown_run_are_refused(store):
    with pytest.raises(RunNotFound):
        write(store, 12345, rows_for([1]))
    with pytest.raises(RunNotFound):
        store.series(12345, ["a"], max_points=10)


def test_a_failing_batch_leaves_nothing_behind(store):
    run, _ = store.create_run("p", "r", {}, [])
    write(store, run.id, rows_for([1]))
    bad = rows_for([2, 3]) + [("a", 4, 1.0, 0, None)]  # time NOT NULL: fails inside the transaction
    with pytest.raises(Exception):
        write(store, run.id, bad)
    s = store.series(run.id, ["a", "b"], max_points=10)
    assert [x.steps for x in s] == [[1], [1]]
    assert store.get_run(run.id).last_step == 1


def test_events_round_trip(store):
    run, _ = store.create_run("p", "r", {}, [])
    assert store.add_events(run.id, [(10, "resume", "from ckpt 9", 5.0), (3, "checkpoint", "", 4.0)]) == 2
    assert [(e.step, e.kind, e.message) for e in store.list_events(run.id)] == [(3, "checkpoint", ""), (10, "resume", "from ckpt 9")]


def test_run_context_lists_the_runs_resumes_in_step_order(store):
    """The engine holds rules back after each resume of a chain (a restart that took several tries), so the
    context names every resume step once, ascending, whatever order and however often they were announced."""
    run, _ = store.create_run("p", "r", {}, [])
    other, _ = store.create_run("p", "other", {}, [])
    assert store.run_context(run.id)[4] == ()
    store.add_events(run.id, [(71, "resume", "ckpt 70", 5.0), (3, "checkpoint", "", 4.0), (68, "resume", "", 6.0),
                              (71, "resume", "again", 7.0), (90, "note", "", 8.0)])
    store.add_events(other.id, [(5, "resume", "", 1.0)])
    assert store.run_context(run.id)[4] == (68, 71)
    assert store.run_context(other.id)[4] == (5,)
    assert store.run_context(10_000)[1:] == ("missing", None, None, (), None)


def test_concurrent_writers_all_land(store):
    runs = [store.create_run("p", f"r{i}", {}, [])[0] for i in range(4)]
    errors = []

    def work(run_id, offset):
        try:
            for b in range(10):
                write(store, run_id, rows_for(range(b * 50, b * 50 + 50), metrics=("a", "b", f"own{offset}")))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(r.id, i)) for i, r in enumerate(runs) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i, r in enumerate(runs):
        s = store.series(r.id, ["a", f"own{i}"], max_points=1000)
        assert [len(x.steps) for x in s] == [500, 500]


def test_derived_tables_match_the_points(store):
    """Rollup blocks and latest values agree with a brute-force recomputation after messy writes."""
    run, _ = store.create_run("p", "r", {}, [])
    import random

    rng = random.Random(7)
    for _ in range(6):
        steps = rng.sample(range(0, 9000), 700)
        write(store, run.id, [("m", s, rng.uniform(-5, 5), 0, 1.0) for s in steps])
    with store.engine.connect() as conn:
        pts = dict(conn.execute(text("SELECT step, value FROM points WHERE run_id = :r"), {"r": run.id}).all())
        for level, size in ((1, 64), (2, 4096)):
            got = {
                r.block: (r.n, r.vmin, r.vmax, r.last_step)
                for r in conn.execute(
                    text("SELECT block, n, vmin, vmax, last_step FROM rollups WHERE run_id = :r AND level = :l"),
                    {"r": run.id, "l": level},
                )
            }
            want: dict[int, list] = {}
            for s, v in pts.items():
                want.setdefault(s // size, []).append((s, v))
            assert set(got) == set(want)
            for block, members in want.items():
                vals = [v for _, v in members]
                assert got[block] == (len(members), min(vals), max(vals), max(s for s, _ in members))
    assert store.latest(run.id)[0].step == max(pts)


def test_ping(store):
    assert store.ping() is True
    assert math.isfinite(store.get_run(store.create_run("p", "r", {}, [])[0].id).created_at)


def test_a_late_point_of_one_metric_keeps_the_others_rollups_exact(store):
    run, _ = store.create_run("p", "r", {}, [])
    write(store, run.id, [("a", s, s / 1e4, 0, 1.0) for s in range(10_000)] + [("b", s, 1.0, 0, 1.0) for s in range(10_000)])
    # One batch: metric "b" at a new step, metric "a" replaced far back.
    write(store, run.id, [("a", 5, 99.0, 0, 1.0), ("b", 10_000, 7.0, 0, 1.0)])
    a, b = store.series(run.id, ["a", "b"], max_points=50)
    assert max(a.vmax) == 99.0 and a.vmax[1] == 99.0  # the old block of "a" was refreshed
    assert max(b.vmax) == 7.0 and b.steps[-1] == 10_000
