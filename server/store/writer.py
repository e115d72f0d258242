"""One writer thread per SQLite database, fed by a queue (as datasette does).

SQLite allows one writer at a time; funnelling every write through one thread
and one connection means concurrent requests queue instead of failing with
"database is locked", and a job's transaction never interleaves with another.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable

from sqlalchemy import Connection, Engine

log = logging.getLogger(__name__)

Job = Callable[[Connection], Any]


class SerialWriter:
    def __init__(self, engine: Engine, name: str = "parallax-sqlite-writer"):
        self._engine = engine
        self._jobs: queue.SimpleQueue[tuple[Job, Future] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._closed = False
        self._thread.start()

    def run(self, job: Job) -> Any:
        """Run ``job(connection)`` in one transaction on the writer thread and return its result."""
        if self._closed:
            raise RuntimeError("the store is closed")
        fut: Future = Future()
        self._jobs.put((job, fut))
        return fut.result()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        conn = self._engine.connect()
        try:
            while True:
                item = self._jobs.get()
                if item is None:
                    return
                job, fut = item
                if not fut.set_running_or_notify_cancel():
                    continue
                try:
                    with conn.begin():
                        result = job(conn)
                except BaseException as exc:  # handed to the caller, who decides
                    fut.set_exception(exc)
                    if conn.invalidated or conn.closed:
                        conn = self._engine.connect()
                else:
                    fut.set_result(result)
        finally:
            conn.close()
