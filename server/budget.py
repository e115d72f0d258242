"""How much memory the request bodies being parsed may take, all requests together.

A JSON body of points takes about 15 times its size in Python objects while it is parsed (measured on 10 MB of
points: the peak of tracemalloc), so four 16 MiB bodies at once took 1 GB. Each request with a body now holds
a share of a budget (``PARALLAX_PARSE_MEMORY_BUDGET_BYTES``), ``PARSE_EXPANSION`` times its size, from when its
body has arrived until it is answered; a request that finds no room waits its turn (first come, first served),
and one that waits longer than ``PARALLAX_PARSE_WAIT_SECONDS`` is answered 503 with ``Retry-After``.

The body is read before the share is taken: a client that sends slowly holds no budget while it does, and one
that has not sent it all within ``PARALLAX_BODY_READ_TIMEOUT_SECONDS`` is answered 408.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable

from parallax.server.security import READ_METHODS, send_json

#: A body's share: this many times its size (the measured peak is about 15).
PARSE_EXPANSION = 20


@dataclass(eq=False)
class _Waiter:
    weight: int
    loop: asyncio.AbstractEventLoop
    granted: asyncio.Future


class MemoryBudget:
    """A weighted semaphore over bytes, served in arrival order so a large request is not passed over for ever by
    small ones. Safe across event loops and threads (tests run several loops; the state is under a lock)."""

    def __init__(self, total: int):
        self.total = total
        self.used = 0
        self.peak = 0  # the most ever held at once: what the tests read
        self.waited = 0  # requests that had to wait
        self._lock = threading.Lock()
        self._queue: deque[_Waiter] = deque()

    def _take(self, weight: int) -> None:
        self.used += weight
        self.peak = max(self.peak, self.used)

    def share(self, weight: int) -> int:
        """A request's weight as held: at most the whole budget, so a body larger than it still goes, alone."""
        return max(1, min(weight, self.total))

    def try_acquire(self, weight: int) -> bool:
        weight = self.share(weight)
        with self._lock:
            if self._queue or self.used + weight > self.total:
                return False
            self._take(weight)
            return True

    async def acquire(self, weight: int, timeout: float) -> bool:
        """Take ``weight`` bytes of the budget, waiting at most ``timeout`` seconds; False when it could not."""
        weight = self.share(weight)
        loop = asyncio.get_running_loop()
        with self._lock:
            if not self._queue and self.used + weight <= self.total:
                self._take(weight)
                return True
            waiter = _Waiter(weight, loop, loop.create_future())
            self._queue.append(waiter)
            self.waited += 1
        try:
            await asyncio.wait_for(asyncio.shield(waiter.granted), timeout)
            return True
        except BaseException as exc:  # timed out, or the request was cancelled (its client left)
            with self._lock:
                queued = waiter in self._queue
                if queued:
                    self._queue.remove(waiter)
            if queued:
                self._grant()  # it may have been the head that held the others back
            elif isinstance(exc, asyncio.TimeoutError):
                return True  # granted just as the wait ran out: it holds its share
            else:
                self.release(weight)
            if isinstance(exc, asyncio.TimeoutError):
                return False
            raise

    def release(self, weight: int) -> None:
        with self._lock:
            self.used -= self.share(weight)
        self._grant()

    def _grant(self) -> None:
        woken = []
        with self._lock:
            while self._queue and self.used + self._queue[0].weight <= self.total:
                waiter = self._queue.popleft()
                self._take(waiter.weight)
                woken.append(waiter)
        for waiter in woken:
            waiter.loop.call_soon_threadsafe(_resolve, waiter.granted)


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(True)


class ParseBudgetMiddleware:
    """Holds a request's share of the parse budget while it is handled (see the module's docstring).

    A compressed body is charged as if it inflated to the body limit: it may, and its size on the wire says
    nothing of what it becomes.
    """

    def __init__(self, app: Callable, budget: MemoryBudget, max_body_bytes: int, wait_s: float,
                 read_timeout_s: float = 30.0):
        self.app = app
        self.budget = budget
        self.max_body_bytes = max_body_bytes
        self.wait_s = wait_s
        self.read_timeout_s = read_timeout_s
        self.retry_after = str(max(1, math.ceil(wait_s / 4))).encode()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] in READ_METHODS:
            await self.app(scope, receive, send)
            return
        # The whole body, within read_timeout_s: ten connections that sent half a body to the dashboard's
        # callback endpoint once held the WSGI bridge's ten threads for ever. Waiting here costs no thread.
        chunks = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                detail = f"the request body did not arrive within {self.read_timeout_s:g} s (PARALLAX_BODY_READ_TIMEOUT_SECONDS)"
                await send_json(send, 408, {"detail": detail}, [(b"connection", b"close")])
                return
            if message["type"] != "http.request":  # the client left before its body was in
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if not body:
            await self.app(scope, replay, send)
            return
        encoded = any(n == b"content-encoding" and v.strip().lower() not in (b"", b"identity") for n, v in scope["headers"])
        weight = PARSE_EXPANSION * (self.max_body_bytes if encoded else len(body))
        if not await self.budget.acquire(weight, self.wait_s):
            detail = (f"the server is parsing as many request bodies as its memory budget allows and this one waited "
                      f"{self.wait_s:g} s (PARALLAX_PARSE_MEMORY_BUDGET_BYTES): retry later")
            await send_json(send, 503, {"detail": detail}, [(b"retry-after", self.retry_after)])
            return
        try:
            await self.app(scope, replay, send)
        finally:
            self.budget.release(weight)
