"""How a notification gets there: one worker thread per channel, retries with backoff and jitter, every attempt
recorded."""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
import time
from collections import deque
from typing import Any, Callable, Collection, Sequence

from parallax.alerts.notify.notification import DeliveryAttempt, DeliveryResult, Notification, Notifier

log = logging.getLogger(__name__)


class _Channel:
    def __init__(self, notifier: Notifier):
        self.notifier = notifier
        self.name = str(getattr(notifier, "name", type(notifier).__name__))
        self.pending: deque[Notification] = deque()
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None


_STOP = object()


class Dispatcher:
    """Delivers notifications in the background: one daemon worker per notifier, each with a
    bounded queue, retrying retryable failures with exponential backoff (±20 % jitter, at
    least the receiver's Retry-After, at most ``max_delay``) up to ``max_attempts``.

    ``record(DeliveryAttempt)`` is called after every attempt and for every dropped
    delivery, in order, from one recording thread, so ``submit`` never waits for it;
    its exceptions are logged. ``sleep`` waits between retries; by default the wait
    is cut short by ``close``.
    """

    def __init__(
        self,
        notifiers: Sequence[Notifier],
        record: Callable[[DeliveryAttempt], Any],
        *,
        max_attempts: int = 5,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        queue_size: int = 10_000,
        sleep: Callable[[float], Any] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if base_delay < 0 or max_delay < 0:
            raise ValueError("delays must not be negative")
        self.max_attempts = max_attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.queue_size = queue_size
        self._record = record
        self._sleep = sleep
        self._clock = clock
        self._random = random.Random()
        self._lock = threading.Lock()  # guards _closing against submit; taken before any channel's cond
        self._closing = False
        self._deadline = math.inf  # monotonic time by which close() gives up
        self._stop = threading.Event()
        self._records: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._record_lock = threading.Lock()
        self._recorder_done = False
        self._recorder = threading.Thread(target=self._record_loop, name="parallax-notify-record", daemon=True)
        self._recorder.start()
        self._channels = [_Channel(n) for n in notifiers]
        for ch in self._channels:
            ch.thread = threading.Thread(target=self._work, args=(ch,), name=f"parallax-notify-{ch.name}", daemon=True)
            ch.thread.start()

    @property
    def channels(self) -> list[str]:
        return [ch.name for ch in self._channels]

    def pending(self) -> int:
        """Deliveries waiting in the queues (not counting those being sent or retried)."""
        return sum(len(ch.pending) for ch in self._channels)

    def submit(self, n: Notification, channels: Collection[str] | None = None) -> None:
        """Queue ``n`` for every channel (or those named). Never blocks, never raises: a full queue drops its oldest delivery."""
        try:
            drops: list[tuple[_Channel, Notification, str]] = []
            targets = [ch for ch in self._channels if channels is None or ch.name in channels]
            with self._lock:
                if self._closing:
                    drops = [(ch, n, "dropped: dispatcher closed") for ch in targets]
                else:
                    for ch in targets:
                        with ch.cond:
                            if len(ch.pending) >= self.queue_size:
                                why = f"dropped: queue full ({self.queue_size} pending)"
                                drops.append((ch, ch.pending.popleft(), why))
                            ch.pending.append(n)
                            ch.cond.notify()
            for ch, old, why in drops:
                log.warning("notification %s to %s %s", old.id, ch.name, why)
                self._emit(self._dropped(ch, old, 0, why))
        except Exception:
            log.exception("could not queue notification %s", getattr(n, "id", n))

    def close(self, timeout: float = 5.0) -> bool:
        """Deliver what can be delivered within ``timeout`` seconds, drop (and record) the rest, stop the threads.

        Returns True when everything queued was delivered or failed for good in time.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            if self._closing:
                return not self._recorder.is_alive()
            self._deadline = deadline
            self._closing = True
        for ch in self._channels:
            with ch.cond:
                ch.cond.notify_all()
        for ch in self._channels:
            assert ch.thread is not None
            ch.thread.join(max(0.0, deadline - time.monotonic()))
        self._stop.set()  # wakes workers waiting out a backoff
        flushed = True
        for ch in self._channels:
            with ch.cond:
                left = list(ch.pending)
                ch.pending.clear()
                ch.cond.notify_all()
            assert ch.thread is not None
            flushed = flushed and not left and not ch.thread.is_alive()
            for old in left:
                self._emit(self._dropped(ch, old, 0, "dropped: dispatcher closed before it was sent"))
        self._records.put(_STOP)
        self._recorder.join(max(0.0, deadline - time.monotonic()))
        for ch in self._channels:  # the notifiers' clients (their connections) go too
            closer = getattr(ch.notifier, "close", None)
            if callable(closer) and not (ch.thread is not None and ch.thread.is_alive()):
                try:
                    closer()
                except Exception:
                    log.exception("closing notifier %s failed", ch.name)
        return flushed and not self._recorder.is_alive()

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- workers --

    def _work(self, ch: _Channel) -> None:
        while True:
            with ch.cond:
                while not ch.pending and not self._closing and not self._stop.is_set():
                    ch.cond.wait()
                if self._stop.is_set() or not ch.pending:
                    return
                n = ch.pending.popleft()
            try:
                self._deliver(ch, n)
            except Exception:  # never let one delivery kill the channel
                log.exception("delivering notification %s to %s failed", n.id, ch.name)

    def _deliver(self, ch: _Channel, n: Notification) -> None:
        attempt = 0
        while True:
            attempt += 1
            result = self._send(ch, n)
            if result.ok or not result.retryable or attempt >= self.max_attempts:
                self._emit(self._attempt(ch, n, attempt, result, result.error, final=True))
                return
            delay = self._backoff(attempt, result.retry_after)
            give_up = self._stop.is_set() or (self._closing and time.monotonic() + delay > self._deadline)
            error = f"{result.error}; not retried: dispatcher closing" if give_up else result.error
            self._emit(self._attempt(ch, n, attempt, result, error, final=give_up))
            if give_up:
                return
            if self._sleep is None:
                self._stop.wait(delay)
            else:
                self._sleep(delay)
            if self._stop.is_set():
                self._emit(self._dropped(ch, n, attempt, "dropped: dispatcher closed before the next attempt"))
                return

    def _send(self, ch: _Channel, n: Notification) -> DeliveryResult:
        try:
            result = ch.notifier.send(n)
        except Exception as exc:  # notifiers should not raise; a third-party one might
            log.exception("notifier %s raised on notification %s", ch.name, n.id)
            return DeliveryResult(ok=False, retryable=False, error=f"notifier raised {type(exc).__name__}: {exc}")
        if not isinstance(result, DeliveryResult):
            return DeliveryResult(ok=False, retryable=False, error=f"notifier returned {type(result).__name__}")
        return result

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = self.base_delay * 2.0 ** min(attempt - 1, 60)
        delay *= 0.8 + 0.4 * self._random.random()
        if retry_after:
            delay = max(delay, retry_after)
        return min(delay, self.max_delay)

    def _attempt(
        self, ch: _Channel, n: Notification, attempt: int, result: DeliveryResult, error: str | None, final: bool
    ) -> DeliveryAttempt:
        return DeliveryAttempt(
            notification_id=n.id,
            channel=ch.name,
            attempt=attempt,
            ok=result.ok,
            retryable=result.retryable,
            error=error,
            at=self._clock(),
            final=final,
            notification=n,
        )

    def _dropped(self, ch: _Channel, n: Notification, attempts: int, why: str) -> DeliveryAttempt:
        return DeliveryAttempt(
            notification_id=n.id,
            channel=ch.name,
            attempt=attempts,
            ok=False,
            retryable=False,
            error=why,
            at=self._clock(),
            final=True,
            dropped=True,
            notification=n,
        )

    # -- recording --

    def _emit(self, attempt: DeliveryAttempt) -> None:
        with self._record_lock:
            if not self._recorder_done:
                self._records.put(attempt)
                return
        self._call_record(attempt)  # a late delivery after close: record it on this thread

    def _record_loop(self) -> None:
        while True:
            item = self._records.get()
            if item is _STOP:
                break
            self._call_record(item)
        with self._record_lock:
            self._recorder_done = True
        while True:  # whatever was queued behind the stop marker
            try:
                item = self._records.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP:
                self._call_record(item)

    def _call_record(self, attempt: DeliveryAttempt) -> None:
        try:
            self._record(attempt)
        except Exception:
            log.exception(
                "recording delivery of notification %s to %s failed", attempt.notification_id, attempt.channel
            )
