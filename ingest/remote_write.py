"""Prometheus remote-write 1.0: snappy (block format) + protobuf ``prometheus.WriteRequest``.

No protoc here: the message types are built at import time from a
``FileDescriptorProto`` whose fields are exactly those of Prometheus's
``prompb/remote.proto`` and ``prompb/types.proto`` (proto3, package
``prometheus``). Native histograms (TimeSeries field 4) and the other fields
Parallax does not read are left out of the descriptor: protobuf keeps them as
unknown fields and they are ignored.

A second, lenient copy of the same messages declares the label strings as
``bytes``: proto3 refuses a string that is not UTF-8 without saying where, so
when the strict parse fails the lenient one finds the series and label at fault.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import cramjam
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from parallax.ingest.inflate import snappy_block
from parallax.ingest.prometheus import PromInputError

_F = descriptor_pb2.FieldDescriptorProto


def _file(name: str, package: str, string_type: int) -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name=name, package=package, syntax="proto3")

    def message(msg_name: str, *fields: tuple[str, int, int, int, str | None]) -> descriptor_pb2.DescriptorProto:
        m = f.message_type.add(name=msg_name)
        for fname, number, ftype, label, type_name in fields:
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                fd.type_name = f".{package}.{type_name}"
        return m

    opt, rep = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    message("Label", ("name", 1, string_type, opt, None), ("value", 2, string_type, opt, None))
    message("Sample", ("value", 1, _F.TYPE_DOUBLE, opt, None), ("timestamp", 2, _F.TYPE_INT64, opt, None))
    message(
        "Exemplar",
        ("labels", 1, _F.TYPE_MESSAGE, rep, "Label"),
        ("value", 2, _F.TYPE_DOUBLE, opt, None),
        ("timestamp", 3, _F.TYPE_INT64, opt, None),
    )
    message(
        "TimeSeries",
        ("labels", 1, _F.TYPE_MESSAGE, rep, "Label"),
        ("samples", 2, _F.TYPE_MESSAGE, rep, "Sample"),
        ("exemplars", 3, _F.TYPE_MESSAGE, rep, "Exemplar"),
    )
    meta = message(
        "MetricMetadata",
        ("type", 1, _F.TYPE_ENUM, opt, "MetricMetadata.MetricType"),
        ("metric_family_name", 2, string_type, opt, None),
        ("help", 4, string_type, opt, None),
        ("unit", 5, string_type, opt, None),
    )
    kind = meta.enum_type.add(name="MetricType")
    for i, v in enumerate(("UNKNOWN", "COUNTER", "GAUGE", "HISTOGRAM", "GAUGEHISTOGRAM", "SUMMARY", "INFO", "STATESET")):
        kind.value.add(name=v, number=i)
    wr = message(
        "WriteRequest",
        ("timeseries", 1, _F.TYPE_MESSAGE, rep, "TimeSeries"),
        ("metadata", 3, _F.TYPE_MESSAGE, rep, "MetricMetadata"),
    )
    wr.reserved_range.add(start=2, end=3)
    return f


def _classes(name: str, package: str, string_type: int) -> dict[str, type]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file(name, package, string_type))
    names = ("WriteRequest", "TimeSeries", "Label", "Sample", "Exemplar", "MetricMetadata")
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{n}")) for n in names}


_STRICT = _classes("prometheus/remote.proto", "prometheus", _F.TYPE_STRING)
_LENIENT = _classes("prometheus_lenient/remote.proto", "prometheus", _F.TYPE_BYTES)

#: The message classes (tests and the benchmark build request bodies with them).
WriteRequest = _STRICT["WriteRequest"]
TimeSeries = _STRICT["TimeSeries"]
Label = _STRICT["Label"]
Sample = _STRICT["Sample"]
MetricMetadata = _STRICT["MetricMetadata"]


#: Prometheus's staleness marker: a NaN with its own bit pattern (``value.StaleNaN``), written when a series
#: ends (its target went away, or it left the scrape). It is not a measurement.
STALE_NAN_BITS = 0x7FF0000000000002
_STALE_BYTES = struct.pack("<Q", STALE_NAN_BITS)
STALE_NAN: float = struct.unpack("<d", _STALE_BYTES)[0]


def is_stale_marker(value: float) -> bool:
    """Whether ``value`` is Prometheus's staleness marker (any other NaN is a real, non-finite sample)."""
    return value != value and struct.pack("<d", value) == _STALE_BYTES


@dataclass(frozen=True, slots=True)
class Series:
    labels: tuple[tuple[str, str], ...]  # as sent
    timestamps: list[int]  # ms, of the real samples
    values: list[float]
    stale: list[int] = field(default_factory=list)  # ms: timestamps of staleness markers (left out of the samples)


def decompress(body: bytes, max_bytes: int) -> bytes:
    """Snappy block format, as Prometheus sends it; refused before allocating when it claims more than ``max_bytes``."""
    return snappy_block(body, max_bytes)


def parse(data: bytes) -> list[Series]:
    """The time series of a serialized WriteRequest, or PromInputError saying what is wrong."""
    req = WriteRequest()
    try:
        req.ParseFromString(data)
    except DecodeError:
        raise PromInputError(_why_undecodable(data)) from None
    out = []
    for ts in req.timeseries:
        samples = ts.samples
        stamps = [s.timestamp for s in samples]
        values = [s.value for s in samples]
        stale: list[int] = []
        if any(v != v for v in values) and any(is_stale_marker(v) for v in values):
            stale = [t for t, v in zip(stamps, values) if is_stale_marker(v)]
            kept = [(t, v) for t, v in zip(stamps, values) if not is_stale_marker(v)]
            stamps, values = [t for t, _ in kept], [v for _, v in kept]
        out.append(Series(labels=tuple((label.name, label.value) for label in ts.labels), timestamps=stamps,
                          values=values, stale=stale))
    return out


def _why_undecodable(data: bytes) -> str:
    lenient = _LENIENT["WriteRequest"]()
    try:
        lenient.ParseFromString(data)
    except DecodeError:
        return "corrupt protobuf: the body is not a prometheus.WriteRequest (remote write 1.0)"
    for i, ts in enumerate(lenient.timeseries):
        for label in ts.labels:
            for what, raw in (("name", label.name), ("value", label.value)):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    shown = label.name.decode("utf-8", "replace")
                    return (
                        f"time series #{i}: the {what} of label {shown!r} is not valid UTF-8 "
                        f"(byte 0x{raw[exc.start]:02x} at offset {exc.start})"
                    )
    for i, meta in enumerate(lenient.metadata):
        for raw in (meta.metric_family_name, meta.help, meta.unit):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return f"metadata #{i}: a string is not valid UTF-8"
    return "corrupt protobuf: the body is not a prometheus.WriteRequest (remote write 1.0)"


def encode(series: list[tuple[dict[str, str], list[tuple[float, int]]]]) -> bytes:
    """A snappy-compressed WriteRequest of ``[(labels, [(value, timestamp_ms)])]`` (for tests and the benchmark;
    ``STALE_NAN`` as a value is a staleness marker)."""
    req = WriteRequest()
    for labels, samples in series:
        ts = req.timeseries.add()
        for name in sorted(labels):
            ts.labels.add(name=name, value=labels[name])
        for value, t in samples:
            ts.samples.add(value=value, timestamp=t)
    return bytes(cramjam.snappy.compress_raw(req.SerializeToString()))
