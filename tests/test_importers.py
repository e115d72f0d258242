"""`parallax import` / `parallax export` against a real server, the readers on their own, and GET /points on both backends."""

from __future__ import annotations

import csv
import json
import math
import sqlite3
import sys
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from starlette.testclient import TestClient

from parallax.ingest.files import FileError, NameMap, Tally, read_csv, read_jsonl, read_tensorboard
from parallax.ingest.points import NAN, NEG_INF, POS_INF
from parallax.server.cli import main
from tests.conftest import new_run, write
from tests.servers import free_port, parallax_server

TOKEN = "import-secret"


# -- GET /api/v1/runs/{id}/points (in process, SQLite and PostgreSQL) ---------------------------------


def _all_pages(client, run_id: int, **params) -> tuple[list[dict], int]:
    found, pages, cursor = [], 0, None
    while True:
        q = dict(params, **({"cursor": cursor} if cursor else {}))
        r = client.get(f"/api/v1/runs/{run_id}/points", params=q)
        assert r.status_code == 200, r.text
        doc = r.json()
        found += doc["points"]
        pages += 1
        cursor = doc["next_cursor"]
        if cursor is None:
            return found, pages


def test_points_pages_through_every_point_at_full_resolution(client):
    run_id = new_run(client)
    store = client.app.state.store
    rows = [("b", s, s * 0.5, 0, 100.0 + s) for s in range(0, 7)]
    rows += [("a", s, -float(s), 0, 200.0 + s) for s in range(3, 12, 2)]
    rows += [("a", 20, None, NAN, 1.0), ("b", 30, None, POS_INF, 2.0), ("b", 31, None, NEG_INF, 3.0)]
    write(store, run_id, rows)
    other = new_run(client, "other")
    write(store, other, [("a", 1, 9.0, 0, 1.0)])

    found, pages = _all_pages(client, run_id, limit=4)
    assert pages == 4  # 15 points, 4 a page; the last page says there is no next one
    got = {(p["metric"], p["step"]): (p["value"], p.get("non_finite"), p["time"]) for p in found}
    assert len(found) == len(got) == len(rows)
    for name, step, value, flag, t in rows:
        assert got[name, step] == (value, {NAN: "NaN", POS_INF: "Infinity", NEG_INF: "-Infinity"}.get(flag), t)
    for metric in ("a", "b"):  # each metric's points come in step order, one metric after the other
        steps = [p["step"] for p in found if p["metric"] == metric]
        assert steps == sorted(steps)
    assert [p["metric"] for p in found] == sorted((p["metric"] for p in found), key=[p["metric"] for p in found].index)

    only_a, _ = _all_pages(client, run_id, metric="a", since_step=5, limit=2)
    assert [(p["step"], p["value"]) for p in only_a] == [(7, -7.0), (9, -9.0), (11, -11.0), (20, None)]
    assert _all_pages(client, run_id, metric="never-sent")[0] == []


@pytest.mark.parametrize("cursor", [
    "99999999999999999999.1", "1.99999999999999999999", "2147483648.0", "1.9223372036854775808", "-1.5", "1.-5",
    "+1.2", " 1.2", "1_0.2", "١.٢", "1.2.3", "1", ".", "",
])
def test_a_malformed_cursor_is_a_json_422_naming_it(client, cursor):
    """Numbers past the database's integers reached the driver: SQLite's OverflowError was a plain-text 500."""
    run_id = new_run(client)
    write(client.app.state.store, run_id, [("a", 1, 1.0, 0, 1.0)])  # with a metric, the query is made
    r = TestClient(client.app, raise_server_exceptions=False).get(f"/api/v1/runs/{run_id}/points", params={"cursor": cursor})
    assert r.status_code == 422 and r.headers["content-type"] == "application/json"
    assert [e["loc"] for e in r.json()["detail"]] == [["query", "cursor"]]


def test_the_largest_cursor_that_fits_is_a_page_not_an_error(client):
    run_id = new_run(client)
    write(client.app.state.store, run_id, [("a", 1, 1.0, 0, 1.0)])
    r = client.get(f"/api/v1/runs/{run_id}/points", params={"cursor": f"{2**31 - 1}.{2**63 - 1}"})
    assert r.status_code == 200 and r.json()["points"] == []


def test_points_rejects_bad_requests(client):
    run_id = new_run(client)
    assert client.get(f"/api/v1/runs/{run_id}/points", params={"cursor": "x.y"}).status_code == 422
    assert client.get(f"/api/v1/runs/{run_id}/points", params={"metric": "bad name"}).status_code == 422
    assert client.get(f"/api/v1/runs/{run_id}/points", params={"limit": 0}).status_code == 422
    assert client.get(f"/api/v1/runs/{run_id}/points", params={"limit": 100_001}).status_code == 422
    assert client.get("/api/v1/runs/999999/points").status_code == 404


# -- readers ------------------------------------------------------------------------------------------------


def _records(reader, path) -> tuple[dict[tuple[str, int], float], Tally]:
    tally = Tally()
    out = {}
    for rec in reader(Path(path), tally):
        for k, v in rec.metrics.items():
            out[k, rec.step] = v
    return out, tally


def test_csv_reads_a_wandb_export(tmp_path):
    f = tmp_path / "wandb.csv"
    f.write_text(
        "Step,run-a - train/loss,run-a - train/loss__MIN,run-a - train/loss__MAX,run-a - eval acc (%),_runtime\n"
        "0,1.5,1.4,1.6,,3.2\n"
        "1.0,NaN,,,0.5,4.1\n"
        "2,oops,,,0.75,5\n"
        ",9,,,,\n"
    )
    got, tally = _records(read_csv, f)
    assert got[("train/loss", 0)] == 1.5 and math.isnan(got[("train/loss", 1)])
    assert got[("eval_acc", 1)] == 0.5 and got[("eval_acc", 2)] == 0.75
    assert len(got) == 4
    assert tally.renamed == {"eval acc (%)": "eval_acc"}
    assert tally.non_numeric == 1 and tally.empty == 1  # "oops"; step 0's empty eval cell
    assert tally.bad_lines == 1 and tally.bad_line_examples == ["line 5: step '' is not a non-negative integer"]
    assert set(tally.ignored_columns) == {"run-a - train/loss__MIN", "run-a - train/loss__MAX", "_runtime"}


def test_names_that_break_the_rule_are_renamed_or_skipped():
    tally = Tally()
    names = NameMap(tally)
    assert names("actor/entropy") == "actor/entropy" and names('pass_at_k{k="8"}') == 'pass_at_k{k="8"}'
    assert names("eval acc (%)") == "eval_acc" and names("eval acc (%)") == "eval_acc"
    assert names("eval_acc") is None  # taken by the key renamed to it first
    assert names("(%)") is None and names("x" * 201) is None
    assert tally.renamed == {"eval acc (%)": "eval_acc"}


def test_csv_without_a_step_column_is_refused(tmp_path):
    f = tmp_path / "x.csv"
    f.write_text("epoch,loss\n1,2\n")
    with pytest.raises(FileError, match="no step column: expected one of step, Step, _step"):
        list(read_csv(f, Tally()))


def test_jsonl_reads_flat_and_nested_lines_and_reports_bad_ones(tmp_path):
    f = tmp_path / "log.jsonl"
    f.write_text(
        '{"step": 1, "loss": 2.5, "actor/entropy": 1.1, "note": "text", "_runtime": 3}\n'
        '{"step": 2, "time": 1764000000.5, "metrics": {"loss": Infinity}}\n'
        "\n"
        "not json\n"
        '{"loss": 1}\n'
        '{"step": -3, "loss": 1}\n'
        '[1, 2]\n'
        '{"_step": 3, "train": {"kl": 0.01}, "_timestamp": 1764000001}\n'
    )
    tally = Tally()
    recs = list(read_jsonl(f, tally))
    assert [(r.step, r.metrics, r.time) for r in recs] == [
        (1, {"loss": 2.5, "actor/entropy": 1.1}, None),
        (2, {"loss": math.inf}, 1764000000.5),
        (3, {"train/kl": 0.01}, 1764000001.0),
    ]
    assert tally.non_numeric == 1
    assert [e.split(":")[0] for e in tally.bad_line_examples] == ["line 4", "line 5", "line 6", "line 7"]


def _write_tensorboard(logdir: Path) -> None:
    """Two TensorBoard runs: tensorboardX's simple_value scalars in train/, TensorBoard's own tensor scalars in eval/."""
    from tensorboard.summary import Writer
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(logdir / "train"))
    for step in range(5):
        w.add_scalar("actor/entropy", 2.0 - 0.25 * step, step)
        w.add_scalar("critic/score/mean", 0.1 * step, step)
    w.add_histogram("weights", [1.0, 2.0, 3.0], 1)
    w.add_text("notes", "hello", 1)
    w.close()
    t = Writer(str(logdir / "eval"))
    for step in (0, 4):
        t.add_scalar("accuracy", 0.5 + step / 10, step)
    t.add_scalar("accuracy", float("nan"), 8)
    t.close()


def test_tensorboard_reads_both_scalar_kinds_and_prefixes_subdirectories(tmp_path):
    _write_tensorboard(tmp_path / "logs")
    got, tally = _records(read_tensorboard, tmp_path / "logs")
    assert got[("train/actor/entropy", 4)] == 1.0 and got[("train/critic/score/mean", 2)] == pytest.approx(0.2)
    assert got[("eval/accuracy", 4)] == pytest.approx(0.9) and math.isnan(got[("eval/accuracy", 8)])
    assert len(got) == 13
    assert tally.non_scalar_tags == {"train/weights", "train/notes/text_summary"}
    # train/ and eval/ merged by step, one record a step, so the server judges each step with both
    tally = Tally()
    records = list(read_tensorboard(tmp_path / "logs", tally))
    assert [r.step for r in records] == [0, 1, 2, 3, 4, 8]
    assert sorted(records[0].metrics) == ["eval/accuracy", "train/actor/entropy", "train/critic/score/mean"]
    # One directory of event files: tags as they are, so framework keys stay aliasable.
    only, _ = _records(read_tensorboard, tmp_path / "logs" / "train")
    assert sorted({k for k, _ in only}) == ["actor/entropy", "critic/score/mean"]


def test_tensorboard_missing_says_what_to_install(tmp_path, monkeypatch, capsys):
    _write_tensorboard(tmp_path / "logs")
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_file_loader", None)
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["import", "tensorboard", str(tmp_path / "logs"), "--url", url]) == 2
    assert "pip install 'rl-parallax[tensorboard]'" in capsys.readouterr().err


# -- against a real server --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("importers")
    db = tmp / "parallax.db"
    with parallax_server(tmp, env={"PARALLAX_TOKEN": TOKEN}, args=["--database-url", f"sqlite:///{db}"]) as srv:
        yield srv.url, db


def cli(server, capsys, *args: str) -> tuple[int, str, str]:
    url, _ = server
    code = main([*args, "--url", url, "--token", TOKEN])
    out = capsys.readouterr()
    return code, out.out, out.err


def run_by_name(url: str, project: str, name: str) -> dict:
    runs = httpx.get(f"{url}/api/v1/runs", params={"project": project}).json()["runs"]
    return next(r for r in runs if r["name"] == name)


def stored_points(db: Path, run_id: int) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM points WHERE run_id = ?", (run_id,)).fetchone()[0]


def points_of(url: str, run_id: int) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    cursor = None
    while True:
        doc = httpx.get(f"{url}/api/v1/runs/{run_id}/points", params={"limit": 101, **({"cursor": cursor} if cursor else {})}).json()
        for p in doc["points"]:
            out.setdefault(p["metric"], {})[p["step"]] = p["value"] if p["value"] is not None else p["non_finite"]
        cursor = doc["next_cursor"]
        if cursor is None:
            return out


def test_csv_import_aliases_keys_and_is_idempotent(server, capsys, tmp_path):
    url, db = server
    f = tmp_path / "verl-run.csv"
    with f.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["_step", "actor/entropy", "critic/score/mean", "eval accuracy", "_runtime"])
        for step in range(1, 121):
            w.writerow([step, 2.0 - step / 100, step / 200, "" if step % 10 else step / 1000, step * 1.5])
    code, out, err = cli(server, capsys, "import", "csv", str(f), "--batch-values", "50")
    assert code == 0, err
    run = run_by_name(url, "imported", "verl-run")
    sent = 120 * 2 + 12
    assert f"{sent} points sent, {sent} stored (0 replaced" in err
    assert "'eval accuracy' -> eval_accuracy" in err and "columns left out: _runtime" in err
    assert "108 empty cells" in err
    series = points_of(url, run["id"])
    assert series["entropy"] == series["actor/entropy"] and series["entropy"][100] == 1.0  # verl's key, canonical name
    assert series["reward_train"][60] == 0.3
    assert series["eval_accuracy"] == {s: s / 1000 for s in range(10, 121, 10)}
    first = stored_points(db, run["id"])
    assert first == sent  # each framework key's canonical name is a link to its points, not a second copy

    code, _, err = cli(server, capsys, "import", "csv", str(f), "--batch-values", "50")
    assert code == 0 and f"{sent} stored (0 replaced" in err
    assert stored_points(db, run["id"]) == first
    assert run_by_name(url, "imported", "verl-run")["id"] == run["id"]


def test_jsonl_import_reports_bad_lines_and_stores_the_rest(server, capsys, tmp_path):
    url, _ = server
    f = tmp_path / "log.jsonl"
    f.write_text('{"step": 1, "loss": 0.5}\n{"step": "two", "loss": 0.4}\n{oops\n{"step": 3, "metrics": {"loss": NaN}}\n')
    code, _, err = cli(server, capsys, "import", "jsonl", str(f), "--project", "p", "--run", "j")
    assert code == 1
    assert "2 lines could not be read" in err and "line 2: step 'two'" in err and "line 3: not JSON" in err
    run = run_by_name(url, "p", "j")
    assert points_of(url, run["id"]) == {"loss": {1: 0.5, 3: "NaN"}}


def test_tensorboard_import(server, capsys, tmp_path):
    url, _ = server
    _write_tensorboard(tmp_path / "tb-run")
    code, _, err = cli(server, capsys, "import", "tensorboard", str(tmp_path / "tb-run"))
    assert code == 0, err
    assert "13 points sent, 13 stored" in err and "non-scalar tags left out: train/notes/text_summary, train/weights" in err
    got = points_of(url, run_by_name(url, "imported", "tb-run")["id"])
    assert got["train/actor/entropy"] == {0: 2.0, 1: 1.75, 2: 1.5, 3: 1.25, 4: 1.0}
    assert got["eval/accuracy"][8] == "NaN"


def test_export_csv_and_jsonl_round_trip(server, capsys, tmp_path):
    url, _ = server
    h = {"authorization": f"Bearer {TOKEN}"}
    run_id = httpx.post(f"{url}/api/v1/runs", json={"project": "exp", "name": "a/b"}, headers=h).json()["id"]
    points = [
        {"step": s, "time": 1764000000.0 + s, "metrics": {"loss": 1 / (s + 1), "actor/entropy": 0.1 * s}} for s in range(300)
    ]
    points += [{"step": 5, "metrics": {"eval": float("inf")}}, {"step": 400, "metrics": {"eval": 0.25, "loss": float("nan")}}]
    body = json.dumps({"points": points})
    assert httpx.post(f"{url}/api/v1/runs/{run_id}/metrics", content=body, headers={**h, "content-type": "application/json"}).status_code == 200
    original = points_of(url, run_id)
    assert "entropy" in original  # the alias copy is part of the run

    out = tmp_path / "a.csv"
    code, _, err = cli(server, capsys, "export", "exp/a/b", "-o", str(out))  # project/name where the name has a slash
    assert code == 0, err
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["step", "actor/entropy", "entropy", "eval", "loss"]
    assert len(rows) == 1 + 301
    assert rows[1] == ["0", "0.0", "0.0", "", "1.0"]
    assert rows[6] == ["5", repr(0.5), repr(0.5), "inf", repr(1 / 6)]
    assert rows[-1] == ["400", "", "", "0.25", "nan"]

    code, stdout, err = cli(server, capsys, "export", str(run_id), "--format", "jsonl", "--metric", "eval")
    assert code == 0 and [json.loads(line) for line in stdout.splitlines()] == [
        {"step": 5, "time": pytest.approx(1764000000.0, abs=1e9), "metrics": {"eval": math.inf}},
        {"step": 400, "time": pytest.approx(1764000000.0, abs=1e9), "metrics": {"eval": 0.25}},
    ]

    dump = tmp_path / "a.jsonl"
    assert cli(server, capsys, "export", str(run_id), "-o", str(dump))[0] == 0
    assert json.loads(dump.read_text().splitlines()[1]) == {"step": 1, "time": 1764000001.0, "metrics": {
        "actor/entropy": 0.1, "entropy": 0.1, "loss": 0.5}}
    code, _, err = cli(server, capsys, "import", "jsonl", str(dump), "--project", "exp", "--run", "copy")
    assert code == 0, err
    assert points_of(url, run_by_name(url, "exp", "copy")["id"]) == original

    from_csv = cli(server, capsys, "import", "csv", str(out), "--project", "exp", "--run", "copy-csv")
    assert from_csv[0] == 0, from_csv[2]
    assert points_of(url, run_by_name(url, "exp", "copy-csv")["id"]) == original


FORMULA_NAMES = ["-A1", "@SUM", "-2.5", "ok", 'x{le="=1+1"}']


def test_export_csv_keeps_formula_names_from_spreadsheets_and_imports_them_back(server, capsys, tmp_path):
    """Metric names may start with - or @: a spreadsheet opening the export would evaluate them (OWASP CSV injection)."""
    url, _ = server
    h = {"authorization": f"Bearer {TOKEN}"}
    run_id = httpx.post(f"{url}/api/v1/runs", json={"project": "exp", "name": "formulas"}, headers=h).json()["id"]
    points = [{"step": s, "metrics": {n: -1.5 - s for n in FORMULA_NAMES}} for s in range(3)]
    assert httpx.post(f"{url}/api/v1/runs/{run_id}/metrics", json={"points": points}, headers=h).status_code == 200
    original = points_of(url, run_id)
    out = tmp_path / "f.csv"
    code, _, err = cli(server, capsys, "export", str(run_id), "-o", str(out))
    assert code == 0, err
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["step", "'-2.5", "'-A1", "'@SUM", "ok", 'x{le="=1+1"}']
    assert rows[1] == ["0", "-1.5", "-1.5", "-1.5", "-1.5", "-1.5"]  # numbers stay numbers, negative ones too
    assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for cell in rows[0])
    assert all(float(cell) < 0 for row in rows[1:] for cell in row[1:])
    code, _, err = cli(server, capsys, "import", "csv", str(out), "--project", "exp", "--run", "formulas-copy")
    assert code == 0, err
    assert points_of(url, run_by_name(url, "exp", "formulas-copy")["id"]) == original


def test_clear_errors(server, capsys, tmp_path):
    url, _ = server
    f = tmp_path / "ok.csv"
    f.write_text("step,loss\n1,2\n")
    assert main(["import", "csv", str(f), "--url", url]) == 2  # no token
    assert "refused the request (401): pass the server's token with --token or PARALLAX_TOKEN" in capsys.readouterr().err

    dead = f"http://127.0.0.1:{free_port()}"
    assert main(["import", "csv", str(f), "--url", dead]) == 2
    assert f"cannot reach Parallax at {dead}" in capsys.readouterr().err

    code, _, err = cli(server, capsys, "import", "csv", str(tmp_path / "missing.csv"))
    assert code == 2 and "missing.csv: no such file" in err
    code, _, err = cli(server, capsys, "import", "tensorboard", str(tmp_path))
    assert code == 2 and "no TensorBoard event files" in err
    (tmp_path / "nostep.csv").write_text("epoch,loss\n1,2\n")
    code, _, err = cli(server, capsys, "import", "csv", str(tmp_path / "nostep.csv"))
    assert code == 2 and "no step column" in err
    assert cli(server, capsys, "import", "csv", str(f))[0] == 0
    bad = tmp_path / "never.csv"
    code, _, err = cli(server, capsys, "export", "imported/ok", "--metric", "not-there", "-o", str(bad))
    assert code == 2 and "has no metric not-there" in err and not bad.exists()
    code, _, err = cli(server, capsys, "export", "nope/none")
    assert code == 2 and "no run 'nope/none'" in err
    code, _, err = cli(server, capsys, "export", "999999")
    assert code == 2 and "HTTP 404" in err


def test_framework_option_sets_a_new_runs_config(server, capsys, tmp_path):
    url, _ = server
    f = tmp_path / "fw.jsonl"
    f.write_text('{"step": 1, "actor/entropy": 1.5}\n')
    code, _, err = cli(server, capsys, "import", "jsonl", str(f), "--framework", "verl")
    assert code == 0, err
    run = run_by_name(url, "imported", "fw")
    assert run["config"] == {"framework": "verl"}
    assert points_of(url, run["id"]) == {"actor/entropy": {1: 1.5}, "entropy": {1: 1.5}}


def test_an_imported_history_fires_where_the_fault_happened(server, capsys, tmp_path):
    """A whole faulty run imported at once (hundreds of steps per request) raises the alerts replay gives,
    at the same steps, with the same top cause: the server judges every step of each request."""
    from parallax.alerts.engine import replay
    from parallax.alerts.rules import load_rules
    from parallax.alerts.suites.synthetic import generate

    sc = next(s for s in generate(seed=3, healthy=0, per_cause=2) if s.name == "reward_hacking-1-swe-agent-32b")
    want = [(t.rule, t.step, t.top_cause) for t in replay(load_rules(), sc.series, times=sc.times).transitions
            if t.to_state == "firing"]
    # the fault is found (by replay) after its onset and before the run's end: the import must raise the same
    assert [w for w in want if w[0] == "reward_hacking" and sc.onset <= w[1] <= sc.last_step]
    f = tmp_path / "hacked.jsonl"
    with f.open("w") as fh:
        for step in sorted({s for pts in sc.series.values() for s in pts}):
            row = {m: pts[step] for m, pts in sc.series.items() if step in pts}
            fh.write(json.dumps({"step": step, "time": sc.times[step], "metrics": row}) + "\n")
    code, _, err = cli(server, capsys, "import", "jsonl", str(f), "--project", "p", "--run", "hacked")
    assert code == 0, err
    assert "; 2 requests" in err or "; 3 requests" in err  # a few big requests, not one per step
    run_id = run_by_name(server[0], "p", "hacked")["id"]
    alerts = httpx.get(f"{server[0]}/api/v1/alerts", params={"run_id": run_id}).json()["alerts"]
    got = sorted((a["rule"], a["fired_step"], a["causes"][0]["id"]) for a in alerts if a["fired_step"] is not None)
    assert got == sorted(want)
