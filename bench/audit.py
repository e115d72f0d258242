"""Harness-audit throughput, called by bench.run (``make bench``); also ``python -m bench.audit [--quick]``.

(j) tokens/s of the audit (ingest/audit.py: exact prefix, trainer token
    stream, log-probabilities over action tokens) on 10,000 turns of 4,000
    tokens on average: 2,500 four-turn trajectories whose turns hold 1,600,
    3,200, 4,800 and 6,400 prompt + completion tokens (a 1,200-token task,
    400-token completions, 1,200-token observations, exact prefix kept), each
    turn with the trainer's ids and both log-probabilities of its completion.
    Target: >= 50M tokens/s (the check costs nothing next to a training step).
    Also reported, without a target: validating the same turns from JSON-decoded
    Python lists (what the HTTP endpoint does before the audit).
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from parallax.ingest.audit import Trajectory, Turn, audit, parse_trajectories

TARGET_TOKENS_PER_S = 50e6
TURNS = 10_000
TURNS_QUICK = 400
TURNS_PER_TRAJECTORY = 4
TASK, COMPLETION, OBSERVATION = 1_200, 400, 1_200  # turn k holds 1,600 * k tokens: 4,000 on average
PARSE_TURNS = 200


def make_trajectories(n_turns: int, seed: int = 0) -> list[Trajectory]:
    rng = np.random.default_rng(seed)
    per = TURNS_PER_TRAJECTORY
    length = TASK + per * COMPLETION + (per - 1) * OBSERVATION
    out = []
    for i in range(n_turns // per):
        full = rng.integers(0, 150_000, size=length, dtype=np.int32)  # the trajectory's token stream
        lp = -rng.random(length)
        turns = []
        pos = TASK
        for _ in range(per):
            prompt, completion = full[:pos], full[pos : pos + COMPLETION]
            # Copies, as the endpoint has them (one array per JSON list): no turn shares memory with another.
            turns.append(Turn(prompt.copy(), completion.copy(), trainer=full[: pos + COMPLETION].copy(),
                              rollout_lp=lp[pos : pos + COMPLETION].copy(), trainer_lp=lp[pos : pos + COMPLETION] + 1e-3))
            pos += COMPLETION + OBSERVATION
        out.append(Trajectory(step=i // 64, turns=turns, index=i, policy_version=i // 64))
    return out


def measure(quick: bool = False, repeats: int | None = None) -> dict:
    n_turns = TURNS_QUICK if quick else TURNS
    repeats = repeats or (1 if quick else 3)
    trajectories = make_trajectories(n_turns)
    tokens = sum(t.tokens for tr in trajectories for t in tr.turns)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        steps = audit(trajectories)
        seconds.append(time.perf_counter() - start)
    assert all(s.breaks == 0 and s.mismatches == 0 for s in steps.values()), "the benchmark's trajectories are clean"
    best = min(seconds)
    # Validation from JSON-decoded lists, on a sample of turns.
    sample = trajectories[: max(1, PARSE_TURNS // TURNS_PER_TRAJECTORY)]
    docs = [
        {"step": tr.step, "turns": [{"prompt_ids": t.prompt.tolist(), "completion_ids": t.completion.tolist(), "trainer_ids": t.trainer.tolist(),
                                     "rollout_logprobs": t.rollout_lp.tolist(), "trainer_logprobs": t.trainer_lp.tolist()} for t in tr.turns]}
        for tr in sample
    ]
    sample_tokens = sum(t.tokens for tr in sample for t in tr.turns)
    start = time.perf_counter()
    parse_trajectories(docs)
    parse_s = time.perf_counter() - start
    tps = tokens / best
    return {
        "turns": len(trajectories) * TURNS_PER_TRAJECTORY,
        "trajectories": len(trajectories),
        "tokens": tokens,
        "tokens_per_turn_mean": tokens / (len(trajectories) * TURNS_PER_TRAJECTORY),
        "repeats": repeats,
        "seconds": seconds,
        "seconds_median": statistics.median(seconds),
        "tokens_per_s": tps,
        "turns_per_s": len(trajectories) * TURNS_PER_TRAJECTORY / best,
        "parse_from_lists_tokens_per_s": sample_tokens / parse_s,
        "target_tokens_per_s_min": TARGET_TOKENS_PER_S,
        "met": tps >= TARGET_TOKENS_PER_S,
    }


def rows(doc: dict, Row: type) -> list:
    """Lines for bench.run's table."""
    return [
        Row(f"audit, {doc['turns']:,} turns of {doc['tokens_per_turn_mean']:,.0f} tokens", f"{doc['tokens_per_s'] / 1e6:,.1f}M tokens/s",
            f"{doc['turns_per_s']:,.0f} turns/s", target=f"≥ {doc['target_tokens_per_s_min'] / 1e6:.0f}M tokens/s", met=doc["met"]),
        Row("audit input validation (JSON lists)", f"{doc['parse_from_lists_tokens_per_s'] / 1e6:,.1f}M tokens/s"),
    ]


if __name__ == "__main__":
    import json

    print(json.dumps(measure(quick="--quick" in sys.argv), indent=2))
