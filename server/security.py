"""Tokens, body limits, the Host allow-list and cross-origin writes, as ASGI middleware so they cover the API and
the mounted dashboard alike."""

from __future__ import annotations

import base64
import hmac
import ipaddress
from typing import Callable, Iterable
from urllib.parse import urlsplit

import orjson
from starlette.exceptions import HTTPException

READ_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))
OPEN_PATHS = frozenset(("/healthz",))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _presented_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The token from `Authorization: Bearer <t>`, or the password of `Basic` auth."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, rest = value.partition(b" ")
            scheme = scheme.lower()
            if scheme == b"bearer":
                return rest.strip()
            if scheme == b"basic":
                try:
                    decoded = base64.b64decode(rest.strip(), validate=True)
                except ValueError:
                    return None
                return decoded.partition(b":")[2]
            return None
    return None


def _matches(presented: bytes | None, expected: bytes | None) -> bool:
    # compare_digest keeps the comparison time independent of where they differ.
    return presented is not None and expected is not None and hmac.compare_digest(presented, expected)


async def send_json(send: Callable, status: int, body: dict, headers: list[tuple[bytes, bytes]] = ()) -> None:
    payload = orjson.dumps(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
            + list(headers),
        }
    )
    await send({"type": "http.response.body", "body": payload})


class TokenAuthMiddleware:
    """Writes need the write token when one is set; reads need the read or write token when a read token is set.

    Dash's callback POSTs (under /dashboard/) are reads. Tokens are never logged.
    """

    def __init__(self, app: Callable, write_token: str | None, read_token: str | None):
        self.app = app
        self.write_token = write_token.encode() if write_token else None
        self.read_token = read_token.encode() if read_token else None

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        is_read = scope["method"] in READ_METHODS or path == "/dashboard" or path.startswith("/dashboard/")
        if is_read:
            needed = self.read_token is not None
            accepted = (self.read_token, self.write_token)
        else:
            needed = self.write_token is not None
            accepted = (self.write_token,)
        if needed:
            presented = _presented_token(scope["headers"])
            if not any(_matches(presented, t) for t in accepted):
                challenge = b'Basic realm="parallax"' if path.startswith("/dashboard") else b'Bearer realm="parallax"'
                what = "read" if is_read else "write"
                detail = (
                    f"this {what} needs a token: send `Authorization: Bearer <token>`"
                    if presented is None
                    else "the token is not valid for this request"
                )
                await send_json(send, 401, {"detail": detail}, [(b"www-authenticate", challenge)])
                return
        await self.app(scope, receive, send)


class BodyTooLarge(HTTPException):
    """Raised from ``receive``; an HTTPException so that route handlers turn it into the 413 itself."""

    def __init__(self, max_bytes: int):
        super().__init__(413, f"request body is larger than the limit of {max_bytes} bytes (PARALLAX_MAX_BODY_BYTES)")


class BodyLimitMiddleware:
    """413 for a body over the limit, whether it declares its length or streams it."""

    def __init__(self, app: Callable, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_json(send, 400, {"detail": "invalid Content-Length header"})
                    return
                if declared > self.max_bytes:
                    await self._too_large(send)
                    return
        received = 0
        started = False

        async def limited_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLarge:
            if not started:
                await self._too_large(send)

    async def _too_large(self, send: Callable) -> None:
        await send_json(send, 413, {"detail": BodyTooLarge(self.max_bytes).detail})


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for n, v in headers:
        if n == name:
            return v.decode("latin-1")
    return None


def host_name(host_header: str) -> str:
    """The name in a Host header (or an origin's netloc), without its port, lower case: ``[::1]:8050`` → ``::1``."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostAllowListMiddleware:
    """A request whose Host header names a host the server was not told it is reached by is refused (400).

    DNS rebinding: a page on evil.example re-points its own name at 127.0.0.1, and the browser then sends it,
    as same-origin, to the server behind that address, with ``Host: evil.example``. A browser that reaches the
    server by its IP address sends that address: IP literals are always allowed, as are localhost, the address
    it listens on, the host of ``PARALLAX_EXTERNAL_URL`` and the names in ``PARALLAX_ALLOWED_HOSTS`` (``*``:
    any). A request without a Host header (HTTP/1.0) is not a browser's. ``/healthz`` answers any Host.
    """

    def __init__(self, app: Callable, allowed: Iterable[str]):
        self.app = app
        names = {host_name(a) for a in allowed if a}
        self.any = "*" in names
        self.allowed = frozenset(names | {"localhost"})

    def allows(self, host_header: str | None) -> bool:
        if host_header is None or self.any:
            return True
        name = host_name(host_header)
        return name in self.allowed or name.endswith(".localhost") or _is_ip(name)

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        host = _header(scope["headers"], b"host")
        if not self.allows(host):
            detail = (f"this server does not answer to the host {host_name(host or '')!r}: add it to PARALLAX_ALLOWED_HOSTS "
                      "(a guard against DNS rebinding)")
            await send_json(send, 400, {"detail": detail})
            return
        await self.app(scope, receive, send)


class CrossOriginMiddleware:
    """A write sent by a browser from another origin is refused (403), as Go's ``http.CrossOriginProtection``.

    A page elsewhere can make the visitor's browser POST (``text/plain``, no preflight) to a server on their
    machine or network: a Pushgateway push that creates a run and stores a NaN, an acknowledgement. Browsers say
    where a request comes from: ``Sec-Fetch-Site`` (same-origin or none: typed by the user) or else ``Origin``,
    which must name this server's own host (or ``PARALLAX_EXTERNAL_URL``'s origin, behind a proxy). A request
    with neither is not from a browser's page (curl, prometheus_client, the Python client): it goes on, to the
    token check.
    """

    def __init__(self, app: Callable, trusted_origins: Iterable[str] = ()):
        self.app = app
        self.trusted = frozenset(o.rstrip("/").lower() for o in trusted_origins if o)

    def allows(self, headers: list[tuple[bytes, bytes]]) -> bool:
        site = _header(headers, b"sec-fetch-site")
        origin = _header(headers, b"origin")
        if origin is not None and origin.rstrip("/").lower() in self.trusted:
            return True
        if site is not None:
            return site.strip().lower() in ("same-origin", "none")
        if origin is None:
            return True
        host = _header(headers, b"host")
        parts = urlsplit(origin.strip())
        return host is not None and parts.scheme in ("http", "https") and parts.netloc.lower() == host.strip().lower()

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] in READ_METHODS or self.allows(scope["headers"]):
            await self.app(scope, receive, send)
            return
        detail = ("a write from another origin (a page elsewhere made this browser send it) is refused; send it "
                  "from the dashboard itself, or without a browser")
        await send_json(send, 403, {"detail": detail})
