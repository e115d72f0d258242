"""Hostile input: no input makes Parallax answer 5xx; every refusal is a 4xx with a message.

    .venv/bin/python -m bench.fuzz [--quick]

- schemathesis against Parallax's own OpenAPI schema: every operation, with
  data that fits the schema (on a run that exists, and on random ids) and
  data that does not;
- hypothesis against the Prometheus inputs, through the routes: Pushgateway
  text pushes (grammar-built and random text, random grouping paths, gzip /
  snappy / bogus encodings) and remote-write bodies (random bytes, snappy of
  random bytes, valid-ish WriteRequests built with the module's own message
  types);
- hypothesis against the parsers themselves (ingest/prometheus.py,
  ingest/remote_write.py, ingest/points.py): a parsed result or the module's
  own error type (PromInputError, InvalidInput), never another exception.

Everything runs in-process on a temporary SQLite database (a PostgreSQL URL
may be given). tests/test_fuzz_api.py and tests/test_fuzz_parsers.py run the
same checks with CI-sized example counts; ``measure`` (called by bench.run)
runs them with larger ones and reports how many inputs were tried and how many
5xx were seen (the target: 0).
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import cramjam
import orjson
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from parallax.ingest import remote_write
from parallax.ingest.points import InvalidInput, parse_json, parse_ndjson
from parallax.ingest.prometheus import PromInputError, decode_text, parse_grouping_path, parse_text

#: Examples per schemathesis (operation, mode), and per hypothesis property, as (schemathesis, hypothesis):
#: sized so that ``measure`` stays near a minute on 2 cores (schemathesis spends ~30 ms generating a case).
BENCH_EXAMPLES = (12, 400)
BENCH_EXAMPLES_QUICK = (4, 100)
PROM_HEADERS = {"content-type": "application/x-protobuf", "content-encoding": "snappy"}


def hypothesis_settings(max_examples: int, **extra: Any) -> settings:
    """Bounded and deterministic (``derandomize``): the same inputs on every run, so CI does not flake."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        **extra,
    )


# -- what an answer must look like -------------------------------------------------------------


def problem_with(status: int, content: bytes, content_type: str | None) -> str | None:
    """Why an answer breaks the contract (a 5xx; a 4xx without a JSON ``detail`` message), or None."""
    if status >= 500:
        return f"HTTP {status}"
    if status < 400:
        return None
    if not (content_type or "").startswith("application/json"):
        return f"HTTP {status} with content type {content_type!r}, not JSON"
    try:
        doc = orjson.loads(content)
    except orjson.JSONDecodeError:
        return f"HTTP {status} with a body that is not JSON: {content[:100]!r}"
    detail = doc.get("detail") if isinstance(doc, dict) else None
    if isinstance(detail, str) and detail:
        return None
    if isinstance(detail, list) and detail and all(isinstance(d, dict) and isinstance(d.get("msg"), str) and d["msg"] for d in detail):
        return None
    return f"HTTP {status} without a 'detail' message: {content[:200]!r}"


#: The contract failures a tally keeps, each with how to reproduce it (the rest are counted, not kept).
MAX_FAILURES = 50


@dataclass
class Tally:
    """Inputs tried per source, and every answer that broke the contract (with how to reproduce it)."""

    examples: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    server_errors: int = 0

    def record(self, source: str, status: int | None, problem: str | None, reproduce: str) -> None:
        self.examples[source] += 1
        self.statuses[f"{status // 100}xx" if status is not None else "exception"] += 1
        if status is None or status >= 500:
            self.server_errors += 1
        if problem is not None and len(self.failures) < MAX_FAILURES:
            self.failures.append(f"{source}: {problem}\n    {reproduce[:600]}")

    def state(self) -> dict:
        """What it counted, as plain JSON values (a pytest-xdist worker hands it back to the controller this way)."""
        return {"examples": dict(self.examples), "statuses": dict(self.statuses), "failures": list(self.failures),
                "server_errors": self.server_errors}

    def merge(self, state: dict) -> None:
        """Add another tally's ``state()`` to this one (failures kept up to MAX_FAILURES)."""
        self.examples += Counter(state["examples"])
        self.statuses += Counter(state["statuses"])
        self.failures.extend(state["failures"][: max(0, MAX_FAILURES - len(self.failures))])
        self.server_errors += state["server_errors"]

    def summary(self) -> dict:
        return {
            "schemathesis_examples": sum(n for k, n in self.examples.items() if k.startswith("schemathesis")),
            "hypothesis_examples": sum(n for k, n in self.examples.items() if k.startswith("hypothesis")),
            "examples": dict(sorted(self.examples.items())),
            "statuses": dict(sorted(self.statuses.items())),
            "server_errors": self.server_errors,
            "contract_failures": len(self.failures),
            "failures": self.failures[:10],
        }


# -- schemathesis against the OpenAPI schema ----------------------------------------------------


def fuzz_api(app: Any, tally: Tally, max_examples: int) -> None:
    """Every operation of the app's schema, in three modes: valid data on a run that exists, valid data, invalid data."""
    import schemathesis
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.python import asgi

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FastAPI warns of the Pushgateway route's shared operation id
        schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", app)
    try:
        with asgi.get_client(app) as client:
            run = client.post("/api/v1/runs", json={"project": "fuzz", "name": "run", "config": {"k": 8}})
            run_id = run.json()["id"]
            client.post(f"/api/v1/runs/{run_id}/metrics", json={"points": [{"step": s, "metrics": {"entropy": 1.0, "loss": 0.5}} for s in range(5)]})
            for result in schema.get_all_operations():
                operation = result.ok()
                modes = [(GenerationMode.POSITIVE, None), (GenerationMode.NEGATIVE, None)]
                if "{run_id}" in operation.path:
                    modes.insert(0, (GenerationMode.POSITIVE, {"run_id": run_id}))
                for mode, path_parameters in modes:
                    source = f"schemathesis {operation.label} ({mode.value}{', existing run' if path_parameters else ''})"
                    try:
                        _cases(operation.as_strategy(mode, path_parameters=path_parameters), client, source, tally, max_examples)
                    except Unsatisfiable:
                        pass  # an operation without parameters has fewer distinct inputs than asked for
    finally:
        asgi.shutdown_lifespans()


def _cases(strategy: Any, client: Any, source: str, tally: Tally, max_examples: int) -> None:
    @given(case=strategy)
    @hypothesis_settings(max_examples)
    def call(case: Any) -> None:
        try:
            response = case.call(session=client)
        except Exception as exc:  # the app raised: a 500 for a real client
            tally.record(source, None, f"{type(exc).__name__}: {exc}", case.as_curl_command())
            return
        ctype = (response.headers.get("content-type") or [None])[0]  # schemathesis keeps every value of a header
        problem = problem_with(response.status_code, response.content, ctype)
        tally.record(source, response.status_code, problem, case.as_curl_command())

    call()


# -- strategies for the Prometheus inputs -----------------------------------------------------------

_NAME_CHARS = st.sampled_from("abcxyz_:09AZ")
metric_names = st.one_of(
    st.sampled_from(["step", "global_step", "entropy", "loss", "reqs_total", "lat_bucket", "x_created", "run", "a"]),
    st.text(_NAME_CHARS, min_size=1, max_size=12),
    st.text(min_size=0, max_size=8),
)
label_names = st.one_of(
    st.sampled_from(["run", "project", "job", "instance", "le", "k", "quantile", "__name__", "rank"]),
    st.text(_NAME_CHARS, min_size=1, max_size=6),
    st.text(max_size=4),
)
label_values = st.one_of(st.text(max_size=12), st.sampled_from(["", "0.5", "+Inf", 'q"z', "a\\b", "line\nbreak", "é🚀"]))
sample_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "0x10", "1_000", "", "--1", "9" * 400]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
timestamps = st.one_of(
    st.integers(min_value=-(2**65), max_value=2**65).map(str),
    st.sampled_from(["", "1.5", "1e3", "1764000000000", "9" * 400]),
)


@st.composite
def exposition_lines(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return "# TYPE " + draw(metric_names) + " " + draw(st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", "bogus", ""]))
    if kind == 1:
        return "# HELP " + draw(metric_names) + " " + draw(st.text(max_size=10))
    if kind == 2:
        return draw(st.text(max_size=30))  # anything at all
    labels = draw(st.lists(st.tuples(label_names, label_values), max_size=3))
    inner = ",".join(f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), chr(92) + "n")}"' for k, v in labels)
    head = draw(metric_names) + ("{" + inner + "}" if labels or draw(st.booleans()) else "")
    line = head + " " + draw(sample_values)
    if draw(st.booleans()):
        line += " " + draw(timestamps)
    return line


exposition_texts = st.lists(exposition_lines(), max_size=12).map("\n".join)
grouping_paths = st.one_of(
    st.lists(st.one_of(st.sampled_from(["job", "run", "project", "job@base64", "x@base64", "=", "%ZZ", "%C3%A9", "%FF", "é"]), st.text(max_size=8)), min_size=0, max_size=6).map("/".join),
    st.text(max_size=30),
)


@st.composite
def push_requests(draw: st.DrawFn) -> tuple[str, str, bytes, dict[str, str]]:
    """(method, path, body, headers) of a Pushgateway request."""
    path = draw(st.one_of(st.just("job/fuzz/run/push"), st.just("job/fuzz"), grouping_paths))
    text = draw(st.one_of(exposition_texts, st.text(max_size=200)))
    body = text.encode("utf-8") if draw(st.integers(0, 4)) else draw(st.binary(max_size=200))
    encoding = draw(st.sampled_from(["", "", "gzip", "snappy", "deflate", "GZIP"]))
    if encoding == "gzip" and draw(st.booleans()):
        body = gzip.compress(body)
    elif encoding == "snappy" and draw(st.booleans()):
        body = bytes(cramjam.snappy.compress(body))
    headers = {"content-type": draw(st.sampled_from(["text/plain; version=0.0.4", "application/openmetrics-text", "", "application/json", "application/vnd.google.protobuf"]))}
    if encoding:
        headers["content-encoding"] = encoding
    # Percent-encoded as a client sends it, but a '%' stays as drawn, so invalid escapes get through.
    return draw(st.sampled_from(["POST", "PUT", "POST", "DELETE"])), "/metrics/" + quote(path, safe="/%@=:+"), body, headers


#: Label sets of valid-ish remote-write series: usually naming a run, sometimes not; values from the edges.
rw_labels = st.dictionaries(label_names, label_values, max_size=4).flatmap(
    lambda extra: st.builds(
        lambda name, run, with_run: {**extra, "__name__": name, **({"run": run} if with_run else {})},
        metric_names, st.sampled_from(["rw", "rw2", "", "é🚀", "x" * 250]), st.integers(0, 5).map(bool),
    )
)


@st.composite
def write_requests(draw: st.DrawFn, now_ms: int) -> bytes:
    """A serialized WriteRequest built with remote_write's own message types (not compressed)."""
    req = remote_write.WriteRequest()
    for _ in range(draw(st.integers(0, 4))):
        ts = req.timeseries.add()
        labels = draw(rw_labels)
        for name in draw(st.permutations(sorted(labels))):
            ts.labels.add(name=name, value=labels[name])
        if draw(st.integers(0, 6)) == 0:
            ts.labels.add(name="__name__", value="dup")
        base = draw(st.one_of(st.just(now_ms), st.integers(min_value=-(2**63), max_value=2**63 - 1)))
        for _ in range(draw(st.integers(0, 4))):
            t = draw(st.one_of(st.integers(-3, 3).map(lambda d: base + d * 1000), st.integers(min_value=-(2**63), max_value=2**63 - 1)))
            ts.samples.add(value=draw(st.floats()), timestamp=max(-(2**63), min(2**63 - 1, t)))
    return req.SerializeToString()


@st.composite
def remote_write_bodies(draw: st.DrawFn, now_ms: int) -> tuple[bytes, dict[str, str]]:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        body = draw(st.binary(max_size=300))
    elif kind == 1:
        body = bytes(cramjam.snappy.compress_raw(draw(st.binary(max_size=300))))
    else:
        raw = draw(write_requests(now_ms))
        if draw(st.integers(0, 7)) == 0 and raw:  # corrupt a byte of a valid message
            i = draw(st.integers(0, len(raw) - 1))
            raw = raw[:i] + bytes([draw(st.integers(0, 255))]) + raw[i + 1 :]
        body = bytes(cramjam.snappy.compress_raw(raw))
    headers = dict(PROM_HEADERS)
    if draw(st.integers(0, 9)) == 0:
        headers = draw(st.sampled_from([{}, {"content-encoding": "gzip"}, {"content-type": "application/x-protobuf;proto=io.prometheus.write.v2.Request"}, {"content-type": "text/plain"}]))
    return body, headers


# -- hypothesis through the routes -------------------------------------------------------------------


def fuzz_prometheus_routes(client: Any, tally: Tally, max_examples: int) -> None:
    """Pushgateway and remote-write requests through a TestClient (``raise_server_exceptions=False``)."""
    now_ms = int(time.time() * 1000)

    @given(push_requests())
    @hypothesis_settings(max_examples)
    def push(request: tuple[str, str, bytes, dict[str, str]]) -> None:
        method, path, body, headers = request
        r = client.request(method, path, content=body if method != "DELETE" else None, headers=headers)
        tally.record("hypothesis Pushgateway route", r.status_code, problem_with(r.status_code, r.content, r.headers.get("content-type")),
                     f"{method} {path!r} headers={headers} body={body[:300]!r}")

    @given(remote_write_bodies(now_ms))
    @hypothesis_settings(max_examples)
    def write(request: tuple[bytes, dict[str, str]]) -> None:
        body, headers = request
        r = client.post("/api/v1/prom/write", content=body, headers=headers)
        tally.record("hypothesis remote-write route", r.status_code, problem_with(r.status_code, r.content, r.headers.get("content-type")),
                     f"POST /api/v1/prom/write headers={headers} body={body[:300]!r}")

    push()
    write()


# -- hypothesis against the parsers ---------------------------------------------------------------------


def _outcome(source: str, tally: Tally, parse: Callable[[], Any], allowed: tuple[type[BaseException], ...], shown: Any) -> None:
    """A parsed result (counted as a 2xx) or the module's own error (a 4xx); any other exception is a failure."""
    try:
        parse()
    except allowed:
        tally.record(source, 400, None, "")
    except Exception as exc:
        tally.record(source, None, f"{type(exc).__name__}: {exc}", repr(shown))
    else:
        tally.record(source, 200, None, "")


def json_bodies() -> st.SearchStrategy[bytes]:
    """Ingest bodies: random bytes, JSON-ish text, and batches with hostile names, steps, values and nesting."""
    json_values = st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=10),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
        max_leaves=10,
    )
    point = st.fixed_dictionaries(
        {"step": st.one_of(st.integers(min_value=-5, max_value=2**64), st.sampled_from([2**63 - 1, 2**63, 1.5, "1", None])),
         "metrics": st.dictionaries(st.one_of(metric_names, st.sampled_from(["entropía", "a{b=\"c\"}", "x" * 201])), st.one_of(st.floats(), st.integers(min_value=-(2**70), max_value=2**70), json_values), max_size=4)},
        optional={"time": st.one_of(st.floats(), st.integers()), "extra": json_values},
    )
    batches = st.lists(point, max_size=4).map(lambda points: json.dumps({"points": points}).encode("utf-8"))
    return st.one_of(
        st.binary(max_size=200),
        st.text(max_size=100).map(lambda s: s.encode("utf-8", "surrogatepass")),
        batches,
        st.sampled_from([b'{"points": [{"step": 1, "metrics": {"a": NaN, "b": Infinity}}]}', b'{"points": [{"step": 1, "metrics": {"\\ud800": 1}}]}',
                         b"[" * 10_000 + b"]" * 10_000, b'{"points": ' + b"[" * 100 + b"]" * 100 + b"}", b'{"points": [{"step": 99999999999999999999999, "metrics": {"a": 1}}]}']),
    )


def fuzz_parsers(tally: Tally, max_examples: int) -> None:
    s = hypothesis_settings(max_examples)
    prom_errors = (PromInputError,)

    @given(st.one_of(exposition_texts, st.text(max_size=200)))
    @s
    def text(t: str) -> None:
        _outcome("hypothesis parse_text", tally, lambda: parse_text(t), prom_errors, t)

    @given(st.binary(max_size=200))
    @s
    def decode(b: bytes) -> None:
        _outcome("hypothesis decode_text", tally, lambda: parse_text(decode_text(b)), prom_errors, b)

    @given(grouping_paths)
    @s
    def grouping(p: str) -> None:
        _outcome("hypothesis parse_grouping_path", tally, lambda: parse_grouping_path(p), prom_errors, p)

    @given(remote_write_bodies(int(time.time() * 1000)))
    @s
    def rw(request: tuple[bytes, dict[str, str]]) -> None:
        body = request[0]
        _outcome("hypothesis remote_write.decompress+parse", tally, lambda: remote_write.parse(remote_write.decompress(body, 1 << 20)), prom_errors, body)

    @given(st.binary(max_size=300))
    @s
    def rw_raw(data: bytes) -> None:
        _outcome("hypothesis remote_write.parse", tally, lambda: remote_write.parse(data), prom_errors, data)

    @given(json_bodies())
    @s
    def points(body: bytes) -> None:
        _outcome("hypothesis points.parse_json", tally, lambda: parse_json(body), (InvalidInput,), body)
        _outcome("hypothesis points.parse_ndjson", tally, lambda: parse_ndjson(body), (InvalidInput,), body)

    for prop in (text, decode, grouping, rw, rw_raw, points):
        prop()


# -- the report ---------------------------------------------------------------------------------------------


def run_all(database_url: str | None = None, examples: tuple[int, int] = BENCH_EXAMPLES) -> Tally:
    """Every check above on a fresh app (a temporary SQLite database unless ``database_url`` is given).

    ``examples``: per schemathesis (operation, mode), and per hypothesis property.
    """
    from starlette.testclient import TestClient

    from parallax.server.app import create_app
    from parallax.server.config import Settings

    api_examples, hypothesis_examples = examples
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="parallax-fuzz-") as tmp:
        url = database_url or f"sqlite:///{Path(tmp) / 'fuzz.db'}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fuzz_api(create_app(Settings(database_url=url, alert_timer_seconds=0, allowed_hosts=["testserver"])), tally, api_examples)
            with TestClient(create_app(Settings(database_url=url, alert_timer_seconds=0, allowed_hosts=["testserver"])), raise_server_exceptions=False) as client:
                fuzz_prometheus_routes(client, tally, hypothesis_examples)
        fuzz_parsers(tally, hypothesis_examples)
    return tally


def measure(quick: bool = False) -> dict:
    """For bench.run: inputs tried (schemathesis and hypothesis example counts) and 5xx seen (target: 0)."""
    start = time.perf_counter()
    examples = BENCH_EXAMPLES_QUICK if quick else BENCH_EXAMPLES
    tally = run_all(examples=examples)
    seconds = time.perf_counter() - start
    summary = tally.summary()
    per_source = list(tally.examples.values())
    return {
        "schemathesis_examples": summary["schemathesis_examples"],
        "hypothesis_examples": summary["hypothesis_examples"],
        "server_errors": tally.server_errors,
        "contract_failures": len(tally.failures),
        "examples_per_operation_and_mode": examples[0],
        "examples_per_property": examples[1],
        "sources": len(per_source),
        "examples_per_source_median": statistics.median(per_source) if per_source else 0,
        "statuses": dict(sorted(tally.statuses.items())),
        "failures": tally.failures[:10],
        "seconds": seconds,
        "met": tally.server_errors == 0 and not tally.failures,
    }


def rows(doc: dict, Row: type) -> list:
    """Lines for bench.run's table."""
    return [
        Row("fuzz: inputs tried", f"{doc['schemathesis_examples']:,} schemathesis + {doc['hypothesis_examples']:,} hypothesis",
            f"{doc['seconds']:.0f} s", target="5xx = 0, every 4xx with a message", met=doc["met"]),
        Row("fuzz: 5xx answers", str(doc["server_errors"]), f"{doc['contract_failures']} contract failures"),
    ]


def _main(argv: list[str]) -> int:
    doc = measure(quick="--quick" in argv)
    print(json.dumps(doc, indent=2))
    return 0 if doc["met"] else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
