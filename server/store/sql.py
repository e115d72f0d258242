"""SqlStore: the Store on SQLite (default) or PostgreSQL, through SQLAlchemy 2.x.

The ingest hot path uses the driver's ``executemany`` (SQLite) or one
``unnest`` statement (PostgreSQL) rather than ORM objects: MLflow's tracking
server spends most of its ingest time building ORM rows.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from operator import itemgetter
from typing import Any, Callable, Iterable

import orjson
from sqlalchemy import Connection, Engine, bindparam, create_engine, event, func, or_, select, text, update
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.exc import OperationalError

from parallax.ingest.points import Batch
from parallax.server.store import (
    Event,
    IngestResult,
    LatestValue,
    PointsPage,
    PointValue,
    Run,
    RunNotFound,
    Series,
)
from parallax.server.store.alerts import AlertsMixin
from parallax.server.store.audit import AuditMixin
from parallax.server.store.links import LinksMixin
from parallax.server.store.retention import RetentionMixin
from parallax.alerts.states import PAGES
from parallax.server.store.health import StorageFailure, WriteHealth, storage_failure
from parallax.server.store.schema import alerts, events, latest, metric_keys, metric_links, runs
from parallax.server.store.writer import SerialWriter

_first = itemgetter(0)
_CHANGE_MARKS = text(
    "SELECT (SELECT count(*) FROM runs), (SELECT max(id) FROM runs), (SELECT max(last_seen_at) FROM runs), "
    "(SELECT count(*) FROM runs WHERE status = 'running'), (SELECT count(*) FROM runs WHERE status = 'failed'), "
    "(SELECT count(*) FROM alerts), (SELECT max(updated_at) FROM alerts), (SELECT max(acked_at) FROM alerts), "
    "(SELECT count(*) FROM silences), (SELECT count(*) FROM silences WHERE until > :now)"
)
#: The PostgreSQL channel on which processes sharing a database announce their writes (server/leader.py).
ANNOUNCE_CHANNEL = "parallax"
#: PostgreSQL refuses a notification payload of 8000 bytes or more.
_MAX_PAYLOAD = 7900
#: A batch spanning at least this many steps has its rollups refreshed per metric range.
WIDE_BATCH_STEPS = 4096

#: (level, block size in steps). Each level is built from the one below it.
ROLLUP_LEVELS: tuple[tuple[int, int], ...] = ((1, 64), (2, 4096))

_POINT_COLUMNS = "run_id, key_id, step, value, nonfinite, time"

# Run and key ids are inlined (they are integers the store made), so that a
# metric's samples (step, value, nonfinite, time) go to executemany as they are.
_SQLITE_INSERT_NEW = f"INSERT INTO points ({_POINT_COLUMNS}) VALUES ({{run}}, {{key}}, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
_SQLITE_REPLACE_CHANGED = (
    f"INSERT INTO points ({_POINT_COLUMNS}) VALUES ({{run}}, {{key}}, ?, ?, ?, ?) "
    "ON CONFLICT (run_id, key_id, step) DO UPDATE SET "
    "value = excluded.value, nonfinite = excluded.nonfinite, time = excluded.time "
    "WHERE points.value IS NOT excluded.value OR points.nonfinite <> excluded.nonfinite"
)
_PG_UPSERT = (
    f"INSERT INTO points ({_POINT_COLUMNS}) "
    "SELECT %s, k, s, v, f, t FROM unnest(%s::integer[], %s::bigint[], %s::float8[], %s::smallint[], %s::float8[]) "
    "AS u(k, s, v, f, t) "
    "ON CONFLICT (run_id, key_id, step) DO UPDATE SET "
    "value = excluded.value, nonfinite = excluded.nonfinite, time = excluded.time "
    "WHERE points.value IS DISTINCT FROM excluded.value OR points.nonfinite <> excluded.nonfinite "
    "RETURNING (xmax = 0)"
)

# The latest point of a metric is recomputed from the points, so a replaced
# value at the newest step is reflected too.
_LATEST_REFRESH = text(
    f"INSERT INTO latest ({_POINT_COLUMNS}) "
    f"SELECT {_POINT_COLUMNS} FROM points WHERE run_id = :r AND key_id = :k "
    "AND step = (SELECT max(step) FROM points WHERE run_id = :r AND key_id = :k) "
    "ON CONFLICT (run_id, key_id) DO UPDATE SET "
    "step = excluded.step, value = excluded.value, nonfinite = excluded.nonfinite, time = excluded.time"
)

_ROLLUP_UPSERT = (
    "ON CONFLICT (run_id, key_id, level, block) DO UPDATE SET "
    "n = excluded.n, vmin = excluded.vmin, vmax = excluded.vmax, last_step = excluded.last_step"
)
_ROLLUP_FROM_POINTS = text(
    "INSERT INTO rollups (run_id, key_id, level, block, n, vmin, vmax, last_step) "
    "SELECT :r, :k, :level, step / :size, count(*), min(value), max(value), max(step) FROM points "
    "WHERE run_id = :r AND key_id = :k AND step BETWEEN :a AND :z GROUP BY step / :size " + _ROLLUP_UPSERT
)
_ROLLUP_FROM_LEVEL = text(
    "INSERT INTO rollups (run_id, key_id, level, block, n, vmin, vmax, last_step) "
    "SELECT :r, :k, :level, block / :ratio, sum(n), min(vmin), max(vmax), max(last_step) FROM rollups "
    "WHERE run_id = :r AND key_id = :k AND level = :child AND block BETWEEN :a AND :z "
    "GROUP BY block / :ratio " + _ROLLUP_UPSERT
)

_RUN_SEEN = text(
    "UPDATE runs SET last_seen_at = :now, "
    "last_step = CASE WHEN last_step IS NULL OR last_step < :hi THEN :hi ELSE last_step END "
    "WHERE id = :r"
)

_NOTIFY = text("SELECT pg_notify(:c, :p)")

_STEP_BOUNDS = text(
    "SELECT (SELECT min(step) FROM points WHERE run_id = :r AND key_id = :k AND step >= :lo), "
    "(SELECT max(step) FROM points WHERE run_id = :r AND key_id = :k)"
)
_RAW_POINTS = text(
    "SELECT step, value, nonfinite, time FROM points "
    "WHERE run_id = :r AND key_id = :k AND step BETWEEN :lo AND :hi ORDER BY step"
)
_NONFINITE_POINTS = text(
    "SELECT step, nonfinite FROM points WHERE run_id = :r AND key_id = :k AND nonfinite <> 0 "
    "AND step BETWEEN :lo AND :hi ORDER BY step LIMIT :limit"
)
_POINT_BEFORE = text(
    "SELECT step, value, nonfinite, time FROM points WHERE run_id = :r AND key_id = :k AND step < :s "
    "ORDER BY step DESC LIMIT 1"
)
# Keyset pagination over the points table's own key order (key, step), so a
# page costs the same wherever it starts. The metric filter and the run are
# inlined as bound parameters; ``IN`` takes an expanding list.
_POINTS_PAGE = (
    "SELECT key_id, step, value, nonfinite, time FROM points "
    "WHERE run_id = :r AND key_id IN :keys AND step > :since "
    "AND (key_id > :after_key OR (key_id = :after_key AND step > :after_step)) "
    "ORDER BY key_id, step LIMIT :limit"
)
_KEY_PAGE = text(
    "SELECT step, value, nonfinite, time FROM points WHERE run_id = :r AND key_id = :k AND step > :s "
    "ORDER BY step LIMIT :limit"
)
_COUNT_ESTIMATE = text(
    "SELECT coalesce(sum(n), 0) FROM rollups WHERE run_id = :r AND key_id = :k AND level = :level "
    "AND block BETWEEN :a AND :z"
)


def _bucketed(level: int, dialect: str) -> Any:
    """Buckets of width :w from :origin; whole blocks come from rollups, the ragged edges from points.

    Each bucket's last point is then looked up by key. On PostgreSQL that
    lookup is a LATERAL subquery with LIMIT (which keeps the planner from
    flattening it): as a plain join, a table without fresh statistics got a
    nested loop that re-ran the whole GROUP BY for every point (minutes, not ms).
    """
    raw = (
        "SELECT (step - :origin) / :w AS bucket, value AS vmin, value AS vmax, step AS ls "
        "FROM points WHERE run_id = :r AND key_id = :k AND step BETWEEN {a} AND {z}"
    )
    if level == 0:
        source = raw.format(a=":lo", z=":hi")
    else:
        source = " UNION ALL ".join(
            (
                "SELECT (block * :size - :origin) / :w AS bucket, vmin, vmax, last_step AS ls "
                "FROM rollups WHERE run_id = :r AND key_id = :k AND level = :level AND block BETWEEN :fb AND :lb",
                raw.format(a=":lo", z=":e1"),
                raw.format(a=":e2", z=":hi"),
            )
        )
    grouped = f"SELECT bucket, min(vmin) AS vmin, max(vmax) AS vmax, max(ls) AS ls FROM ({source}) src GROUP BY bucket"
    if dialect == "postgresql":
        last = (
            "JOIN LATERAL (SELECT value, nonfinite, time FROM points "
            "WHERE run_id = :r AND key_id = :k AND step = g.ls LIMIT 1) p ON true"
        )
    else:
        last = "JOIN points p ON p.run_id = :r AND p.key_id = :k AND p.step = g.ls"
    return text(f"SELECT g.ls, p.value, p.nonfinite, p.time, g.vmin, g.vmax FROM ({grouped}) g {last} ORDER BY g.ls")


_BUCKETED = {
    (level, dialect): _bucketed(level, dialect)
    for level in [0] + [lv for lv, _ in ROLLUP_LEVELS]
    for dialect in ("sqlite", "postgresql")
}


#: The write probe: rewrites the schema's version row with itself. Every backend writes the row again (a new
#: page in SQLite's WAL, a new tuple and WAL record in PostgreSQL), so a disk with no room refuses it; what it
#: stores is unchanged.
_PROBE = text("UPDATE alembic_version SET version_num = version_num")


#: How long an SQLite connection waits for another one's lock (its busy timeout), in milliseconds.
SQLITE_BUSY_MS = 30_000


def _sqlite_wal(cur: Any) -> None:
    """The file in WAL mode: switched once, when it is new (the mode persists in it). The switch needs the file to
    itself and is refused at once, without the busy timeout, while another connection opened beside this one
    switches it: read the mode again and retry, up to the busy timeout."""
    deadline = time.monotonic() + SQLITE_BUSY_MS / 1000
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_MS / 1000})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            # Let SQLAlchemy's "begin" event below start transactions, so
            # that executemany runs inside one (pysqlite's own handling is
            # legacy; see SQLAlchemy's pysqlite notes).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            _sqlite_wal(cur)  # the busy timeout is connect_args' "timeout", set as the file is opened
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Connection) -> None:
            # BEGIN (deferred), or what the connection asks for: BEGIN IMMEDIATE takes the write lock at once,
            # waiting out the busy timeout (server.migrate.ensure_schema)
            conn.exec_driver_sql(conn.get_execution_options().get("sqlite_begin", "BEGIN"))

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def _run_entity(row: Any) -> Run:
    return Run(
        id=row.id,
        project=row.project,
        name=row.name,
        config=row.config,
        tags=list(row.tags),
        notes=row.notes,
        status=row.status,
        created_at=row.created_at,
        last_seen_at=row.last_seen_at,
        last_step=row.last_step,
        heartbeat_at=row.heartbeat_at,
    )


class SqlStore(AlertsMixin, AuditMixin, RetentionMixin, LinksMixin):
    def __init__(self, url: str):
        self.url = url
        self.engine = make_engine(url)
        self.dialect = self.engine.dialect.name
        self._key_ids: dict[str, int] = {}
        self._known_runs: set[int] = set()
        self._writer = SerialWriter(self.engine) if self.dialect == "sqlite" else None
        self._insert = sqlite_dialect.insert if self.dialect == "sqlite" else pg_dialect.insert
        self._key_lock = threading.Lock()
        self._links_init()
        #: Names this process in what it announces, so that it can tell its own announcements apart.
        self.origin = uuid.uuid4().hex[:12]
        #: PostgreSQL, set while another process leads: every points write announces (run, steps,
        #: metric key ids) on ANNOUNCE_CHANNEL in its own transaction, so the leader hears of it
        #: exactly when it commits, and never of a write that rolled back.
        self.announce_writes = False
        self.write_health = WriteHealth()

    # -- plumbing ---------------------------------------------------------

    def _write(self, job: Callable[[Connection], Any]) -> Any:
        """Run ``job`` in one write transaction: on SQLite through the single writer. Its outcome is what
        ``can_write`` reports: a failure of the store itself (a full disk, a read-only or unreachable database)
        until a later write succeeds."""
        try:
            result = self._write_once(job)
        except Exception as exc:
            failure = storage_failure(exc)
            if failure is not None:
                self.write_health.record(failure)
            raise
        self.write_health.record(None)
        return result

    def can_write(self, probe_after_s: float = 10.0) -> StorageFailure | None:
        """None when the store can write, else why not: the outcome of the latest write, or, when none came in
        the last ``probe_after_s`` seconds, of a tiny one made now (a full disk refuses it as it would points)."""
        if self.write_health.stale(probe_after_s):
            try:
                self._write(lambda conn: conn.execute(_PROBE))
            except Exception:  # recorded by _write when it is the store's failure
                pass
        return self.write_health.failure

    def _write_once(self, job: Callable[[Connection], Any]) -> Any:
        if self._writer is not None:
            return self._writer.run(job)
        for attempt in range(5):
            try:
                with self.engine.begin() as conn:
                    return job(conn)
            except OperationalError as exc:
                # Deadlock or serialization failure between concurrent writers: retry.
                code = getattr(exc.orig, "sqlstate", None)
                if code not in ("40P01", "40001") or attempt == 4:
                    raise
                time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")

    def _read(self) -> Connection:
        return self.engine.connect()

    def _snapshot_read(self) -> Connection:
        """A read connection whose statements all see one snapshot, for reads made of several statements (a
        series: bounds, size estimate, points). SQLite's read transaction already is one (the begin hook);
        PostgreSQL's READ COMMITTED gives each statement its own, so this asks for REPEATABLE READ."""
        conn = self.engine.connect()
        if self.dialect == "postgresql":
            conn.execution_options(isolation_level="REPEATABLE READ")
        return conn

    def ping(self) -> bool:
        try:
            with self._read() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except Exception:
            return False

    def announce(self, message: dict[str, Any]) -> None:
        """Tell the processes listening on ANNOUNCE_CHANNEL (PostgreSQL only; nothing on SQLite)."""
        if self.dialect != "postgresql":
            return
        with self.engine.begin() as conn:
            conn.execute(_NOTIFY, {"c": ANNOUNCE_CHANNEL, "p": self._payload(message)})

    def _payload(self, message: dict[str, Any]) -> str:
        payload = orjson.dumps({"o": self.origin, **message}).decode()
        if len(payload) > _MAX_PAYLOAD and "k" in message:  # too many metrics to list: "any metric"
            payload = orjson.dumps({"o": self.origin, **message, "k": None}).decode()
        return payload

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self.engine.dispose()

    # -- runs -------------------------------------------------------------

    def create_run(self, project: str, name: str, config: dict, tags: list[str]) -> tuple[Run, bool]:
        def job(conn: Connection) -> tuple[Run, bool]:
            found = conn.execute(select(runs).where(runs.c.project == project, runs.c.name == name)).first()
            if found is not None:
                return _run_entity(found), False
            stmt = (
                self._insert(runs)
                .values(
                    project=project,
                    name=name,
                    config=config,
                    tags=list(dict.fromkeys(tags)),
                    notes="",
                    status="running",
                    created_at=time.time(),
                )
                .on_conflict_do_nothing(index_elements=["project", "name"])
                .returning(*runs.c)
            )
            row = conn.execute(stmt).first()
            if row is None:  # a concurrent request (another process) created it first
                row = conn.execute(select(runs).where(runs.c.project == project, runs.c.name == name)).one()
                return _run_entity(row), False
            return _run_entity(row), True

        run, created = self._write(job)
        self._known_runs.add(run.id)
        return run, created

    def get_run(self, run_id: int) -> Run:
        with self._read() as conn:
            row = conn.execute(select(runs).where(runs.c.id == run_id)).first()
        if row is None:
            raise RunNotFound(run_id)
        return _run_entity(row)

    def get_runs(self, run_ids: Iterable[int]) -> dict[int, Run]:
        """The runs of these ids that exist, by id."""
        ids = sorted(set(run_ids))
        out: dict[int, Run] = {}
        with self._read() as conn:
            for i in range(0, len(ids), 1000):
                for row in conn.execute(select(runs).where(runs.c.id.in_(ids[i:i + 1000]))):
                    out[row.id] = _run_entity(row)
        return out

    def find_run(self, project: str, name: str) -> Run | None:
        with self._read() as conn:
            row = conn.execute(select(runs).where(runs.c.project == project, runs.c.name == name)).first()
        return None if row is None else _run_entity(row)

    def list_runs(self, project: str | None = None, tag: str | None = None, status: str | None = None) -> list[Run]:
        stmt = select(runs).where(*self._run_filters(project=project, tag=tag, status=status)).order_by(runs.c.id)
        with self._read() as conn:
            return [_run_entity(r) for r in conn.execute(stmt)]

    def change_marks(self, now: float | None = None) -> list:
        """Cheap aggregates that move whenever something the dashboard's lists show does: a run added, reporting,
        finishing or failing; an alert opened, moved, closed or acknowledged; a silence added, ended early or
        run out. The list pages' live refresh compares them with what it drew before redrawing anything."""
        now = time.time() if now is None else now
        with self._read() as conn:
            row = conn.execute(_CHANGE_MARKS, {"now": now}).one()
        return [None if v is None else (float(v) if isinstance(v, float) else int(v)) for v in row]

    def _run_filters(
        self, *, project: str | None = None, tag: str | None = None, status: str | None = None,
        search: str | None = None, verdict: str | None = None,
    ) -> list[Any]:
        """WHERE clauses of the runs list's filters, in SQL on both backends (see ``query_runs``)."""
        where: list[Any] = []
        if project is not None:
            where.append(runs.c.project == project)
        if status is not None:
            where.append(runs.c.status == status)
        if tag is not None:
            if self.dialect == "postgresql":
                where.append(text("EXISTS (SELECT 1 FROM json_array_elements_text(runs.tags) AS t(v) WHERE t.v = :tag)")
                             .bindparams(tag=tag))
            else:
                where.append(text("EXISTS (SELECT 1 FROM json_each(runs.tags) AS t WHERE t.value = :tag)")
                             .bindparams(tag=tag))
        if search:
            pattern = "%" + search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            where.append(or_(func.lower(runs.c.name).like(pattern, escape="\\"),
                             func.lower(runs.c.project).like(pattern, escape="\\")))
        if verdict in ("healthy", "faulty"):
            # alerts.verdict's rule: a run is faulty when an alert of a paging severity ever fired on it
            paged = (select(alerts.c.id).where(alerts.c.run_id == runs.c.id, alerts.c.fired_step.is_not(None),
                                               alerts.c.severity.in_(PAGES)).exists())
            where.append(paged if verdict == "faulty" else ~paged)
        return where

    def query_runs(
        self, *, project: str | None = None, tag: str | None = None, status: str | None = None,
        search: str | None = None, verdict: str | None = None, limit: int | None = 50, offset: int = 0,
    ) -> tuple[list[Run], int]:
        """A page of runs, newest first, filtered in SQL, and how many runs match in all. ``search`` finds a
        case-insensitive substring of the name or the project; ``verdict`` is ``healthy`` or ``faulty`` (an alert
        of a paging severity ever fired); ``tag`` is one of the run's tags."""
        where = self._run_filters(project=project, tag=tag, status=status, search=search, verdict=verdict)
        stmt = select(runs).where(*where).order_by(runs.c.id.desc()).offset(max(0, offset))
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._read() as conn:
            found = [_run_entity(r) for r in conn.execute(stmt)]
            if limit is None or (offset == 0 and len(found) < limit):
                total = len(found) + max(0, offset)
            else:
                total = conn.execute(select(func.count()).select_from(runs).where(*where)).scalar_one()
        return found, int(total)

    def run_facets(self, limit: int = 1000) -> dict[str, list[str]]:
        """The projects and tags the runs carry (for the runs list's filters), sorted, at most ``limit`` each."""
        tags_sql = ("SELECT DISTINCT t.v FROM runs, json_array_elements_text(runs.tags) AS t(v) ORDER BY 1 LIMIT :n"
                    if self.dialect == "postgresql" else
                    "SELECT DISTINCT t.value FROM runs, json_each(runs.tags) AS t ORDER BY 1 LIMIT :n")
        with self._read() as conn:
            projects = [r[0] for r in conn.execute(select(runs.c.project).distinct().order_by(runs.c.project).limit(limit))]
            tags = [r[0] for r in conn.execute(text(tags_sql), {"n": limit})]
        return {"projects": projects, "tags": tags}

    def has_runs(self) -> bool:
        with self._read() as conn:
            return conn.execute(select(runs.c.id).limit(1)).first() is not None

    def update_run(
        self, run_id: int, *, status: str | None = None, tags: list[str] | None = None, notes: str | None = None
    ) -> Run:
        values: dict[str, Any] = {}
        if status is not None:
            values["status"] = status
        if tags is not None:
            values["tags"] = list(dict.fromkeys(tags))
        if notes is not None:
            values["notes"] = notes

        def job(conn: Connection) -> Any:
            if values:
                conn.execute(update(runs).where(runs.c.id == run_id).values(**values))
            return conn.execute(select(runs).where(runs.c.id == run_id)).first()

        row = self._write(job)
        if row is None:
            raise RunNotFound(run_id)
        return _run_entity(row)

    def _require_run(self, run_id: int) -> None:
        if run_id in self._known_runs:
            return
        with self._read() as conn:
            if conn.execute(select(runs.c.id).where(runs.c.id == run_id)).first() is None:
                raise RunNotFound(run_id)
        self._known_runs.add(run_id)

    # -- metric keys ------------------------------------------------------

    def _key_ids_for(self, names: Iterable[str]) -> dict[str, int]:
        """Ids of these metric names, creating the missing ones in their own transaction."""
        ids = self._key_ids
        missing = [n for n in names if n not in ids]
        if missing:
            with self._key_lock:

                def job(conn: Connection) -> dict[str, int]:
                    conn.execute(
                        self._insert(metric_keys).on_conflict_do_nothing(index_elements=["name"]),
                        [{"name": n} for n in missing],
                    )
                    rows = conn.execute(
                        select(metric_keys.c.name, metric_keys.c.id).where(metric_keys.c.name.in_(missing))
                    )
                    return {name: kid for name, kid in rows}

                ids.update(self._write(job))
        return ids

    def metric_names(self, key_ids: Iterable[int]) -> dict[int, str]:
        """The names of these metric key ids (those that exist)."""
        known = {kid: name for name, kid in self._key_ids.items()}
        missing = [k for k in key_ids if k not in known]
        if missing:
            with self._read() as conn:
                rows = conn.execute(select(metric_keys.c.name, metric_keys.c.id).where(metric_keys.c.id.in_(missing)))
                found = {name: kid for name, kid in rows}
            self._key_ids.update(found)
            known.update({kid: name for name, kid in found.items()})
        return {k: known[k] for k in key_ids if k in known}

    def _existing_key_ids(self, names: Iterable[str]) -> dict[str, int]:
        ids = self._key_ids
        missing = [n for n in names if n not in ids]
        if missing:
            with self._read() as conn:
                rows = conn.execute(select(metric_keys.c.name, metric_keys.c.id).where(metric_keys.c.name.in_(missing)))
                ids.update({name: kid for name, kid in rows})
        return {n: ids[n] for n in names if n in ids}

    # -- points -----------------------------------------------------------

    def write_points(self, run_id: int, batch: Batch, *, now: float | None = None) -> IngestResult:
        """Store a validated batch atomically: points, latest values, rollups and the run's last step.

        A canonical name the batch links to another of its keys (``batch.links``) is kept as a link to that
        key's points, not as a copy of them (server/store/links.py)."""
        self._require_run(run_id)
        if batch.steps is None:
            return IngestResult(0, 0, 0)
        ids = self._key_ids_for(batch.groups)
        links = batch.links or {}
        steps = batch.steps
        now = time.time() if now is None else now
        upsert = self._upsert_points_sqlite if self.dialect == "sqlite" else self._upsert_points_pg

        def job(conn: Connection) -> int:
            # The run's row first: on PostgreSQL its lock serializes the batches of one run, so
            # each one's latest/rollup refresh reads what the one before it committed.
            conn.execute(_RUN_SEEN, {"now": now, "hi": steps[1], "r": run_id})
            linked = self._plan_links(conn, run_id, links, ids) if links else ()
            by_key = sorted((ids[name], samples) for name, samples in batch.groups.items() if samples and name not in linked)
            count = sum(len(samples) for _, samples in by_key)
            replaced = upsert(conn, run_id, by_key, count)
            # Each metric's own step range when the batch spans many steps: a late evaluation at an
            # old step must not make every other metric rescan its points back to that step. A
            # narrow batch (the usual case) refreshes its whole range for every metric, which is
            # cheaper than finding each metric's range.
            if steps[1] - steps[0] < WIDE_BATCH_STEPS:
                spans = [(k, steps[0], steps[1]) for k, _ in by_key]
            else:
                spans = [(k, min(map(_first, samples)), max(map(_first, samples))) for k, samples in by_key]
            self._refresh_derived(conn, run_id, spans)
            if self.announce_writes:
                keys = [k for k, _ in by_key] + [ids[name] for name in linked]
                message = {"t": "points", "r": run_id, "lo": steps[0], "hi": steps[1], "k": keys}
                conn.execute(_NOTIFY, {"c": ANNOUNCE_CHANNEL, "p": self._payload(message)})
            return replaced

        try:
            replaced = self._write(job)
        except BaseException:
            if links:
                self._forget_links(run_id)
            raise
        return IngestResult(accepted=batch.count, replaced=replaced, non_finite=batch.non_finite)

    @staticmethod
    def _upsert_points_sqlite(conn: Connection, run_id: int, by_key: list[tuple[int, list]], count: int) -> int:
        inserted = 0
        for key_id, samples in by_key:
            inserted += conn.exec_driver_sql(_SQLITE_INSERT_NEW.format(run=run_id, key=key_id), samples).rowcount
        if inserted == count:
            return 0
        # Some keys existed: overwrite those whose value differs, and count them.
        return sum(
            conn.exec_driver_sql(_SQLITE_REPLACE_CHANGED.format(run=run_id, key=key_id), samples).rowcount
            for key_id, samples in by_key
        )

    @staticmethod
    def _upsert_points_pg(conn: Connection, run_id: int, by_key: list[tuple[int, list]], count: int) -> int:
        # One statement may not touch a row twice (the last value of a step
        # wins), and the (key, step) order keeps concurrent batches from deadlocking.
        keys: list[int] = []
        steps: list[int] = []
        values: list[float | None] = []
        flags: list[int] = []
        times: list[float] = []
        for key_id, samples in by_key:
            unique = {sample[0]: sample for sample in samples}
            for step in sorted(unique):
                _, v, f, t = unique[step]
                keys.append(key_id)
                steps.append(step)
                values.append(v)
                flags.append(f)
                times.append(t)
        result = conn.exec_driver_sql(_PG_UPSERT, (run_id, keys, steps, values, flags, times))
        return sum(1 for (was_insert,) in result if not was_insert)

    def _refresh_derived(self, conn: Connection, run_id: int, spans: list[tuple[int, int, int]]) -> None:
        """Bring ``latest`` and the rollup blocks covering each (key, lowest step, highest step) up to date."""
        conn.execute(_LATEST_REFRESH, [{"r": run_id, "k": k} for k, _, _ in spans])
        child_size = 1
        child_level = 0
        for level, size in ROLLUP_LEVELS:
            ratio = size // child_size
            if child_level == 0:
                params = [
                    {"r": run_id, "k": k, "level": level, "size": size,
                     "a": (lo // size) * ratio, "z": (hi // size) * ratio + ratio - 1}
                    for k, lo, hi in spans
                ]
                conn.execute(_ROLLUP_FROM_POINTS, params)
            else:
                params = [
                    {"r": run_id, "k": k, "level": level, "ratio": ratio, "child": child_level,
                     "a": (lo // size) * ratio, "z": (hi // size) * ratio + ratio - 1}
                    for k, lo, hi in spans
                ]
                conn.execute(_ROLLUP_FROM_LEVEL, params)
            child_size, child_level = size, level

    # -- events -----------------------------------------------------------

    def add_events(self, run_id: int, items: list[tuple[int, str, str, float]]) -> int:
        """Store the events a run does not hold yet; returns how many were new.

        An event is the same as another of the run with its step, kind and message (its time aside): a
        client's retried request, or a resume announced twice, is stored once."""
        self._require_run(run_id)
        if not items:
            return 0

        def job(conn: Connection) -> int:
            if self.dialect == "postgresql":  # concurrent requests of one run: one after the other
                conn.execute(select(runs.c.id).where(runs.c.id == run_id).with_for_update())
            steps = sorted({s for s, _, _, _ in items})
            seen: set[tuple[int, str, str]] = set()
            for start in range(0, len(steps), 500):
                rows = conn.execute(
                    select(events.c.step, events.c.kind, events.c.message)
                    .where(events.c.run_id == run_id, events.c.step.in_(steps[start:start + 500]))
                )
                seen.update((r.step, r.kind, r.message) for r in rows)
            new = []
            for s, k, m, t in items:
                if (s, k, m) not in seen:
                    seen.add((s, k, m))
                    new.append({"run_id": run_id, "step": s, "kind": k, "message": m, "time": t})
            if new:
                conn.execute(events.insert(), new)
            return len(new)

        return self._write(job)

    def list_events(self, run_id: int) -> list[Event]:
        self._require_run(run_id)
        with self._read() as conn:
            rows = conn.execute(select(events).where(events.c.run_id == run_id).order_by(events.c.step, events.c.id))
            return [Event(r.id, r.run_id, r.step, r.kind, r.message, r.time) for r in rows]

    # -- reads ------------------------------------------------------------

    def latest(self, run_id: int) -> list[LatestValue]:
        self._require_run(run_id)
        stmt = (
            select(metric_keys.c.name, latest.c.step, latest.c.value, latest.c.nonfinite, latest.c.time)
            .join(metric_keys, metric_keys.c.id == latest.c.key_id)
            .where(latest.c.run_id == run_id)
            .order_by(metric_keys.c.name)
        )
        with self._read() as conn:
            found = [LatestValue(*r) for r in conn.execute(stmt)]
            if self.run_links(run_id):
                found += [LatestValue(name, *row) for name, row in self._linked_latest(conn, run_id)]
                found.sort(key=lambda lv: lv.metric)
            return found

    def latest_all(self, metrics: frozenset[str], *, ended_since: float | None = None) -> list[tuple[Run, LatestValue]]:
        """The latest value of these metrics for every run (for /metrics).

        With ``ended_since``, a run that is no longer running is left out once
        its last point is older than that (so the export's cardinality stays bounded).
        """
        stmt = (
            select(runs, metric_keys.c.name.label("metric"), latest.c.step.label("l_step"), latest.c.value,
                   latest.c.nonfinite, latest.c.time)
            .join(latest, latest.c.run_id == runs.c.id)
            .join(metric_keys, metric_keys.c.id == latest.c.key_id)
            .where(metric_keys.c.name.in_(sorted(metrics)))
            .order_by(runs.c.id, metric_keys.c.name)
        )
        canonical = metric_keys.alias("canonical")
        linked = (
            select(runs, canonical.c.name.label("metric"), latest.c.step.label("l_step"), latest.c.value,
                   latest.c.nonfinite, latest.c.time)
            .join(metric_links, metric_links.c.run_id == runs.c.id)
            .join(canonical, canonical.c.id == metric_links.c.key_id)
            .join(latest, (latest.c.run_id == runs.c.id) & (latest.c.key_id == metric_links.c.source_key_id))
            .where(canonical.c.name.in_(sorted(metrics)))
        )
        if ended_since is not None:
            alive = (runs.c.status == "running") | (runs.c.last_seen_at >= ended_since)
            stmt, linked = stmt.where(alive), linked.where(alive)
        with self._read() as conn:
            found = [
                (_run_entity(r), LatestValue(r.metric, r.l_step, r.value, r.nonfinite, r.time))
                for part in (stmt, linked) for r in conn.execute(part)
            ]
        found.sort(key=lambda item: (item[0].id, item[1].metric))
        return found

    def values_before(self, run_id: int, metrics: list[str], step: int) -> dict[str, LatestValue]:
        """Each metric's point at the highest step below ``step`` (cumulative counters become per-step deltas with it)."""
        self._require_run(run_id)
        ids = self._run_key_ids(run_id, metrics)
        out: dict[str, LatestValue] = {}
        with self._read() as conn:
            for name, kid in ids.items():
                row = conn.execute(_POINT_BEFORE, {"r": run_id, "k": kid, "s": step}).first()
                if row is not None:
                    out[name] = LatestValue(name, *row)
        return out

    def series(
        self, run_id: int, metrics: list[str], *, max_points: int, since_step: int | None = None
    ) -> list[Series]:
        """Each metric's points after ``since_step``, at most ``max_points`` of them.

        Past ``max_points`` the points are grouped into buckets of equal step
        width; a bucket reports its last point with its min and max, so a
        one-step spike survives. The first point is always kept as itself.
        """
        if max_points < 3:
            raise ValueError("max_points must be at least 3")
        self._require_run(run_id)
        ids = self._run_key_ids(run_id, metrics)
        lo = 0 if since_step is None else since_step + 1
        out = []
        with self._snapshot_read() as conn:
            for name in metrics:
                s = Series(metric=name)
                out.append(s)
                kid = ids.get(name)
                if kid is None:
                    continue
                first, last = conn.execute(_STEP_BOUNDS, {"r": run_id, "k": kid, "lo": lo}).one()
                if first is None or last < first:
                    continue
                params = {"r": run_id, "k": kid, "lo": first, "hi": last}
                if last - first + 1 <= max_points or self._count_at_most(conn, params, max_points):
                    self._fill_raw(conn, s, params)
                else:
                    self._fill_bucketed(conn, s, params, max_points)
        return out

    def points(
        self,
        run_id: int,
        metrics: list[str] | None = None,
        *,
        after: tuple[int, int] | None = None,
        since_step: int | None = None,
        limit: int = 10_000,
    ) -> PointsPage:
        """Raw points at full resolution, ordered by (metric, step), one page at a time.

        ``metrics`` None means every metric the run has. ``after`` is the
        previous page's ``next`` cursor; the page's own ``next`` is None once
        nothing is left.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._require_run(run_id)
        links = self.run_links(run_id)
        if metrics is None:
            stmt = select(metric_keys.c.name, metric_keys.c.id).join(latest, latest.c.key_id == metric_keys.c.id).where(
                latest.c.run_id == run_id
            )
            with self._read() as conn:
                ids = {name: kid for name, kid in conn.execute(stmt)}
            self._key_ids.update(ids)
            ids.update(self._existing_key_ids(list(links)))
        else:
            ids = self._existing_key_ids(metrics)
        if not ids:
            return PointsPage(points=[], next=None)
        # A linked name pages in its own key's place, with its source's points.
        reads = {name: links.get(name, kid) for name, kid in ids.items()}
        after_key, after_step = after if after is not None else (-1, -1)
        since = -1 if since_step is None else since_step
        if all(reads[n] == ids[n] for n in ids):
            names = {kid: name for name, kid in ids.items()}
            query = text(_POINTS_PAGE).bindparams(bindparam("keys", expanding=True))
            params = {
                "r": run_id, "keys": sorted(names), "since": since,
                "after_key": after_key, "after_step": after_step, "limit": limit + 1,
            }
            with self._read() as conn:
                rows = [(names[k], k, step, v, f, t) for k, step, v, f, t in conn.execute(query, params).all()]
        else:
            rows = []
            with self._read() as conn:
                for name, kid in sorted(ids.items(), key=lambda item: item[1]):
                    if kid < after_key:
                        continue
                    lo = max(since, after_step if kid == after_key else -1)
                    found = conn.execute(_KEY_PAGE, {"r": run_id, "k": reads[name], "s": lo, "limit": limit + 1 - len(rows)}).all()
                    rows += [(name, kid, step, v, f, t) for step, v, f, t in found]
                    if len(rows) > limit:
                        break
        more = len(rows) > limit
        rows = rows[:limit]
        found_points = [PointValue(name, step, value, nonfinite, t) for name, _, step, value, nonfinite, t in rows]
        return PointsPage(points=found_points, next=(rows[-1][1], rows[-1][2]) if more else None)

    @staticmethod
    def _count_at_most(conn: Connection, params: dict, limit: int) -> bool:
        """Whether the points in [lo, hi] are surely no more than ``limit`` (from the coarsest rollup)."""
        level, size = ROLLUP_LEVELS[-1]
        est = conn.execute(
            _COUNT_ESTIMATE,
            {**params, "level": level, "a": params["lo"] // size, "z": params["hi"] // size},
        ).scalar_one()
        return est <= limit

    @staticmethod
    def _fill_raw(conn: Connection, s: Series, params: dict) -> None:
        rows = conn.execute(_RAW_POINTS, params).all()
        if not rows:
            return
        steps, values, nonfinite, times = (list(c) for c in zip(*rows))
        s.steps, s.values, s.times = steps, values, times
        s.vmin = s.vmax = values
        if any(nonfinite):
            s.non_finite = [(st, f) for st, f in zip(steps, nonfinite) if f]

    def _fill_bucketed(self, conn: Connection, s: Series, params: dict, max_points: int) -> None:
        lo, hi = params["lo"], params["hi"]
        span = hi - lo + 1
        buckets = max_points - 1  # one slot stays free for the first point
        width = -(-span // buckets)
        level, size = 0, 1
        for lv, sz in ROLLUP_LEVELS:
            if sz <= width:
                level, size = lv, sz
        width = -(-width // size) * size
        origin = lo - lo % size
        while (hi - origin) // width + 1 > buckets:
            width += size
        q = {**params, "origin": origin, "w": width}
        if level:
            fb = -(-lo // size)  # first block entirely inside [lo, hi]
            lb = (hi + 1) // size - 1  # last such block
            if fb > lb:
                level, size = 0, 1
            else:
                q.update(size=size, level=level, fb=fb, lb=lb, e1=fb * size - 1, e2=(lb + 1) * size)
        rows = conn.execute(_BUCKETED[level, self.dialect], q).all()
        first = conn.execute(_RAW_POINTS, {**params, "hi": lo}).first()
        if first is not None and (not rows or rows[0][0] != first[0]):
            rows.insert(0, (first[0], first[1], first[2], first[3], first[1], first[1]))
        steps, values, nonfinite, times, vmin, vmax = (list(c) for c in zip(*rows))
        s.steps, s.values, s.times, s.vmin, s.vmax = steps, values, times, vmin, vmax
        s.downsampled = True
        s.non_finite = [
            tuple(r) for r in conn.execute(_NONFINITE_POINTS, {**params, "limit": max_points}).all()
        ]
