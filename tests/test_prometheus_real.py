"""Against Debian's real binaries (run by hand on loopback, stopped at the end; see tests/promstack.py):

- the Pushgateway and Parallax answer the same pushes with the same status codes and the same labels;
- a real Prometheus scrapes prometheus_client trainers (tests/prom_exporter.py) and Parallax's own /metrics,
  and remote-writes to a real ``parallax serve``, with one shard and with four: every sample it holds is stored
  at its step, nothing is invented, no request is refused; a trainer that exits ends its run, one that stops short
  of its configured total steps stays running (a crash), one that says ``parallax_run_finished`` is finished;
  ``pass_at_k{k="8"}`` feeds ``pass_at_k``; Parallax's own series never come back as a run's data.

``PARALLAX_TEST_PROMETHEUS=skip`` leaves these out when the binaries are not installed (``make test`` installs them).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.prom_exporter import pass_at_k_of, value_of
from tests.promstack import (
    PROMETHEUS,
    PUSHGATEWAY,
    Missing,
    Target,
    binary,
    close_exporter,
    compare_run,
    exporter,
    prometheus,
    prometheus_config,
    pushgateway,
    remote_write_caught_up,
    remote_write_stats,
    wait_for,
)
from tests.servers import parallax_server


def _need(name: str) -> None:
    try:
        binary(name)
    except Missing as exc:
        if os.environ.get("PARALLAX_TEST_PROMETHEUS") == "skip":
            pytest.skip(f"{exc} (PARALLAX_TEST_PROMETHEUS=skip)")
        pytest.fail(f"{exc}; or set PARALLAX_TEST_PROMETHEUS=skip")


# -- the Pushgateway and Parallax, side by side ---------------------------------------------------------

PUSH_CASES = [
    # (path after /metrics/job/<job>, body, content type)
    ("/rank@base64/=", b"m 3.14\n", "application/x-www-form-urlencoded"),  # curl --data-binary's content type
    ("/rank/", b"m 3.14\n", None),
    ("/rank@base64/", b"m 3.14\n", None),
    ("/rank@base64/YQ", b"m 3.14\n", None),
    ("/rank@base64/YQ%3D%3D", b"m 3.14\n", None),
    ("/rank@base64/w4g", b"m 3.14\n", None),
    ("/run@base64/=", b"m 3.14\n", None),
    ("/a/b/a/c", b"m 3.14\n", None),
    ("/job/other", b"m 3.14\n", None),
    ("/rank@base64/%%%", b"m 3.14\n", None),
    ("/rank@base64/!!!", b"m 3.14\n", None),
    ("/rank@base64/Y", b"m 3.14\n", None),
    ("/rank@base64/YQ==x", b"m 3.14\n", None),
    ("/rank@base64/YW+v", b"m 3.14\n", None),
    ("/run@base64/_w", b"m 3.14\n", None),  # 0xff: not UTF-8
    ("/rank/%ff", b"m 3.14\n", None),
    ("/rank/a%2Fb", b"m 3.14\n", None),
    ("/1a/b", b"m 3.14\n", None),
    ("/__a/b", b"m 3.14\n", None),
    ("", b"m 3.14\n", ""),
    ("", b"m 3.14\n", "application/json"),
    ("", b"m 3.14\n", "text/html"),
    ("", b"m 3.14\n", "application/octet-stream"),
    ("", b"m 3.14\n", "application/openmetrics-text; version=1.0.0"),
    ("", b"m 3.14\n", "text/plain; version=0.0.4"),
    ("", b"", None),
    ("", b'm{a=""} 3.14\n', None),
    ("", b'm{a="1",b=""} 3.14\n', None),
    ("", b'm{a="} 3.14\n', None),
]


@pytest.fixture(scope="module")
def gateways(tmp_path_factory) -> Iterator[tuple[str, str]]:
    _need(PUSHGATEWAY)
    tmp = tmp_path_factory.mktemp("pushgateway")
    with pushgateway(tmp / "pg") as pg, parallax_server(tmp, args=["--database-url", f"sqlite:///{tmp}/x.db"]) as px:
        yield pg.url, px.url


def _pg_labels(pg: str, job: str) -> dict[str, str] | None:
    """The Pushgateway's grouping labels of job's group (empty values left out: Prometheus's no label), or None."""
    for group in httpx.get(f"{pg}/api/v1/metrics", timeout=10).json()["data"]:
        if group["labels"].get("job") == job and "m" in group:
            labels = {**group["labels"], **group["m"]["metrics"][0]["labels"]}
            return {k: v for k, v in labels.items() if v and k not in ("job", "instance")}
    return None


def _parallax_labels(px: str, job: str, labels_of_run: dict[str, str]) -> dict[str, str] | None:
    from parallax.ingest.names import split_name

    runs = httpx.get(f"{px}/api/v1/runs", params={"project": job}).json()["runs"]
    for run in runs:
        for m in httpx.get(f"{px}/api/v1/runs/{run['id']}/metrics").json()["metrics"]:
            base, labels = split_name(m["name"])
            if base == "m":
                extra = {"run": run["name"]} if run["name"] != job else {}
                return {**labels, **extra}
    return None


@pytest.mark.parametrize("i", range(len(PUSH_CASES)), ids=[f"{c[0] or 'body'}|{c[2]}|{c[1][:12]!r}" for c in PUSH_CASES])
def test_pushes_get_the_pushgateways_status_code_and_labels(gateways, i):
    pg, px = gateways
    suffix, body, ctype = PUSH_CASES[i]
    job = f"parity{i}"
    headers = {"content-type": ctype} if ctype is not None else {}
    try:
        got_pg = httpx.put(f"{pg}/metrics/job/{job}{suffix}", content=body, headers=headers, timeout=10)
        pg_status, pg_text = got_pg.status_code, got_pg.text
    except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
        # Go's server answers a request line it cannot parse (an invalid %-escape) with a 400 and closes the
        # connection at once: depending on timing the client reads the 400 or sees the reset
        assert "%%" in suffix, exc
        pg_status, pg_text = 400, ""
    got_px = httpx.put(f"{px}/metrics/job/{job}{suffix}", content=body, headers=headers, timeout=10)
    try:
        assert got_px.status_code == pg_status, (pg_text, got_px.text)
        if pg_status == 200 and body.strip():
            assert _parallax_labels(px, job, {}) == _pg_labels(pg, job)
        if got_px.status_code == 400 and "base64" in pg_text:
            assert "base64" in got_px.json()["detail"][0]["msg"]  # says what was wrong, naming the label
    finally:
        try:  # a bad group left in it would fail later pushes
            httpx.delete(f"{pg}/metrics/job/{job}{suffix}", timeout=10)
        except (httpx.ReadError, httpx.RemoteProtocolError):
            pass  # nothing was stored for a path it could not parse


def test_protobuf_pushes_are_415_where_the_pushgateway_reads_them(gateways):
    """The one documented difference: Parallax reads the text format only."""
    _, px = gateways
    ctype = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
    r = httpx.put(f"{px}/metrics/job/proto", content=b"\x00", headers={"content-type": ctype})
    assert r.status_code == 415 and "text format" in r.json()["detail"][0]["msg"]


# -- a real Prometheus remote-writing to Parallax ---------------------------------------------------------

STEPS = {"exits": 10, "crash": 6, "says": 5}


@pytest.fixture(scope="module", params=[1, 4], ids=["1-shard", "4-shards"])
def stack(request, tmp_path_factory) -> Iterator[dict]:
    """Trainers scraped by Prometheus (and Parallax's own /metrics), remote-written to Parallax; ends them, then
    waits until Prometheus has sent everything."""
    _need(PROMETHEUS)
    shards = request.param
    tmp: Path = tmp_path_factory.mktemp(f"prom{shards}")
    with parallax_server(tmp, args=["--database-url", f"sqlite:///{tmp}/x.db"]) as px:
        # A crash is told from an exit by the total steps the run's config announces: created first, as a trainer would.
        crash = httpx.post(f"{px.url}/api/v1/runs", json={"project": "real", "name": "crash", "config": {"total_steps": 1000}})
        assert crash.status_code == 201
        with exporter(tmp, name="exits", steps=STEPS["exits"], extra=["--pass-at-k"]) as e_exits, \
                exporter(tmp, name="crash", steps=STEPS["crash"], extra=["--step-name", "global_step", "--run-index", "1"]) as e_crash, \
                exporter(tmp, name="says", steps=STEPS["says"], extra=["--finish", "--run-index", "2"]) as e_says:
            targets = [Target(f"127.0.0.1:{e.port}", {"run": e.name, "project": "real"}) for e in (e_exits, e_crash, e_says)]
            config = prometheus_config(targets, remote_write_url=f"{px.url}/api/v1/prom/write", shards=shards,
                                       scrape_self=px.url.removeprefix("http://"))
            with prometheus(tmp / "prometheus", config) as prom:
                run_ids: dict[str, int] = {}

                def at_last_step(name: str) -> bool:
                    runs = {r["name"]: r for r in httpx.get(f"{px.url}/api/v1/runs", params={"project": "real"}).json()["runs"]}
                    run = runs.get(name)
                    if run is not None:
                        run_ids[name] = run["id"]
                    return run is not None and run["last_step"] == STEPS[name] - 1

                for e in (e_crash, e_exits, e_says):
                    wait_for(f"run {e.name} to reach its last step", lambda: at_last_step(e.name), alive=[prom, e])
                for e in (e_crash, e_exits, e_says):  # the trainers exit: their series go stale
                    close_exporter(e)
                closed = time.time()
                status = lambda name: httpx.get(f"{px.url}/api/v1/runs/{run_ids[name]}").json()["status"]  # noqa: E731
                wait_for("the exited trainer's run to finish", lambda: status("exits") == "finished", alive=[prom])
                wait_for("Prometheus to send everything", lambda: remote_write_caught_up(prom.url, closed + 3), alive=[prom])
                yield {"parallax": px.url, "prometheus": prom.url, "runs": run_ids, "shards": shards,
                       "stats": remote_write_stats(prom.url), "own": httpx.get(f"{px.url}/metrics").text,
                       "prometheus_log": prom.log_path}


def test_every_sample_is_stored_at_its_step_and_none_invented(stack):
    for name, run_id in stack["runs"].items():
        report = compare_run(stack["prometheus"], stack["parallax"], name, run_id)
        assert report["sent"] >= STEPS[name] * 3, report
        assert (report["lost"], report["invented"], report["unstepped"], report["conflicts"]) == (0, 0, 0, 0), (name, report)
    stats = stack["stats"]
    assert stats["prometheus_remote_storage_samples_failed_total"] == 0, stats  # no request refused
    # A retried batch is one Prometheus failed to send (a 5xx, 429, or a connection that closed under it); its log says which
    retries = [line for line in stack["prometheus_log"].read_text(errors="replace").splitlines() if "etry" in line]
    assert stats["prometheus_remote_storage_samples_retried_total"] == 0, (stats, retries[-5:])
    assert stats["prometheus_remote_storage_shards"] == stack["shards"]
    waited = sum(float(line.rsplit(" ", 1)[1]) for line in stack["own"].splitlines()
                 if line.startswith('parallax_remote_write_samples_total{outcome="waited"}'))
    unplaced = [line for line in stack["own"].splitlines() if line.startswith('parallax_remote_write_samples_total{outcome="unplaced"}')]
    assert not unplaced or unplaced[0].endswith(" 0.0"), unplaced
    print(f"{stack['shards']} shard(s): {waited:.0f} samples waited for their step")


def test_values_are_the_trainers_at_each_step(stack):
    px, runs = stack["parallax"], stack["runs"]
    s = httpx.get(f"{px}/api/v1/runs/{runs['exits']}/series", params={"metric": ["entropy", "pass_at_k", "step"]}).json()["series"]
    assert s["step"]["steps"] == list(range(STEPS["exits"]))
    assert s["entropy"]["values"] == [value_of(0, 0, i) for i in range(STEPS["exits"])]
    assert s["pass_at_k"]["values"] == [pass_at_k_of(0, 8, i) for i in range(STEPS["exits"])]  # from pass_at_k{k="8"}
    g = httpx.get(f"{px}/api/v1/runs/{runs['crash']}/series", params={"metric": ["global_step", "kl"]}).json()["series"]
    assert g["global_step"]["steps"] == list(range(STEPS["crash"])) and g["kl"]["values"] == [value_of(1, 1, i) for i in range(STEPS["crash"])]


def test_how_each_run_ended(stack):
    px, runs = stack["parallax"], stack["runs"]
    doc = {name: httpx.get(f"{px}/api/v1/runs/{rid}").json() for name, rid in runs.items()}
    ends = {name: [e for e in httpx.get(f"{px}/api/v1/runs/{rid}/events").json()["events"] if e["kind"] == "end"]
            for name, rid in runs.items()}
    # Exited: its step series went stale, and its config announces no total: finished, at its last step. (A scrape
    # that timed out on a busy machine also writes markers: the run then ends and resumes before; the last end counts.)
    assert doc["exits"]["status"] == "finished" and ends["exits"][-1]["step"] == STEPS["exits"] - 1
    assert "staleness" in ends["exits"][-1]["message"]
    # Stopped at step 5 of the 1000 its config announces: a crash, left running for trainer_silent to page.
    assert doc["crash"]["status"] == "running" and ends["crash"] == [] and doc["crash"]["last_step"] == STEPS["crash"] - 1
    # Said so with parallax_run_finished = 1: finished at that step, once.
    assert doc["says"]["status"] == "finished" and ends["says"][-1]["step"] == STEPS["says"] - 1
    assert "parallax_run_finished" in ends["says"][-1]["message"]
    # No marker became a NaN point or a nonfinite_values alert.
    for name, rid in runs.items():
        metrics = httpx.get(f"{px}/api/v1/runs/{rid}/metrics").json()["metrics"]
        assert not [m for m in metrics if m["non_finite"]], name
        assert not httpx.get("{}/api/v1/alerts".format(px), params={"run_id": rid}).json()["alerts"], name


def test_parallax_own_series_never_come_back_as_data(stack):
    px, runs = stack["parallax"], stack["runs"]
    text = httpx.get(f"{px}/metrics").text
    assert 'parallax_metric{' in text and 'run="exits"' in text  # scraped by Prometheus, with the run label
    for name, rid in runs.items():
        names = {m["name"] for m in httpx.get(f"{px}/api/v1/runs/{rid}/metrics").json()["metrics"]}
        assert not [n for n in names if n.startswith("parallax_") and n != "parallax_run_finished"], (name, names)
        assert not {"up", "scrape_duration_seconds"} & names
    assert {r["name"] for r in httpx.get(f"{px}/api/v1/runs").json()["runs"]} == set(runs)
