"""Labelled runs for the rule evaluation suite (``make eval``), in independent families.

A family is a way of making runs whose ground truth is known: which fault, if
any, was injected, and from which step. Rules are tuned on some seeds of each
family and judged on others they never saw (``TUNING_SEEDS``/``HELDOUT_SEEDS``);
a result quoted for the default pack is always on the held-out seeds.

- ``synthetic``   (:mod:`parallax.alerts.suites.synthetic`) five task profiles, faults
  injected into clean curves; the suite the first rule pack was tuned on.
- ``independent`` (:mod:`parallax.alerts.suites.independent`) a second generator, written
  apart from the rules and the first one, from another model of the processes:
  heavy tails, values clipped at a bound, slow trends, level shifts after a
  resume, several held-out datasets, framework key sets, synchronous and
  asynchronous timing, runs that end normally and trainers that die.
- ``toyrl``       (:mod:`parallax.alerts.suites.toyrl`) the real toy RL loop
  (:mod:`parallax.ingest.toyrl`) swept over configurations, faults injected as mechanisms.

Every family module has ``generate(seed, *, healthy, per_cause) -> list[Scenario]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from parallax.alerts.rules import CAUSE_ORDER

T0 = 1_764_000_000.0

CAUSES = CAUSE_ORDER

#: How a run that was not killed ends. "finished": the trainer marks the run finished after its last point
#: (the client's close(), PATCH status, a Pushgateway DELETE): nothing judges it afterwards. "total_steps": its
#: config says how many steps it trains (total_steps) and its last step reaches that count, but it sends no
#: status; it simply stops: the silence that follows is a normal end and must not page.
ENDS = ("finished", "total_steps")


@dataclass
class Scenario:
    name: str
    task: str
    variant: str
    cause: str | None  # None: a healthy run, where any alert is a false alarm
    onset: int | None  # first faulty step
    #: metric name -> {step: value}. Canonical names (DESIGN §1), or when ``config["framework"]`` names a
    #: framework, that framework's own keys as its source logs them: the suite maps them through
    #: ``ingest.aliases`` as ingest does, so the alias table is judged with the rules.
    series: dict[str, dict[int, float]]
    times: dict[int, float]  # wall time (s since the epoch) at which each step was reported
    config: dict
    events: list[tuple[int, str]] = field(default_factory=list)  # (step, kind), e.g. (120, "resume")
    silent_from: float | None = None  # the trainer died: wall time it stopped reporting (cause trainer_silent)
    symptom: str | None = None  # the sparse metric that shows the fault (one point per evaluation), if any
    end: str = "finished"  # how the run ends when its trainer did not die: one of ENDS
    family: str = ""
    #: The trainer reports through ParallaxClient, which says every 30 s while idle that its process is alive
    #: (heartbeats stop when the process exits or dies).
    heartbeat: bool = False
    #: trainer_silent only: the process lives on after the data stopped (a hang), so its heartbeats go on.
    hung: bool = False

    @property
    def last_step(self) -> int:
        return max(max(p) for p in self.series.values() if p)


Generator = Callable[..., list[Scenario]]

#: Seeds the rules may be tuned on, and seeds they are judged on (never looked at while tuning). Seeds
#: 1001-1003 served as held-out once, in the middle of the session that built the families; the rules changed
#: after that, so the held-out seeds were renewed: a held-out seed's misses must not feed back into the rules.
TUNING_SEEDS: tuple[int, ...] = (0, 1, 2)
HELDOUT_SEEDS: tuple[int, ...] = (2001, 2002, 2003)


def assign_heartbeats(scenarios: list[Scenario], seed: int, *, share: float = 0.5,
                      hung: Callable[[Scenario], bool] = lambda sc: False) -> list[Scenario]:
    """Give ``share`` of the runs a client that sends heartbeats, from a random stream of its own (the family's
    draws stay as they were); ``hung`` says which dead trainers' processes live on."""
    import random

    for sc in scenarios:
        rng = random.Random(f"{seed}:{sc.family}:{sc.name}:heartbeat")
        sc.heartbeat = rng.random() < share
        sc.hung = sc.cause == "trainer_silent" and hung(sc)
    return scenarios


def families() -> dict[str, Generator]:
    """The families, by name (imported on demand: toyrl needs numpy)."""
    from parallax.alerts.suites import synthetic

    out: dict[str, Generator] = {"synthetic": synthetic.generate}
    try:
        from parallax.alerts.suites import independent

        out["independent"] = independent.generate
    except ImportError:  # pragma: no cover - while the family is being written
        pass
    try:
        from parallax.alerts.suites import toyrl

        out["toyrl"] = toyrl.generate
    except ImportError:  # pragma: no cover
        pass
    return out
