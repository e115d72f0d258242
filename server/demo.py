"""`parallax demo`: several live runs of a real toy asynchronous RL loop, one healthy and one per fault.

    parallax demo [--runs NAMES|N] [--steps 300] [--speed 3] [--url URL] [--port 8050] [--exit]

Without ``--url`` it starts the server (same settings as ``parallax serve``, so
the embedded SQLite default) in this process, then trains every run in a thread
of its own (:mod:`parallax.ingest.toyrl`) and sends its metrics as a trainer would: some
runs through :class:`parallax.client.ParallaxClient`, the others through
``prometheus_client.push_to_gateway`` (one push per step). Each faulty run marks
the step where its fault begins with a ``demo_fault`` event. When every run has
finished, it prints which alert fired first on each run and its top cause next
to the cause that was injected; ``--exit`` then exits (code 1 when a run was
not diagnosed as expected, or the healthy run raised an alert), otherwise the
server keeps serving the dashboard until Ctrl-C.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import httpx

from parallax.ingest.toyrl import EXPECTED_CAUSE, AsyncTrainer, Config

PROJECT_PREFIX = "demo"
PUSH_JOB = "parallax-demo"


@dataclass(frozen=True)
class DemoRun:
    name: str
    fault: str | None  # a fault of ingest.toyrl.FAULTS, None for the healthy run
    onset: int  # first faulty step
    transport: str  # "client" or "pushgateway"
    seed: int = 0

    @property
    def expected(self) -> str | None:
        return EXPECTED_CAUSE[self.fault] if self.fault else None


#: The default demo: the healthy run first, then one run per cause of DESIGN §2 (trainer_silent aside: a
#: demo run that stops sending is just a finished run). Onsets leave the rules 40+ steps of normal to learn
#: from; the sparse faults (evaluations every 5 steps) need more evaluations before and after. Every run is
#: deterministic (its seed). Reward hacking uses seed 2, the seed it was first calibrated on (the loophole of
#: that time, one turn's check only, spread so slowly with seeds 0 and 1 that exploration_collapse fired
#: first; today's loophole, the whole episode on the first answer, pays at once).
RUNS: tuple[DemoRun, ...] = (
    DemoRun("healthy", None, 0, "client"),
    DemoRun("stale-rollouts", "stale_rollouts", 80, "client"),
    DemoRun("token-mismatch", "token_mismatch", 90, "client"),
    DemoRun("unbalanced-groups", "unbalanced_groups", 70, "pushgateway"),
    DemoRun("padding", "padding_imbalance", 100, "pushgateway"),
    DemoRun("exploration-collapse", "exploration_collapse", 140, "client"),
    DemoRun("reward-hacking", "reward_hacking", 120, "pushgateway", seed=2),
    DemoRun("numerical-blowup", "numerical_blowup", 150, "client"),
)
#: Runs that can be asked for by name but are not in the default set.
EXTRA_RUNS: tuple[DemoRun, ...] = (DemoRun("retokenize", "retokenize", 90, "client"),)
DEFAULT_STEPS = 300


def select_runs(spec: str | None) -> list[DemoRun]:
    """``None``: every default run; ``"N"``: the first N; ``"a,b"``: those names (the healthy run always included)."""
    if spec is None or not spec.strip():
        return list(RUNS)
    spec = spec.strip()
    if spec.isdigit():
        n = int(spec)
        if not 1 <= n <= len(RUNS):
            raise ValueError(f"--runs {n}: between 1 and {len(RUNS)}")
        return list(RUNS[:n])
    known = {r.name: r for r in (*RUNS, *EXTRA_RUNS)}
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"--runs: unknown run {', '.join(unknown)} (known: {', '.join(known)})")
    if "healthy" not in names:
        names.insert(0, "healthy")
    return [known[n] for n in dict.fromkeys(names)]


@dataclass
class Outcome:
    run: DemoRun
    run_id: int | None = None
    steps_sent: int = 0
    first_rule: str | None = None
    first_step: int | None = None
    top_cause: str | None = None
    fired: list[tuple[str, int, str | None]] = field(default_factory=list)  # (rule, step, top cause), by step
    error: str | None = None

    @property
    def ok(self) -> bool:
        if self.error:
            return False
        if self.run.fault is None:
            return not self.fired
        return self.top_cause == self.run.expected and self.first_step is not None and self.first_step >= self.run.onset


class _Pacer:
    """Sleeps so that a loop runs at ``speed`` iterations per second (0: as fast as it can)."""

    def __init__(self, speed: float):
        self.interval = 1.0 / speed if speed > 0 else 0.0
        self.next = time.monotonic()

    def wait(self, stop: threading.Event) -> None:
        if self.interval:
            self.next += self.interval
            stop.wait(max(0.0, self.next - time.monotonic()))


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _run_config(run: DemoRun, steps: int) -> dict[str, Any]:
    cfg = Config(fault=run.fault, onset=run.onset, seed=run.seed)
    return {
        "algorithm": "GRPO (async, one-step off-policy, clipped IS)",
        "k": cfg.k,
        "staleness_bound": cfg.staleness_bound,
        "rollout_gpus": cfg.rollout_workers,
        "train_gpus": cfg.rollout_workers,
        "lr": cfg.lr,
        "entropy_coef": cfg.entropy_coef,
        "group_size": cfg.group_size,
        "steps": steps,
        "demo": {"fault": run.fault or "none", "onset": run.onset if run.fault else None},
    }


def _fault_message(run: DemoRun) -> str:
    return {
        "stale_rollouts": "weight sync to the rollout workers now lags: every 8 steps",
        "token_mismatch": "the trainer now renders the history with a chat template that drops earlier reasoning",
        "retokenize": "the rollout engine now returns text; the trainer re-tokenizes it",
        "unbalanced_groups": "half of the rollout workers are lost",
        "padding_imbalance": "micro-batches are no longer packed: padded to their longest sequence",
        "exploration_collapse": "entropy bonus removed, learning rate x20",
        "reward_hacking": "the training verifier now reads only the first answer: one token there passes the episode",
        "numerical_blowup": "a broken schedule multiplies the learning rate by 2000; entropy computed as -sum(p log p)",
    }.get(run.fault or "", "")


def _send_client(url: str, project: str, run: DemoRun, steps: int, speed: float, token: str | None,
                 stop: threading.Event, progress: Callable[[int], None]) -> None:
    from parallax.client import ParallaxClient

    trainer = AsyncTrainer(Config(fault=run.fault, onset=run.onset, seed=run.seed))
    pacer = _Pacer(speed)
    # Rules are evaluated per request: a batch a step (or two) keeps their view the same as a real trainer's.
    # At full speed (--speed 0) each step is flushed before the next one: lockstep, for tests.
    px = ParallaxClient(url, project=project, run=run.name, config=_run_config(run, steps), tags=["demo"],
                        token=token, spool_dir=False, flush_interval=min(1.0, 0.5 / speed) if speed > 0 else 1.0)
    status = "finished"
    try:
        for step, metrics in trainer.steps(steps):
            if stop.is_set():
                status = "failed"
                break
            if run.fault and step == run.onset:
                px.event("demo_fault", step, _fault_message(run))
            px.log(metrics, step)
            if not speed:
                px.flush(timeout=30)
            progress(step + 1)
            pacer.wait(stop)
    finally:
        px.close(timeout=30, status=status)


def _send_pushgateway(url: str, project: str, run: DemoRun, steps: int, speed: float, token: str | None,
                      stop: threading.Event, progress: Callable[[int], None]) -> None:
    from prometheus_client import CollectorRegistry, Gauge
    from prometheus_client.exposition import default_handler, delete_from_gateway, push_to_gateway

    def handler(url: str, method: str, timeout: float | None, headers: list, data: bytes) -> Callable[[], None]:
        return default_handler(url, method, timeout, [*headers, *_auth(token).items()], data)

    grouping = {"project": project, "run": run.name}
    trainer = AsyncTrainer(Config(fault=run.fault, onset=run.onset, seed=run.seed))
    pacer = _Pacer(speed)
    for step, metrics in trainer.steps(steps):
        if stop.is_set():
            break
        registry = CollectorRegistry()  # only this step's metrics: a pass@k of an earlier evaluation is not resent
        Gauge("step", "training step", registry=registry).set(step)
        for name, value in metrics.items():
            Gauge(name, name, registry=registry).set(value)
        for attempt in range(5):
            try:
                push_to_gateway(url, job=PUSH_JOB, grouping_key=grouping, registry=registry, timeout=10, handler=handler)
                break
            except OSError:
                if attempt == 4 or stop.wait(0.5 * 2**attempt):
                    raise
        if run.fault and step == run.onset:
            run_id = find_run_id(url, project, run.name, token)
            if run_id is not None:
                httpx.post(f"{url}/api/v1/runs/{run_id}/events", headers=_auth(token), timeout=10,
                           json={"events": [{"kind": "demo_fault", "step": step, "message": _fault_message(run)}]},
                           ).raise_for_status()
        progress(step + 1)
        pacer.wait(stop)
    # Deleting the group marks the run finished (its alerts resolve, it leaves the live export).
    delete_from_gateway(url, job=PUSH_JOB, grouping_key=grouping, timeout=10, handler=handler)


def find_run_id(url: str, project: str, name: str, token: str | None) -> int | None:
    r = httpx.get(f"{url}/api/v1/runs", params={"project": project}, headers=_auth(token), timeout=10)
    r.raise_for_status()
    return next((x["id"] for x in r.json()["runs"] if x["name"] == name), None)


def diagnose(url: str, project: str, outcome: Outcome, token: str | None) -> None:
    """Fill ``outcome`` from the server: every alert that fired on the run, the first one and its top cause."""
    outcome.run_id = find_run_id(url, project, outcome.run.name, token)
    if outcome.run_id is None:
        outcome.error = outcome.error or "the run never reached the server"
        return
    r = httpx.get(f"{url}/api/v1/runs/{outcome.run_id}/diagnosis", headers=_auth(token), timeout=10)
    r.raise_for_status()
    doc = r.json()
    fired = []
    for alert in (*doc.get("firing", []), *doc.get("resolved", [])):
        if alert.get("fired_step") is None:
            continue
        causes = alert.get("causes") or []
        fired.append((alert["rule"], int(alert["fired_step"]), causes[0]["id"] if causes else None))
    fired.sort(key=lambda f: f[1])
    outcome.fired = fired
    if fired:
        outcome.first_rule, outcome.first_step, outcome.top_cause = fired[0]


def run_demo(
    url: str,
    runs: Sequence[DemoRun] = RUNS,
    *,
    steps: int = DEFAULT_STEPS,
    speed: float = 3.0,
    token: str | None = None,
    project: str | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> tuple[str, list[Outcome]]:
    """Train and send every run concurrently against the server at ``url``; return the project and outcomes."""
    url = url.rstrip("/")
    project = project or f"{PROJECT_PREFIX}-{time.strftime('%Y%m%d-%H%M%S')}"
    stop = stop or threading.Event()
    outcomes = [Outcome(r) for r in runs]

    def work(o: Outcome) -> None:
        def step_done(n: int) -> None:
            o.steps_sent = n
            if progress:
                progress(o.run.name, n)

        send = _send_client if o.run.transport == "client" else _send_pushgateway
        try:
            send(url, project, o.run, steps, speed, token, stop, step_done)
        except Exception as exc:  # noqa: BLE001 - reported per run, the other runs go on
            o.error = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=work, args=(o,), name=f"demo-{o.run.name}", daemon=True) for o in outcomes]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)
    for o in outcomes:
        try:
            diagnose(url, project, o, token)
        except httpx.HTTPError as exc:
            o.error = o.error or f"diagnosis: {exc}"
    return project, outcomes


def print_report(outcomes: Sequence[Outcome], project: str, url: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Parallax demo — project {project}")
    for col in ("run", "sent via", "injected", "at step", "first alert", "fired at", "top cause", ""):
        table.add_column(col, no_wrap=True)
    for o in outcomes:
        r = o.run
        table.add_row(
            r.name,
            r.transport,
            r.fault or "—",
            str(r.onset) if r.fault else "—",
            o.first_rule or ("—" if not o.error else o.error[:60]),
            str(o.first_step) if o.first_step is not None else "—",
            o.top_cause or "—",
            "[green]✓[/]" if o.ok else "[red]✗[/]",
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log file: no wrapping at 80 columns
    console.print(table)
    console.print(f"Dashboard: {url}/dashboard/  (runs of project {project})")


def main(args: Any) -> int:
    """The `parallax demo` command (``args`` from :func:`parallax.server.cli.build_parser`)."""
    import sys

    try:
        runs = select_runs(args.runs)
    except ValueError as exc:
        print(f"parallax demo: {exc}", file=sys.stderr)
        return 2
    if args.steps < 1:
        print("parallax demo: --steps must be at least 1", file=sys.stderr)
        return 2
    if args.speed < 0:
        print("parallax demo: --speed must be 0 (as fast as possible) or more", file=sys.stderr)
        return 2
    server = None
    url = args.url
    token = args.token
    if url is None:
        server, url, token = _start_server(args)
        if server is None:
            return 1
    print(f"Parallax demo: {len(runs)} runs x {args.steps} steps at "
          f"{'full speed' if args.speed == 0 else f'{args.speed:g} steps/s'}; dashboard {url}/dashboard/", flush=True)
    stop = threading.Event()
    try:
        project, outcomes = run_demo(url, runs, steps=args.steps, speed=args.speed, token=token, stop=stop,
                                     progress=_progress_printer(args.steps, len(runs)))
        print_report(outcomes, project, url)
        ok = all(o.ok for o in outcomes)
        if args.exit or server is None:
            return 0 if ok else 1
        print("The server keeps running; Ctrl-C to stop.", flush=True)
        while server.started and not server.should_exit:
            time.sleep(0.5)
        return 0
    except KeyboardInterrupt:
        stop.set()
        return 130
    finally:
        if server is not None:
            server.should_exit = True


def _progress_printer(steps: int, n_runs: int) -> Callable[[str, int], None]:
    lock = threading.Lock()
    done: dict[str, int] = {}
    shown = [0]

    def progress(name: str, n: int) -> None:
        with lock:
            done[name] = n
            total = sum(done.values())
            pct = 100 * total // (steps * n_runs)
            if pct >= shown[0] + 10:
                shown[0] = pct - pct % 10
                print(f"  {shown[0]}% of the steps sent", flush=True)

    return progress


def _start_server(args: Any) -> tuple[Any, str, str | None]:
    """Start `parallax serve`'s app in a thread of this process; return (uvicorn server, URL, write token)."""
    import sys

    import uvicorn

    from parallax.server.app import create_app
    from parallax.server.cli import _settings

    settings = _settings(args)
    try:
        app = create_app(settings)
    except Exception as exc:  # noqa: BLE001 - same messages as `parallax serve`
        print(f"parallax demo: {exc}", file=sys.stderr)
        return None, "", None
    config = uvicorn.Config(app, host=settings.host, port=settings.port, access_log=False,
                            log_level="warning", lifespan="on", server_header=False,
                            timeout_keep_alive=settings.keep_alive_seconds)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="parallax-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            print(f"parallax demo: the server did not start on {settings.host}:{settings.port} "
                  "(port in use? try --port)", file=sys.stderr)
            return None, "", None
        time.sleep(0.05)
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    token = settings.token.get_secret_value() if settings.token else None
    return server, f"http://{host}:{settings.port}", token
