"""Concurrency (issue #8): 16 writers x 4 runs against the real `parallax serve`, on SQLite and PostgreSQL
(there, two `parallax serve` processes on one database, as behind a load balancer).

The writers of a run interleave their steps, so every batch touches the same
rollup blocks and `latest` rows as the others. Nothing is lost or stored twice,
the derived tables agree with the points, no "database is locked" and no 5xx;
the p99 ingest latency is printed and recorded (`make soak` runs a minute).
"""

from __future__ import annotations

import json

from bench.soak import SoakConfig, failures, soak


def test_16_concurrent_writers_x_4_runs_lose_and_duplicate_nothing(db_url, tmp_path, record_property):
    # On PostgreSQL two processes share the database (DESIGN §7), each run's writers spread over both.
    servers = 2 if db_url.startswith("postgresql") else 1
    report = soak(SoakConfig(database_url=db_url, seconds=6, writers=16, runs=4, servers=servers, push_writers=2), tmp_path)
    print(
        f"\n{report['backend']} ({servers} server process(es)): {report['writers']} writers x {report['runs']} runs, {report['points_per_s']:,} points/s, "
        f"p50 {report['p50_ms']} ms, p99 {report['p99_ms']} ms, {report['acknowledged_points']:,} points"
    )
    for name in ("points_per_s", "p50_ms", "p99_ms", "acknowledged_points"):
        record_property(name, report[name])
    record_property("soak", json.dumps(report))
    assert failures(report) == {}
    assert report["acknowledged_points"] == report["stored_points"] > 0
    assert report["failed_requests"] == 0 and report["abandoned_batches"] == 0
