"""Thin wrappers over ParallaxClient for training frameworks, importable without them.

* ``ParallaxCallback``: a TRL / transformers ``TrainerCallback`` by duck typing
  (``trainer.add_callback(ParallaxCallback(url, project=..., run=...))`` or
  ``callbacks=[...]``); it logs what the Trainer logs (``on_log``: loss,
  rewards/..., entropy, kl, ...) at ``state.global_step``, from the main process
  only, and flushes at the end of training.
* ``ParallaxLogger``: a verl / OpenRLHF-style logger, ``log(data, step)`` and
  ``finish()`` (verl's ``Tracking`` backends have that shape), plus
  TensorBoard's ``add_scalar`` / ``add_scalars`` for code written against a
  ``SummaryWriter``.

Neither imports trl, transformers, verl or torch.
"""

from __future__ import annotations

from typing import Any, Mapping

from ingest.client import ParallaxClient

__all__ = ["ParallaxCallback", "ParallaxLogger"]


def _client(client: ParallaxClient | None, args: tuple, kwargs: dict) -> ParallaxClient | None:
    if client is not None:
        return client
    if args or kwargs:
        return ParallaxClient(*args, **kwargs)
    return None


class ParallaxCallback:
    """A ``transformers.TrainerCallback`` look-alike that sends the Trainer's logs to Parallax.

    ``ParallaxCallback(client=px)`` with a client of your own, or
    ``ParallaxCallback("http://host:8050", project="p", run="r", ...)`` with the
    arguments of ``ParallaxClient``; then, unless ``run`` was given, the client
    is created at ``on_train_begin`` with the run named after
    ``args.run_name`` and the training arguments as the run's config.
    Every event a Trainer may call exists (unknown future ``on_*`` events are no-ops).
    """

    def __init__(self, url: str | None = None, *, client: ParallaxClient | None = None, close_at_end: bool = True, **client_kwargs: Any):
        self._url = url
        self._kwargs = client_kwargs
        self.client = client
        if client is None and url is not None and "run" in client_kwargs and "project" in client_kwargs:
            self.client = ParallaxClient(url, **client_kwargs)
        self._close_at_end = close_at_end and client is None

    @staticmethod
    def _main(state: Any) -> bool:
        return bool(getattr(state, "is_world_process_zero", True))

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.client is None and self._url is not None and self._main(state):
            kw = dict(self._kwargs)
            kw.setdefault("project", "trl")
            kw.setdefault("run", str(getattr(args, "run_name", None) or getattr(args, "output_dir", None) or "trainer"))
            if "config" not in kw:
                to_dict = getattr(args, "to_dict", None)
                try:
                    kw["config"] = to_dict() if callable(to_dict) else {}
                except Exception:
                    kw["config"] = {}
            self.client = ParallaxClient(self._url, **kw)
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        if self.client is not None and logs and self._main(state):
            self.client.log(logs, step=getattr(state, "global_step", None))
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.client is not None:
            if self._close_at_end:
                self.client.close()
            else:
                self.client.flush()
        return control

    def _noop(self, args: Any = None, state: Any = None, control: Any = None, **kwargs: Any) -> Any:
        return control

    on_init_end = on_epoch_begin = on_epoch_end = on_step_begin = on_substep_end = on_step_end = _noop
    on_pre_optimizer_step = on_optimizer_step = on_evaluate = on_predict = on_save = on_prediction_step = _noop

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):
            return self._noop
        raise AttributeError(name)


class ParallaxLogger:
    """``log(data, step)`` / ``finish()``, as verl's tracking backends and OpenRLHF's loggers are called.

    ``ParallaxLogger(client=px)`` or ``ParallaxLogger("http://host:8050", project="p", run="r", config=...)``.
    Keys are sent as the framework writes them (``actor/entropy``, ``critic/score/mean``, ...): the server
    stores known ones under their canonical names too.
    """

    def __init__(self, url: str | None = None, *, client: ParallaxClient | None = None, **client_kwargs: Any):
        if client is None:
            if url is None:
                raise TypeError("ParallaxLogger needs a client or a url with project= and run=")
            client = ParallaxClient(url, **client_kwargs)
            self._owns = True
        else:
            self._owns = False
        self.client = client

    def log(self, data: Mapping[str, Any], step: int | None = None, **_: Any) -> None:
        self.client.log(data, step)

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None, *_: Any, **__: Any) -> None:
        self.client.log({tag: scalar_value}, global_step)

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any], global_step: int | None = None, *_: Any, **__: Any) -> None:
        self.client.log({f"{main_tag}/{k}": v for k, v in tag_scalar_dict.items()}, global_step)

    def flush(self, timeout: float | None = 10.0) -> bool:
        return self.client.flush(timeout)

    def finish(self, *_: Any, **__: Any) -> None:
        if self._owns:
            self.client.close()
        else:
            self.client.flush()

    close = finish

    def __enter__(self) -> "ParallaxLogger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
