"""Compressed request bodies, inflated only within a size limit: what a body would inflate to is known, or
bounded, before the memory is taken.

- gzip: one streaming inflate whose output is capped at the limit plus one byte (more means too large).
- snappy, framing format (``prometheus_client``'s ``compression="snappy"``): every chunk says its length, and a
  compressed chunk's block starts with a varint of its uncompressed length; their sum is checked first.
- snappy, block format (remote write): the varint at its start is the uncompressed length, checked first.

A 15.5 MiB framed snappy body once inflated whole before its size was looked at: 700 MB of RSS per request.
"""

from __future__ import annotations

import zlib

import cramjam

from parallax.ingest.prometheus import PromInputError


class TooLarge(PromInputError):
    """The uncompressed body is over the limit (a 413)."""


def _over(size: int | str, max_bytes: int) -> TooLarge:
    return TooLarge(f"the uncompressed body would be {size} bytes, over the limit of {max_bytes} (PARALLAX_MAX_BODY_BYTES)")


def inflate(body: bytes, encoding: str, max_bytes: int) -> bytes:
    """``body`` under its Content-Encoding (empty or ``identity``, ``gzip``, ``snappy`` framed), at most ``max_bytes``."""
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        return gunzip(body, max_bytes)
    if encoding == "snappy":
        return snappy_framed(body, max_bytes)
    raise PromInputError(f"unsupported Content-Encoding {encoding!r}: send the body plain, gzip or snappy")


def gunzip(body: bytes, max_bytes: int) -> bytes:
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(body, max_bytes + 1)  # zlib stops there: never more than the limit and a byte
    except zlib.error as exc:
        raise PromInputError(f"corrupt gzip body: {exc}") from None
    if len(out) > max_bytes:
        raise _over(f"more than {max_bytes}", max_bytes)
    if not d.eof:
        raise PromInputError("corrupt gzip body: truncated")
    return out


def varint(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The little-endian base-128 varint at ``pos`` (at most 5 bytes, 32 bits, as snappy writes its length) and
    the position after it."""
    value = 0
    for i in range(5):
        if pos + i >= end:
            break
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return value, pos + i + 1
    raise PromInputError("corrupt snappy data: no uncompressed length at the start of a block")


def snappy_block(body: bytes, max_bytes: int) -> bytes:
    """Snappy's block format, as Prometheus's remote write sends it."""
    if not body:
        raise PromInputError("empty body: expected a snappy-compressed protobuf WriteRequest")
    size, _ = varint(body, 0, len(body))
    if size > max_bytes:
        raise _over(size, max_bytes)
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except Exception as exc:  # cramjam raises its own error types
        raise PromInputError(f"corrupt snappy data (expected the block format, as Prometheus sends): {exc}") from None


#: The framing format's chunk types (github.com/google/snappy, framing_format.txt).
_STREAM_ID, _COMPRESSED, _UNCOMPRESSED, _PADDING = 0xFF, 0x00, 0x01, 0xFE
_STREAM_MAGIC = b"sNaPpY"
#: No chunk holds more than this uncompressed (the format's own bound).
_CHUNK_MAX = 65_536


def framed_size(body: bytes) -> int:
    """What a framing-format body inflates to, from its chunk headers and blocks' length varints, without
    inflating anything; PromInputError when the framing is broken."""
    view, end = memoryview(body), len(body)
    if not body:
        return 0
    if not body.startswith(bytes([_STREAM_ID, 6, 0, 0]) + _STREAM_MAGIC):
        raise PromInputError("corrupt snappy body (expected the framing format): no stream identifier at the start")
    pos = total = 0
    while pos < end:
        if pos + 4 > end:
            raise PromInputError("corrupt snappy body: a chunk header is cut short")
        kind = view[pos]
        length = int.from_bytes(view[pos + 1:pos + 4], "little")
        start, pos = pos + 4, pos + 4 + length
        if pos > end:
            raise PromInputError("corrupt snappy body: a chunk is cut short")
        if kind == _COMPRESSED:
            size = varint(view, start + 4, pos)[0] if length > 4 else -1  # after the 4-byte checksum
            if not 0 <= size <= _CHUNK_MAX:
                raise PromInputError("corrupt snappy body: a compressed chunk without a valid length")
            total += size
        elif kind == _UNCOMPRESSED:
            if not 4 <= length <= _CHUNK_MAX + 4:
                raise PromInputError("corrupt snappy body: an uncompressed chunk of a length the format forbids")
            total += length - 4
        elif kind == _STREAM_ID:
            if bytes(view[start:pos]) != _STREAM_MAGIC:
                raise PromInputError("corrupt snappy body: a bad stream identifier")
        elif kind < 0x80:  # 0x02-0x7f: reserved, unskippable
            raise PromInputError(f"corrupt snappy body: reserved chunk type {kind:#04x}")
        # 0x80-0xfe (padding included): skippable
    return total


def snappy_framed(body: bytes, max_bytes: int) -> bytes:
    """Snappy's framing format, refused before inflating when its chunks add up to more than ``max_bytes``."""
    size = framed_size(body)
    if size > max_bytes:
        raise _over(size, max_bytes)
    try:
        out = bytes(cramjam.snappy.decompress(body))
    except Exception as exc:
        raise PromInputError(f"corrupt snappy body (expected the framing format): {exc}") from None
    if len(out) > max_bytes:  # the blocks' lengths lied and the decoder did not notice: still refused
        raise _over(len(out), max_bytes)
    return out
