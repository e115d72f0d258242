"""Schema versions: create a new database at head, refuse an old one, upgrade on request."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

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
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


#: Held while a PostgreSQL database is checked and created, so that several
#: Parallax processes starting together on an empty database create it once.
SCHEMA_LOCK_KEY = 0x7061726C  # "parl"


def ensure_schema(engine: Engine, url_for_humans: str) -> None:
    """An empty database is created at head; an older schema is refused with the fix."""
    if engine.dialect.name != "postgresql":
        _ensure_schema(engine, url_for_humans)
        return
    with engine.connect() as lock_conn:
        lock_conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": SCHEMA_LOCK_KEY})
        try:
            _ensure_schema(engine, url_for_humans)
        finally:
            lock_conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": SCHEMA_LOCK_KEY})
            lock_conn.commit()


def _ensure_schema(engine: Engine, url_for_humans: str) -> None:
    current = current_revision(engine)
    head = head_revision()
    if current == head:
        return
    if current is None:
        tables = set(inspect(engine).get_table_names())
        if tables & {"runs", "points"}:
            raise SchemaOutOfDate(
                f"database {url_for_humans} has Parallax tables but no schema version; "
                "back it up and start with a new database file"
            )
        upgrade(engine)
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
