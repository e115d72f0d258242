"""One settings class: defaults, then parallax.toml, then PARALLAX_* environment variables, then CLI flags."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PARALLAX_", toml_file="parallax.toml", extra="forbid")

    database_url: str = Field(
        "sqlite:///parallax.db",
        description="SQLAlchemy URL of the store. The default is a SQLite file in the working folder; "
        "postgresql+psycopg://user@host/db switches to PostgreSQL.",
    )
    host: str = Field("127.0.0.1", description="Address to listen on. Any non-loopback address needs a token or --insecure.")
    port: int = Field(8050, ge=1, le=65535, description="Port to listen on.")
    token: SecretStr | None = Field(
        None, description="When set, every write (POST/PUT/PATCH/DELETE) needs `Authorization: Bearer <token>`."
    )
    read_token: SecretStr | None = Field(
        None,
        description="When set, reads, /metrics and the dashboard need this token (or the write token), "
        "as a Bearer header or the password of HTTP basic auth.",
    )
    insecure: bool = Field(False, description="Allow listening on a non-loopback address without a write token.")
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 beyond).")
    max_points_limit: int = Field(
        100_000, ge=10, description="Largest `max_points` a series request may ask for, per metric."
    )
    default_max_points: int = Field(2000, ge=3, description="`max_points` of a series request that gives none.")
    log_level: str = Field("info", description="Log level of the server (debug, info, warning, error).")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    def secret(self, name: str) -> str | None:
        value = getattr(self, name)
        return value.get_secret_value() if value is not None else None
