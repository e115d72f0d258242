"""One writer thread per SQLite database, fed by a queue (as datasette does).

SQLite allows one writer at a time; funnelling every write through one thread
and one connection means concurrent requests queue instead of failing with
"database is locked", and a job's transaction never interleaves with another.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable

from sqlalchemy import Connection, Engine

log = logging.getLogger(__name__)

Job = Callable[[Connection], Any]

#: Most jobs committed together.
MAX_GROUP = 16


class SerialWriter:
    def __init__(self, engine: Engine, name: str = "parallax-sqlite-writer"):
        self._engine = engine
        self._jobs: queue.SimpleQueue[tuple[Job, Future] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._closed = False
        self._gate = threading.Lock()  # makes "not closed, then queued" one step
        self._thread.start()

    def run(self, job: Job) -> Any:
        """Run ``job(connection)`` in one transaction on the writer thread and return its result."""
        fut: Future = Future()
        with self._gate:
            if self._closed:
                raise RuntimeError("the store is closed")
            self._jobs.put((job, fut))
        return fut.result()

    def close(self) -> None:
        with self._gate:
            if self._closed:
                return
            self._closed = True
            self._jobs.put(None)
        self._thread.join(timeout=30)

    def _connect(self) -> Connection:
        """A connection for the writer; a failure is retried, never allowed to end the thread."""
        delay = 0.05
        while True:
            try:
                return self._engine.connect()
            except Exception:
                log.exception("the SQLite writer cannot connect; retrying in %.2f s", delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _loop(self) -> None:
        conn = self._connect()
        try:
            while True:
                item = self._jobs.get()
                if item is None:
                    return
                group = [item]
                # Group commit: jobs that queued up meanwhile share one
                # transaction, each inside its own savepoint so that a job
                # that fails rolls back alone.
                while len(group) < MAX_GROUP:
                    try:
                        more = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._jobs.put(None)
                        break
                    group.append(more)
                conn = self._run_group(conn, group)
        finally:
            conn.close()
            self._fail_pending()

    def _fail_pending(self) -> None:
        """Nobody will run what is still queued: tell the callers instead of leaving them waiting."""
        while True:
            try:
                item = self._jobs.get_nowait()
            except queue.Empty:
                return
            if item is not None and item[1].set_running_or_notify_cancel():
                item[1].set_exception(RuntimeError("the store is closed"))

    def _run_group(self, conn: Connection, group: list[tuple[Job, Future]]) -> Connection:
        done: list[tuple[Future, Any]] = []
        try:
            with conn.begin():
                for job, fut in group:
                    if not fut.set_running_or_notify_cancel():
                        continue
                    if len(group) == 1:
                        done.append((fut, job(conn)))
                        continue
                    try:
                        with conn.begin_nested():
                            done.append((fut, job(conn)))
                    except Exception as exc:  # handed to its caller; the others go on
                        fut.set_exception(exc)
        except BaseException as exc:
            # The transaction itself failed (or the only job did): nothing of it was stored.
            for fut, _ in done:
                fut.set_exception(exc)
            for job, fut in group:
                if fut.running() and not fut.done():
                    fut.set_exception(exc)
            if conn.invalidated or conn.closed:
                conn.close()
                conn = self._connect()
            return conn
        for fut, result in done:
            fut.set_result(result)
        return conn
