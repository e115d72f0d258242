"""Leader election among Parallax processes sharing one PostgreSQL database.

Several ``parallax serve`` processes may share a database behind a load
balancer. Rule evaluation and notification must happen in one of them only,
or each alert transition would be sent once per process. The leader is the
process whose dedicated connection holds a session-level advisory lock:

- PostgreSQL releases a session lock when its session ends, so a leader that
  dies (a killed process closes its socket) hands over as soon as a follower
  next asks — followers ask every ``poll_seconds``;
- a leader cut off from the database (network partition) is dropped by the
  server through TCP keepalives set on the session (about 5 x ``poll_seconds``
  of silence), and steps down itself sooner, when the ``SELECT 1`` it runs on
  the connection every ``poll_seconds`` gets no answer;
- the same connection LISTENs on a channel, so that what the other processes
  announce (points stored, runs changed, rules reloaded) reaches the leader.
  Every process listens, leader or not, so that there is no gap between
  taking the lock and hearing the announcements.

This module knows nothing of alerts: it is handed callbacks. On SQLite there
is one process by design and no elector: that process always leads.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import psycopg
from psycopg import sql
from sqlalchemy import make_url

log = logging.getLogger(__name__)

#: The advisory lock key of the leader ("plxl"); the schema lock (server/migrate.py) is another key.
LEADER_LOCK_KEY = 0x706C786C
#: The longest ``stop`` waits for the elector's thread to notice (it listens in slices this long).
STOP_CHECK_SECONDS = 0.1


def libpq_conninfo(sqlalchemy_url: str) -> str:
    """A libpq connection URI from a SQLAlchemy PostgreSQL URL (``postgresql+psycopg://…``)."""
    return make_url(sqlalchemy_url).set(drivername="postgresql").render_as_string(hide_password=False)


class LeaderElector:
    """Holds the leader lock when it can, and says when it wins or loses it.

    ``on_elected`` and ``on_deposed`` run on the elector's thread (or on the
    caller's for the first attempt made by ``start``), before ``is_leader``
    changes to True and after it changes to False respectively; ``on_message``
    gets the payload of every notification on ``channel``, leader or not, in
    the order PostgreSQL delivered them.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        poll_seconds: float = 2.0,
        key: int = LEADER_LOCK_KEY,
        channel: str | None = None,
        on_elected: Callable[[], None] | None = None,
        on_deposed: Callable[[], None] | None = None,
        on_message: Callable[[str], None] | None = None,
        name: str = "parallax",
    ):
        if poll_seconds <= 0:
            raise ValueError("poll_seconds must be positive")
        self._conninfo = conninfo
        self.poll_seconds = poll_seconds
        self._key = key
        self._channel = channel
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._on_message = on_message
        self._name = name
        self._conn: psycopg.Connection | None = None
        self._leader = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Monotonic time of the last win, and how many times this elector won (for tests and logs).
        self.elected_at: float | None = None
        self.terms = 0

    @property
    def is_leader(self) -> bool:
        return self._leader

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> None:
        """Try once now (so that a lone process leads as soon as it starts), then keep trying in the background."""
        if self._thread is not None:
            return
        self._round()
        self._thread = threading.Thread(target=self._loop, name=f"{self._name}-leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Give the lock up (closing the session releases it) and stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.poll_seconds + 5)
            self._thread = None
        self._drop_connection()

    # -- the loop -------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._listen(self.poll_seconds)
            if not self._stop.is_set():
                self._round()

    def _round(self) -> None:
        """Connect if need be, then take the lock (a follower) or check the connection (the leader)."""
        try:
            if self._conn is None:
                self._connect()
            assert self._conn is not None
            if self._leader:
                self._conn.execute("SELECT 1")
                return
            got = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,)).fetchone()
            if got and got[0]:
                self._win()
        except (psycopg.Error, OSError) as exc:
            log.warning("leader election: database connection lost (%s); retrying every %.3g s", exc, self.poll_seconds)
            self._drop_connection()

    def _listen(self, seconds: float) -> None:
        """Hand over the notifications that arrive within ``seconds`` (or just wait, without a connection).

        It waits in slices of at most ``STOP_CHECK_SECONDS``, so that ``stop`` never waits a whole poll for a quiet
        channel (psycopg keeps what arrives between two slices for the next one)."""
        conn = self._conn
        if conn is None or self._channel is None:
            self._stop.wait(seconds)
            return
        deadline = time.monotonic() + seconds
        try:
            while not self._stop.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                for note in conn.notifies(timeout=min(left, STOP_CHECK_SECONDS)):
                    if self._on_message is not None:
                        try:
                            self._on_message(note.payload)
                        except Exception:
                            log.exception("handling a notification failed")
                    if self._stop.is_set():
                        return
        except (psycopg.Error, OSError) as exc:
            log.warning("leader election: lost the connection while listening (%s)", exc)
            self._drop_connection()
            self._stop.wait(seconds)

    def _connect(self) -> None:
        # Keepalives on both ends: the server drops the session (and with it the lock) of a leader
        # that vanished without closing its socket, after idle + 3 x interval seconds of silence; a
        # leader whose check gets no answer gives up sooner (tcp_user_timeout, idle + interval), so
        # it has stepped down by the time another process can take the lock.
        idle = max(1, round(self.poll_seconds * 2))
        interval = max(1, round(self.poll_seconds))
        conn = psycopg.connect(
            self._conninfo,
            autocommit=True,
            application_name=f"{self._name}-leader",
            connect_timeout=max(2, round(self.poll_seconds * 2)),
            keepalives=1,
            keepalives_idle=idle,
            keepalives_interval=interval,
            keepalives_count=3,
            tcp_user_timeout=int((idle + interval) * 1000),
        )
        try:
            for setting, value in (("tcp_keepalives_idle", idle), ("tcp_keepalives_interval", interval),
                                   ("tcp_keepalives_count", 3)):
                conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(setting), sql.Literal(value)))
            if self._channel is not None:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _win(self) -> None:
        if self._on_elected is not None:
            try:
                self._on_elected()
            except Exception:  # the lock is ours: lead anyway rather than leave nobody leading
                log.exception("taking over as leader failed")
        self._leader = True
        self.elected_at = time.monotonic()
        self.terms += 1
        log.info("this process is now the leader (rule evaluation and notifications)")

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        was_leader, self._leader = self._leader, False
        if conn is not None:
            try:
                conn.close()  # the session ends: PostgreSQL releases the lock
            except Exception:
                pass
        if was_leader:
            log.warning("this process is no longer the leader")
            if self._on_deposed is not None:
                try:
                    self._on_deposed()
                except Exception:
                    log.exception("stepping down as leader failed")
