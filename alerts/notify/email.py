"""E-mail: the plain-text message over SMTP (smtplib), firing and resolved mails of an alert threaded together."""

from __future__ import annotations

import email.utils
import logging
import smtplib
import ssl
from email.message import EmailMessage
from typing import Mapping, Sequence

from parallax.alerts.notify.notification import DeliveryResult, Notification
from parallax.alerts.notify.text import headline, plain_text

log = logging.getLogger(__name__)


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
