"""The trainer-side client: ``client.log(metrics, step)`` and nothing can hurt training.

    from parallax.client import ParallaxClient
    with ParallaxClient("http://127.0.0.1:8050", project="p", run="r", config={...}) as px:
        px.log({"entropy": 1.2, "actor/entropy": 1.2}, step=10)   # never blocks, never raises

Depends only on the standard library and httpx. The spool (``parallax.client.spool``) and the
metric-name grammar (``parallax.client.names``) are modules of this package.

How a point travels:

* ``log`` copies the dict (numbers as they are; numpy/torch scalars read with
  ``float``), stamps the wall time and appends it to a bounded in-memory queue.
  Nothing else: no I/O, no validation of names, no encoding.
* A background thread wakes when the queue holds ``batch_values`` values or
  every ``flush_interval`` seconds, drops (and counts) invalid names and
  non-numeric values, encodes batches of at most ``batch_values`` values as
  the JSON body of ``POST /api/v1/runs/{id}/metrics`` (NaN/Infinity as
  ``json.dumps`` writes them) and sends them. The run is created (or found:
  same project+name, same run) on the first send, retried like everything else.
* A send that fails (server unreachable, 5xx, 429, 401/403) is retried with
  exponential backoff; meanwhile batches go to an append-only spool on disk
  (``spool_dir``, default ``~/.cache/parallax/spool/<project>/<run>``) and are
  replayed in order once the server answers. A trainer that restarts with the
  same project and run resumes what its predecessor left in the spool. The
  server is idempotent per (run, metric, step), so a batch sent twice (after a
  lost response) is stored once.
* Bounds: ``max_queue_values`` in memory, ``max_spool_bytes`` on disk. Past half
  the memory bound (a server slower than the trainer) the backlog goes to the
  spool, in order. When the spool is full the oldest segment of it is dropped;
  when memory is full before the thread could spill it (it is busy in a
  request), the oldest queued points are dropped. Either way the values are counted in ``stats()["dropped"]``
  and ``log`` never waits.
* ``close()`` (and leaving the ``with`` block, and ``atexit``) flushes within a
  time bound; what could not be sent in time stays in the spool for next time.
  ``close(status="finished")`` (or ``"failed"``) then sets the run's status; ``set_status(...)`` does the
  same and keeps the client open (points logged after it are still sent).
* ``event(kind, step, message)`` and ``log_trajectories([...])`` go the same way:
  queued with their endpoint (``POST .../events``, ``POST .../trajectories``),
  sent, retried and spooled in order with the metrics (a spool line names its
  endpoint; a line without one is a metrics batch, as in older spools). Each
  event and each trajectory counts as one value in ``stats()``. Events are not
  idempotent on the server: one resent after a lost answer is stored twice.
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import math
import operator
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import httpx

from parallax.client.names import is_valid_name
from parallax.client.spool import Spool, default_spool_dir, lock_folder

__all__ = ["ParallaxClient", "default_spool_dir"]

logger = logging.getLogger("parallax.client")

#: Seconds between heartbeats while the client has nothing else to send (the server's trainer_silent rule
#: reads them: a process that stops them has died).
HEARTBEAT_SECONDS = 30.0
MAX_STEP = 2**63 - 1
_BAD = object()  # a value that is not a number: dropped and counted by the sender thread
_KIND = re.compile(r"[a-z][a-z0-9_]{0,31}")  # the server's pattern for an event kind
_MAX_EVENTS = 1_000  # events per request
_now = time.time
_sleep = time.sleep


def _number(v: Any) -> Any:
    """A float or int the server accepts, or _BAD. Runs in ``log`` only for values that are not float/int."""
    tv = type(v)
    if tv is float or tv is int:
        return v
    if tv is bool:
        return float(v)
    if v is None or isinstance(v, (str, bytes, bytearray, Mapping, list, tuple, set)):
        return _BAD
    try:  # numpy scalars, 0-d arrays, one-element tensors, Decimal, Fraction...
        return float(v)
    except Exception:
        return _BAD


def _jsonable(v: Any, depth: int = 0) -> Any:
    """Config as strict JSON: keys as strings, NaN/Infinity and unknown objects as their text."""
    if depth > 20:
        return str(v)
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x, depth + 1) for x in v]
    try:
        f = float(v)  # numpy scalars
        if not isinstance(v, (bytes, bytearray)):
            return f if math.isfinite(f) else str(f)
    except Exception:
        pass
    return str(v)


def _json_default(o: Any) -> Any:
    """Trajectory fields json cannot write: numpy/torch arrays and scalars as lists/numbers, the rest as text."""
    tolist = getattr(o, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    try:
        return operator.index(o)
    except TypeError:
        pass
    try:
        return float(o)
    except Exception:
        return str(o)


class ParallaxClient:
    """Send a trainer's metrics to Parallax without ever slowing or failing the training loop.

    Arguments: ``url`` of the server, ``project`` and ``run`` names (the same
    pair finds the same run), the run's ``config`` dict and ``tags``, the
    ``token`` (default ``$PARALLAX_TOKEN``). Tuning: ``batch_values`` (values per
    request), ``flush_interval`` (seconds a point may wait before it is sent),
    ``max_queue_values`` (memory bound), ``spool_dir`` (``None``: the default
    folder; ``False``: no spool, memory only), ``max_spool_bytes`` (disk bound),
    ``timeout`` (seconds per request), ``backoff`` and ``max_backoff`` (seconds
    between retries, doubling), ``atexit_timeout`` (seconds the interpreter's exit
    may spend flushing), ``heartbeat`` (seconds between heartbeats while there is
    nothing else to send, so the server tells a long evaluation from a dead
    process; ``None`` or 0: none).
    """

    def __init__(
        self,
        url: str,
        project: str,
        run: str,
        config: Mapping[str, Any] | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
        token: str | None = None,
        *,
        batch_values: int = 5_000,
        flush_interval: float = 1.0,
        max_queue_values: int = 500_000,
        spool_dir: str | os.PathLike | bool | None = None,
        max_spool_bytes: int = 256 * 1024 * 1024,
        timeout: float = 10.0,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        atexit_timeout: float = 5.0,
        heartbeat: float | None = HEARTBEAT_SECONDS,
    ):
        self.url = str(url).rstrip("/")
        self.project = str(project)
        self.run = str(run)
        self._config = _jsonable(dict(config or {}))
        self._tags = [str(t)[:100] for t in (tags or ())][:100]
        token = token if token is not None else os.environ.get("PARALLAX_TOKEN")
        self._headers = {"content-type": "application/json"}
        if token:
            self._headers["authorization"] = f"Bearer {token}"
        self._batch_values = max(1, int(batch_values))
        self._flush_interval = max(0.01, float(flush_interval))
        self._max_queue = max(1, int(max_queue_values))
        self._high_water = max(self._batch_values, self._max_queue // 2)  # memory spills to disk past this
        self._timeout = httpx.Timeout(float(timeout), connect=min(float(timeout), 3.0))
        self._backoff0 = max(0.01, float(backoff))
        self._max_backoff = max(self._backoff0, float(max_backoff))
        self._atexit_timeout = float(atexit_timeout)
        # while it has nothing else to send, the sender says every `heartbeat` seconds that the process is alive
        self._heartbeat = float(heartbeat) if heartbeat else 0.0
        self._last_contact = time.monotonic()

        # -- state shared with log(): guarded by _lock
        self._lock = threading.Lock()
        self._buf: collections.deque = collections.deque()
        self._buf_values = 0
        self._kicked = False
        self._last_step = -1
        self._closed = False
        self._c = dict.fromkeys(
            ("logged", "sent", "dropped", "dropped_invalid", "dropped_overflow", "retries", "batches", "resumed", "spilled", "log_errors",
             "events", "trajectories"), 0
        )
        self._inflight_values = 0
        self._inflight: list[tuple[int, bytes, str]] = []
        # unsent values in the spool as stats() and flush() see them: set (under _lock, with the counters the same
        # spool change moves) while _spool_lock is still held, so spooled, sent and dropped change at one instant
        self._spooled = 0

        # -- sender thread state
        self._wake = threading.Event()
        self._idle = threading.Condition(threading.Lock())
        self._flush_requested = False
        self._stopping = False
        self._abandoned = False  # close() stopped waiting for the thread (stuck in a request)
        self._kept: list[tuple[int, bytes, str]] = []  # the batches the thread had in hand when it was abandoned
        self._in_request = False  # the sender thread is inside an HTTP request
        # close() abandons the thread only while it is inside a request, and the thread leaves a request under the
        # same lock: once it is back to local work (spilling, counting) it can no longer be abandoned mid-way
        self._handoff = threading.Lock()
        self._run_id: int | None = None
        self._retry_at = 0.0
        self._delay = self._backoff0
        self._down = False
        self.last_error: str | None = None
        self._valid_names: set[str] = set()
        # built here, not in the thread: its TLS context takes milliseconds with the GIL held
        self._http = httpx.Client(base_url=self.url, timeout=self._timeout, headers=self._headers)

        self._spool: Spool | None = None
        self._spool_lock = threading.RLock()
        self._spool_lockfile = None
        if spool_dir is not False:
            try:
                base = Path(spool_dir) if spool_dir not in (None, True) else default_spool_dir(self.project, self.run)
                folder, self._spool_lockfile = lock_folder(base)
                self._spool = Spool(folder, max(1024, int(max_spool_bytes)))
                self._c["resumed"] = self._spooled = self._spool.values
                if self._spool.values:
                    logger.info("parallax: resuming %d spooled values from %s", self._spool.values, folder)
            except Exception as exc:  # a read-only home must not stop training: memory only
                logger.warning("parallax: no spool (%s); points stay in memory only", exc)
                self._spool = None

        self._thread = threading.Thread(target=self._worker, name=f"parallax-client-{self.run}", daemon=True)
        self._thread.start()
        atexit.register(self._atexit)

    # -- the training loop's side ------------------------------------------------

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Queue ``metrics`` (name -> number) at ``step`` (default: the previous step + 1). Never blocks, never raises."""
        try:
            if type(step) is not int:
                step = self._step(step)
                if step is None:
                    with self._lock:
                        self._c["dropped_invalid"] += len(metrics) if hasattr(metrics, "__len__") else 1
                        self._c["dropped"] += len(metrics) if hasattr(metrics, "__len__") else 1
                    return
            elif step < 0 or step > MAX_STEP:
                with self._lock:
                    self._c["dropped_invalid"] += len(metrics)
                    self._c["dropped"] += len(metrics)
                return
            d = dict(metrics)
            for v in d.values():
                if type(v) is not float and type(v) is not int:
                    d = {k: _number(x) for k, x in d.items()}
                    break
            n = len(d)
            entry = (step, _now(), d)
            with self._lock:
                self._last_step = step
                if self._closed:
                    self._c["dropped"] += n
                    self._c["dropped_overflow"] += n
                    return
                self._c["logged"] += n
                self._buf.append(entry)
                self._buf_values += n
                if self._buf_values > self._max_queue:
                    self._overflow()
                if self._buf_values >= self._batch_values and not self._kicked:
                    self._kicked = True
                    self._wake.set()
        except Exception:  # never into the training loop
            try:
                self._c["log_errors"] += 1
            except Exception:
                pass

    def event(self, kind: str, step: int, message: str = "") -> None:
        """Queue an event (``resume``, ``checkpoint``, ``weight_sync``, ``eval``, ``note``...) at ``step`` for
        ``POST /api/v1/runs/{id}/events``. Sent, retried and spooled in order with the metrics. A kind that does not
        match ``^[a-z][a-z0-9_]{0,31}$`` or a bad step is dropped and counted. Never blocks, never raises."""
        try:
            s = step if type(step) is int and 0 <= step <= MAX_STEP else self._step(step) if step is not None else None
            if s is None or type(kind) is not str or not _KIND.fullmatch(kind):
                with self._lock:
                    self._c["dropped"] += 1
                    self._c["dropped_invalid"] += 1
                return
            msg = message if type(message) is str else str(message)
            if "\x00" in msg:
                msg = msg.replace("\x00", "")
            self._enqueue("events", [{"step": s, "kind": kind, "message": msg[:10_000], "time": _now()}])
        except Exception:
            try:
                self._c["log_errors"] += 1
            except Exception:
                pass

    def log_trajectories(self, trajectories: list[dict]) -> None:
        """Queue trajectories (``{"step", "turns": [...], ...}`` dicts, passed through as given) for the harness audit,
        ``POST /api/v1/runs/{id}/trajectories``, one request per call, in order with the metrics. The dicts are
        encoded later by the sender thread: do not change them after the call. Never blocks, never raises."""
        try:
            items = [dict(t) if isinstance(t, Mapping) else t for t in trajectories]
            if items:
                self._enqueue("trajectories", items)
        except Exception:
            try:
                self._c["log_errors"] += 1
            except Exception:
                pass

    def _enqueue(self, endpoint: str, items: list) -> None:
        n = len(items)
        with self._lock:
            if self._closed:
                self._c["dropped"] += n
                self._c["dropped_overflow"] += n
                return
            self._c["logged"] += n
            self._c[endpoint] += n
            self._buf.append((endpoint, n, items))
            self._buf_values += n
            if self._buf_values > self._max_queue:
                self._overflow()
            if not self._kicked:  # rare and small: sent without waiting for the flush interval
                self._kicked = True
                self._wake.set()

    def _step(self, step: Any) -> int | None:
        if step is None:
            return self._last_step + 1
        try:
            if isinstance(step, bool):
                return None
            s = operator.index(step)  # numpy integers
        except TypeError:
            try:
                f = float(step)
                s = int(f) if f.is_integer() else None
            except Exception:
                return None
        return s if s is not None and 0 <= s <= MAX_STEP else None

    def _overflow(self) -> None:
        """Memory full (the sender is busy): drop the oldest queued points. Called with _lock held."""
        while self._buf_values > self._max_queue and len(self._buf) > 1:
            old = self._buf.popleft()
            k = old[1] if type(old[0]) is str else len(old[2])
            self._buf_values -= k
            self._c["dropped"] += k
            self._c["dropped_overflow"] += k

    # -- control -------------------------------------------------------------------

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every point logged so far is acknowledged by the server (True) or ``timeout`` passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._idle:
            self._flush_requested = True
            self._retry_at = 0.0  # one immediate attempt, then the usual backoff
        self._wake.set()
        while True:
            if self._drained():
                return True
            if not self._thread.is_alive():
                return False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            with self._idle:
                self._flush_requested = True
                self._idle.wait(0.05 if left is None else min(0.05, left))

    def _drained(self) -> bool:
        with self._lock:  # _spooled, not _spool.values: a replayed batch counts as spooled until it counts as sent
            return self._buf_values + self._inflight_values == 0 and self._spooled == 0

    def close(self, timeout: float | None = 10.0, status: str | None = None) -> bool:
        """Flush (within ``timeout`` seconds) and stop. What is not acknowledged by then stays in the spool. Idempotent.

        ``status`` (``"finished"`` or ``"failed"``): after the flush, set the run's status (one request, best effort,
        at most ``min(timeout, 5)`` seconds; skipped while the server is unreachable)."""
        try:
            t0 = time.monotonic()
            if self._stopping:
                if status is not None:
                    self._set_status(status, timeout, t0)
                return self._drained()
            ok = self.flush(timeout)
            with self._lock:
                self._closed = True
            self._stopping = True
            self._wake.set()
            self._thread.join(timeout=1.0 if ok else 0.2)
            # Still encoding or spilling (local work, bounded by the queue and the spool): wait for it, so that what
            # was logged is on disk when close returns. Only a thread stuck in a request is left behind.
            deadline = time.monotonic() + 60
            while self._thread.is_alive() and not self._abandon_if_in_request() and time.monotonic() < deadline:
                self._thread.join(0.05)
            if self._thread.is_alive():  # stuck in a request (or past the deadline): give up on it
                with self._handoff:
                    self._abandon()
            if self._abandoned:  # keep the batches it had in hand (a duplicate is harmless), even if it ended since
                kept, self._kept = self._kept, []
                self._spill(kept)
            self._spill_memory()
            with self._spool_lock:
                if self._spool is not None:
                    self._spool.close()
            if self._spool_lockfile is not None:
                self._spool_lockfile.close()
                self._spool_lockfile = None
            try:
                atexit.unregister(self._atexit)
            except Exception:
                pass
            if status is not None:
                self._set_status(status, timeout, t0)
            return ok and self._drained()
        except Exception as exc:
            logger.warning("parallax: close failed: %s", exc)
            return False

    def set_status(self, status: str, timeout: float | None = 10.0) -> bool:
        """Flush (within ``timeout`` seconds), then set the run's status (``"finished"``, ``"failed"`` or
        ``"running"``) and keep the client open: what is logged afterwards (an ``evaluate()`` after ``train()``) is
        still sent. True when the server took it. Skipped (False) while the server is unreachable or before the run
        exists (nothing was sent yet). Never raises."""
        try:
            t0 = time.monotonic()
            if not self._stopping:
                self.flush(timeout)
            if self._run_id is None and not self._down:
                return False  # nothing was ever sent: no run to set (a new one starts as running)
            return self._set_status(status, timeout, t0)
        except Exception as exc:
            logger.warning("parallax: setting the run status failed: %s", exc)
            return False

    def _abandon_if_in_request(self) -> bool:
        with self._handoff:
            if self._in_request:
                self._abandon()
            return self._abandoned

    def _abandon(self) -> None:
        """Give up on the sender thread and take the batches it has in hand. Called with _handoff held: while the
        thread is inside a request it cannot touch _inflight, so these are exactly the batches it holds (read later,
        the thread could already have cleared _inflight on its way out of the request, and they would be lost)."""
        if not self._abandoned:
            self._abandoned = True
            self._kept, self._inflight = self._inflight, []

    def _set_status(self, status: str, timeout: float | None, t0: float) -> bool:
        """PATCH the run's status from the caller's thread (the sender has stopped). Never raises."""
        if status not in ("finished", "failed", "running"):
            logger.warning("parallax: unknown run status %r not set", status)
            return False
        if self._run_id is None or self._down:
            logger.warning("parallax: run status %r not set: the server was not reached", status)
            return False
        left = 5.0 if timeout is None else min(5.0, max(0.5, timeout - (time.monotonic() - t0)))
        try:
            r = httpx.patch(f"{self.url}/api/v1/runs/{self._run_id}", json={"status": status}, headers=self._headers,
                            timeout=httpx.Timeout(left, connect=min(left, 3.0)))
            if r.status_code == 200:
                return True
            logger.warning("parallax: setting the run status: HTTP %d %s", r.status_code, r.text[:200])
        except Exception as exc:
            logger.warning("parallax: setting the run status failed: %s", exc)
        return False

    def _atexit(self) -> None:
        self.close(self._atexit_timeout)

    def __enter__(self) -> "ParallaxClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def run_id(self) -> int | None:
        """The server's id of the run, once it is created."""
        return self._run_id

    def stats(self) -> dict[str, Any]:
        """Counts of metric values, events and trajectories (one each). ``events`` and ``trajectories`` count those
        queued by ``event`` and ``log_trajectories``. ``queued`` (in memory, including a request in flight) and ``spooled`` (on disk,
        unsent) are current; ``logged``, ``sent``, ``dropped`` (= ``dropped_invalid`` + ``dropped_overflow``),
        ``spilled`` (ever written to the spool), ``resumed`` (found in the spool at start), ``retries`` (failed
        attempts) and ``batches`` (requests acknowledged) only grow. logged + resumed = sent + queued + spooled + dropped,
        once invalid values are counted (the sender does it); a batch moves from one count to the next at one instant,
        so once ``flush()`` returned True, ``sent`` counts everything it waited for."""
        with self._lock:
            out = dict(self._c)
            out["queued"] = self._buf_values + self._inflight_values
            out["spooled"] = self._spooled
        out["run_id"] = self._run_id
        out["connected"] = not self._down and self._run_id is not None
        out["last_error"] = self.last_error
        return out

    # -- the sender thread -----------------------------------------------------------

    def _worker(self) -> None:
        try:
            while not self._stopping:
                wait = self._flush_interval
                if self._spool is not None and self._spool.values and not self._down:
                    wait = 0.0
                elif self._down:
                    wait = min(wait, max(0.0, self._retry_at - time.monotonic()))
                elif self._heartbeat and self._run_id is not None:
                    wait = min(wait, max(0.0, self._last_contact + self._heartbeat - time.monotonic()))
                self._wake.wait(wait)
                self._wake.clear()
                if self._stopping:
                    break
                try:
                    self._cycle()
                    self._beat()
                except Exception as exc:  # pragma: no cover - a bug here must not kill the thread
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    logger.exception("parallax: sender error")
                    self._fail(self.last_error)
                with self._idle:
                    self._flush_requested = False
                    self._idle.notify_all()
        finally:
            self._http.close()

    def _take(self) -> list:
        with self._lock:
            entries = self._buf
            if not entries:
                self._kicked = False
                return []
            self._buf = collections.deque()
            self._inflight_values += self._buf_values
            self._buf_values = 0
            self._kicked = False
        return list(entries)

    def _encode(self, entries: list) -> list[tuple[int, bytes, str]]:
        """Queued entries as (values, request body, endpoint), in order: valid points in bodies of at most
        batch_values values each (invalid values counted), consecutive events together, one body per
        log_trajectories call."""
        valid = self._valid_names
        batches: list[tuple[int, bytes, str]] = []
        points: list[dict] = []
        count = bad = 0
        limit = self._batch_values
        events: list[dict] = []
        for i, (step, t, d) in enumerate(entries):
            if i & 127 == 127:
                _sleep(0)  # let the training thread have the GIL now rather than after the 5 ms switch interval
            if type(step) is str or events:  # an event or trajectory entry (endpoint, count, items), or the end of events
                if points:
                    batches.append((count, json.dumps({"points": points}, separators=(",", ":")).encode(), "metrics"))
                    points, count = [], 0
                if events and (step != "events" or len(events) >= _MAX_EVENTS):
                    batches.append((len(events), json.dumps({"events": events}, separators=(",", ":")).encode(), "events"))
                    events = []
                if step == "events":
                    events.extend(d)
                    continue
                if step == "trajectories":
                    try:
                        body = json.dumps({"trajectories": d}, separators=(",", ":"), default=_json_default).encode()
                        batches.append((t, body, "trajectories"))
                    except Exception as exc:
                        logger.warning("parallax: trajectories not encodable, dropped: %s", exc)
                        bad += t
                    continue
            clean = True
            for k, v in d.items():
                if v is _BAD or k not in valid:
                    if v is not _BAD and is_valid_name(k):
                        valid.add(k)
                        continue
                    clean = False
                    break
            if not clean:
                m = {k: v for k, v in d.items() if v is not _BAD and (k in valid or is_valid_name(k))}
                bad += len(d) - len(m)
                d = m
                if not d:
                    continue
            points.append({"step": step, "metrics": d, "time": t})
            count += len(d)
            if count >= limit:
                batches.append((count, json.dumps({"points": points}, separators=(",", ":")).encode(), "metrics"))
                points, count = [], 0
        if points:
            batches.append((count, json.dumps({"points": points}, separators=(",", ":")).encode(), "metrics"))
        if events:
            batches.append((len(events), json.dumps({"events": events}, separators=(",", ":")).encode(), "events"))
        with self._lock:
            self._inflight_values -= bad
            self._c["dropped"] += bad
            self._c["dropped_invalid"] += bad
        return batches

    def _spill(self, batches: list[tuple[int, bytes, str]]) -> None:
        """Batches (in memory until now) to the spool, or dropped and counted when there is no spool."""
        sender = threading.current_thread() is self._thread
        for n, body, endpoint in batches:
            with self._spool_lock:
                if sender and self._abandoned:
                    return  # close() gave up waiting for this thread and has kept these batches itself
                dropped = self._spool.append(n, body, endpoint) if self._spool is not None else n
                with self._lock:  # the spool's values and the counters change together
                    self._inflight_values -= n
                    if self._spool is not None:
                        self._c["spilled"] += n
                        self._spooled = self._spool.values
                    self._c["dropped"] += dropped
                    self._c["dropped_overflow"] += dropped

    def _spill_memory(self) -> None:
        entries = self._take()
        if entries:
            self._spill(self._encode(entries))

    def _keep(self, batches: list[tuple[int, bytes, str]]) -> None:
        """Unsent batches: to the spool, or back in front of the memory queue without one."""
        self._inflight = []
        if batches:
            self._spill(batches) if self._spool is not None else self._requeue(batches)

    def _cycle(self) -> None:
        force = self._flush_requested
        if self._spool is None and self._down and time.monotonic() < self._retry_at and not force:
            return  # memory only: the points wait in the queue (bounded) for the next attempt
        entries = self._take()
        batches = self._encode(entries) if entries else []
        waiting = self._down and time.monotonic() < self._retry_at and not force
        if self._spool is not None and (self._spool.pending or waiting):
            self._keep(batches)  # keep the order: behind what is already spooled
            batches = []
        if waiting:
            self._keep(batches)
            return
        self._inflight = batches
        if self._run_id is None and not self._create_run():
            self._keep(batches)
            return
        # the spool first, oldest batch first
        while self._spool is not None and self._spool.values and not self._stopping:
            with self._spool_lock:
                before = self._spool.values
                item = self._spool.peek()
                lost = before - self._spool.values  # values of lines that could not be read (a damaged segment)
                if lost:
                    logger.warning("parallax: %d spooled values unreadable, dropped", lost)
                    with self._lock:
                        self._spooled = self._spool.values
                        self._c["dropped"] += lost
                        self._c["dropped_invalid"] += lost
            if item is None:
                break
            n, body, length, endpoint = item
            outcome = self._post(body, endpoint)
            if self._abandoned:
                return
            if outcome == "retry":
                self._keep(batches)
                return
            with self._spool_lock:
                self._spool.advance(n, length)
                # the batch leaves `spooled` and enters `sent` at one instant: flush() sees the spool empty only
                # once what it held is counted as sent (a stats() right after flush() returned True was short)
                with self._lock:
                    self._spooled = self._spool.values
                    self._c["sent" if outcome == "ok" else "dropped"] += n
                    if outcome != "ok":
                        self._c["dropped_invalid"] += n
            if self._buf_values >= self._batch_values:  # a long replay: keep memory bounded, order kept
                self._spill_memory()
        for i, (n, body, endpoint) in enumerate(batches):
            if self._spool is not None and self._buf_values >= self._high_water:
                # the server takes points more slowly than they come: the backlog goes to disk, in order
                self._keep(batches[i:])
                self._spill_memory()
                return
            self._inflight = batches[i:]
            outcome = self._post(body, endpoint)
            if self._abandoned:
                return
            if outcome == "retry":
                self._keep(batches[i:])
                return
            with self._lock:
                self._inflight_values -= n
                self._c["sent" if outcome == "ok" else "dropped"] += n
                if outcome != "ok":
                    self._c["dropped_invalid"] += n
        self._inflight = []

    def _requeue(self, batches: list[tuple[int, bytes, str]]) -> None:
        """No spool: unsent batches go back in front of the queue (as decoded points), bounded like the rest."""
        if self._abandoned and threading.current_thread() is self._thread:
            return
        entries: list = []
        n = 0
        for k, body, endpoint in batches:
            if endpoint == "metrics":
                for p in json.loads(body)["points"]:
                    entries.append((p["step"], p["time"], p["metrics"]))
                    n += len(p["metrics"])
            else:
                entries.append((endpoint, k, json.loads(body)[endpoint]))
                n += k
        with self._lock:
            self._inflight_values -= n
            self._buf.extendleft(reversed(entries))
            self._buf_values += n
            if self._buf_values > self._max_queue:
                self._overflow()

    def _fail(self, error: str) -> None:
        if not self._down:
            logger.warning("parallax: %s unreachable (%s); spooling and retrying", self.url, error)
        self._down = True
        self.last_error = error
        self._retry_at = time.monotonic() + self._delay
        self._delay = min(self._delay * 2, self._max_backoff)
        with self._lock:
            self._c["retries"] += 1

    def _ok(self) -> None:
        if self._down:
            logger.info("parallax: %s reachable again", self.url)
        self._down = False
        self._delay = self._backoff0
        self._last_contact = time.monotonic()

    def _beat(self) -> None:
        """A heartbeat when nothing reached the server for `heartbeat` seconds: the process is alive (a long
        evaluation is not a dead trainer). A server without the route (404) gets no more of them."""
        if (not self._heartbeat or self._run_id is None or self._down or self._stopping
                or time.monotonic() - self._last_contact < self._heartbeat):
            return
        try:
            r = self._request(f"/api/v1/runs/{self._run_id}/heartbeat")
        except httpx.HTTPError as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
            return
        if r.status_code == 204:
            self._ok()
        elif r.status_code == 404:
            self._heartbeat = 0.0
        else:
            self._last_contact = time.monotonic()  # 401/5xx: try again a period later, points decide the rest

    def _create_run(self) -> bool:
        body = {"project": self.project, "name": self.run, "config": self._config, "tags": self._tags}
        for attempt in range(2):
            try:
                r = self._request("/api/v1/runs", json=body)
            except httpx.HTTPError as exc:
                self._fail(f"{type(exc).__name__}: {exc}")
                return False
            if r.status_code in (200, 201):
                try:
                    self._run_id = int(r.json()["id"])
                except Exception as exc:
                    self._fail(f"unexpected answer creating the run: {exc}")
                    return False
                self._ok()
                return True
            if r.status_code in (400, 422) and attempt == 0:
                logger.warning("parallax: run config/tags refused (%s); creating the run without them", r.text[:300])
                body = {"project": self.project, "name": self.run}
                continue
            self._fail(f"creating the run: HTTP {r.status_code} {r.text[:200]}")
            return False
        return False

    def _request(self, path: str, **kwargs: Any) -> httpx.Response:
        """A POST from the sender thread; ``close`` does not wait for one (it may hang on a dead server)."""
        with self._handoff:
            if self._abandoned:  # pragma: no cover - close() gave up on this thread before this request
                raise httpx.TransportError("the client is closed")
            self._in_request = True
        try:
            return self._http.post(path, **kwargs)
        finally:
            with self._handoff:
                self._in_request = False

    def _post(self, body: bytes, endpoint: str = "metrics") -> str:
        """'ok', 'reject' (the server will never take this batch: dropped) or 'retry' (backoff armed)."""
        if self._run_id is None and not self._create_run():
            return "retry"
        try:
            r = self._request(f"/api/v1/runs/{self._run_id}/{endpoint}", content=body)
        except httpx.HTTPError as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
            return "retry"
        code = r.status_code
        if code in (200, 201):
            self._ok()
            with self._lock:
                self._c["batches"] += 1
            return "ok"
        if code == 404:  # the run is gone (a new database): create it again
            self._run_id = None
            self._fail("HTTP 404: run not found; creating it again")
            return "retry"
        if code in (400, 413, 422):
            logger.warning("parallax: %s batch refused, dropped: HTTP %d %s", endpoint, code, r.text[:300])
            self.last_error = f"HTTP {code}: {r.text[:200]}"
            return "reject"
        self._fail(f"HTTP {code}: {r.text[:200]}")  # 401/403 (a token to fix), 429, 5xx
        return "retry"
