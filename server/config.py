"""One settings class: defaults, then parallax.toml, then PARALLAX_* environment variables, then CLI flags."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from parallax.alerts.notify import NotifyConfig


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
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names the server answers to besides localhost, IP addresses, the address it listens on "
        "and external_url's host: a request with another Host header is refused (400), a guard against DNS "
        "rebinding. `*` allows any (env: a JSON list).",
    )
    insecure: bool = Field(False, description="Allow listening on a non-loopback address without a write token.")
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 beyond).")
    parse_memory_budget_bytes: int = Field(
        512 * 1024 * 1024,
        ge=1024 * 1024,
        description="Memory the request bodies being parsed at once may take, all requests together; a body is "
        "counted at 20 times its size (JSON points take about 15 times their text while parsed; a gzip or snappy "
        "body as if it inflated to max_body_bytes). A body that finds no room waits its turn.",
    )
    body_read_timeout_seconds: float = Field(
        30.0, gt=0, description="How long a request's body may take to arrive once its headers have (408 beyond)."
    )
    keep_alive_seconds: int = Field(
        330,
        ge=1,
        description="How long an idle client connection stays open. Longer than the 5 minutes Prometheus keeps an "
        "idle remote-write connection, so that the client always closes first: a server that closes first races "
        "the client's next request on that connection, which then fails and is sent again.",
    )
    parse_wait_seconds: float = Field(
        30.0, gt=0, description="How long a body waits for room in the parse memory budget before a 503 with Retry-After."
    )
    write_probe_seconds: float = Field(
        10.0,
        ge=0,
        description="/healthz: when no write reached the database for this long, it makes a tiny one to learn "
        "whether the database can still write (a full disk, a read-only database make it 503).",
    )
    max_points_limit: int = Field(
        100_000, ge=10, description="Largest `max_points` a series request may ask for, per metric."
    )
    default_max_points: int = Field(2000, ge=3, description="`max_points` of a series request that gives none.")
    # W&B advises keeping a run under about 10,000 metric names; a real RL run logs a few hundred, and
    # Prometheus histograms with labels a few thousand. Past that it is a bug (a step or an id in a name).
    max_metrics_per_run: int = Field(
        10_000,
        ge=1,
        description="Most distinct metric names one run may have (canonical copies and labelled Prometheus "
        "series count too). A batch that would go past it is refused whole (422; 400 on the Prometheus routes); "
        "metrics the run already has are still accepted.",
    )
    rules: list[str] = Field(
        default_factory=list,
        description="Rule pack files (YAML) used beside the built-in pack; `parallax serve --rules FILE` adds one.",
    )
    alert_timer_seconds: float = Field(
        15.0, ge=0, description="How often rules that read absent_for() run on every running run (0 turns the timer off)."
    )
    leader_poll_seconds: float = Field(
        2.0,
        gt=0,
        le=60,
        description="PostgreSQL with several processes: how often a follower tries to become the leader (the one "
        "that evaluates rules and notifies), and the leader checks its lock; a dead leader's place is taken "
        "within about this long.",
    )
    # Webhook URLs carry their secret in the path: SecretStr keeps them out of reprs and logs.
    notify_webhook_urls: list[SecretStr] = Field(
        default_factory=list,
        description="URLs that get every firing and resolved alert as a JSON POST "
        '(env: a JSON list, e.g. \'["https://hooks.example/a"]\').',
    )
    notify_slack_webhook_url: SecretStr | None = Field(None, description="Slack incoming-webhook URL to post alerts to.")
    notify_smtp_host: str | None = Field(None, description="SMTP server for alert e-mails (needs a sender and recipients).")
    notify_smtp_port: int = Field(25, ge=1, le=65535, description="Port of the SMTP server.")
    notify_smtp_sender: str | None = Field(None, description="From address of alert e-mails.")
    notify_smtp_recipients: list[str] = Field(
        default_factory=list, description="Addresses alert e-mails go to (env: a JSON list)."
    )
    notify_smtp_username: str | None = Field(None, description="SMTP login user (with notify_smtp_password).")
    notify_smtp_password: SecretStr | None = Field(None, description="SMTP login password.")
    notify_smtp_starttls: bool = Field(False, description="Upgrade the SMTP connection with STARTTLS.")
    notify_smtp_ssl: bool = Field(False, description="Connect to the SMTP server over TLS (SMTPS, usually port 465).")
    notify_alertmanager_url: str | None = Field(
        None, description="Alertmanager base URL; alerts are POSTed to <url>/api/v2/alerts."
    )
    external_url: str | None = Field(
        None, description="Base URL users reach Parallax at (e.g. http://parallax.internal:8050), for links in alerts."
    )
    prometheus_ignored_labels: list[str] = Field(
        default_factory=lambda: ["job", "instance"],
        description="Labels of pushed and remote-written samples left out of stored metric names (besides run and "
        "project): the target labels Prometheus adds, and any external_labels of yours (env: a JSON list).",
    )
    prometheus_step_wait_s: float = Field(
        30.0,
        ge=0,
        description="Seconds the remote-write samples of a run this process has not seen a step series of yet wait "
        "for one (with several shards it may come in a later request); then the run takes its steps from timestamp "
        "order. 0: at once (only safe when every run sends a step series in the same request, or none).",
    )
    export_finished_runs_for_s: float = Field(
        3600.0,
        ge=0,
        description="Seconds a finished or failed run stays in the /metrics export (parallax_metric) after its last "
        "point; running runs always stay. Keeps the export's cardinality bounded.",
    )
    retention_days: float | None = Field(
        None,
        ge=0,
        description="Delete the points (with their rollups and latest values) of finished and failed runs that sent "
        "nothing for this many days, in the background; the run itself, its config, events, alerts and audit "
        "reports stay. Unset or 0 keeps everything forever.",
    )
    retention_interval_seconds: float = Field(
        3600.0, gt=0, description="How often the retention sweep looks for runs to delete the points of."
    )
    log_level: str = Field("info", description="Log level of the server (debug, info, warning, error).")

    @field_validator("token", "read_token")
    @classmethod
    def _token_not_blank(cls, value: SecretStr | None) -> SecretStr | None:
        # An empty PARALLAX_TOKEN= would count as "a token is set" (so a public address is allowed)
        # while checking nothing: refuse it rather than serve writes to anyone.
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("a token must not be empty or blank; unset the variable to turn the check off")
        return value

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

    def notify_config(self) -> NotifyConfig:
        """The notification channels these settings ask for (``alerts.notify.build_notifiers`` checks them)."""
        return NotifyConfig(
            webhook_urls=tuple(u.get_secret_value() for u in self.notify_webhook_urls),
            slack_webhook_url=self.secret("notify_slack_webhook_url"),
            smtp_host=self.notify_smtp_host,
            smtp_port=self.notify_smtp_port,
            smtp_sender=self.notify_smtp_sender,
            smtp_recipients=tuple(self.notify_smtp_recipients),
            smtp_username=self.notify_smtp_username,
            smtp_password=self.secret("notify_smtp_password"),
            smtp_starttls=self.notify_smtp_starttls,
            smtp_ssl=self.notify_smtp_ssl,
            alertmanager_url=self.notify_alertmanager_url,
            external_url=self.external_url,
        )

    def secret(self, name: str) -> str | None:
        value = getattr(self, name)
        return value.get_secret_value() if value is not None else None
