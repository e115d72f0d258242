"""Family ``toyrl``: the real toy RL loop (:mod:`parallax.ingest.toyrl`) swept over configurations, faults as mechanisms.

Each scenario is one run of the numpy policy-gradient loop with one
configuration drawn from the seed. Nothing is painted onto clean curves: every
metric is what the loop computed from its own samples, log-probabilities and
cost model, and a fault is the mechanism itself switched on at the onset
(:data:`parallax.ingest.toyrl.FAULTS`; ``trainer_silent`` is a healthy run cut at the
onset: the trainer died). The label is the cause id of that mechanism
(:data:`parallax.ingest.toyrl.EXPECTED_CAUSE`), whatever the curves look like.

What the sweep varies, per run: the loop's seed; synchronous (on-policy,
colocated, no ``stall_s``) or asynchronous mode; in asynchronous runs the
weight-sync model (eager, or lazy so the lag swings up to the bound) and the
staleness bound (1-8); tasks per step and group size (64-384 episodes a step);
learning rate (0.006-0.03) and entropy coefficient (0.025-0.1); k (4-16) and the
evaluation set and cadence (every 5-50 steps); rollout workers (2-16), their
throughput and the trainer's (the healthy rollout:train time ratio 0.3-0.92,
half the runs near balance, and its jitter; training steps of 3-30 s) and the
trainer's peak MFU; whether the trainer
computes the mismatch metrics (``token_mismatch_rate``, ``prefix_break_rate``,
``logprob_diff_max``) and, in synchronous runs, staleness; the run length
(150-400 steps), the onset (60+ steps in, 60+ steps before the end) and how the
run ends (``finished``, or ``total_steps`` reached); what its config says
(``k`` always; ``staleness_bound`` on most asynchronous runs; ``synchronous``
on about half of the synchronous runs; GPU counts on some).

A fault run is drawn where its mechanism really acts (see :func:`_draw`):
``stale_rollouts`` and ``unbalanced_groups`` only in asynchronous runs, the
lagging sync's period long enough that staleness leaves the bound, the lost
workers enough to make rollouts slower than training; the two faults only
sparse evaluations show (``exploration_collapse``, ``reward_hacking``) after
the policy has learned (so there is coverage to lose and a held-out score to
fall from), with enough steps and evaluations after the onset for them to show.
Healthy runs are drawn where the loop is healthy: entropy coefficients of at
least 0.025 (below that, high learning rates let pass@k stall against pass@1 on
their own).

The runs are independent and deterministic (their own numpy seeds, every other
random choice drawn up front from one ``random.Random`` of the seed), so a
process pool computes them in any order and ``generate`` returns the same list.
Workers holding the same weights sample as one batch (``batch_workers``): the
same process, far fewer calls with 16 workers. ``generate(seed)`` at the
defaults costs ~30 s of CPU (15-20 s on two idle cores), ``healthy=2,
per_cause=1`` ~6 s (3-5 s).
"""

from __future__ import annotations

import math
import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from parallax.alerts.suites import CAUSES, ENDS, T0, Scenario
from parallax.ingest.toyrl import AsyncTrainer, Config

FAMILY = "toyrl"

#: Mismatch metrics a trainer may not compute.
MISMATCH_METRICS = ("token_mismatch_rate", "prefix_break_rate", "logprob_diff_max")
#: Faults that only sparse evaluations show: the symptom metric.
SPARSE_SYMPTOM = {"exploration_collapse": "pass_at_k", "reward_hacking": "reward_heldout"}
#: Faults that exist only when rollouts overlap training.
ASYNC_ONLY = ("stale_rollouts", "unbalanced_groups")

STEPS = (150, 400)
MIN_ONSET = 60  # steps of normal training before a fault
MIN_TAIL = 60  # steps after the onset
#: The sparse faults take hold over tens of steps, the slower the lower the learning rate: steps after the onset
#: (at least, and pace / lr). Reward hacking: the exploit pays at once, so the training reward jumps and climbs
#: from the onset (the train/held-out gap up ~0.15 by the first evaluation after it), and the held-out score
#: falls 0.05 below its level some 20-40 steps later, as the policy gives up right first answers for the exploit.
#: Exploration collapse: entropy falls within tens of steps (lr x20), pass@k follows.
HACK_TAIL, HACK_PACE = 100, 1.6
COLLAPSE_TAIL, COLLAPSE_PACE = 80, 1.2
#: Learning progress (learning rate x steps) before the sparse faults can show: pass@k near its first plateau.
LEARNED = 2.0
MIN_EVALS_AFTER, MIN_EVALS_BEFORE = 4, 3

#: Initial policy (near uniform over 22 actions): generated and processed tokens per episode, to calibrate
#: throughputs to a rollout:train time ratio. Lengths drift by some 15% over training either way.
GEN_PER_EPISODE = 4.1
PROCESSED_PER_EPISODE = (3 + GEN_PER_EPISODE) * 1.02
SYNC_COST_S = 0.3  # the loop's weight sync per rollout batch


@dataclass(frozen=True)
class Spec:
    """Everything one scenario is made from: the loop's Config and what the trainer sends and logs."""

    name: str
    cause: str | None
    onset: int | None
    steps: int  # planned length of the run (a trainer_silent run stops at its onset)
    loop: dict  # ingest.toyrl.Config keyword arguments (fault and onset included)
    config: dict  # the run's logged config
    mismatch_metrics: bool
    send_staleness: bool
    end: str
    variant: str
    start: float  # wall time of step 0's start
    overhead: float  # seconds a step spends outside step_s (logging, bookkeeping)
    silent_delay: float  # trainer_silent: seconds after the last point at which it stopped
    checks: dict = field(default_factory=dict)  # calibration facts the tests check (e.g. the faulty rollout ratio)


def _loguniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _eval_steps(n: int, every: int) -> list[int]:
    return [s for s in range(n) if s % every == every - 1]


def _draw(rng: random.Random, cause: str | None, index: int) -> Spec:
    """One configuration for ``cause`` (None: healthy), drawn where its mechanism acts."""
    fault = cause
    if cause == "token_mismatch":  # the two mechanisms of a token-stream mismatch, in turn
        fault = "token_mismatch" if index % 2 == 0 else "retokenize"
    elif cause == "trainer_silent":
        fault = None
    sparse = cause in SPARSE_SYMPTOM

    synchronous = cause not in ASYNC_ONLY and rng.random() < 0.35
    seed = rng.randrange(1_000_000)
    while True:
        tasks = rng.choice([8, 12, 16, 24, 32, 48])
        group = rng.choice([4, 8, 16])
        if 64 <= tasks * group <= 384:
            break
    episodes = tasks * group
    lr = round(_loguniform(rng, 0.01 if sparse else 0.006, 0.03), 5)
    entropy_coef = round(_loguniform(rng, 0.025, 0.1), 4)
    k = rng.choice([4, 8, 8, 16])
    eval_tasks = rng.choice([96, 128]) if k == 16 else rng.choice([128, 192, 256])

    # run length and onset
    lo = MIN_ONSET
    tail = MIN_TAIL
    if sparse:
        lo = max(lo, math.ceil(LEARNED / lr))
    if cause == "exploration_collapse":
        tail = max(COLLAPSE_TAIL, math.ceil(COLLAPSE_PACE / lr))
    if cause == "reward_hacking":
        tail = max(HACK_TAIL, math.ceil(HACK_PACE / lr))
    n = rng.randint(max(STEPS[0], lo + tail), STEPS[1]) if cause else rng.randint(*STEPS)
    onset = rng.randint(lo, n - tail) if cause else None

    # evaluation cadence: every 5-50 steps; the sparse faults need evaluations on both sides of the onset
    if sparse:
        assert onset is not None
        top = min(50, (n - onset) // MIN_EVALS_AFTER, onset // MIN_EVALS_BEFORE)
        eval_every = rng.randint(5, max(5, top))
        while eval_every > 5 and (len([s for s in _eval_steps(n, eval_every) if s >= onset]) < MIN_EVALS_AFTER
               or len([s for s in _eval_steps(n, eval_every) if s < onset]) < MIN_EVALS_BEFORE):
            eval_every -= 1
    else:
        eval_every = rng.choice([5, 5, 10, 10, 20, 25, 50]) if rng.random() < 0.5 else rng.randint(5, 50)

    # timing: workers, throughputs calibrated to a rollout:train time ratio, steps of 3-30 s of training
    workers = rng.choice([2, 3, 4, 6, 8, 12, 16])
    train_s = _loguniform(rng, 3.0, 30.0)
    # pipelines are usually sized near balance (idle GPUs cost money): half the runs near it. The ratio is
    # nominal, at the initial lengths: as the policy stops thinking it falls by ~8%; a strong entropy bonus with a
    # high learning rate makes responses grow instead (up to ~+15%: a few % of sustained idle at the top).
    ratio = rng.uniform(0.75, 0.92) if rng.random() < 0.5 else rng.uniform(0.3, 0.75)
    jitter = round(rng.uniform(0.02, 0.15), 4)  # with a ratio near 1, a slow batch makes the trainer wait a little
    lost = 0.5
    checks: dict = {}
    if cause == "unbalanced_groups":
        # rollouts must become materially slower than training once the workers are lost
        while True:
            workers = rng.choice([2, 3, 4, 6, 8, 12, 16])
            ratio = rng.uniform(0.62, 0.85)
            lost = rng.choice([0.5, 0.5, 2 / 3, 0.75])
            survivors = max(1, int(workers * (1 - lost) + 1e-9))
            faulty = ((ratio * train_s - SYNC_COST_S) * workers / survivors + SYNC_COST_S) / train_s
            if survivors < workers and faulty >= 1.45:
                checks["faulty_ratio"] = round(faulty, 3)
                break
    trainer_tps = PROCESSED_PER_EPISODE * episodes / train_s
    worker_tps = GEN_PER_EPISODE * episodes / (workers * (ratio * train_s - SYNC_COST_S))

    # weight sync and the staleness bound (asynchronous runs)
    bound = rng.choice([1, 2, 3, 4, 6, 8])
    weight_sync = "lazy" if rng.random() < 0.65 else "eager"
    lazy_p = round(rng.uniform(0.15, 0.6), 3)
    stale_every = 8
    if cause == "stale_rollouts":
        # the lagging sync's period: staleness climbs to period + 1, its mean (period + 3) / 2 leaves the bound
        stale_every = max(8, 2 * bound + 1) + rng.randint(0, 6)

    loop = dict(
        fault=fault, onset=onset if fault else Config.onset, seed=seed, tasks_per_step=tasks, group_size=group,
        lr=lr, entropy_coef=entropy_coef, rollout_workers=workers, worker_tokens_per_s=round(worker_tps, 4),
        trainer_tokens_per_s=round(trainer_tps, 4), rollout_jitter=jitter, peak_mfu=round(rng.uniform(0.3, 0.55), 3),
        eval_every=eval_every, eval_tasks=eval_tasks, k=k, synchronous=synchronous, batch_workers=True,
    )
    if not synchronous:
        loop.update(staleness_bound=bound, weight_sync=weight_sync, lazy_sync_p=lazy_p,
                    stale_sync_every=stale_every, workers_lost=lost)
    Config(**loop)  # validates

    mismatch_metrics = (index % 4 != 3) if cause == "token_mismatch" else rng.random() < 0.6
    send_staleness = not synchronous or rng.random() < 0.5

    # the run's logged config
    config: dict = {
        "algorithm": "GRPO" + (" (synchronous, on-policy)" if synchronous else " (async, clipped IS)"),
        "k": k, "lr": lr, "entropy_coef": entropy_coef, "tasks_per_step": tasks, "group_size": group,
        "seed": seed, "eval_every": eval_every,
    }
    if synchronous:
        if rng.random() < 0.5:
            config["synchronous"] = True
    else:
        if rng.random() < 0.8:
            config["staleness_bound"] = bound
        if rng.random() < 0.25:
            config["synchronous"] = False
    if rng.random() < 0.5:
        config["rollout_gpus"] = workers
        config["train_gpus"] = rng.choice([1, 2, 4, 8])
    end = rng.choice(ENDS)
    if end == "total_steps" or rng.random() < 0.3:
        config["total_steps"] = n  # a trainer_silent run announces the steps it never reached
    if cause == "trainer_silent":
        end = "finished"  # how it would have ended: it died first (its config may announce n steps)

    mode = "sync" if synchronous else f"async {weight_sync}" + (f" p={lazy_p}" if weight_sync == "lazy" else "")
    parts = [mode]
    if not synchronous:
        parts.append(f"bound {bound}" + ("" if "staleness_bound" in config else " (not in config)"))
    parts += [f"{workers} workers, rollout:train {ratio:.2f} (jitter {jitter:.2f})", f"{tasks}x{group}", f"lr {lr:g}",
              f"ent {entropy_coef:g}", f"eval every {eval_every}", f"k {k}"]
    if not mismatch_metrics:
        parts.append("no mismatch metrics")
    if not send_staleness:
        parts.append("no staleness")
    if fault and fault != cause:
        parts.append(fault)
    if cause == "stale_rollouts":
        parts.append(f"sync every {stale_every}")
    if cause == "unbalanced_groups":
        parts.append(f"lost {lost:.2f} of the workers (rollout:train {checks['faulty_ratio']:.2f})")
    checks.update(ratio=round(ratio, 3), train_s=round(train_s, 3))
    return Spec(
        name=f"{cause or 'healthy'}-{index:02d}",
        cause=cause,
        onset=onset,
        steps=n,
        loop=loop,
        config=config,
        mismatch_metrics=mismatch_metrics,
        send_staleness=send_staleness,
        end=end,
        variant=", ".join(parts),
        start=T0 + rng.uniform(0.0, 60.0),
        overhead=rng.uniform(0.05, 0.6),
        silent_delay=rng.uniform(0.0, 5.0),
        checks=checks,
    )


def draw_specs(seed: int, *, healthy: int = 16, per_cause: int = 4) -> list[Spec]:
    """The configurations of :func:`generate`, without running them (cheap)."""
    rng = random.Random(f"{FAMILY}-{seed}")
    specs = [_draw(rng, None, i) for i in range(healthy)]
    for cause in CAUSES:
        specs += [_draw(rng, cause, v) for v in range(per_cause)]
    return specs


def run_spec(spec: Spec) -> Scenario:
    """Run the loop for one configuration and assemble what its trainer would have sent."""
    cut = spec.onset if spec.cause == "trainer_silent" else spec.steps
    trainer = AsyncTrainer(Config(**spec.loop))
    series: dict[str, dict[int, float]] = {}
    times: dict[int, float] = {}
    wobble = np.random.default_rng(spec.loop["seed"] + 20_000).uniform(0.8, 1.2, size=cut)  # of the overhead
    t = spec.start
    drop = set()
    if not spec.mismatch_metrics:
        drop.update(MISMATCH_METRICS)
    if not spec.send_staleness:
        drop.update(("staleness_mean", "staleness_max"))
    for step, metrics in trainer.steps(cut):
        for name, value in metrics.items():
            if name not in drop:
                series.setdefault(name, {})[step] = float(value)
        dt = metrics["step_s"]
        t += (dt if math.isfinite(dt) else 10.0) + spec.overhead * float(wobble[step])
        times[step] = t
    silent_from = None
    if spec.cause == "trainer_silent":
        silent_from = times[cut - 1] + spec.silent_delay
    return Scenario(
        name=spec.name,
        task="toyrl",
        variant=spec.variant,
        cause=spec.cause,
        onset=spec.onset,
        series=series,
        times=times,
        config=dict(spec.config),
        events=[],
        silent_from=silent_from,
        symptom=SPARSE_SYMPTOM.get(spec.cause or ""),
        end=spec.end,
        family=FAMILY,
    )


def _cost(spec: Spec) -> float:
    """Rough relative cost of a run: episodes sampled (training batches and evaluations)."""
    loop = spec.loop
    n = spec.onset if spec.cause == "trainer_silent" else spec.steps
    return n * (loop["tasks_per_step"] * loop["group_size"] + loop["eval_tasks"] * loop["k"] / loop["eval_every"])


def run_specs(specs: list[Spec], *, workers: int = 2) -> list[Scenario]:
    """Run every spec, in a pool of ``workers`` processes (0 or 1: in this process); results in spec order."""
    if workers <= 1 or len(specs) <= 1 or multiprocessing.current_process().daemon:
        return [run_spec(s) for s in specs]
    order = sorted(range(len(specs)), key=lambda i: -_cost(specs[i]))  # longest first: the pool ends together
    with ProcessPoolExecutor(max_workers=min(workers, len(specs))) as pool:
        futures = {i: pool.submit(run_spec, specs[i]) for i in order}
        return [futures[i].result() for i in range(len(specs))]


def generate(seed: int, *, healthy: int = 16, per_cause: int = 4, workers: int = 2) -> list[Scenario]:
    """``healthy`` healthy runs and ``per_cause`` runs of each cause, each one run of the toy RL loop."""
    return run_specs(draw_specs(seed, healthy=healthy, per_cause=per_cause), workers=workers)
