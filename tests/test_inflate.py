"""Compressed bodies on the Pushgateway and remote-write paths: refused with a 413 before they inflate past the
body limit (a 15.5 MiB framed snappy body once inflated whole: ~700 MB of RSS per request)."""

from __future__ import annotations

import gzip
import types
import zlib
from typing import Any

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parallax.ingest import inflate as inflate_module
from parallax.ingest.inflate import TooLarge, framed_size, gunzip, snappy_block, snappy_framed
from parallax.ingest.prometheus import PromInputError
from tests.conftest import make_client

LIMIT = 64 * 1024
#: Text-format lines that compress well: about 1 MiB once inflated, some tens of kB compressed.
BOMB_TEXT = b"# TYPE step gauge\nstep 1\n" + b"entropy 1.5\n" * 90_000


class Spy:
    """Stands in for ``cramjam`` and ``zlib`` in ingest.inflate: records what the decompressors were asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        spy = self

        class Decompressor:
            def __init__(self, wbits: int) -> None:
                self.real = zlib.decompressobj(wbits=wbits)

            def decompress(self, data: bytes, max_length: int = 0) -> bytes:
                spy.calls.append(("zlib", max_length))
                return self.real.decompress(data, max_length)

            @property
            def eof(self) -> bool:
                return self.real.eof

        def named(name: str, real: Any) -> Any:
            def call(body: bytes) -> Any:
                spy.calls.append((name, len(body)))
                return real(body)
            return call

        self.cramjam = types.SimpleNamespace(snappy=types.SimpleNamespace(
            decompress=named("snappy", cramjam.snappy.decompress),
            decompress_raw=named("snappy_raw", cramjam.snappy.decompress_raw)))
        self.zlib = types.SimpleNamespace(decompressobj=Decompressor, error=zlib.error)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    s = Spy()
    monkeypatch.setattr(inflate_module, "cramjam", s.cramjam)
    monkeypatch.setattr(inflate_module, "zlib", s.zlib)
    return s


STREAM = b"\xff\x06\x00\x00sNaPpY"  # the framing format's stream identifier


def framed(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress(data))


def block(data: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(data))


# -- the functions --------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200_000) | st.binary(max_size=50).map(lambda b: b * 3000))
def test_the_framed_size_read_from_the_headers_is_what_inflates(data):
    body = framed(data)
    assert framed_size(body) == len(data)
    assert snappy_framed(body, len(data)) == data


def test_a_framed_snappy_body_over_the_limit_is_refused_without_inflating(spy):
    body = framed(BOMB_TEXT)
    assert len(body) < LIMIT < len(BOMB_TEXT)
    with pytest.raises(TooLarge, match=f"would be {len(BOMB_TEXT)} bytes"):
        snappy_framed(body, LIMIT)
    assert spy.calls == []


def test_a_snappy_block_claiming_more_than_the_limit_is_refused_without_inflating(spy):
    body = block(BOMB_TEXT)
    with pytest.raises(TooLarge):
        snappy_block(body, LIMIT)
    assert spy.calls == []
    # a header that lies about a smaller size: the decoder refuses the block, it does not grow past it
    small = bytes([100]) + body[3:]  # BOMB_TEXT's length takes 3 varint bytes
    with pytest.raises(PromInputError) as refused:
        snappy_block(small, LIMIT)
    assert not isinstance(refused.value, TooLarge)


def test_gzip_is_never_asked_for_more_than_the_limit_and_a_byte(spy):
    body = gzip.compress(BOMB_TEXT)
    with pytest.raises(TooLarge):
        gunzip(body, LIMIT)
    assert spy.calls == [("zlib", LIMIT + 1)]
    assert gunzip(gzip.compress(b"step 1\n"), LIMIT) == b"step 1\n"


@pytest.mark.parametrize("body, says", [
    (b"\xff\x06\x00\x00sNaPpX" + b"\x01\x05\x00\x00abcde", "no stream identifier"),
    (framed(b"abc")[:-2], "cut short"),
    (framed(b"abc") + b"\x01\x00", "header is cut short"),
    (STREAM + b"\x05\x01\x00\x00x", "reserved chunk type 0x05"),
    (STREAM + b"\x00\x04\x00\x00abcd", "compressed chunk without a valid length"),
    (STREAM + b"\x00\x08\x00\x00abcd\xff\xff\xff\x7f", "compressed chunk without a valid length"),
    (STREAM + b"\x01\x02\x00\x00ab", "uncompressed chunk of a length the format forbids"),
])
def test_broken_framing_is_a_400_saying_where(body, says):
    with pytest.raises(PromInputError, match=says) as refused:
        snappy_framed(body, LIMIT)
    assert not isinstance(refused.value, TooLarge)


def test_skippable_chunks_and_an_empty_body_are_read():
    assert snappy_framed(framed(b"ab") + b"\xfe\x03\x00\x00pad" + b"\x80\x00\x00\x00", LIMIT) == b"ab"
    assert snappy_framed(b"", LIMIT) == b""


# -- through the routes ---------------------------------------------------------------------------------------------


@pytest.fixture
def client(sqlite_url):
    with make_client(database_url=sqlite_url, max_body_bytes=LIMIT) as c:
        yield c


@pytest.mark.parametrize("encoding, compress", [("snappy", framed), ("gzip", gzip.compress)])
def test_a_push_that_inflates_past_the_limit_is_a_413_and_nothing_inflates_past_it(client, spy, encoding, compress):
    body = compress(BOMB_TEXT)
    assert len(body) < LIMIT
    r = client.put("/metrics/job/bomb", content=body, headers={"content-encoding": encoding})
    assert r.status_code == 413, r.text
    assert "PARALLAX_MAX_BODY_BYTES" in r.json()["detail"][0]["msg"]
    assert all(name == "zlib" and asked <= LIMIT + 1 for name, asked in spy.calls)  # snappy: not called at all
    assert client.get("/api/v1/runs").json()["runs"] == []
    small = compress(b"# TYPE step gauge\nstep 3\nentropy 1.5\n")
    assert client.put("/metrics/job/ok", content=small, headers={"content-encoding": encoding}).status_code == 200


def test_a_remote_write_that_claims_more_than_the_limit_is_a_413_before_inflating(client, spy):
    r = client.post("/api/v1/prom/write", content=block(BOMB_TEXT),
                    headers={"content-type": "application/x-protobuf", "content-encoding": "snappy"})
    assert r.status_code == 413 and "PARALLAX_MAX_BODY_BYTES" in r.json()["detail"][0]["msg"]
    assert spy.calls == []
