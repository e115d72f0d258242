"""Alembic migrations. Run them with ``parallax db upgrade``."""
