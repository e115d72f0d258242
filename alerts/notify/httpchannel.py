"""What the HTTP channels share: one kept client, the JSON body, and how a receiver's answer is read."""

from __future__ import annotations

import email.utils
import json
import logging
import math
import threading
import time
from http import HTTPStatus
from typing import Any, Mapping
from urllib.parse import urlsplit

import httpx

from parallax.alerts.notify.notification import DeliveryResult, Notification
from parallax.alerts.render import value_text

log = logging.getLogger(__name__)


USER_AGENT = "parallax-notify/1"


def _json_ready(v: Any) -> Any:
    """Plain JSON: non-finite floats become the strings Python's json writes for them."""
    if isinstance(v, float) and not math.isfinite(v):
        return value_text(v)
    if isinstance(v, Mapping):
        return {str(k): _json_ready(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_ready(x) for x in v]
    return v


def _json_bytes(body: Any) -> bytes:
    return json.dumps(_json_ready(body), default=str, allow_nan=False).encode()


def check_http_url(url: str, what: str) -> None:
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


class HttpNotifier:
    name = "http"

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        external_url: str | None = None,
    ):
        check_http_url(url, f"{type(self).__name__} url")
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
