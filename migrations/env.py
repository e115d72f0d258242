"""Alembic environment: server.migrate hands over a connection; with the plain `alembic` command
(e.g. to autogenerate the next revision) an ini file's sqlalchemy.url is used instead."""

from alembic import context
from sqlalchemy import create_engine

from parallax.server.store.schema import metadata

config = context.config


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


connection = config.attributes.get("connection")
if connection is not None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()
