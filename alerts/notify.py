"""Alert notifications: what is sent (``Notification``), where (the notifiers) and how it gets there (``Dispatcher``).

Modelled on Alertmanager's integrations. A notifier's ``send`` never raises:
it returns a ``DeliveryResult`` that says whether a failure is worth retrying
(429, 5xx, SMTP 4xx, a refused or timed-out connection) or not (other 4xx,
SMTP 5xx, a bad URL). The ``Dispatcher`` retries the retryable ones with
exponential backoff and jitter, one worker thread per channel so a slow or
failing channel never holds back the others, and hands every attempt (and
every delivery it had to drop) to a ``record`` callback; each notification
carries the reason it was sent.

Standard library and httpx only: nothing here imports FastAPI, Dash or server/.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import queue
import random
import smtplib
import ssl
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http import HTTPStatus
from email.message import EmailMessage
from typing import Any, Callable, Collection, Literal, Mapping, Protocol, Sequence, runtime_checkable
from urllib.parse import quote, urlsplit

import httpx

from parallax.alerts.render import advice_lines, evidence_text
from parallax.alerts.render import value_text as _value

log = logging.getLogger(__name__)

FIRING, RESOLVED = "firing", "resolved"
KINDS = (FIRING, RESOLVED)
#: Causes shown in short messages (Slack, Alertmanager annotations); e-mail lists them all.
TOP_CAUSES = 3
USER_AGENT = "parallax-notify/1"


# -- what is sent ------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Notification:
    """One alert transition to send. ``alert`` is the API's alert shape (DESIGN §4) plus
    ``run_name``, ``project``, ``labels``, ``started_at`` and ``ended_at`` (unix seconds or None)."""

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    kind: Literal["firing", "resolved"]
    alert: Mapping[str, Any]
    reason: str
    created_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be 'firing' or 'resolved', not {self.kind!r}")
        if not isinstance(self.alert, Mapping):
            raise ValueError("alert must be a mapping in the API's alert shape")

    @classmethod
    def for_alert(
        cls,
        alert: Mapping[str, Any],
        kind: str | None = None,
        reason: str | None = None,
        *,
        created_at: float | None = None,
    ) -> Notification:
        """A notification for this alert; ``kind`` defaults to the alert's state and
        ``reason`` to "rule R went firing at step S"."""
        kind = kind or alert.get("state")
        if kind not in KINDS:
            raise ValueError(f"kind must be 'firing' or 'resolved', not {kind!r}")
        if reason is None:
            step = alert.get("started_step") if kind == FIRING else alert.get("ended_step")
            reason = f"rule {alert.get('rule')} went {kind}" + (f" at step {step}" if step is not None else "")
        return cls(kind=kind, alert=alert, reason=reason, created_at=time.time() if created_at is None else created_at)


@dataclass(frozen=True)
class DeliveryResult:
    """What one ``send`` came to. ``retry_after`` is the receiver's Retry-After, in seconds, when it gave one."""

    ok: bool
    retryable: bool = False
    error: str | None = None
    retry_after: float | None = None


@dataclass(frozen=True)
class DeliveryAttempt:
    """One attempt to deliver a notification to a channel, as handed to ``record``.

    ``final`` is true on the last record of that (notification, channel): delivered,
    failed for good, out of attempts, or dropped. A dropped delivery (queue full,
    dispatcher closed) has ``dropped`` true and ``attempt`` = the attempts made before.
    """

    notification_id: str
    channel: str
    attempt: int
    ok: bool
    retryable: bool
    error: str | None
    at: float
    final: bool
    dropped: bool = False
    notification: Notification | None = field(default=None, repr=False, compare=False)


@runtime_checkable
class Notifier(Protocol):
    name: str

    def send(self, n: Notification) -> DeliveryResult: ...


# -- message text, shared by the channels -------------------------------------


def dashboard_url(alert: Mapping[str, Any], external_url: str | None) -> str | None:
    """The run's dashboard page under ``external_url`` (e.g. http://127.0.0.1:8050), or None."""
    run_id = alert.get("run_id")
    if not external_url or run_id is None:
        return None
    return f"{external_url.rstrip('/')}/dashboard/runs/{quote(str(run_id), safe='')}"


def run_label(alert: Mapping[str, Any]) -> str:
    name, project = alert.get("run_name"), alert.get("project")
    if not name:
        return f"run {alert.get('run_id')}"
    return f"{project}/{name}" if project else str(name)


def headline(n: Notification) -> str:
    """``FIRING importance_weight_spike on proj/run-3``."""
    return f"{n.kind.upper()} {n.alert.get('rule')} on {run_label(n.alert)}"


def step_range(alert: Mapping[str, Any]) -> str:
    start, end = alert.get("started_step"), alert.get("ended_step")
    if start is None:
        return "unknown steps" if end is None else f"until step {end}"
    return f"steps {start}-{end}" if end is not None else f"from step {start} (ongoing)"


def rfc3339(ts: float) -> str:
    """Unix seconds as RFC 3339 in UTC: ``2025-11-29T19:52:00.000Z``."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _causes(alert: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in (alert.get("causes") or []) if isinstance(c, Mapping)]


def _cause_title(cause: Mapping[str, Any]) -> str:
    score = cause.get("score")
    return f"{cause.get('id')}" + (f" (score {_value(score)})" if score is not None else "")


def causes_text(alert: Mapping[str, Any], limit: int | None = None) -> str:
    """The ranked causes with their evidence and advice, one block per cause."""
    lines = []
    causes = _causes(alert)
    for i, cause in enumerate(causes[:limit] if limit else causes, 1):
        lines.append(f"{i}. {_cause_title(cause)}")
        for ev in cause.get("evidence") or []:
            lines.append(f"   - {evidence_text(ev)}")
        for a in advice_lines(cause):
            lines.append(f"   advice: {a}")
    return "\n".join(lines)


def plain_text(n: Notification, external_url: str | None = None) -> str:
    """The full message as plain text (the e-mail body)."""
    a = n.alert
    lines = [f"{headline(n)} (severity: {a.get('severity') or 'n/a'})", ""]
    lines.append(f"Run:      {run_label(a)} (id {a.get('run_id')})")
    lines.append(f"Rule:     {a.get('rule')}")
    lines.append(f"Steps:    {step_range(a)}")
    if a.get("started_at") is not None:
        lines.append(f"Started:  {rfc3339(a['started_at'])}")
    if a.get("ended_at") is not None:
        lines.append(f"Ended:    {rfc3339(a['ended_at'])}")
    lines.append(f"Why sent: {n.reason}")
    if a.get("summary"):
        lines += ["", str(a["summary"])]
    causes = causes_text(a)
    lines += ["", "Likely causes, best first:", causes] if causes else ["", "No cause ranked."]
    labels = a.get("labels") or {}
    if labels:
        lines += ["", "Labels: " + ", ".join(f"{k}={v}" for k, v in labels.items())]
    link = dashboard_url(a, external_url)
    if link:
        lines += ["", f"Dashboard: {link}"]
    lines += ["", f"Alert {a.get('id')}, notification {n.id}, sent by Parallax."]
    return "\n".join(lines) + "\n"


def _json_ready(v: Any) -> Any:
    """Plain JSON: non-finite floats become the strings Python's json writes for them."""
    if isinstance(v, float) and not math.isfinite(v):
        return _value(v)
    if isinstance(v, Mapping):
        return {str(k): _json_ready(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_ready(x) for x in v]
    return v


def _json_bytes(body: Any) -> bytes:
    return json.dumps(_json_ready(body), default=str, allow_nan=False).encode()


# -- HTTP channels ------------------------------------------------------------


def _check_http_url(url: str, what: str) -> None:
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an http:// or https:// URL with a host")


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


def _status_phrase(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return ""


def http_result(resp: httpx.Response) -> DeliveryResult:
    """2xx delivered; 408, 429 and 5xx worth retrying; any other status is final."""
    code = resp.status_code
    if 200 <= code < 300:
        return DeliveryResult(ok=True)
    # The status and its standard phrase, never the receiver's body or reason phrase: a receiver that echoes
    # the request (headers with their token, the payload) would have its answer stored and shown to anyone
    # with the read token.
    error = f"HTTP {code} {_status_phrase(code)}".rstrip()
    if 300 <= code < 400:
        error += " (redirects are not followed)"
    retryable = code in (408, 429) or code >= 500
    return DeliveryResult(ok=False, retryable=retryable, error=error, retry_after=_retry_after(resp))


class _HttpNotifier:
    name = "http"

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        external_url: str | None = None,
    ):
        _check_http_url(url, f"{type(self).__name__} url")
        self.url = url
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.external_url = external_url
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:  # the URL may hold a token: keep it out of logs
        return f"<{type(self).__name__} {self.name}>"

    def _target(self) -> str:
        return self.url

    def body(self, n: Notification) -> Any:
        raise NotImplementedError

    def _http(self) -> httpx.Client:
        """The notifier's one client, made on first use and kept: its TLS context and connection pool are
        built once, not for every notification. (A client per notification cost about 0.8 MB of TLS context
        each, held in reference cycles that the server's raised GC thresholds leave uncollected for long:
        RSS grew by that much per alert sent and re-sent.) httpx clients are thread-safe: the
        Alertmanager notifier is shared by the delivery and the re-send dispatchers."""
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout, follow_redirects=False)
            return self._client

    def close(self) -> None:
        """Close the client (a later send opens a new one)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def send(self, n: Notification) -> DeliveryResult:
        try:
            content = _json_bytes(self.body(n))
            headers = {"content-type": "application/json", "user-agent": USER_AGENT, **self.headers}
            resp = self._http().post(self._target(), content=content, headers=headers)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            return DeliveryResult(ok=False, retryable=False, error=f"bad URL: {exc}")
        except httpx.TimeoutException as exc:
            error = f"timed out after {self.timeout}s ({type(exc).__name__})"
            return DeliveryResult(ok=False, retryable=True, error=error)
        except httpx.TransportError as exc:
            return DeliveryResult(ok=False, retryable=True, error=f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug, not the network: retrying will not help
            log.exception("%r failed to send notification %s", self, n.id)
            return DeliveryResult(ok=False, retryable=False, error=f"{type(exc).__name__}: {exc}")
        return http_result(resp)


class WebhookNotifier(_HttpNotifier):
    """POSTs ``{"version": "1", "id", "kind", "reason", "created_at", "alert", "url"}`` as JSON."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        *,
        external_url: str | None = None,
    ):
        super().__init__(url, headers=headers, timeout=timeout, external_url=external_url)
        parts = urlsplit(url)
        self.name = f"webhook:{parts.hostname}" + (f":{parts.port}" if parts.port else "")

    def body(self, n: Notification) -> dict[str, Any]:
        return {
            "version": "1",
            "id": n.id,
            "kind": n.kind,
            "reason": n.reason,
            "created_at": n.created_at,
            "alert": dict(n.alert),
            "url": dashboard_url(n.alert, self.external_url),
        }


def _mrkdwn(text: Any) -> str:
    """Text as Slack shows it literally: its three control characters as the entities Slack asks for, so a run
    or rule name cannot write ``<!channel>`` (a ping), ``<https://evil|docs>`` (a disguised link) or ``<@U1>``."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_link(url: str, label: str) -> str:
    """``<url|label>``: the URL escaped like text and its ``|`` percent-encoded, so it cannot end the link early."""
    return f"<{_mrkdwn(url).replace('|', '%7C')}|{_mrkdwn(label)}>"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SlackNotifier(_HttpNotifier):
    """A Slack incoming webhook: a short ``text`` (the push notification) and Block Kit ``blocks``."""

    name = "slack"

    def __init__(self, url: str, timeout: float = 5.0, *, external_url: str | None = None):
        super().__init__(url, timeout=timeout, external_url=external_url)

    def body(self, n: Notification) -> dict[str, Any]:
        a = n.alert
        link = dashboard_url(a, self.external_url)
        icon = ":rotating_light:" if n.kind == FIRING else ":white_check_mark:"
        # The top-level text is the push notification and the fallback, parsed as mrkdwn like the blocks.
        text = _mrkdwn(f"{headline(n)} ({step_range(a)})")
        blocks: list[dict[str, Any]] = [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": _cut(f"{icon} {headline(n)}", 150), "emoji": True},
            },
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": _cut(f"*Run*\n{_mrkdwn(run_label(a))}", 2000)},
                    {"type": "mrkdwn", "text": _cut(f"*Severity*\n{_mrkdwn(a.get('severity') or 'n/a')}", 2000)},
                    {"type": "mrkdwn", "text": _cut(f"*Steps*\n{_mrkdwn(step_range(a))}", 2000)},
                    {"type": "mrkdwn", "text": _cut(f"*Rule*\n`{_mrkdwn(a.get('rule'))}`", 2000)},
                ],
            },
        ]
        if a.get("summary"):
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(_mrkdwn(a["summary"]), 3000)}})
        causes = []
        for i, cause in enumerate(_causes(a)[:TOP_CAUSES], 1):
            score = cause.get("score")
            line = f"{i}. *{_mrkdwn(cause.get('id'))}*" + (f" (score {_value(score)})" if score is not None else "")
            evidence = "; ".join(evidence_text(e) for e in cause.get("evidence") or [])
            if evidence:
                line += f"\n      {_mrkdwn(evidence)}"
            for advice in advice_lines(cause):
                line += f"\n      _{_mrkdwn(advice)}_"
            causes.append(line)
        if causes:
            body = "*Likely causes*\n" + "\n".join(causes)
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(body, 3000)}})
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(_mrkdwn(n.reason), 3000)}]})
        if link:
            text += " " + _slack_link(link, "open in Parallax")
            blocks.append(
                {
                    "type": "actions",
                    "elements": [
                        {"type": "button", "text": {"type": "plain_text", "text": "Open in Parallax"}, "url": link}
                    ],
                }
            )
        return {"text": text, "blocks": blocks}


class AlertmanagerNotifier(_HttpNotifier):
    """``POST {url}/api/v2/alerts`` with one alert in Alertmanager's v2 shape.

    The labels identify the alert to Alertmanager (rule + run), so the resolved
    message matches the firing one. Alertmanager ends a firing alert by itself
    after its ``resolve_timeout`` unless it is sent again, as Prometheus re-sends
    firing alerts every minute.
    """

    name = "alertmanager"

    def __init__(
        self,
        url: str,
        timeout: float = 5.0,
        *,
        headers: Mapping[str, str] | None = None,
        external_url: str | None = None,
    ):
        super().__init__(url, headers=headers, timeout=timeout, external_url=external_url)

    def _target(self) -> str:
        return self.url.rstrip("/") + "/api/v2/alerts"

    def body(self, n: Notification) -> list[dict[str, Any]]:
        a = n.alert
        labels = {str(k): str(v) for k, v in (a.get("labels") or {}).items() if v is not None and v != ""}
        core = {
            "alertname": a.get("rule"),
            "run": a.get("run_name"),
            "run_id": a.get("run_id"),
            "project": a.get("project"),
            "severity": a.get("severity"),
        }
        # As in Prometheus, a rule's own labels cannot override the ones that identify the alert.
        labels.update({k: str(v) for k, v in core.items() if v is not None and v != ""})
        advice = [f"{c.get('id')}: {x}" for c in _causes(a)[:TOP_CAUSES] for x in advice_lines(c)]
        annotations = {
            "summary": str(a.get("summary") or headline(n)),
            "causes": causes_text({"causes": [{**c, "advice": None} for c in _causes(a)]}, TOP_CAUSES),
            "advice": "\n".join(advice),
            "reason": n.reason,
            "parallax_alert_id": str(a.get("id")),
        }
        started = a.get("started_at")
        alert: dict[str, Any] = {
            "labels": labels,
            "annotations": {k: v for k, v in annotations.items() if v},
            "startsAt": rfc3339(started if started is not None else n.created_at),
        }
        if n.kind == RESOLVED:
            ended = a.get("ended_at")
            alert["endsAt"] = rfc3339(ended if ended is not None else n.created_at)
        link = dashboard_url(a, self.external_url)
        if link:
            alert["generatorURL"] = link
        return [alert]


# -- e-mail -------------------------------------------------------------------


class EmailNotifier:
    """Plain-text e-mail over SMTP (smtplib). SMTP 4xx and connection errors are retried; 5xx are final."""

    name = "email"

    def __init__(
        self,
        host: str,
        port: int,
        sender: str,
        recipients: Sequence[str],
        username: str | None = None,
        password: str | None = None,
        starttls: bool = False,
        use_ssl: bool = False,
        timeout: float = 10.0,
        *,
        external_url: str | None = None,
    ):
        if not host:
            raise ValueError("EmailNotifier needs an SMTP host")
        if not sender:
            raise ValueError("EmailNotifier needs a sender address")
        if isinstance(recipients, str):
            recipients = [recipients]
        if not recipients:
            raise ValueError("EmailNotifier needs at least one recipient")
        if starttls and use_ssl:
            raise ValueError(
                "EmailNotifier: starttls and use_ssl exclude each other (STARTTLS upgrades a plain connection)"
            )
        if (username is None) != (password is None):
            raise ValueError("EmailNotifier: username and password go together")
        self.host, self.port = host, int(port)
        self.sender, self.recipients = sender, tuple(recipients)
        self.username, self._password = username, password
        self.starttls, self.use_ssl = starttls, use_ssl
        self.timeout = timeout
        self.external_url = external_url
        self._tls: ssl.SSLContext | None = None  # made once (loading the CA store per mail costs memory and time)

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def __repr__(self) -> str:
        return f"<EmailNotifier {self.host}:{self.port} to {len(self.recipients)} recipient(s)>"

    def message(self, n: Notification) -> EmailMessage:
        msg = EmailMessage()
        domain = self.sender.rpartition("@")[2] or "parallax.local"
        msg["Subject"] = f"[Parallax] {headline(n)}"
        msg["From"] = self.sender
        msg["To"] = ", ".join(self.recipients)
        msg["Date"] = email.utils.formatdate(n.created_at, localtime=False)
        msg["Message-ID"] = f"<parallax.{n.id}@{domain}>"
        # Firing and resolved mails of one alert thread together under a common root.
        msg["References"] = f"<parallax.alert.{n.alert.get('id')}@{domain}>"
        msg["X-Parallax-Notification-Id"] = n.id
        msg["X-Parallax-Alert-Id"] = str(n.alert.get("id"))
        msg.set_content(plain_text(n, self.external_url))
        return msg

    def send(self, n: Notification) -> DeliveryResult:
        try:
            msg = self.message(n)
            if self.use_ssl:
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(
                    self.host, self.port, timeout=self.timeout, context=self._tls_context()
                )
            else:
                smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
            with smtp:
                if self.starttls:
                    smtp.starttls(context=self._tls_context())
                if self.username is not None:
                    smtp.login(self.username, self._password or "")
                refused = smtp.send_message(msg, from_addr=self.sender, to_addrs=list(self.recipients))
        except smtplib.SMTPRecipientsRefused as exc:
            codes = {rcpt: code for rcpt, (code, _) in exc.recipients.items()}
            return DeliveryResult(
                ok=False,
                retryable=any(400 <= c < 500 for c in codes.values()),
                error="SMTP recipients refused: " + _smtp_refusals(exc.recipients),
            )
        except smtplib.SMTPResponseException as exc:
            reply = exc.smtp_error
            text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
            return DeliveryResult(
                ok=False, retryable=400 <= exc.smtp_code < 500, error=f"SMTP {exc.smtp_code} {text}".strip()
            )
        except smtplib.SMTPNotSupportedError as exc:
            return DeliveryResult(ok=False, retryable=False, error=f"SMTP server does not support it: {exc}")
        except ssl.SSLCertVerificationError as exc:
            return DeliveryResult(ok=False, retryable=False, error=f"TLS certificate rejected: {exc}")
        except (OSError, smtplib.SMTPException) as exc:  # refused, reset, timed out, disconnected
            return DeliveryResult(ok=False, retryable=True, error=f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            log.exception("%r failed to send notification %s", self, n.id)
            return DeliveryResult(ok=False, retryable=False, error=f"{type(exc).__name__}: {exc}")
        if refused:
            # Delivered to the others; retrying would send them a second copy.
            return DeliveryResult(ok=True, error="SMTP recipients refused: " + _smtp_refusals(refused))
        return DeliveryResult(ok=True)


def _smtp_refusals(refused: Mapping[str, tuple[int, bytes]]) -> str:
    out = []
    for rcpt, (code, text) in refused.items():
        text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
        out.append(f"{rcpt}: {code} {text}".strip())
    return "; ".join(out)


# -- configuration ------------------------------------------------------------


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
            _check_http_url(value or "", name)
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


# -- delivery -----------------------------------------------------------------


class _Channel:
    def __init__(self, notifier: Notifier):
        self.notifier = notifier
        self.name = str(getattr(notifier, "name", type(notifier).__name__))
        self.pending: deque[Notification] = deque()
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None


_STOP = object()


class Dispatcher:
    """Delivers notifications in the background: one daemon worker per notifier, each with a
    bounded queue, retrying retryable failures with exponential backoff (±20 % jitter, at
    least the receiver's Retry-After, at most ``max_delay``) up to ``max_attempts``.

    ``record(DeliveryAttempt)`` is called after every attempt and for every dropped
    delivery, in order, from one recording thread, so ``submit`` never waits for it;
    its exceptions are logged. ``sleep`` waits between retries; by default the wait
    is cut short by ``close``.
    """

    def __init__(
        self,
        notifiers: Sequence[Notifier],
        record: Callable[[DeliveryAttempt], Any],
        *,
        max_attempts: int = 5,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        queue_size: int = 10_000,
        sleep: Callable[[float], Any] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if queue_size < 1:
            raise ValueError("queue_size must be at least 1")
        if base_delay < 0 or max_delay < 0:
            raise ValueError("delays must not be negative")
        self.max_attempts = max_attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.queue_size = queue_size
        self._record = record
        self._sleep = sleep
        self._clock = clock
        self._random = random.Random()
        self._lock = threading.Lock()  # guards _closing against submit; taken before any channel's cond
        self._closing = False
        self._deadline = math.inf  # monotonic time by which close() gives up
        self._stop = threading.Event()
        self._records: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._record_lock = threading.Lock()
        self._recorder_done = False
        self._recorder = threading.Thread(target=self._record_loop, name="parallax-notify-record", daemon=True)
        self._recorder.start()
        self._channels = [_Channel(n) for n in notifiers]
        for ch in self._channels:
            ch.thread = threading.Thread(target=self._work, args=(ch,), name=f"parallax-notify-{ch.name}", daemon=True)
            ch.thread.start()

    @property
    def channels(self) -> list[str]:
        return [ch.name for ch in self._channels]

    def pending(self) -> int:
        """Deliveries waiting in the queues (not counting those being sent or retried)."""
        return sum(len(ch.pending) for ch in self._channels)

    def submit(self, n: Notification, channels: Collection[str] | None = None) -> None:
        """Queue ``n`` for every channel (or those named). Never blocks, never raises: a full queue drops its oldest delivery."""
        try:
            drops: list[tuple[_Channel, Notification, str]] = []
            targets = [ch for ch in self._channels if channels is None or ch.name in channels]
            with self._lock:
                if self._closing:
                    drops = [(ch, n, "dropped: dispatcher closed") for ch in targets]
                else:
                    for ch in targets:
                        with ch.cond:
                            if len(ch.pending) >= self.queue_size:
                                why = f"dropped: queue full ({self.queue_size} pending)"
                                drops.append((ch, ch.pending.popleft(), why))
                            ch.pending.append(n)
                            ch.cond.notify()
            for ch, old, why in drops:
                log.warning("notification %s to %s %s", old.id, ch.name, why)
                self._emit(self._dropped(ch, old, 0, why))
        except Exception:
            log.exception("could not queue notification %s", getattr(n, "id", n))

    def close(self, timeout: float = 5.0) -> bool:
        """Deliver what can be delivered within ``timeout`` seconds, drop (and record) the rest, stop the threads.

        Returns True when everything queued was delivered or failed for good in time.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            if self._closing:
                return not self._recorder.is_alive()
            self._deadline = deadline
            self._closing = True
        for ch in self._channels:
            with ch.cond:
                ch.cond.notify_all()
        for ch in self._channels:
            assert ch.thread is not None
            ch.thread.join(max(0.0, deadline - time.monotonic()))
        self._stop.set()  # wakes workers waiting out a backoff
        flushed = True
        for ch in self._channels:
            with ch.cond:
                left = list(ch.pending)
                ch.pending.clear()
                ch.cond.notify_all()
            assert ch.thread is not None
            flushed = flushed and not left and not ch.thread.is_alive()
            for old in left:
                self._emit(self._dropped(ch, old, 0, "dropped: dispatcher closed before it was sent"))
        self._records.put(_STOP)
        self._recorder.join(max(0.0, deadline - time.monotonic()))
        for ch in self._channels:  # the notifiers' clients (their connections) go too
            closer = getattr(ch.notifier, "close", None)
            if callable(closer) and not (ch.thread is not None and ch.thread.is_alive()):
                try:
                    closer()
                except Exception:
                    log.exception("closing notifier %s failed", ch.name)
        return flushed and not self._recorder.is_alive()

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- workers --

    def _work(self, ch: _Channel) -> None:
        while True:
            with ch.cond:
                while not ch.pending and not self._closing and not self._stop.is_set():
                    ch.cond.wait()
                if self._stop.is_set() or not ch.pending:
                    return
                n = ch.pending.popleft()
            try:
                self._deliver(ch, n)
            except Exception:  # never let one delivery kill the channel
                log.exception("delivering notification %s to %s failed", n.id, ch.name)

    def _deliver(self, ch: _Channel, n: Notification) -> None:
        attempt = 0
        while True:
            attempt += 1
            result = self._send(ch, n)
            if result.ok or not result.retryable or attempt >= self.max_attempts:
                self._emit(self._attempt(ch, n, attempt, result, result.error, final=True))
                return
            delay = self._backoff(attempt, result.retry_after)
            give_up = self._stop.is_set() or (self._closing and time.monotonic() + delay > self._deadline)
            error = f"{result.error}; not retried: dispatcher closing" if give_up else result.error
            self._emit(self._attempt(ch, n, attempt, result, error, final=give_up))
            if give_up:
                return
            if self._sleep is None:
                self._stop.wait(delay)
            else:
                self._sleep(delay)
            if self._stop.is_set():
                self._emit(self._dropped(ch, n, attempt, "dropped: dispatcher closed before the next attempt"))
                return

    def _send(self, ch: _Channel, n: Notification) -> DeliveryResult:
        try:
            result = ch.notifier.send(n)
        except Exception as exc:  # notifiers should not raise; a third-party one might
            log.exception("notifier %s raised on notification %s", ch.name, n.id)
            return DeliveryResult(ok=False, retryable=False, error=f"notifier raised {type(exc).__name__}: {exc}")
        if not isinstance(result, DeliveryResult):
            return DeliveryResult(ok=False, retryable=False, error=f"notifier returned {type(result).__name__}")
        return result

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = self.base_delay * 2.0 ** min(attempt - 1, 60)
        delay *= 0.8 + 0.4 * self._random.random()
        if retry_after:
            delay = max(delay, retry_after)
        return min(delay, self.max_delay)

    def _attempt(
        self, ch: _Channel, n: Notification, attempt: int, result: DeliveryResult, error: str | None, final: bool
    ) -> DeliveryAttempt:
        return DeliveryAttempt(
            notification_id=n.id,
            channel=ch.name,
            attempt=attempt,
            ok=result.ok,
            retryable=result.retryable,
            error=error,
            at=self._clock(),
            final=final,
            notification=n,
        )

    def _dropped(self, ch: _Channel, n: Notification, attempts: int, why: str) -> DeliveryAttempt:
        return DeliveryAttempt(
            notification_id=n.id,
            channel=ch.name,
            attempt=attempts,
            ok=False,
            retryable=False,
            error=why,
            at=self._clock(),
            final=True,
            dropped=True,
            notification=n,
        )

    # -- recording --

    def _emit(self, attempt: DeliveryAttempt) -> None:
        with self._record_lock:
            if not self._recorder_done:
                self._records.put(attempt)
                return
        self._call_record(attempt)  # a late delivery after close: record it on this thread

    def _record_loop(self) -> None:
        while True:
            item = self._records.get()
            if item is _STOP:
                break
            self._call_record(item)
        with self._record_lock:
            self._recorder_done = True
        while True:  # whatever was queued behind the stop marker
            try:
                item = self._records.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP:
                self._call_record(item)

    def _call_record(self, attempt: DeliveryAttempt) -> None:
        try:
            self._record(attempt)
        except Exception:
            log.exception(
                "recording delivery of notification %s to %s failed", attempt.notification_id, attempt.channel
            )
