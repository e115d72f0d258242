"""ingest.points: parsing and validation, without a server."""

import json
import math

import pytest

from parallax.ingest.points import NAN, NEG_INF, POS_INF, InvalidInput, parse_json, parse_ndjson


def body(points) -> bytes:
    return json.dumps({"points": points}).encode()


def test_samples_are_grouped_by_metric_in_order():
    b = parse_json(body([{"step": 3, "metrics": {"a": 1, "b/c": 2.5}, "time": 10}, {"step": 4, "metrics": {"a": 0.5}}, {"step": 9, "metrics": {}}]), now=99.0)
    assert b.groups == {"a": [(3, 1.0, 0, 10.0), (4, 0.5, 0, 99.0)], "b/c": [(3, 2.5, 0, 10.0)]}
    assert b.rows == [("a", 3, 1.0, 0, 10.0), ("a", 4, 0.5, 0, 99.0), ("b/c", 3, 2.5, 0, 10.0)]
    assert (b.count, b.steps, b.non_finite) == (3, (3, 4), 0)  # a point without metrics is no step


def test_python_json_non_finite_values_are_kept_with_markers():
    raw = json.dumps({"points": [{"step": 1, "metrics": {"x": math.nan, "y": math.inf, "z": -math.inf, "w": 1.0}}]})
    assert "NaN" in raw and "-Infinity" in raw
    b = parse_json(raw.encode(), now=1.0)
    assert [(r[0], r[2], r[3]) for r in b.rows] == [("x", None, NAN), ("y", None, POS_INF), ("z", None, NEG_INF), ("w", 1.0, 0)]
    assert b.non_finite == 3


def test_huge_integer_is_infinite_not_an_error():
    b = parse_json(b'{"points": [{"step": 1, "metrics": {"x": 1' + b"0" * 400 + b"}}]}", now=1.0)
    assert b.rows[0][2:4] == (None, POS_INF)


def test_ndjson_one_point_per_line_blank_lines_ignored():
    b = parse_ndjson(b'{"step": 1, "metrics": {"a": 1}}\n\n{"step": 2, "metrics": {"a": NaN}}\n', now=5.0)
    assert [(r[1], r[3]) for r in b.rows] == [(1, 0), (2, NAN)]


@pytest.mark.parametrize(
    "points, loc, index",
    [
        ([{"step": -1, "metrics": {"a": 1}}], ["body", "points", 0, "step"], 0),
        ([{"step": 1, "metrics": {"a": 1}}, {"step": 1.5, "metrics": {"a": 1}}], ["body", "points", 1, "step"], 1),
        ([{"step": "7", "metrics": {"a": 1}}], ["body", "points", 0, "step"], 0),
        ([{"step": True, "metrics": {"a": 1}}], ["body", "points", 0, "step"], 0),
        ([{"step": 2**63, "metrics": {"a": 1}}], ["body", "points", 0, "step"], 0),
        ([{"metrics": {"a": 1}}], ["body", "points", 0, "step"], 0),
        ([{"step": 1}], ["body", "points", 0, "metrics"], 0),
        ([{"step": 1, "metrics": [1, 2]}], ["body", "points", 0, "metrics"], 0),
        ([{"step": 1, "metrics": {"": 1}}], ["body", "points", 0, "metrics", ""], 0),
        ([{"step": 1, "metrics": {"has space": 1}}], ["body", "points", 0, "metrics", "has space"], 0),
        ([{"step": 1, "metrics": {"x" * 201: 1}}], ["body", "points", 0, "metrics", "x" * 201], 0),
        ([{"step": 1, "metrics": {"a": "1.0"}}], ["body", "points", 0, "metrics", "a"], 0),
        ([{"step": 1, "metrics": {"a": None}}], ["body", "points", 0, "metrics", "a"], 0),
        ([{"step": 1, "metrics": {"a": True}}], ["body", "points", 0, "metrics", "a"], 0),
        ([{"step": 1, "metrics": {"a": 1}, "time": "now"}], ["body", "points", 0, "time"], 0),
        ([{"step": 1, "metrics": {"a": 1}, "time": -5}], ["body", "points", 0, "time"], 0),
        ([{"step": 1, "metrics": {"a": 1}, "metric": {}}], ["body", "points", 0, "metric"], 0),
        ([5], ["body", "points", 0], 0),
    ],
)
def test_each_bad_point_names_its_field_and_index(points, loc, index):
    with pytest.raises(InvalidInput) as err:
        parse_json(body(points))
    first = err.value.errors[0]
    assert first["loc"] == loc
    assert first["index"] == index
    assert err.value.status_code == 422


def test_allowed_name_characters():
    b = parse_json(body([{"step": 0, "metrics": {"actor/pg_clipfrac": 1, "a:b.c@d-e_f": 2, "x" * 200: 3}}]), now=1.0)
    assert len(b.rows) == 3


def test_all_errors_are_reported_not_only_the_first():
    with pytest.raises(InvalidInput) as err:
        parse_json(body([{"step": -1, "metrics": {}}, {"step": 1, "metrics": {"a": "x"}}, {"step": 2, "metrics": {"ok": 1}}]))
    assert [e["index"] for e in err.value.errors] == [0, 1]


@pytest.mark.parametrize(
    "raw, status",
    [
        (b"{not json", 400),
        (b"", 400),
        (b'{"points": 5}', 422),
        (b"[1, 2]", 422),
        (b'{"points": [], "extra": 1}', 422),
    ],
)
def test_malformed_documents(raw, status):
    with pytest.raises(InvalidInput) as err:
        parse_json(raw)
    assert err.value.status_code == status
    assert err.value.errors[0]["loc"][0] == "body"


def test_malformed_ndjson_names_the_line():
    with pytest.raises(InvalidInput) as err:
        parse_ndjson(b'{"step": 1, "metrics": {"a": 1}}\n{"step": 2, "metr\n')
    assert err.value.errors[0]["line"] == 2
    assert err.value.status_code == 400
