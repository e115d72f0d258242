"""Labelled simulated runs for the rule evaluation suite (``make eval``).

Healthy runs follow a task profile (levels and noise differ between tasks, as
real runs of a math model and a software agent do) with the things normal
training shows: entropy that declines slowly, isolated one-step spikes, noisy
early steps, sparse evaluations (pass@k, held-out reward every 5-50 steps),
optional metrics a trainer may not send, and resumes from a checkpoint after
which mismatch metrics, staleness, stalls and MFU jump for a few steps.

Each fault run is a healthy run into which one cause of DESIGN §2 is injected
from a known step (the onset), in several variants per cause: magnitudes,
ramps, baselines, sparsity and which supporting metrics are sent. The label is
the cause id the first alert must name.

Everything is drawn from a seeded ``random.Random``: the same seed gives the
same suite.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

from parallax.alerts.suites import CAUSES, T0, Scenario


# -- tasks ----------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    name: str
    entropy: float  # starting mean token entropy
    iw: float  # typical importance_weight_max
    iw_noise: float  # lognormal sigma of (iw - 1)
    mfu: float
    train_s: float  # seconds per training step
    length: float  # mean response length (tokens)
    length_cv: float  # response_length_std / mean
    padding: float
    pass1: tuple[float, float]  # start, plateau
    passk: tuple[float, float]
    pass_noise: float
    reward: tuple[float, float]  # start, plateau of the training reward
    reward_noise: float
    heldout_gap: float  # training minus held-out reward at the plateau
    heldout_noise: float


TASKS: tuple[Task, ...] = (
    Task("math-1.5b", 0.65, 1.06, 0.25, 0.42, 16.0, 650, 0.45, 0.10, (0.30, 0.62), (0.62, 0.84), 0.015,
         (0.30, 0.70), 0.025, 0.06, 0.015),
    Task("swe-agent-32b", 1.35, 1.7, 0.35, 0.21, 140.0, 5200, 0.85, 0.28, (0.08, 0.24), (0.22, 0.41), 0.02,
         (0.05, 0.26), 0.03, 0.05, 0.02),
    Task("web-agent-7b", 1.05, 1.25, 0.3, 0.31, 45.0, 1800, 0.6, 0.18, (0.18, 0.43), (0.45, 0.66), 0.02,
         (0.15, 0.48), 0.035, 0.07, 0.025),
    Task("code-rm-7b", 0.9, 1.15, 0.3, 0.36, 30.0, 1200, 0.55, 0.15, (0.25, 0.5), (0.5, 0.72), 0.015,
         (-1.2, 0.9), 0.15, 0.5, 0.12),  # reward-model scores: another scale, more noise
    Task("tool-use-3b", 2.1, 1.12, 0.3, 0.47, 9.0, 420, 0.4, 0.08, (0.4, 0.74), (0.7, 0.9), 0.012,
         (0.35, 0.8), 0.02, 0.04, 0.012),
)


# -- one run ---------------------------------------------------------------------


@dataclass
class _Run:
    """A run under construction: one list per metric (None = no point at that step)."""

    n: int
    task: Task
    config: dict
    m: dict[str, list[float | None]]
    eval_every: int
    eval_offset: int
    async_: bool
    bound: float | None
    ratio: float  # rollout_s / train_s when healthy
    events: list[tuple[int, str]] = field(default_factory=list)

    def eval_steps(self) -> list[int]:
        return [s for s in range(self.n) if s % self.eval_every == self.eval_offset]


def _lognormal(rng: random.Random, sigma: float) -> float:
    return math.exp(rng.gauss(0.0, sigma))


def _isolated(rng: random.Random, n: int, p: float, start: int = 5, gap: int = 4) -> list[int]:
    """Steps of isolated one-step events: probability p per step, never within `gap` of each other."""
    out: list[int] = []
    for s in range(start, n):
        if rng.random() < p and (not out or s - out[-1] > gap):
            out.append(s)
    return out


def healthy_run(
    rng: random.Random,
    task: Task,
    n: int,
    *,
    async_: bool,
    eval_every: int,
    mismatch_metrics: bool,
    send_staleness: bool = True,
    bound_in_config: bool = True,
    resume_at: int | None = None,
) -> _Run:
    """A run of `n` steps with realistic noise and no fault."""
    j = lambda: rng.uniform(0.85, 1.15)  # noqa: E731 - per-run jitter of the task's levels
    early = [1.0 + 2.0 * math.exp(-s / 6.0) for s in range(n)]  # noisy early steps
    bound = float(rng.choice([1, 2, 4, 8])) if async_ else None
    ratio = rng.uniform(0.5, 0.85)
    config: dict = {"k": 8, "task": task.name}
    if bound is not None and bound_in_config:
        config["staleness_bound"] = bound
    if rng.random() < 0.5:
        r, t = rng.choice([(4, 4), (6, 2), (8, 8), (3, 1)])
        config.update(rollout_gpus=r, train_gpus=t)
    m: dict[str, list[float | None]] = {}

    # entropy: slow decline (a few % per 25 steps), multiplicative noise
    e0, decay = task.entropy * j(), rng.uniform(0.0008, 0.003)
    m["entropy"] = [e0 * math.exp(-decay * s) * _lognormal(rng, 0.03 * early[s]) for s in range(n)]

    # importance weights: 1 + lognormal excess, isolated one-step spikes
    iw = 1.0 + (task.iw - 1.0) * j()
    m["importance_weight_max"] = [1.0 + (iw - 1.0) * _lognormal(rng, task.iw_noise * early[s]) for s in range(n)]
    for s in _isolated(rng, n, 0.02):
        m["importance_weight_max"][s] = iw * rng.uniform(2.0, 8.0)

    # staleness
    if async_:
        level = rng.uniform(0.3, 0.7) * bound
        stale = [min(bound, max(0.0, level + rng.gauss(0, 0.08 * bound))) for _ in range(n)]
        m["staleness_mean"] = stale
        m["staleness_max"] = [min(bound, math.ceil(v + rng.uniform(0, 1))) for v in stale]
    elif send_staleness:
        m["staleness_mean"] = [0.0] * n
        m["staleness_max"] = [0.0] * n
    m["policy_version"] = [float(s) for s in range(n)]

    # timing: rollouts usually faster than training; occasional isolated stalls
    train_s = task.train_s * j()
    m["train_s"] = [train_s * _lognormal(rng, 0.03) for _ in range(n)]
    m["rollout_s"] = [ratio * train_s * _lognormal(rng, 0.08) for _ in range(n)]
    m["stall_s"] = [max(0.0, r - t) for r, t in zip(m["rollout_s"], m["train_s"])]
    for s in _isolated(rng, n, 0.02):
        m["stall_s"][s] = rng.uniform(0.5, 0.4 * train_s)

    # MFU, padding and lengths
    mfu = task.mfu * j()
    m["trainer_mfu"] = [mfu * _lognormal(rng, 0.025 * early[s]) for s in range(n)]
    for s in range(min(n, rng.randint(2, 6))):  # warm-up: compilation, caches
        m["trainer_mfu"][s] = mfu * rng.uniform(0.4, 0.9)
    padding = task.padding * j()
    m["padding_ratio"] = [min(0.95, max(0.0, padding + rng.gauss(0, 0.015))) for _ in range(n)]
    length, growth, cv = task.length * j(), rng.uniform(0.0, 0.002), task.length_cv * j()
    m["response_length_mean"] = [length * (1 + growth * s) * _lognormal(rng, 0.04) for s in range(n)]
    m["response_length_std"] = [cv * x * _lognormal(rng, 0.05) for x in m["response_length_mean"]]

    # rewards and evaluations: saturating curves, sparse held-out evaluation
    tau = rng.uniform(60, 160)
    curve = [1 - math.exp(-s / tau) for s in range(n)]
    r0, r1 = task.reward
    m["reward_train"] = [r0 + (r1 - r0) * c + rng.gauss(0, task.reward_noise * early[s]) for s, c in enumerate(curve)]
    eval_offset = rng.randrange(eval_every)
    evals = set(s for s in range(n) if s % eval_every == eval_offset)
    h_noise = task.heldout_noise * j()
    m["reward_heldout"] = [
        (r0 + (r1 - r0) * c - task.heldout_gap * c + rng.gauss(0, h_noise)) if s in evals else None
        for s, c in enumerate(curve)
    ]
    (a1, b1), (ak, bk) = task.pass1, task.passk
    p_noise = task.pass_noise * j()
    m["pass_at_1"] = [(a1 + (b1 - a1) * c + rng.gauss(0, p_noise)) if s in evals else None for s, c in enumerate(curve)]
    m["pass_at_k"] = [(ak + (bk - ak) * c + rng.gauss(0, p_noise)) if s in evals else None for s, c in enumerate(curve)]

    # optimiser numbers
    g = rng.uniform(0.3, 3.0)
    m["grad_norm"] = [g * _lognormal(rng, 0.2 * early[s]) for s in range(n)]
    for s in _isolated(rng, n, 0.02):
        m["grad_norm"][s] *= rng.uniform(3, 10)
    m["loss"] = [rng.gauss(0, 0.05) for _ in range(n)]
    m["kl"] = [max(0.0, 0.0005 + 0.0001 * s * rng.uniform(0.5, 1.5)) for s in range(n)]
    m["clip_frac"] = [max(0.0, rng.uniform(0.01, 0.08) + rng.gauss(0, 0.005)) for _ in range(n)]

    if mismatch_metrics:
        base_rate = rng.choice([0.0, 0.0005, 0.002])
        m["token_mismatch_rate"] = [abs(rng.gauss(0, base_rate)) for _ in range(n)]
        m["prefix_break_rate"] = [0.0] * n
        lp = rng.uniform(0.2, 1.2)
        m["logprob_diff_max"] = [lp * _lognormal(rng, 0.2) for _ in range(n)]

    run = _Run(n, task, config, m, eval_every, eval_offset, async_, bound, ratio)
    if resume_at is not None:
        _resume(rng, run, resume_at)
    return run


def _resume(rng: random.Random, run: _Run, at: int) -> None:
    """A restart from a checkpoint: for a few steps mismatch metrics and staleness jump, the
    pipeline refills (stall), MFU warms up, importance weights spike."""
    m, n = run.m, run.n
    run.events.append((at, "resume"))
    for s in range(at, min(n, at + rng.randint(2, 5))):
        if "staleness_mean" in m:
            top = run.bound if run.bound else 1.0
            m["staleness_mean"][s] = top * rng.uniform(1.5, 3.0)
            m["staleness_max"][s] = math.ceil(m["staleness_mean"][s] + 1)
        if "token_mismatch_rate" in m:
            m["token_mismatch_rate"][s] = rng.uniform(0.02, 0.1)
            m["prefix_break_rate"][s] = rng.uniform(0.05, 0.2)
            m["logprob_diff_max"][s] *= rng.uniform(3, 10)
        m["importance_weight_max"][s] = m["importance_weight_max"][s] * rng.uniform(3, 12)
        m["trainer_mfu"][s] *= rng.uniform(0.4, 0.8)
        m["stall_s"][s] = m["train_s"][s] * rng.uniform(0.3, 1.5)


# -- faults -------------------------------------------------------------------------
# Each takes (rng, run, onset) and changes the run from `onset` on; returns a variant note.


def _ramp(s: int, onset: int, steps: int) -> float:
    """0 before the onset, rising to 1 over `steps` steps (1 at once when steps <= 1)."""
    if s < onset:
        return 0.0
    return min(1.0, (s - onset + 1) / max(1, steps))


def fault_stale_rollouts(rng: random.Random, run: _Run, onset: int, variant: int) -> str:
    m, n = run.m, run.n
    bound = run.bound or 2.0
    base = [v for v in m["staleness_mean"][:onset]]
    level = sorted(base)[len(base) // 2]
    if variant % 4 == 3:  # weight sync stuck: rollouts keep the old policy, lag grows by ~1 per step
        rate = rng.uniform(0.4, 1.0)
        for s in range(onset, n):
            m["staleness_mean"][s] = level + rate * (s - onset + 1) + rng.gauss(0, 0.05 * bound)
        note = f"weight sync stuck, staleness +{rate:.2f}/step"
    else:
        target = bound * rng.uniform(1.4, 3.0)
        steps = rng.randint(1, 6)
        for s in range(onset, n):
            m["staleness_mean"][s] = level + (target - level) * _ramp(s, onset, steps) + rng.gauss(0, 0.05 * bound)
        note = f"staleness -> {target:.1f} (bound {bound:g}) over {steps} steps"
    for s in range(onset, n):
        m["staleness_max"][s] = math.ceil(m["staleness_mean"][s] + rng.uniform(0.5, 2))
    if variant % 4 != 2:  # importance weights follow the excess lag (variant 2: IS correction keeps them down)
        k = rng.uniform(1.0, 6.0)
        for s in range(onset, n):
            excess = max(0.0, m["staleness_mean"][s] - level) / max(1.0, bound)
            m["importance_weight_max"][s] = m["importance_weight_max"][s] * (1 + k * excess)
        note += f", iw x(1+{k:.1f}*excess)"
    if variant % 4 == 1 and "staleness_bound" in run.config:  # the bound is not in the config: relative thresholds
        del run.config["staleness_bound"]
        note += ", no bound in config"
    return note


def fault_token_mismatch(rng: random.Random, run: _Run, onset: int, variant: int) -> str:
    m, n = run.m, run.n
    factor = math.exp(rng.uniform(math.log(3), math.log(60)))
    share = 1.0 if variant % 4 != 3 else rng.uniform(0.6, 0.8)  # variant 3: only some batches (multi-turn ones)
    base = sorted(m["importance_weight_max"][:onset])[onset // 2]
    for s in range(onset, n):
        if rng.random() < share:
            m["importance_weight_max"][s] = base * factor * _lognormal(rng, 0.3)
    kind = ("retokenization", "template drops reasoning", "non-exact prefix", "intermittent")[variant % 4]
    if "token_mismatch_rate" in m:
        rate = rng.uniform(0.02, 0.2) if variant % 4 != 1 else rng.uniform(0.0, 0.004)
        pbr = rng.uniform(0.2, 0.9) if variant % 4 in (1, 2) else 0.0
        for s in range(onset, n):
            m["token_mismatch_rate"][s] = rate * _lognormal(rng, 0.2)
            m["prefix_break_rate"][s] = pbr * _lognormal(rng, 0.1)
            m["logprob_diff_max"][s] *= rng.uniform(4, 20)
    return f"{kind}: iw x{factor:.1f} on {share:.0%} of steps" + ("" if "token_mismatch_rate" in m else ", no mismatch metrics")


def fault_unbalanced_groups(rng: random.Random, run: _Run, onset: int, variant: int) -> str:
    m, n = run.m, run.n
    over = rng.uniform(1.15, 1.35) if variant % 3 == 2 else rng.uniform(1.3, 3.0)
    steps = rng.randint(1, 4)
    wall_mfu = variant % 3 == 1  # MFU measured over wall time falls with the stall
    for s in range(onset, n):
        t = m["train_s"][s]
        target = over * t * _lognormal(rng, 0.06)
        r = m["rollout_s"][s] + (target - m["rollout_s"][s]) * _ramp(s, onset, steps)
        m["rollout_s"][s] = r
        m["stall_s"][s] = max(0.0, r - t)
        if wall_mfu:
            m["trainer_mfu"][s] *= t / (t + m["stall_s"][s])
    return f"rollout {over:.2f}x train" + (", wall-time MFU" if wall_mfu else "")


def fault_padding_imbalance(rng: random.Random, run: _Run, onset: int, variant: int) -> str:
    m, n = run.m, run.n
    drop = rng.uniform(0.45, 0.78)
    pad = rng.uniform(0.35, 0.7)
    spread = rng.uniform(1.8, 3.5)
    steps = 1 if variant % 3 == 0 else rng.randint(3, 6)
    for s in range(onset, n):
        r = _ramp(s, onset, steps)
        m["trainer_mfu"][s] *= 1 - (1 - drop) * r
        m["padding_ratio"][s] += (pad - m["padding_ratio"][s]) * r
        m["response_length_std"][s] *= 1 + (spread - 1) * r
    note = f"MFU x{drop:.2f}, padding -> {pad:.2f}, length spread x{spread:.1f} over {steps} steps"
    if variant % 3 == 2:  # the trainer sends no padding metrics: MFU alone
        del m["padding_ratio"], m["response_length_std"], m["response_length_mean"]
        note += ", no padding metrics"
    return note


def fault_exploration_collapse(rng: random.Random, run: _Run, onset: int, variant: int) -> str:
    m, n = run.m, run.n
    tau = rng.uniform(4, 12)
    floor = rng.uniform(0.1, 0.35)
    noise = run.task.pass_noise
    fall, rise = rng.uniform(0.7, 1.5) * noise, rng.uniform(0.1, 0.4) * noise
    for s in range(onset, n):
        k = floor + (1 - floor) * math.exp(-(s - onset + 1) / tau)
        m["entropy"][s] *= k
        if m["pass_at_k"][s] is not None:
            m["pass_at_k"][s] = max(0.0, m["pass_at_k"][s] - fall * (s - onset + 1))
            m["pass_at_1"][s] = min(1.0, m["pass_at_1"][s] + rise * (s - onset + 1))
    return f"entropy -> x{floor:.2f} (tau {tau:.0f}), pass@k -{fall:.3f}/step, pass@1 +{rise:.3f}/step, eval every {run.eval_every}"


def fault_reward_hacking(rng: random.Random, run: _Run, onset: int, variant: int) -> str:
    m, n = run.m, run.n
    up = rng.uniform(0.1, 0.5) * run.task.reward_noise
    down = rng.uniform(0.7, 1.5) * run.task.heldout_noise
    for s in range(onset, n):
        m["reward_train"][s] += up * (s - onset + 1)
        if m["reward_heldout"][s] is not None:
            m["reward_heldout"][s] -= down * (s - onset + 1)
    return f"train +{up:.4f}/step, held-out -{down:.4f}/step, eval every {run.eval_every}"


def fault_numerical_blowup(rng: random.Random, run: _Run, onset: int, variant: int) -> str:
    m, n = run.m, run.n
    nan, inf = float("nan"), float("inf")
    if variant % 3 == 0:  # gradients explode, then everything is NaN
        m["grad_norm"][onset] *= 30
        for s in range(onset + 1, n):
            for metric in ("loss", "grad_norm", "kl", "entropy", "importance_weight_max"):
                m[metric][s] = nan
        return "grad norm x30, then NaN everywhere"
    if variant % 3 == 1:  # only the loss goes NaN (log of zero in the loss)
        for s in range(onset, n):
            m["loss"][s] = nan
        return "loss NaN"
    for s in range(onset, n):  # overflow in the ratio
        m["importance_weight_max"][s] = inf
        m["kl"][s] = inf if rng.random() < 0.5 else nan
    return "importance weight inf, kl non-finite"


def fault_trainer_silent(rng: random.Random, run: _Run, onset: int, variant: int) -> str:
    for metric in run.m.values():
        for s in range(onset, run.n):
            metric[s] = None
    return "no data from the onset on"


FAULTS: dict[str, Callable[[random.Random, _Run, int, int], str]] = {
    "stale_rollouts": fault_stale_rollouts,
    "token_mismatch": fault_token_mismatch,
    "unbalanced_groups": fault_unbalanced_groups,
    "padding_imbalance": fault_padding_imbalance,
    "exploration_collapse": fault_exploration_collapse,
    "reward_hacking": fault_reward_hacking,
    "numerical_blowup": fault_numerical_blowup,
    "trainer_silent": fault_trainer_silent,
}


#: Faults that only sparse evaluations show: detection waits for the next evaluation.
SPARSE_SYMPTOM = {"exploration_collapse": "pass_at_k", "reward_hacking": "reward_heldout"}


# -- assembling scenarios ------------------------------------------------------------------


def _finish(run: _Run, name: str, variant: str, cause: str | None, onset: int | None, rng: random.Random) -> Scenario:
    series: dict[str, dict[int, float]] = {}
    for metric, values in run.m.items():
        pts = {s: float(v) for s, v in enumerate(values) if v is not None}
        if pts:
            series[metric] = pts
    # wall clock: each step takes its step time (training + stall + overhead)
    times: dict[int, float] = {}
    t = T0
    overhead = rng.uniform(0.5, 3.0)
    step_s = []
    for s in range(run.n):
        train = run.m["train_s"][s]
        stall = run.m["stall_s"][s]
        dt = (train if train is not None else run.task.train_s) + (stall or 0.0) + overhead
        step_s.append(dt)
        t += dt
        times[s] = t
    series["step_s"] = {s: step_s[s] for s in range(run.n) if run.m["train_s"][s] is not None}
    silent_from = None
    if cause == "trainer_silent":
        last = max(s for s in series["step_s"])
        times = {s: v for s, v in times.items() if s <= last}
        silent_from = times[last] + rng.uniform(0.0, 5.0)
    symptom = SPARSE_SYMPTOM.get(cause) if cause else None
    config = dict(run.config)
    end = "finished"
    if rng.random() < 0.4:  # the config announces the run's length: it reaches it (or its trainer dies short of it)
        config["total_steps"] = run.n
        if cause != "trainer_silent":
            end = "total_steps"
    return Scenario(
        name, run.task.name, variant, cause, onset, series, times, config, list(run.events), silent_from, symptom,
        end=end, family="synthetic",
    )


def generate(
    seed: int = 0,
    *,
    healthy: int = 25,
    per_cause: int = 5,
    steps: tuple[int, int] = (220, 320),
    earliest_onset: int = 90,
    reward_effect: bool = True,
) -> list[Scenario]:
    """`healthy` healthy runs and `per_cause` fault runs for each cause id, each fault beginning
    between `earliest_onset` and 60 steps before the end of its run. `reward_effect=False`: the same runs, every
    draw the same, but a reward-hacking run's exploit leaves its training reward and held-out score as they were
    (the counterfactual `parallax.alerts.oracle` measures the exploit's own effect against)."""
    rng = random.Random(seed)
    out: list[Scenario] = []
    for i in range(healthy):
        task = TASKS[i % len(TASKS)]
        n = rng.randint(*steps)
        run = healthy_run(
            rng,
            task,
            n,
            async_=rng.random() < 0.6,
            eval_every=rng.choice([5, 10, 20, 25, 50]),
            mismatch_metrics=rng.random() < 0.5,
            send_staleness=rng.random() < 0.7,
            bound_in_config=rng.random() < 0.7,
            resume_at=rng.randint(60, n - 20) if rng.random() < 0.5 else None,
        )
        variant = f"{'async' if run.async_ else 'sync'}, eval every {run.eval_every}" + (
            ", resume" if run.events else ""
        )
        out.append(_finish(run, f"healthy-{i:02d}-{task.name}", variant, None, None, rng))
    for cause in CAUSES:
        for v in range(per_cause):
            task = TASKS[(v + CAUSES.index(cause)) % len(TASKS)]
            n = rng.randint(*steps)
            onset = rng.randint(earliest_onset, max(earliest_onset, n - 60))
            async_ = cause == "stale_rollouts" or (cause == "unbalanced_groups") or rng.random() < 0.5
            if cause == "token_mismatch" and v % 2 == 0:
                async_ = False
            eval_every = rng.choice([5, 10]) if cause in ("exploration_collapse", "reward_hacking") else rng.choice([10, 25, 50])
            run = healthy_run(
                rng,
                task,
                n,
                async_=async_,
                eval_every=eval_every,
                mismatch_metrics=(cause == "token_mismatch" and v % 4 != 0) or rng.random() < 0.4,
                send_staleness=rng.random() < 0.8,
                resume_at=rng.randint(40, onset - 30) if onset >= 70 and rng.random() < 0.3 else None,
            )
            if cause in ("exploration_collapse", "reward_hacking") and not run.eval_steps():
                continue
            kept = ({k: list(run.m[k]) for k in ("reward_train", "reward_heldout")}
                    if not reward_effect and cause == "reward_hacking" else {})
            note = FAULTS[cause](rng, run, onset, v)
            run.m.update(kept)
            out.append(_finish(run, f"{cause}-{v}-{task.name}", note, cause, onset, rng))
    return out
