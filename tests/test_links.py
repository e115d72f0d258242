"""An alias is stored once: a canonical name whose values are a framework key's is a link to that key's points,
and every read of the run (series, latest, points, the rules' windows, /metrics) resolves it. SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import text

from parallax.ingest import aliases
from parallax.ingest.aliases import run_aliasing
from parallax.ingest.points import Batch
from tests.conftest import new_run


def verl_batch(steps: range, entropy: float = 1.0) -> Batch:
    rows = []
    for s in steps:
        rows += [("actor/entropy", s, entropy + s, 0, 100.0 + s), ("perf/mfu/actor", s, 0.3, 0, 100.0 + s)]
    batch = Batch.of(rows)
    aliases.apply(batch, run_aliasing({"framework": "verl"}))
    return batch


def stored(store, run_id: int, name: str) -> int:
    kid = store._existing_key_ids([name]).get(name)
    if kid is None:
        return 0
    with store.engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM points WHERE run_id = :r AND key_id = :k"), {"r": run_id, "k": kid}).scalar()


def test_a_linked_alias_is_stored_once_and_read_everywhere(store):
    run, _ = store.create_run("p", "verl", {"framework": "verl"}, [])
    batch = verl_batch(range(0, 5))
    assert batch.links == {"entropy": "actor/entropy", "trainer_mfu": "perf/mfu/actor"}
    result = store.write_points(run.id, batch)
    assert result.accepted == 20  # raw and canonical points, as before links existed
    store.write_points(run.id, verl_batch(range(5, 8)))
    assert stored(store, run.id, "actor/entropy") == 8 and stored(store, run.id, "entropy") == 0
    assert store.run_links(run.id) == {"entropy": store._existing_key_ids(["actor/entropy"])["actor/entropy"],
                                       "trainer_mfu": store._existing_key_ids(["perf/mfu/actor"])["perf/mfu/actor"]}

    (series,) = store.series(run.id, ["entropy"], max_points=100)
    assert series.steps == list(range(8)) and series.values == [1.0 + s for s in range(8)]
    latest = {lv.metric: lv for lv in store.latest(run.id)}
    assert latest["entropy"].step == 7 and latest["entropy"].value == 8.0 and latest["trainer_mfu"].value == 0.3
    assert store.values_before(run.id, ["entropy"], 3)["entropy"].value == 3.0
    page = store.points(run.id, ["entropy", "actor/entropy"], limit=5)
    assert [(p.metric, p.step) for p in page.points] == [("actor/entropy", s) for s in range(5)]
    rest = store.points(run.id, ["entropy", "actor/entropy"], after=page.next, limit=100)
    assert [(p.metric, p.step) for p in rest.points] == [("actor/entropy", s) for s in range(5, 8)] + [("entropy", s) for s in range(8)]
    everything = store.points(run.id, None, limit=1000)
    assert {p.metric for p in everything.points} == {"actor/entropy", "perf/mfu/actor", "entropy", "trainer_mfu"}
    assert store.recent_points(run.id, {"entropy": 3})["entropy"] == [(5, 6.0), (6, 7.0), (7, 8.0)]
    assert store.points_after(run.id, {"entropy": (5, 10), "actor/entropy": (6, 10)}) == {
        "entropy": [(6, 7.0), (7, 8.0)], "actor/entropy": [(7, 8.0)]}
    exported = {(r.id, lv.metric): lv.value for r, lv in store.latest_all(frozenset({"entropy", "trainer_mfu"}))}
    assert exported == {(run.id, "entropy"): 8.0, (run.id, "trainer_mfu"): 0.3}


def test_a_name_with_points_of_its_own_is_never_linked_and_a_link_keeps_its_first_source(store):
    run, _ = store.create_run("p", "own", {}, [])
    store.write_points(run.id, Batch.of([("entropy", 0, 5.0, 0, 1.0)]))  # the trainer sent it itself
    store.write_points(run.id, verl_batch(range(1, 3)))
    assert store.run_links(run.id).keys() == {"trainer_mfu"}
    (series,) = store.series(run.id, ["entropy"], max_points=100)
    assert series.steps == [0, 1, 2] and series.values == [5.0, 2.0, 3.0]

    other, _ = store.create_run("p", "two-sources", {}, [])
    first = Batch.of([("critic/rewards/mean", 0, 0.1, 0, 1.0)])
    aliases.apply(first, run_aliasing({"framework": "verl"}))
    store.write_points(other.id, first)
    later = Batch.of([("critic/score/mean", 1, 0.9, 0, 1.0), ("critic/rewards/mean", 1, 0.2, 0, 1.0)])
    aliases.apply(later, run_aliasing({"framework": "verl"}))
    assert later.links["reward_train"] == "critic/score/mean"  # the better key, in this batch
    store.write_points(other.id, later)
    (series,) = store.series(other.id, ["reward_train"], max_points=100)
    assert series.values == [0.1, 0.2]  # the run's reward_train stays one series, from its first source


def test_through_the_api_aliases_cost_no_second_copy(client):
    run = new_run(client, name="verl-api", config={"framework": "verl"})
    pts = [{"step": s, "metrics": {"actor/entropy": 1.0, "critic/score/mean": 0.5, "perf/mfu": 1.0}} for s in range(50)]
    r = client.post(f"/api/v1/runs/{run}/metrics", json={"points": pts})
    assert r.json() == {"accepted": 150, "replaced": 0, "non_finite": 0, "aliased": 100}
    assert client.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}).json()["replaced"] == 0
    store = client.app.state.store
    assert stored(store, run, "actor/entropy") == 50 and stored(store, run, "entropy") == 0 and stored(store, run, "reward_train") == 0
    s = client.get(f"/api/v1/runs/{run}/series", params={"metric": ["entropy", "reward_train"]}).json()["series"]
    assert s["entropy"]["steps"] == list(range(50)) and s["reward_train"]["values"] == [0.5] * 50
    body = client.get("/metrics").text
    line = next(ln for ln in body.splitlines() if ln.startswith("parallax_metric{") and 'metric="entropy"' in ln)
    assert line.endswith(" 1.0")


def test_another_process_sees_a_link_it_did_not_make(pg_url, monkeypatch):
    from parallax.server.app import open_store
    from parallax.server.config import Settings
    from parallax.server.store import links as links_module
    from tests.conftest import reset_postgres

    reset_postgres(pg_url)
    a, b = open_store(Settings(database_url=pg_url)), open_store(Settings(database_url=pg_url))
    try:
        run, _ = a.create_run("p", "two-processes", {"framework": "verl"}, [])
        assert b.run_links(run.id) == {}  # b has read the run's links before a linked anything
        a.write_points(run.id, verl_batch(range(3)))
        monkeypatch.setattr(links_module, "REFRESH_S", 0.0)
        (series,) = b.series(run.id, ["entropy"], max_points=100)
        assert series.steps == [0, 1, 2]
        assert b.recent_points(run.id, {"trainer_mfu": 2})["trainer_mfu"] == [(1, 0.3), (2, 0.3)]
    finally:
        a.close()
        b.close()
