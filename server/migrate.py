"""Schema versions: create a new database at head, refuse an old one, upgrade on request."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from parallax import migrations

SCRIPT_LOCATION = str(Path(migrations.__file__).parent)


class SchemaOutOfDate(RuntimeError):
    """The database was made by an older Parallax; the message says how to fix it."""


def alembic_config() -> Config:
    """Alembic's config for our scripts; the connection is handed over in ``cfg.attributes``."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    return cfg


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return _revision_on(conn)


def _revision_on(conn: Connection) -> str | None:
    return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        _upgrade_on(conn, revision)


def _upgrade_on(conn: Connection, revision: str = "head") -> None:
    """Alembic's upgrade inside the transaction ``conn`` is in (env.py runs on the connection handed over)."""
    cfg = alembic_config()
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, revision)


#: Held while a PostgreSQL database is checked and created, so that several
#: Parallax processes starting together on an empty database create it once.
SCHEMA_LOCK_KEY = 0x7061726C  # "parl"


def ensure_schema(engine: Engine, url_for_humans: str) -> None:
    """An empty database is created at head; an older schema is refused with the fix.

    Several processes (or threads) may open one empty database at once: one creates it, the others wait and find it
    at head (a single server too: its store's SQLite writer thread connects, switching a new file to WAL mode, while
    the schema is checked). PostgreSQL serialises them with an advisory lock; SQLite with a write transaction begun
    at once (BEGIN IMMEDIATE, which waits out the busy timeout for the other writer): a deferred transaction reads
    first, and its upgrade to a writer after another connection wrote is refused at once ("database is locked"),
    busy timeout or not. The check and the creation run in that one transaction."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as lock_conn:
            lock_conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": SCHEMA_LOCK_KEY})
            try:
                with engine.begin() as conn:
                    _ensure_schema(conn, url_for_humans)
            finally:
                lock_conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": SCHEMA_LOCK_KEY})
                lock_conn.commit()
        return
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.execution_options(sqlite_begin="BEGIN IMMEDIATE")  # read by the store's "begin" listener
        with conn.begin():
            _ensure_schema(conn, url_for_humans)


def _ensure_schema(conn: Connection, url_for_humans: str) -> None:
    current = _revision_on(conn)
    head = head_revision()
    if current == head:
        return
    if current is None:
        tables = set(inspect(conn).get_table_names())
        if tables & {"runs", "points"}:
            raise SchemaOutOfDate(
                f"database {url_for_humans} has Parallax tables but no schema version; "
                "back it up and start with a new database file"
            )
        _upgrade_on(conn)
        return
    script = ScriptDirectory.from_config(alembic_config())
    known = {rev.revision for rev in script.walk_revisions()}
    if current not in known:
        raise SchemaOutOfDate(
            f"database {url_for_humans} is at schema {current}, newer than this Parallax ({head}): upgrade Parallax"
        )
    raise SchemaOutOfDate(
        f"database {url_for_humans} is at schema {current}, this Parallax needs {head}: run `parallax db upgrade`"
    )
