"""Rule evaluation cost: 1,000 live runs on the default pack, each sending a 10-step batch.

Measured in-process on a SQLite store: for every batch, the time to validate
and store it (ingest) and the time the engine takes to re-evaluate the rules
that read its metrics (evaluation). Reported per batch and as evaluation's
share of ingest time (target ≤ 20%), and per judged step: the engine judges
each step of a batch (as ``replay`` and ``parallax rules test`` do, so that a
fault inside a buffered or imported batch fires where it happened), so a
10-step batch costs ten evaluations of the rules its metrics touch.
"""

from __future__ import annotations

import gc
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from parallax.alerts.engine import AlertEngine
from parallax.alerts.rules import load_rules
from parallax.ingest.points import parse_json
from parallax.server.app import open_store
from parallax.server.config import Settings

RUNS = 1_000
HISTORY_STEPS = 40
BATCH_STEPS = 10
TARGET_SHARE = 0.20


def _metrics(rng: random.Random, step: int) -> dict[str, float]:
    return {
        "importance_weight_max": 1.0 + abs(rng.gauss(0, 0.05)),
        "staleness_mean": 0.5 + rng.random() * 0.2,
        "staleness_max": 1.0,
        "stall_s": 0.0,
        "rollout_s": 20 + rng.random(),
        "train_s": 18 + rng.random(),
        "step_s": 21 + rng.random(),
        "trainer_mfu": 0.45 + rng.gauss(0, 0.01),
        "padding_ratio": 0.1,
        "response_length_mean": 800 + rng.gauss(0, 10),
        "response_length_std": 120.0,
        "pass_at_k": 0.6 + step * 1e-4,
        "pass_at_1": 0.3 + step * 1e-4,
        "entropy": 1.5 - step * 1e-4,
        "reward_train": 0.3 + step * 1e-4,
        "reward_heldout": 0.28 + step * 1e-4,
        "kl": 0.01,
        "grad_norm": 1.0,
        "loss": 0.1,
    }


def _body(rng: random.Random, first: int, n: int) -> bytes:
    return orjson.dumps({"points": [{"step": s, "metrics": _metrics(rng, s)} for s in range(first, first + n)]})


def measure(runs: int = RUNS) -> dict[str, Any]:
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Settings(database_url=f"sqlite:///{Path(tmp) / 'rules.db'}"))
        try:
            rules = load_rules()
            engine = AlertEngine(rules, store)
            run_ids = [store.create_run("bench", f"r{i}", {}, [])[0].id for i in range(runs)]
            for rid in run_ids:  # history, so windows are full and states loaded
                batch = parse_json(_body(rng, 0, HISTORY_STEPS))
                store.write_points(rid, batch)
                engine.observe(rid, batch.groups, batch.steps[1])
            bodies = [_body(rng, HISTORY_STEPS, BATCH_STEPS) for _ in run_ids]
            ingest, evaluation = _timed(store, engine, list(zip(run_ids, bodies)))
        finally:
            store.close()
    return {
        "runs": runs,
        "rules": len(rules),
        "batch_steps": BATCH_STEPS,
        "metrics_per_step": len(_metrics(rng, 0)),
        **_figures(ingest, evaluation),
        "eval_us_per_judged_step_p50": statistics.median(evaluation) * 1e6 / BATCH_STEPS,
    }


def _timed(store: Any, engine: AlertEngine, bodies: list[tuple[int, bytes]]) -> tuple[list[float], list[float]]:
    """Each (run, body) in order: the seconds to validate and store it, and the engine's to judge its steps."""
    gc.collect()
    ingest, evaluation = [], []
    for rid, body in bodies:
        t0 = time.perf_counter()
        batch = parse_json(body)
        store.write_points(rid, batch)
        t1 = time.perf_counter()
        engine.observe(rid, batch.groups, batch.steps[1])
        t2 = time.perf_counter()
        ingest.append(t1 - t0)
        evaluation.append(t2 - t1)
    return ingest, evaluation


def _figures(ingest: list[float], evaluation: list[float]) -> dict[str, Any]:
    share = sum(evaluation) / sum(ingest)
    return {
        "ingest_ms_per_batch_p50": statistics.median(ingest) * 1e3,
        "eval_ms_per_batch_p50": statistics.median(evaluation) * 1e3,
        "eval_ms_per_batch_p95": sorted(evaluation)[int(0.95 * len(evaluation))] * 1e3,
        "eval_share_of_ingest": share,
        "target_share": TARGET_SHARE,
        "met": share <= TARGET_SHARE,
    }


#: The families' runs judged by ``measure_families``: their healthy runs of this seed (a tuning seed of
#: ``make eval``), the runs the pack meets most, all day.
FAMILY_SEED = 0


def measure_families(seed: int = FAMILY_SEED) -> dict[str, Any]:
    """The same measurement on the healthy runs of ``make eval``'s three families (noisy rewards, evaluations every
    5-50 steps, framework keys through the alias table, synchronous and asynchronous timing), each sent whole in
    10-step batches: what the pack costs on runs like a user's, beside ``measure``'s steady lines (a held-out score
    at every step, rewards without noise), which pass more of its tests."""
    from parallax.alerts.eval import canonical_series
    from parallax.alerts.suites import families

    made = [(name, sc) for name, generate in families().items()
            for sc in generate(seed, per_cause=0) if sc.cause is None]
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Settings(database_url=f"sqlite:///{Path(tmp) / 'rules.db'}"))
        try:
            rules = load_rules()
            engine = AlertEngine(rules, store)
            bodies = []
            for family, sc in made:
                series = canonical_series(sc)
                rid = store.create_run("bench-families", f"{family}/{sc.name}", dict(sc.config), [])[0].id
                steps = sorted({s for points in series.values() for s in points})
                for i in range(0, len(steps), BATCH_STEPS):
                    points = [{"step": s, "metrics": {m: p[s] for m, p in series.items() if s in p}}
                              for s in steps[i:i + BATCH_STEPS]]
                    bodies.append((rid, orjson.dumps({"points": points}, option=orjson.OPT_SERIALIZE_NUMPY)))
            ingest, evaluation = _timed(store, engine, bodies)  # each run's batches in order, one run after another
        finally:
            store.close()
    return {"seed": seed, "runs": len(made), "batches": len(bodies), "batch_steps": BATCH_STEPS,
            **_figures(ingest, evaluation)}


def rows(doc: dict, Row: type) -> list:
    """Lines for bench.run's table."""
    out = [
        Row(
            f"rule eval, {doc['runs']:,} runs x {doc['batch_steps']}-step batch",
            f"{doc['eval_ms_per_batch_p50']:.3f} ms/batch ({doc['eval_us_per_judged_step_p50']:.0f} µs/step judged)",
            f"{doc['ingest_ms_per_batch_p50']:.3f} ms ingest",
            f"{doc['eval_share_of_ingest']:.3f}",
            f"share ≤ {doc['target_share']}",
            doc["met"],
        )
    ]
    fam = doc.get("families")
    if fam:
        out.append(Row(
            f"  the same, eval families' {fam['runs']} healthy runs (seed {fam['seed']})",
            f"{fam['eval_ms_per_batch_p50']:.3f} ms/batch",
            f"{fam['ingest_ms_per_batch_p50']:.3f} ms ingest",
            f"{fam['eval_share_of_ingest']:.3f}",
            f"share ≤ {fam['target_share']}",
            fam["met"],
        ))
    return out


if __name__ == "__main__":
    report = measure()
    report["families"] = measure_families()
    print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
