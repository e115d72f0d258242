"""Thin wrappers over ParallaxClient for training frameworks, importable without them.

* ``ParallaxCallback``: a TRL / transformers ``TrainerCallback`` by duck typing
  (``trainer.add_callback(ParallaxCallback(url, project=...))`` or
  ``callbacks=[...]``). It logs what the Trainer logs (``on_log``: loss,
  rewards/..., entropy, kl, ...) at ``state.global_step``, from the main process
  only, plus ``step_s`` (the wall time of an optimizer step, measured between
  ``on_step_begin`` and ``on_step_end``); records ``resume`` and ``checkpoint``
  events; marks the run finished at the end of training, and failed when the
  process exits before training ended (an exception) — metrics of an
  ``evaluate()`` after ``train()`` are still delivered.
* ``ParallaxLogger``: a verl / OpenRLHF-style logger, ``log(data, step)`` and
  ``finish()`` (verl's ``Tracking`` backends have that shape), OpenRLHF's
  ``log_train`` / ``log_eval``, plus TensorBoard's ``add_scalar`` /
  ``add_scalars`` for code written against a ``SummaryWriter``. ``finish()``
  marks the run finished; leaving its ``with`` block on an exception, or the
  process dying of one before ``finish()``, marks it failed.

Both behave as W&B's integrations do: each run gets a new, unique name
(``<base>-<YYYYmmdd-HHMMSS>-<4 hex>``) unless an explicit ``run`` name or
``resume=True`` asks to continue one (the same project and name find the same
run), and the run's config records ``framework``, the trainer class, the
library versions and, when known, the total number of steps (``total_steps``:
the rules tell a run that ended from one that crashed by it).

Neither imports trl, transformers, verl or torch.
"""

from __future__ import annotations

import atexit
import secrets
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from parallax.client.client import ParallaxClient

__all__ = ["ParallaxCallback", "ParallaxLogger", "unique_run_name"]

#: Libraries whose versions a TRL / transformers run records (those installed).
TRAINER_LIBRARIES = ("trl", "transformers", "torch", "accelerate", "peft", "datasets", "deepspeed", "vllm")
#: Per framework name, the distributions whose versions ParallaxLogger records (those installed).
FRAMEWORK_LIBRARIES = {
    "verl": ("verl", "torch", "vllm", "sglang", "ray"),
    "openrlhf": ("openrlhf", "torch", "vllm", "deepspeed", "ray"),
    "areal": ("areal", "torch", "sglang", "vllm"),
    "slime": ("slime", "torch", "sglang", "megatron-core"),
    "miles": ("miles", "torch", "sglang", "megatron-core"),
    "skyrl": ("skyrl", "skyrl-train", "torch", "vllm", "ray"),
    "roll": ("roll", "torch", "vllm", "ray"),
    "pipelinerl": ("pipelinerl", "torch", "vllm"),
    "prime-rl": ("prime-rl", "torch", "vllm"),
    "tinker-cookbook": ("tinker-cookbook", "tinker"),
}


def unique_run_name(base: str) -> str:
    """``base`` with the local time and 4 random hex digits: a new run every time (W&B names runs the same way)."""
    return f"{base}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def library_versions(names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        except Exception:  # a broken installation must not stop training
            continue
    return out


def _exited_on_exception() -> bool:
    """The interpreter is exiting because an exception was not caught (it sets sys.last_value when it prints it)."""
    return getattr(sys, "last_value", None) is not None and not isinstance(sys.last_value, SystemExit)


def _find_trainer() -> Any:
    """The transformers ``Trainer`` calling back, found up the stack (callbacks are not handed the trainer)."""
    frame = sys._getframe(2)
    for _ in range(16):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        if obj is not None and hasattr(obj, "callback_handler") and type(obj).__name__.endswith("Trainer"):
            return obj
        frame = frame.f_back
    return None


class ParallaxCallback:
    """A ``transformers.TrainerCallback`` look-alike that sends the Trainer's logs to Parallax.

    ``ParallaxCallback("http://host:8050", project="p")``: the run is created when training (or a first
    ``evaluate()``) starts, named ``<args.run_name or the output_dir's name>-<time>-<hex>``, with the training
    arguments as its config plus ``framework`` (``trl`` for TRL's trainers, else ``transformers``),
    ``trainer_class``, ``library_versions`` and ``total_steps``. ``run="name"`` (continue that run) or
    ``resume=True`` (the base name, without the suffix) reuse a run; ``config={...}`` adds to the config;
    the other keyword arguments are ``ParallaxClient``'s. ``ParallaxCallback(client=px)`` uses a client of
    your own: its run is still marked finished (or failed), but it is never closed.
    Every event a Trainer may call exists (unknown future ``on_*`` events are no-ops).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: ParallaxClient | None = None,
        project: str = "trl",
        run: str | None = None,
        resume: bool = False,
        config: Mapping[str, Any] | None = None,
        **client_kwargs: Any,
    ):
        client_kwargs.pop("close_at_end", None)  # older spelling: the callback always ends what it started
        self._url = url
        self._project = project
        self._run = run
        self._resume = resume
        self._config = dict(config or {})
        self._kwargs = client_kwargs
        self.client = client
        self._owns = client is None
        self._trainer: Any = None
        self._training = False  # inside train(): on_train_begin seen, on_train_end not yet
        self._step_started: float | None = None
        self._step_seconds: list[float] = []
        self._exit_hook = False

    # -- the run ----------------------------------------------------------------------

    @staticmethod
    def _main(state: Any) -> bool:
        return bool(getattr(state, "is_world_process_zero", True))

    def _run_name(self, args: Any) -> str:
        if self._run:
            return self._run
        base = getattr(args, "run_name", None) or Path(str(getattr(args, "output_dir", "") or "")).name or "trainer"
        return str(base) if self._resume else unique_run_name(str(base))

    def _run_config(self, args: Any, state: Any) -> dict:
        config: dict[str, Any] = {}
        to_dict = getattr(args, "to_dict", None)
        try:
            config.update(to_dict() if callable(to_dict) else {})
        except Exception:
            pass
        trainer = self._trainer
        cls = type(trainer) if trainer is not None else None
        trainer_class = cls.__name__ if cls is not None else type(args).__name__.replace("Config", "Trainer").replace("TrainingArguments", "Trainer")
        module = cls.__module__ if cls is not None else type(args).__module__
        config["framework"] = "trl" if module.split(".")[0] == "trl" else "transformers"
        config["trainer_class"] = trainer_class
        config["library_versions"] = library_versions(TRAINER_LIBRARIES)
        total = getattr(state, "max_steps", None) or getattr(args, "max_steps", None)
        if isinstance(total, int) and total > 0:
            config["total_steps"] = total
        config.update(self._config)
        return config

    def _ensure_client(self, args: Any, state: Any) -> ParallaxClient | None:
        if self.client is None and self._url is not None and self._main(state):
            kw = dict(self._kwargs)
            self.client = ParallaxClient(
                self._url, project=self._project, run=self._run_name(args), config=self._run_config(args, state), **kw
            )
        if self.client is not None and not self._exit_hook:
            self._exit_hook = True
            atexit.register(self._at_exit)  # after the client's own: runs before it (atexit is last in, first out)
        return self.client

    def _at_exit(self) -> None:
        client = self.client
        if client is None:
            return
        failed = self._training or _exited_on_exception()
        status = "failed" if failed else None
        if self._owns:
            client.close(getattr(client, "_atexit_timeout", 5.0), status=status)
        elif status is not None:
            client.set_status(status, 5.0)

    # -- events -------------------------------------------------------------------------

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._trainer = self._trainer or _find_trainer()
        return control

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._trainer = self._trainer or _find_trainer()
        was_ended = self.client is not None and not self._training
        client = self._ensure_client(args, state)
        self._training = True
        if client is not None and self._main(state):
            step = int(getattr(state, "global_step", 0) or 0)
            if step > 0:  # resumed from a checkpoint: the rules hold back for a few steps
                client.event("resume", step, f"training resumed at step {step}")
            if step > 0 or was_ended or self._resume or self._run:
                client.set_status("running", 5.0)  # a run taken up again (it may have ended or failed before)
        return control

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._step_started = time.perf_counter()
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self._step_started is not None:
            self._step_seconds.append(time.perf_counter() - self._step_started)
            self._step_started = None
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        if not logs or not self._main(state):
            return control
        client = self._ensure_client(args, state)
        if client is None:
            return control
        metrics = dict(logs)
        if self._step_seconds and "step_s" not in metrics and not any(k.startswith("eval_") for k in metrics):
            # the wall time of the optimizer steps since the last log (TRL's step_time is the inner step only)
            metrics["step_s"] = sum(self._step_seconds) / len(self._step_seconds)
            self._step_seconds.clear()
        client.log(metrics, step=getattr(state, "global_step", None))
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.client is not None and self._main(state):
            step = int(getattr(state, "global_step", 0) or 0)
            self.client.event("checkpoint", step, f"checkpoint-{step}")
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._training = False
        if self.client is not None and self._main(state):
            # Finished; the client stays open, so that an evaluate() after train() is still delivered.
            self.client.set_status("finished")
        return control

    def _noop(self, args: Any = None, state: Any = None, control: Any = None, **kwargs: Any) -> Any:
        return control

    on_epoch_begin = on_epoch_end = on_substep_end = _noop
    on_pre_optimizer_step = on_optimizer_step = on_evaluate = on_predict = on_prediction_step = on_push_begin = _noop

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return self._noop
        raise AttributeError(name)


class ParallaxLogger:
    """``log(data, step)`` / ``finish()``, as verl's tracking backends and OpenRLHF's loggers are called.

    ``ParallaxLogger("http://host:8050", project="p", framework="verl", config=cfg)``: a new run named
    ``<framework or "run">-<time>-<hex>``; ``run="name"`` continues that run, ``resume=True`` with ``run``
    says so explicitly. The config gains ``framework``, ``trainer_class`` and ``total_steps`` when given and
    ``library_versions`` (of the framework's packages, those installed). ``ParallaxLogger(client=px)`` uses a client of your own (never
    closed). Keys are sent as the framework writes them (``actor/entropy``, ``critic/score/mean``, ...): the
    server stores known ones under their canonical names too.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: ParallaxClient | None = None,
        project: str = "rl",
        run: str | None = None,
        resume: bool = False,
        framework: str | None = None,
        trainer_class: str | None = None,
        config: Mapping[str, Any] | None = None,
        total_steps: int | None = None,
        **client_kwargs: Any,
    ):
        if client is None:
            if url is None:
                raise TypeError("ParallaxLogger needs a client or a url")
            full = dict(config or {})
            if framework is not None:
                full.setdefault("framework", framework)
            if trainer_class is not None:
                full.setdefault("trainer_class", trainer_class)
            fw = str(full.get("framework") or "").lower()
            if fw in FRAMEWORK_LIBRARIES:
                full.setdefault("library_versions", library_versions(FRAMEWORK_LIBRARIES[fw]))
            if total_steps is not None:
                full.setdefault("total_steps", int(total_steps))
            name = run if run else (fw or "run") if resume else unique_run_name(fw or "run")
            client = ParallaxClient(url, project=project, run=name, config=full, **client_kwargs)
            self._owns = True
        else:
            self._owns = False
        self.client = client
        self._finished = False
        atexit.register(self._at_exit)  # after the client's own: runs before it

    def log(self, data: Mapping[str, Any], step: int | None = None, **_: Any) -> None:
        self.client.log(data, step)

    def log_train(self, global_step: int, logs_dict: Mapping[str, Any]) -> None:
        """OpenRLHF's logger call: keys under ``train/``, as its W&B logger writes them."""
        self.client.log({f"train/{k}": v for k, v in logs_dict.items()}, global_step)

    def log_eval(self, global_step: int, logs_dict: Mapping[str, Any]) -> None:
        """OpenRLHF's logger call: keys under ``eval/``."""
        self.client.log({f"eval/{k}": v for k, v in logs_dict.items()}, global_step)

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None, *_: Any, **__: Any) -> None:
        self.client.log({tag: scalar_value}, global_step)

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any], global_step: int | None = None, *_: Any, **__: Any) -> None:
        self.client.log({f"{main_tag}/{k}": v for k, v in tag_scalar_dict.items()}, global_step)

    def event(self, kind: str, step: int, message: str = "") -> None:
        self.client.event(kind, step, message)

    def flush(self, timeout: float | None = 10.0) -> bool:
        return self.client.flush(timeout)

    def finish(self, *_: Any, status: str = "finished", exit_code: int | None = None, **__: Any) -> None:
        """End the run: ``finished`` (or ``status="failed"``, or a non-zero ``exit_code`` as W&B's ``finish`` takes
        it); closes the client when this logger made it."""
        if exit_code:
            status = "failed"
        if self._finished:
            return
        self._finished = True
        try:
            atexit.unregister(self._at_exit)
        except Exception:
            pass
        if self._owns:
            self.client.close(status=status)
        else:
            self.client.set_status(status)

    close = finish

    def _at_exit(self) -> None:
        if not self._finished:
            self.finish(status="failed" if _exited_on_exception() else "finished")

    def __enter__(self) -> "ParallaxLogger":
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        self.finish(status="failed" if exc_type is not None and not issubclass(exc_type, SystemExit) else "finished")
