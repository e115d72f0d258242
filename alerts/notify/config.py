"""Which channels to notify: ``NotifyConfig`` (from the PARALLAX_NOTIFY_* settings) and ``build_notifiers``."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from parallax.alerts.notify.alertmanager import AlertmanagerNotifier
from parallax.alerts.notify.email import EmailNotifier
from parallax.alerts.notify.httpchannel import check_http_url
from parallax.alerts.notify.notification import Notifier
from parallax.alerts.notify.slack import SlackNotifier
from parallax.alerts.notify.webhook import WebhookNotifier


@dataclass(frozen=True)
class NotifyConfig:
    """The channels to notify; ``Settings.notify_config()`` builds one from PARALLAX_NOTIFY_* settings."""

    webhook_urls: tuple[str, ...] = ()
    slack_webhook_url: str | None = None
    smtp_host: str | None = None
    smtp_port: int = 25
    smtp_sender: str | None = None
    smtp_recipients: tuple[str, ...] = ()
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = False
    smtp_ssl: bool = False
    alertmanager_url: str | None = None
    external_url: str | None = None

    def __post_init__(self) -> None:
        for name in ("webhook_urls", "smtp_recipients"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            object.__setattr__(self, name, tuple(value or ()))

    def __repr__(self) -> str:
        # Webhook URLs often carry their token (Slack's always does): show scheme and host only.
        def site(url: str | None) -> str | None:
            if url is None:
                return None
            parts = urlsplit(url)
            return f"{parts.scheme}://{parts.hostname}/…" if parts.hostname else "…"

        shown = {
            "webhook_urls": tuple(site(u) for u in self.webhook_urls),
            "slack_webhook_url": site(self.slack_webhook_url),
            "smtp_host": self.smtp_host,
            "smtp_port": self.smtp_port,
            "smtp_sender": self.smtp_sender,
            "smtp_recipients": self.smtp_recipients,
            "smtp_username": self.smtp_username,
            "smtp_password": None if self.smtp_password is None else "**********",
            "smtp_starttls": self.smtp_starttls,
            "smtp_ssl": self.smtp_ssl,
            "alertmanager_url": self.alertmanager_url,
            "external_url": self.external_url,
        }
        return "NotifyConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


def _env(name: str) -> str:
    return "PARALLAX_EXTERNAL_URL" if name == "external_url" else f"PARALLAX_NOTIFY_{name.upper()}"


def build_notifiers(config: NotifyConfig) -> list[Notifier]:
    """The notifiers this configuration asks for; a ``ValueError`` lists everything incomplete or invalid."""
    problems: list[str] = []

    def url_ok(value: str | None, name: str) -> bool:
        try:
            check_http_url(value or "", name)
            return True
        except ValueError:
            problems.append(f"{name} ({_env(name)}) must be an http:// or https:// URL with a host")
            return False

    if config.external_url is not None:
        url_ok(config.external_url, "external_url")
    for url in config.webhook_urls:
        url_ok(url, "webhook_urls")
    if config.slack_webhook_url is not None:
        url_ok(config.slack_webhook_url, "slack_webhook_url")
    if config.alertmanager_url is not None:
        url_ok(config.alertmanager_url, "alertmanager_url")

    smtp_given = [
        n
        for n in ("smtp_sender", "smtp_recipients", "smtp_username", "smtp_password")
        if getattr(config, n) not in (None, "", ())
    ]
    if config.smtp_host:
        for name in ("smtp_sender", "smtp_recipients"):
            if name not in smtp_given:
                problems.append(f"smtp_host is set but {name} ({_env(name)}) is not")
        if config.smtp_sender and "@" not in config.smtp_sender:
            problems.append(f"smtp_sender ({_env('smtp_sender')}) must be an e-mail address")
        if any(not r or "@" not in r for r in config.smtp_recipients):
            problems.append(f"every smtp_recipients entry ({_env('smtp_recipients')}) must be an e-mail address")
        if not 1 <= config.smtp_port <= 65535:
            problems.append(f"smtp_port ({_env('smtp_port')}) must be between 1 and 65535")
        if config.smtp_starttls and config.smtp_ssl:
            problems.append("smtp_starttls and smtp_ssl exclude each other: STARTTLS upgrades a plain connection")
        if (config.smtp_username is None) != (config.smtp_password is None):
            problems.append("smtp_username and smtp_password go together")
    elif smtp_given or config.smtp_starttls or config.smtp_ssl:
        problems.append(f"{', '.join(smtp_given) or 'SMTP options'} given but smtp_host ({_env('smtp_host')}) is not")

    if problems:
        raise ValueError("notification settings: " + "; ".join(problems))

    ext = config.external_url
    notifiers: list[Notifier] = [WebhookNotifier(u, external_url=ext) for u in config.webhook_urls]
    if config.slack_webhook_url:
        notifiers.append(SlackNotifier(config.slack_webhook_url, external_url=ext))
    if config.smtp_host:
        notifiers.append(
            EmailNotifier(
                config.smtp_host,
                config.smtp_port,
                config.smtp_sender or "",
                config.smtp_recipients,
                username=config.smtp_username,
                password=config.smtp_password,
                starttls=config.smtp_starttls,
                use_ssl=config.smtp_ssl,
                external_url=ext,
            )
        )
    if config.alertmanager_url:
        notifiers.append(AlertmanagerNotifier(config.alertmanager_url, external_url=ext))
    # Channel names key the delivery records: two webhooks on one host get #2, #3, …
    seen: dict[str, int] = {}
    for notifier in notifiers:
        count = seen[notifier.name] = seen.get(notifier.name, 0) + 1
        if count > 1:
            notifier.name = f"{notifier.name}#{count}"
    return notifiers
