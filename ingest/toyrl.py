"""A tiny asynchronous (or synchronous) policy-gradient loop in numpy, for `parallax demo`: real metrics, real faults.

The task is multi-turn: an episode is three turns; each turn the environment
shows an observation token (16 kinds), the policy may "think" (emit up to three
think tokens) and then answers with one of 16 answer tokens. The right answer
of the first two turns depends on the observation (the common observations
share three popular answers, four rare ones have their own); the last turn's
depends on the first observation too, which the policy no longer sees, so four
answers are right equally often there and solving a task within k samples needs
a policy that keeps all four (coverage: what pass@k measures). The training
reward is the fraction of turns the training verifier accepts (it misses one
right answer in five); a task counts as solved (pass@1, pass@k) when all three
turns are right. Tasks (triples of observations) are split by hash into a
training split (rare observations rare) and a held-out split (uniform).

The policy is a softmax over the 22 action tokens whose logits add a row per
feature of the context: the (turn, observation), the previous token of the
rendered sequence, its position in that sequence and the turn. The rendered
sequence (the "chat history") therefore matters: a trainer that renders it
differently from the rollout engine scores other tokens in other contexts.

The loop is asynchronous like AReaL / verl's fully-async mode: rollout workers
sample with the weights of the policy version they last synced, the trainer
consumes their batch one step later and corrects with per-token importance
weights exp(logp_trainer - logp_rollout) (clipped surrogate, GRPO group
advantages, an entropy bonus, Adam). Every metric it reports is computed from
those samples and log-probabilities; the timings come from a cost model over
the real token counts (rollout workers and the trainer have fixed throughputs
in tokens per second, the trainer idles when rollouts take longer).

Weight sync and the staleness bound. A sample's staleness is the trainer's
version minus the version that sampled it: at least 1 in an asynchronous run
(the batch was generated while the previous step trained). With the default
``weight_sync="eager"`` every worker takes the newest weights before each batch
and one in five is still a version behind (in-flight generation), so staleness
is 1-2; with ``"lazy"`` a worker picks up new weights with probability
``lazy_sync_p`` a step and otherwise keeps sampling with the ones it has, so the
lag swings between 1 and the bound. Either way ``staleness_bound`` is enforced
(as AReaL's max off-policyness): a worker more than ``staleness_bound``
versions behind must resync before it samples, and staleness never exceeds it
while the weight sync works.

``synchronous=True`` runs the on-policy loop of a colocated trainer (verl's
default): generation with the current weights, then training, no overlap;
staleness is 0 and importance weights are 1 up to rounding unless the token
streams differ. The trainer waits for generation by design, so a synchronous
step reports ``rollout_s`` (the generation time), ``train_s`` and
``step_s = rollout_s + train_s``, and no ``stall_s`` at all: a synchronous
framework has no idle-trainer timer (verl logs gen/update_actor/step), and a
zero it never computed would be a made-up value.

Each fault of DESIGN §2 is injected as the mechanism itself at ``onset``:

* ``stale_rollouts``: weight sync to the rollout workers lags: new weights reach them only every
  ``stale_sync_every`` steps (8), and the bound can no longer be enforced (asynchronous runs only).
* ``token_mismatch``: the trainer re-renders the history with a chat template
  that drops earlier turns' reasoning (``drop_reasoning``), or re-tokenizes the
  detokenized text, where two think tokens share one string (``retokenize``).
* ``unbalanced_groups``: a share ``workers_lost`` (half) of the rollout workers is lost; the
  survivors generate everything (asynchronous runs only: it shows as the trainer idling).
* ``padding_imbalance``: micro-batches are no longer packed but padded.
* ``exploration_collapse``: the entropy bonus is removed and the learning
  rate raised twentyfold.
* ``reward_hacking``: the training verifier reads only the first answer it finds
  (answer extraction that stops at the first match): one answer token there
  passes the whole episode, whatever the task; the held-out check reads every
  turn. The exploit pays the full reward where the task pays about half, so the
  policy converges on it: the training reward climbs steeply while the held-out
  score stays flat, then falls (earlier versions accepted the token in the first
  turn only, an exploit worth a fifteenth of a turn over the right answer that
  took 60-145 steps to show in any curve: no signature to diagnose).
* ``numerical_blowup``: a broken schedule multiplies the learning rate by
  2,000 and the trainer computes entropy naively as -sum(p log p).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

N_OBS = 16
ANS0 = N_OBS  # answer tokens ANS0 .. ANS0 + N_OBS - 1
THINK0 = ANS0 + N_OBS  # think tokens THINK0 .. THINK0 + N_THINK - 1
N_THINK = 6
BOS = THINK0 + N_THINK
VOCAB = BOS + 1
N_ACT = N_OBS + N_THINK  # the policy's outputs: answer and think tokens (action index = token - ANS0)
TURNS = 3
MAX_THINK = 3
MAX_LEN = TURNS * (2 + MAX_THINK)  # observation, up to MAX_THINK think tokens, answer
#: Observations rare in training (the last RARE kinds of every turn): training tasks draw them four times less
#: often than the others; held-out tasks draw every kind alike.
RARE = 4


def _answer_table() -> np.ndarray:
    """(TURNS, N_OBS) correct answer token. Per turn, the common observations share three popular answers; each
    rare observation has an answer of its own, so a policy leaning on the popular ones gets rare ones wrong."""
    table = np.empty((TURNS, N_OBS), dtype=np.int64)
    for t in range(TURNS):
        perm = np.random.default_rng(1234 + t).permutation(N_OBS)
        obs = np.arange(N_OBS)
        table[t] = ANS0 + np.where(obs < N_OBS - RARE, perm[obs % 3], perm[3 + (obs - (N_OBS - RARE))])
    # The last turn's answer depends on the first observation, which the policy does not see then: for each
    # observation four answers are right equally often, and only a policy that keeps all four solves the task
    # within k samples.
    table[-1] = ANS0 + np.random.default_rng(1234 + TURNS).permutation(N_OBS - 1)[np.arange(N_OBS) % 4]
    return table


ANSWER = _answer_table()
#: The first answer the hacked verifier accepts for the whole episode whatever the observation: one the policy
#: already gives often there (right for a quarter of the common observations), so the exploit is found at once.
LOOPHOLE = int(ANSWER[0, 0])
#: Retokenization: the detokenizer renders these two think tokens as one string; the
#: tokenizer maps that string back to the first.
RETOKENIZED = {THINK0 + N_THINK - 1: THINK0 + N_THINK - 2}

FAULTS = (
    "stale_rollouts",
    "token_mismatch",
    "retokenize",
    "unbalanced_groups",
    "padding_imbalance",
    "exploration_collapse",
    "reward_hacking",
    "numerical_blowup",
)
#: The cause id of DESIGN §2 each fault must be diagnosed as.
EXPECTED_CAUSE = {f: f for f in FAULTS} | {"retokenize": "token_mismatch"}


@dataclass
class Config:
    fault: str | None = None
    onset: int = 80
    seed: int = 0
    tasks_per_step: int = 24
    group_size: int = 8
    lr: float = 0.015
    entropy_coef: float = 0.05
    clip_eps: float = 0.2
    rollout_workers: int = 4
    worker_tokens_per_s: float = 70.0
    rollout_jitter: float = 0.03  # relative spread of a batch's generation time (long-tail responses)
    trainer_tokens_per_s: float = 320.0
    peak_mfu: float = 0.42
    eval_every: int = 5
    eval_tasks: int = 192
    k: int = 8
    staleness_bound: int = 4  # asynchronous runs: the largest version lag a worker may sample with (>= 1)
    synchronous: bool = False  # on-policy, no overlap of generation and training
    weight_sync: str = "eager"  # "eager" or "lazy" (see the module docstring)
    lazy_sync_p: float = 0.3  # "lazy": probability a worker picks up the newest weights before a batch
    stale_sync_every: int = 8  # stale_rollouts: the lagging weight sync reaches the workers every N steps
    workers_lost: float = 0.5  # unbalanced_groups: the share of the rollout workers lost
    #: Sample the shares of all workers holding the same weights in one call: the same distribution with other
    #: random draws, and much faster with many workers. Off by default, so a seed replays what it always did.
    batch_workers: bool = False

    def __post_init__(self) -> None:
        if self.fault is not None and self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}; one of {', '.join(FAULTS)}")
        if self.weight_sync not in ("eager", "lazy"):
            raise ValueError(f"weight_sync {self.weight_sync!r}: 'eager' or 'lazy'")
        if self.synchronous and self.fault in ("stale_rollouts", "unbalanced_groups"):
            raise ValueError(f"{self.fault} has no meaning in a synchronous run (no overlap, no staleness)")
        if not self.synchronous and self.staleness_bound < 1:
            raise ValueError("an asynchronous run's staleness is at least 1: staleness_bound must be >= 1")
        if self.stale_sync_every < 1 or not 0 < self.workers_lost < 1:
            raise ValueError("stale_sync_every >= 1 and 0 < workers_lost < 1")


@dataclass
class Rollouts:
    """A batch of sampled episodes, as the rollout engine produced them."""

    tokens: np.ndarray  # (B, MAX_LEN) int, BOS-padded after the end
    action: np.ndarray  # (B, MAX_LEN) bool: generated by the policy (loss mask)
    logp: np.ndarray  # (B, MAX_LEN) float32: the rollout engine's log-probability of each action token
    turn: np.ndarray  # (B, MAX_LEN) int: the turn each position belongs to
    obs: np.ndarray  # (B, TURNS) int: the task's observations
    length: np.ndarray  # (B,) int
    version: np.ndarray  # (B,) int: policy version that sampled each episode


_TRAIN_P = np.where(np.arange(N_OBS) >= N_OBS - RARE, 0.25, 1.0)
_TRAIN_P = _TRAIN_P / _TRAIN_P.sum()


def _task_split(rng: np.random.Generator, n: int, heldout: bool) -> np.ndarray:
    """``n`` tasks (observation triples) from one split: held-out tasks are those whose hash is 0 mod 5."""
    out = np.empty((0, TURNS), dtype=np.int64)
    while len(out) < n:
        if heldout:
            cand = rng.integers(0, N_OBS, size=(4 * n, TURNS))
        else:
            cand = rng.choice(N_OBS, size=(2 * n, TURNS), p=_TRAIN_P)
        h = (cand[:, 0] * 7 + cand[:, 1] * 3 + cand[:, 2] * 5) % 5
        out = np.concatenate([out, cand[(h == 0) == heldout]])
    return out[:n]


class Policy:
    """Logits = W_obs[turn, current observation] + W_prev[previous token] + W_pos[position] + W_turn[turn]."""

    def __init__(self, rng: np.random.Generator):
        self.w = {
            "obs": rng.normal(0, 0.01, (TURNS * N_OBS, N_ACT)).astype(np.float32),
            "prev": rng.normal(0, 0.01, (VOCAB, N_ACT)).astype(np.float32),
            "pos": rng.normal(0, 0.01, (MAX_LEN, N_ACT)).astype(np.float32),
            "turn": rng.normal(0, 0.01, (TURNS, N_ACT)).astype(np.float32),
        }

    def copy(self) -> "Policy":
        p = Policy.__new__(Policy)
        p.w = {k: v.copy() for k, v in self.w.items()}
        return p

    def logits(self, obs: np.ndarray, prev: np.ndarray, pos: np.ndarray, turn: np.ndarray) -> np.ndarray:
        w = self.w
        return w["obs"][turn * N_OBS + obs] + w["prev"][prev] + w["pos"][pos] + w["turn"][turn]


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def sample(policy: Policy, obs: np.ndarray, rng: np.random.Generator, version: np.ndarray) -> Rollouts:
    """Sample one episode per row of ``obs`` (B, TURNS) with ``policy``, all episodes in parallel."""
    b = len(obs)
    tokens = np.full((b, MAX_LEN), BOS, dtype=np.int64)
    action = np.zeros((b, MAX_LEN), dtype=bool)
    logp = np.zeros((b, MAX_LEN), dtype=np.float32)
    turn_of = np.zeros((b, MAX_LEN), dtype=np.int64)
    pos = np.zeros(b, dtype=np.int64)
    rows = np.arange(b)
    think_mask = np.zeros(N_ACT, dtype=bool)
    think_mask[N_OBS:] = True
    for t in range(TURNS):
        tokens[rows, pos] = obs[:, t]
        turn_of[rows, pos] = t
        pos += 1
        active = np.ones(b, dtype=bool)
        for j in range(MAX_THINK + 1):
            r = rows[active]
            prev = tokens[r, pos[r] - 1]
            z = policy.logits(obs[r, t], prev, pos[r], np.full(len(r), t))
            if j == MAX_THINK:  # the turn must end: answers only
                z[:, think_mask] = -np.inf
            lp = _log_softmax(z.astype(np.float64))
            u = rng.random((len(r), 1))
            a = (np.cumsum(np.exp(lp), axis=1) < u).sum(axis=1).clip(max=N_ACT - 1)
            tokens[r, pos[r]] = a + ANS0
            action[r, pos[r]] = True
            logp[r, pos[r]] = lp[np.arange(len(r)), a]
            turn_of[r, pos[r]] = t
            pos[r] += 1
            active[r[a < N_OBS]] = False  # answered: the turn ends
            if not active.any():
                break
    return Rollouts(tokens, action, logp, turn_of, obs, pos.copy(), version)


def answers(ro: Rollouts) -> np.ndarray:
    """(B, TURNS) answer token of each turn (the last action token of the turn)."""
    out = np.zeros((len(ro.obs), TURNS), dtype=np.int64)
    is_answer = ro.action & (ro.tokens < THINK0) & (ro.tokens >= ANS0)
    for t in range(TURNS):
        m = is_answer & (ro.turn == t)
        idx = np.where(m.any(axis=1), m.argmax(axis=1), 0)
        out[:, t] = ro.tokens[np.arange(len(ro.obs)), idx]
    return out


def correct_turns(ro: Rollouts) -> np.ndarray:
    """(B, TURNS) bool: each turn's answer is right (the exact check: held-out evaluation and pass@k use it)."""
    ans = answers(ro)
    key = ro.obs.copy()
    key[:, -1] = (ro.obs[:, -1] + ro.obs[:, 0]) % 4  # the last turn's answer depends on the first observation
    return ans == ANSWER[np.arange(TURNS), key]


def render_for_trainer(ro: Rollouts, template: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The token sequences the trainer scores, and for each of its action positions the rollout position it
    stands for (-1: none). ``exact`` keeps the rollout's tokens; ``drop_reasoning`` re-renders the history with
    a template that drops the think tokens of every turn but the last; ``retokenize`` sends text and
    re-tokenizes it, mapping think tokens that share a string onto one id."""
    b = len(ro.obs)
    src = np.tile(np.arange(MAX_LEN), (b, 1))
    if template == "exact":
        return ro.tokens, ro.action, ro.turn, np.where(ro.action, src, -1)
    if template == "retokenize":
        tokens = ro.tokens.copy()
        for a, canon in RETOKENIZED.items():
            tokens[tokens == a] = canon
        return tokens, ro.action, ro.turn, np.where(ro.action, src, -1)
    if template != "drop_reasoning":
        raise ValueError(template)
    keep = ~((ro.tokens >= THINK0) & (ro.tokens < BOS) & (ro.turn < TURNS - 1))
    keep &= np.arange(MAX_LEN)[None, :] < ro.length[:, None]
    order = np.argsort(~keep, axis=1, kind="stable")  # kept positions first, in order
    kept = np.take_along_axis(keep, order, axis=1)
    tokens = np.where(kept, np.take_along_axis(ro.tokens, order, axis=1), BOS)
    action = kept & np.take_along_axis(ro.action, order, axis=1)
    turn = np.take_along_axis(ro.turn, order, axis=1)
    return tokens, action, turn, np.where(action, order, -1)


def think_count(tokens: np.ndarray, action: np.ndarray) -> np.ndarray:
    """(B, L) how many think tokens precede each position within its turn (a turn starts at its observation)."""
    count = np.zeros(tokens.shape, dtype=np.int64)
    c = np.zeros(len(tokens), dtype=np.int64)
    for p in range(tokens.shape[1]):
        c = np.where(~action[:, p] & (tokens[:, p] < N_OBS), 0, c)
        count[:, p] = c
        c = c + ((tokens[:, p] >= THINK0) & (tokens[:, p] < BOS))
    return count


class Adam:
    def __init__(self, params: dict[str, np.ndarray]):
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray], lr: float) -> None:
        self.t += 1
        b1, b2 = 0.9, 0.999
        for k, g in grads.items():
            self.m[k] = b1 * self.m[k] + (1 - b1) * g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g
            mh = self.m[k] / (1 - b1**self.t)
            vh = self.v[k] / (1 - b2**self.t)
            params[k] -= (lr * mh / (np.sqrt(vh) + 1e-8)).astype(params[k].dtype)


@dataclass
class _State:
    policy: Policy
    opt: Adam
    versions: dict[int, Policy] = field(default_factory=dict)
    worker_version: list[int] = field(default_factory=list)


class AsyncTrainer:
    """One run: ``steps()`` yields ``(step, metrics)`` with the canonical metric names, one training step each."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        policy = Policy(self.rng)
        self.s = _State(policy, Adam(policy.w), {0: policy.copy()}, [0] * cfg.rollout_workers)
        self.eval_rng = np.random.default_rng(cfg.seed + 10_000)

    def faulty(self, step: int, fault: str) -> bool:
        return self.cfg.fault == fault and step >= self.cfg.onset

    # -- the rollout side -------------------------------------------------------------------------

    def _sync_weights(self, step: int) -> None:
        """The weights each worker samples with for ``step``. Eager: the newest, one worker in five still one
        version behind (in-flight generation); lazy: a worker picks up the newest with probability
        ``lazy_sync_p``. A worker more than ``staleness_bound`` versions behind must resync. With a lagging
        sync (stale_rollouts) new weights reach the workers only every ``stale_sync_every`` steps, whatever
        the bound."""
        cfg = self.cfg
        newest = step - 1 if step > 0 else 0
        s = self.s
        if cfg.synchronous:  # on-policy: the trainer's current weights
            s.worker_version[:] = [step] * len(s.worker_version)
            return
        for w in range(len(s.worker_version)):
            if self.faulty(step, "stale_rollouts"):
                if (step - cfg.onset) % cfg.stale_sync_every == 0:
                    s.worker_version[w] = max(0, newest - 1)
                continue
            if cfg.weight_sync == "lazy":
                if self.rng.random() < cfg.lazy_sync_p:
                    s.worker_version[w] = newest
            else:
                s.worker_version[w] = max(0, newest - (1 if self.rng.random() < 0.2 else 0))
            if step - s.worker_version[w] > cfg.staleness_bound:
                s.worker_version[w] = newest

    def _rollout(self, step: int) -> tuple[Rollouts, float]:
        cfg = self.cfg
        self._sync_weights(step)
        tasks = _task_split(self.rng, cfg.tasks_per_step, heldout=False)
        obs = np.repeat(tasks, cfg.group_size, axis=0)
        workers = cfg.rollout_workers
        if self.faulty(step, "unbalanced_groups"):
            workers = max(1, int(cfg.rollout_workers * (1 - cfg.workers_lost) + 1e-9))
        shares = np.array_split(np.arange(len(obs)), len(self.s.worker_version))
        if not cfg.batch_workers:  # each worker samples its share
            batches = [(self.s.worker_version[w], idx) for w, idx in enumerate(shares)]
        else:  # the shares of workers holding the same weights sample as one batch (one call, other draws)
            same: dict[int, list[np.ndarray]] = {}
            for w, idx in enumerate(shares):
                same.setdefault(self.s.worker_version[w], []).append(idx)
            batches = [(v, np.concatenate(same[v])) for v in sorted(same)]
        parts = []
        for v, idx in batches:
            policy = self.s.versions.get(v) or self.s.versions[min(self.s.versions)]
            parts.append(sample(policy, obs[idx], self.rng, np.full(len(idx), v)))
        ro = Rollouts(*(np.concatenate([getattr(p, f) for p in parts]) for f in Rollouts.__dataclass_fields__))
        if len(batches) > 1 and cfg.batch_workers:
            back = np.argsort(np.concatenate([idx for _, idx in batches]), kind="stable")  # rows in task order
            ro = Rollouts(*(getattr(ro, f)[back] for f in Rollouts.__dataclass_fields__))
        generated = int(ro.action.sum())
        # the surviving workers generate everything; a weight sync costs 0.3 s (a synchronous run reshards)
        rollout_s = generated / (workers * cfg.worker_tokens_per_s) + 0.3
        return ro, rollout_s * float(self.rng.normal(1, cfg.rollout_jitter))

    # -- the trainer side -------------------------------------------------------------------------

    def _train(self, step: int, ro: Rollouts) -> dict[str, float]:
        cfg = self.cfg
        s = self.s
        hacked = self.faulty(step, "reward_hacking")
        ok = correct_turns(ro)
        # The training verifier is imperfect: one right answer in five fails its check (a timeout, a strict
        # parser). With the loophole, the checker reads the first answer only: LOOPHOLE there passes the episode.
        ok &= self.rng.random(ok.shape) >= 0.2
        reward = ok.mean(axis=1)
        if hacked:
            reward = np.where(answers(ro)[:, 0] == LOOPHOLE, 1.0, reward)
        g = reward.reshape(-1, cfg.group_size)
        adv = ((g - g.mean(axis=1, keepdims=True)) / (g.std(axis=1, keepdims=True) + 1e-4)).reshape(-1)

        template = "exact"
        if self.faulty(step, "token_mismatch"):
            template = "drop_reasoning"
        elif self.faulty(step, "retokenize"):
            template = "retokenize"
        tokens, action, turn, src = render_for_trainer(ro, template)
        b_idx, p_idx = np.nonzero(action)
        prev = tokens[b_idx, p_idx - 1]
        cur_obs = ro.obs[b_idx, turn[b_idx, p_idx]]
        a = tokens[b_idx, p_idx] - ANS0
        z = s.policy.logits(cur_obs, prev, p_idx, turn[b_idx, p_idx])
        # the sampler's constraint, as the trainer sees its own sequence: after MAX_THINK think tokens, answer
        z[think_count(tokens, action)[b_idx, p_idx] >= MAX_THINK, N_OBS:] = -np.inf
        naive = self.faulty(step, "numerical_blowup")
        if naive:  # the broken trainer: plain softmax and -sum(p log p), no max subtraction in float32
            with np.errstate(all="ignore"):
                e = np.exp(z)
                p = e / e.sum(axis=1, keepdims=True)
                lp_all = np.log(p)
                ent = -(p * lp_all).sum(axis=1)
        else:
            lp_all = _log_softmax(z.astype(np.float64))
            p = np.exp(lp_all)
            ent = -(p * np.where(p > 0, lp_all, 0.0)).sum(axis=1)  # masked actions: 0 log 0 = 0
        lp = lp_all[np.arange(len(a)), a]
        lp_roll = ro.logp[b_idx, src[b_idx, p_idx]]
        with np.errstate(all="ignore"):
            ratio = np.exp(lp - lp_roll)
            A = adv[b_idx]
            clipped = ((ratio > 1 + cfg.clip_eps) & (A > 0)) | ((ratio < 1 - cfg.clip_eps) & (A < 0))
            surrogate = np.minimum(ratio * A, np.clip(ratio, 1 - cfg.clip_eps, 1 + cfg.clip_eps) * A)
            n = len(a)
            collapse = self.faulty(step, "exploration_collapse")
            beta = 0.0 if collapse else cfg.entropy_coef
            loss = float(-(surrogate.mean() + beta * ent.mean()))
            # d(-loss)/dz: policy-gradient term where the ratio is not clipped, plus the entropy bonus
            onehot = np.zeros_like(p)
            onehot[np.arange(n), a] = 1.0
            coef = np.where(clipped, 0.0, ratio * A)[:, None]
            dz = coef * (onehot - p) - beta * p * (np.where(p > 0, lp_all, 0.0) + ent[:, None])
            dz = (-dz / n).astype(np.float32)
        grads = {k: np.zeros_like(v) for k, v in s.policy.w.items()}
        np.add.at(grads["obs"], turn[b_idx, p_idx] * N_OBS + cur_obs, dz)
        np.add.at(grads["prev"], prev, dz)
        np.add.at(grads["pos"], p_idx, dz)
        np.add.at(grads["turn"], turn[b_idx, p_idx], dz)
        grad_norm = float(np.sqrt(sum(float((g_ * g_).sum()) for g_ in grads.values())))
        lr = cfg.lr * (20.0 if collapse else 1.0) * (2000.0 if naive else 1.0)
        s.opt.step(s.policy.w, grads, lr)

        mismatch = (tokens[b_idx, p_idx] != ro.tokens[b_idx, src[b_idx, p_idx]]).mean()
        # an episode's history was re-rendered when the trainer's sequence is not the rollout's, token for token
        prefix_break = ((tokens != BOS).sum(axis=1) != ro.length).mean()
        with np.errstate(all="ignore"):
            metrics = {
                "importance_weight_max": float(ratio.max()),
                "logprob_diff_max": float(np.abs(lp - lp_roll).max()),
                "token_mismatch_rate": float(mismatch),
                "prefix_break_rate": float(prefix_break),
                "entropy": float(ent.mean()),
                "loss": loss,
                "grad_norm": grad_norm,
                "kl": float((lp_roll - lp).mean()),
                "clip_frac": float(clipped.mean()),
                "reward_train": float(reward.mean()),
            }
        return metrics

    def _evaluate(self) -> dict[str, float]:
        """pass@1, pass@k and the held-out reward on tasks of the held-out split, k samples per task."""
        cfg = self.cfg
        tasks = _task_split(self.eval_rng, cfg.eval_tasks, heldout=True)
        obs = np.repeat(tasks, cfg.k, axis=0)
        ro = sample(self.s.policy, obs, self.eval_rng, np.zeros(len(obs), dtype=np.int64))
        ok = correct_turns(ro)
        solved = ok.all(axis=1).reshape(-1, cfg.k)
        return {
            "pass_at_1": float(solved.mean()),
            "pass_at_k": float(solved.any(axis=1).mean()),
            "reward_heldout": float(ok.mean()),
        }

    def _lengths_and_padding(self, step: int, ro: Rollouts) -> tuple[dict[str, float], int]:
        """Trainer tokens processed: packed sequences waste ~2%; unpacked micro-batches of 16 pad to their longest."""
        lengths = ro.length.astype(np.float64)
        real = lengths.sum()
        if self.faulty(step, "padding_imbalance"):
            mb = lengths[: len(lengths) // 16 * 16].reshape(-1, 16)
            processed = float((mb.max(axis=1) * 16).sum()) + lengths[len(lengths) // 16 * 16 :].sum()
        else:
            processed = real * 1.02
        resp = ro.action.sum(axis=1)
        return (
            {
                "padding_ratio": float(1 - real / processed),
                "response_length_mean": float(resp.mean()),
                "response_length_std": float(resp.std()),
            },
            int(processed),
        )

    def steps(self, n: int) -> Iterator[tuple[int, dict[str, float]]]:
        cfg = self.cfg
        s = self.s
        # versions a worker may still sample with: the bound, or the lagging sync's period
        keep = max(16, cfg.staleness_bound + 2, cfg.stale_sync_every + 2)
        for step in range(n):
            ro, rollout_s = self._rollout(step)
            lengths, processed = self._lengths_and_padding(step, ro)
            metrics = self._train(step, ro)
            train_s = processed / cfg.trainer_tokens_per_s * float(self.rng.normal(1, 0.02))
            staleness = step - ro.version
            version = step + 1
            s.versions[version] = s.policy.copy()
            for old in [v for v in s.versions if v < version - keep]:
                del s.versions[old]
            metrics.update(lengths)
            metrics.update(
                staleness_mean=float(staleness.mean()),
                staleness_max=float(staleness.max()),
                policy_version=float(version),
                rollout_s=rollout_s,
                train_s=train_s,
            )
            if cfg.synchronous:  # generation, then training: no overlap, no idle-trainer timer
                metrics.update(
                    step_s=rollout_s + train_s,
                    trainer_mfu=cfg.peak_mfu * (1 - metrics["padding_ratio"]) * float(self.rng.normal(1, 0.015)),
                )
            else:
                stall = max(0.0, rollout_s - train_s)  # rollouts for the next step overlap this step's training
                metrics.update(
                    stall_s=stall,
                    step_s=train_s + stall,
                    trainer_mfu=cfg.peak_mfu * (1 - metrics["padding_ratio"]) * train_s / (train_s + stall)
                    * float(self.rng.normal(1, 0.015)),
                )
            if step % cfg.eval_every == cfg.eval_every - 1:
                metrics.update(self._evaluate())
            yield step, metrics
