"""Series downsampling: bounded size, exact envelopes, spikes kept, first and last point kept."""

import random

import pytest

from parallax.ingest.points import NAN
from tests.conftest import write


def load(store, run_id, steps, value, metric="m", chunk=5000):
    truth = {s: value(s) for s in steps}
    steps = list(truth)
    for i in range(0, len(steps), chunk):
        write(store, run_id, [(metric, s, truth[s], 0, float(s)) for s in steps[i : i + chunk]])
    return truth


def check_envelopes(series, truth: dict[int, float], max_points: int):
    """Each reported bucket ends at its step and covers the points since the previous one, exactly."""
    steps = series.steps
    assert len(steps) <= max_points
    assert steps == sorted(set(steps))
    ordered = sorted(truth)
    assert steps[0] == ordered[0] and steps[-1] == ordered[-1]
    assert series.values[0] == truth[ordered[0]] and series.values[-1] == truth[ordered[-1]]
    j = 0
    members: list[list[float]] = [[] for _ in steps]
    for s in ordered:
        while steps[j] < s:
            j += 1
        members[j].append(truth[s])
    for j, vals in enumerate(members):
        assert series.values[j] == vals[-1]
        # The first point is reported on its own and may also belong to the first bucket.
        candidates = [vals, vals + members[0]] if j == 1 else [vals]
        assert any(series.vmin[j] == min(c) and series.vmax[j] == max(c) for c in candidates), j


@pytest.mark.parametrize("max_points", [3, 17, 500])
def test_dense_series_downsampled_exactly(store, max_points):
    run, _ = store.create_run("p", "r", {}, [])
    rng = random.Random(max_points)
    truth = load(store, run.id, range(3, 30_003), lambda s: rng.gauss(0, 1))
    s = store.series(run.id, ["m"], max_points=max_points)[0]
    assert s.downsampled
    check_envelopes(s, truth, max_points)


def test_one_step_spike_survives(store):
    run, _ = store.create_run("p", "r", {}, [])
    truth = load(store, run.id, range(50_000), lambda s: 1.0 + (s % 7) * 0.01)
    write(store, run.id, [("m", 31_337, 250.0, 0, 1.0)])
    truth[31_337] = 250.0
    s = store.series(run.id, ["m"], max_points=200)[0]
    assert max(s.vmax) == 250.0
    assert min(s.vmin) == 1.0
    check_envelopes(s, truth, 200)


def test_sparse_and_irregular_steps(store):
    run, _ = store.create_run("p", "r", {}, [])
    rng = random.Random(3)
    steps = sorted(rng.sample(range(0, 2_000_000), 6000))
    truth = load(store, run.id, steps, lambda s: rng.uniform(-1, 1))
    for mp in (50, 999):
        s = store.series(run.id, ["m"], max_points=mp)[0]
        check_envelopes(s, truth, mp)
    full = store.series(run.id, ["m"], max_points=6000)[0]
    assert not full.downsampled and full.steps == steps


def test_since_step_returns_only_newer_points(store):
    run, _ = store.create_run("p", "r", {}, [])
    rng = random.Random(5)
    truth = load(store, run.id, range(20_000), lambda s: rng.random())
    newer = store.series(run.id, ["m"], max_points=100, since_step=19_989)[0]
    assert newer.steps == list(range(19_990, 20_000)) and not newer.downsampled
    # A large window after since_step is downsampled from whole blocks and raw edges, still exactly.
    part = store.series(run.id, ["m"], max_points=100, since_step=1000)[0]
    check_envelopes(part, {k: v for k, v in truth.items() if k > 1000}, 100)
    assert store.series(run.id, ["m"], max_points=100, since_step=19_999)[0].steps == []


def test_non_finite_points_are_listed_when_downsampled(store):
    run, _ = store.create_run("p", "r", {}, [])
    load(store, run.id, range(10_000), lambda s: 1.0)
    write(store, run.id, [("m", 7777, None, NAN, 1.0)])
    s = store.series(run.id, ["m"], max_points=100)[0]
    assert s.downsampled and s.non_finite == [(7777, NAN)]
    assert all(v == 1.0 for v in s.vmax)


def test_unknown_metric_is_an_empty_series(store):
    run, _ = store.create_run("p", "r", {}, [])
    load(store, run.id, range(10), float)
    a, missing = store.series(run.id, ["m", "nope"], max_points=10)
    assert a.steps == list(range(10)) and missing.steps == []


def test_a_series_is_read_from_one_snapshot(store, monkeypatch):
    """Points committed by another writer while a series is being read (between its statements) do not show in it:
    a series of sparse steps, judged small enough to return raw, must not come back longer than max_points when
    writers fill the gaps meanwhile (seen under 16 concurrent writers on PostgreSQL, where each statement of a
    READ COMMITTED transaction has its own snapshot)."""
    run, _ = store.create_run("p", "r", {}, [])
    truth = load(store, run.id, range(0, 1000, 2), lambda s: float(s))  # 500 points, even steps
    original = type(store)._count_at_most
    calls = []

    def count_then_fill_the_gaps(conn, params, limit):
        small = original(conn, params, limit)
        if not calls:
            calls.append(1)
            write(store, run.id, [("m", s, -1.0, 0, float(s)) for s in range(1, 1000, 2)])  # committed meanwhile
        return small

    monkeypatch.setattr(type(store), "_count_at_most", staticmethod(count_then_fill_the_gaps))
    s = store.series(run.id, ["m"], max_points=500)[0]
    assert calls and s.steps == sorted(truth) and s.values == [truth[k] for k in s.steps]
    monkeypatch.undo()
    assert len(store.series(run.id, ["m"], max_points=1000)[0].steps) == 1000  # the new points are there now
