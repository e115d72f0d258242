"""The dashboard without a browser: figures are pure functions; pages are functions of the store and the URL."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any, Iterator

import plotly
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from dash import no_update
from dash.html import Div

from parallax.dashboard import ids
from parallax.dashboard.app import alert_action, csv_export, extra_chart, live_update, may_write, route
from parallax.dashboard.figures import (
    GL_THRESHOLD,
    MAX_POINTS_PER_TRACE,
    PANELS,
    alert_panels,
    alert_span,
    compare_figure,
    config_diff,
    ema,
    extend_payload,
    feeders,
    indicator_figure,
    metrics_figure,
    panel_title,
)
from parallax.dashboard.pages import FIRST_LOAD_POINTS, compare_href, compare_search, evidence_text, harness_audit, parse_run_ids
from parallax.server.store import Event, Run, Series
from tests.conftest import make_client, new_run
from tests import test_audit

STALL_ALERT = {
    "id": 7, "run_id": 1, "rule": "rollout_stall", "state": "firing", "severity": "warning", "started_step": 40,
    "fired_step": 42, "ended_step": None, "labels": {"panel": "stall_s"}, "summary": "trainer idle",
    "causes": [{"id": "unbalanced_groups", "score": 1.0,
                "evidence": [{"expr": "median_over(stall_s, 5)", "metric": "stall_s", "window": 5, "steps": [45, 49],
                              "value": 30.0}],
                "advice": "a rollout:train GPU ratio of about 2.00:1 would balance the groups"}],
}


def series(metric: str, steps: list[int], values: list[float | None], *, spread: float = 0.0) -> Series:
    vals = list(values)
    return Series(metric, list(steps), vals, [None if v is None else v - spread for v in vals],
                  [None if v is None else v + spread for v in vals], [1_764_000_000.0 + s for s in steps])


def run(id: int, name: str, config: dict | None = None, last_step: int | None = 99) -> Run:
    return Run(id, "p", name, config or {}, [], "", "running", 0.0, None, last_step)


def walk(component: Any) -> Iterator[Any]:
    """Every Dash component in a tree."""
    if component is None or isinstance(component, (str, int, float)):
        return
    if isinstance(component, (list, tuple)):
        for c in component:
            yield from walk(c)
        return
    yield component
    yield from walk(getattr(component, "children", None))


def by_id(tree: Any) -> dict[str, Any]:
    return {str(c.id): c for c in walk(tree) if getattr(c, "id", None) is not None}


def text_of(tree: Any) -> str:
    out = []

    def visit(c: Any) -> None:
        if isinstance(c, (str, int, float)):
            out.append(str(c))
        elif isinstance(c, (list, tuple)):
            for x in c:
                visit(x)
        elif c is not None:
            visit(getattr(c, "children", None))

    visit(tree)
    return " ".join(out)


# -- figures ---------------------------------------------------------------------------


def test_panels_are_the_eight_indicators_in_design_order():
    assert [p.metrics for p in PANELS] == [
        ("importance_weight_max",), ("staleness_mean", "staleness_max"), ("stall_s", "rollout_s", "train_s", "step_s"),
        ("trainer_mfu",), ("pass_at_k",), ("pass_at_1",), ("entropy",), ("reward_train", "reward_heldout"),
    ]
    assert panel_title(PANELS[4], {"k": 16}) == "pass@16" and panel_title(PANELS[4], {}) == "pass@8"


def test_indicator_figure_draws_envelope_and_value_per_metric():
    p = PANELS[1]  # staleness: mean and max
    fig = indicator_figure(p, {"staleness_mean": series("staleness_mean", [0, 64, 128], [1.0, 2.0, 3.0], spread=0.5)})
    assert len(fig.data) == 3 * len(p.metrics)
    lo, hi, val = fig.data[:3]
    assert list(lo.y) == [0.5, 1.5, 2.5] and list(hi.y) == [1.5, 2.5, 3.5] and list(val.y) == [1.0, 2.0, 3.0]
    assert hi.fill == "tonexty" and val.name == "staleness_mean"
    assert all(t.type == "scatter" for t in fig.data)  # few points: SVG
    assert list(fig.data[5].x) == []  # staleness_max not logged: empty traces, ready for live points
    raw = indicator_figure(p, {"staleness_mean": series("staleness_mean", [0, 1], [1.0, 2.0])})
    assert list(raw.data[0].x) == list(raw.data[1].x) == [] and list(raw.data[2].y) == [1.0, 2.0]
    assert fig.layout.uirevision == "run"
    json.dumps(fig.to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder)


def test_figures_built_unvalidated_pass_plotly_validation():
    """figures._figure skips plotly.py's validation for speed: every kind of figure must still be valid."""
    n = GL_THRESHOLD + 1
    long = {"entropy": series("entropy", list(range(n)), [1.0] * (n - 1) + [None], spread=0.1)}
    s = {"stall_s": series("stall_s", list(range(100)), [0.0] * 100, spread=1.0)}
    runs = [run(1, "a"), run(2, "b")]
    by_run = {1: s, 2: {"stall_s": series("stall_s", [0, 1], [2.0, 3.0])}}
    figs = [
        indicator_figure(PANELS[2], s, alerts=[STALL_ALERT], events=[Event(1, 1, 50, "resume", "ckpt", 0.0)],
                         last_step=99, config={"k": 4}),
        indicator_figure(PANELS[6], long), indicator_figure(PANELS[0], {}),
        *[compare_figure(PANELS[2], runs, by_run, xaxis=x, alerts_by_run={1: [STALL_ALERT]})
          for x in ("step", "time", "relative")],
        metrics_figure([long["entropy"], s["stall_s"]]),
    ]
    for fig in figs:
        checked = go.Figure(fig.to_plotly_json())  # raises on any property plotly does not know
        assert checked.to_plotly_json()["data"] == fig.to_plotly_json()["data"]
    # The template sent is plotly_white's look (cut to the trace types drawn here).
    white = pio.templates["plotly_white"].layout
    assert all(f.layout.template.layout.plot_bgcolor == white.plot_bgcolor for f in figs)
    assert all(f.layout.template.layout.xaxis.gridcolor == white.xaxis.gridcolor for f in figs)


#: A name that plotly.js would render as a live link and bold text if it reached a figure unescaped.
HOSTILE = '<a href="javascript:alert(1)">x</a> <b>&amp;</b>{le="<br>"}'
_PLOTLY_TAG = re.compile(r"<(/?)([^ >]*)(\s+(.*))?>", re.I)
_PLOTLY_ENTITY = re.compile(r"&(#\d+|#x[\da-fA-F]+|[a-z]+);")


def plotly_shows(text: str) -> tuple[str, list[str]]:
    """What plotly.js draws for a text (its svg_text_utils, read from the vendored bundle): split at tags, the
    tags it knows become markup, entities between them are decoded. Returns (the text shown, the tags rendered)."""
    shown, tags = [], []
    entities = {"amp": "&", "lt": "<", "gt": ">"}
    for part in re.split(r"(<[^<>]*>)", text):
        tag = _PLOTLY_TAG.match(part)
        if tag and tag.group(2).lower() in ("br", "sup", "sub", "s", "u", "b", "i", "a", "span", "em"):
            tags.append(part)
        else:
            shown.append(_PLOTLY_ENTITY.sub(lambda m: entities.get(m.group(1), m.group(0)), part))
    return "".join(shown), tags


def drawn_texts(fig: go.Figure) -> list[str]:
    """Every string of a figure's traces and layout (not its template) that plotly.js may draw."""
    out: list[str] = []

    def visit(v: Any) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                if k not in ("template", "uirevision", "legendgroup"):
                    visit(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)

    as_json = fig.to_plotly_json()
    visit(as_json["data"])
    visit(as_json["layout"])
    return out


def test_plotly_draws_user_names_as_text_never_as_html():
    """Run names, metric names with labels, rule names and event messages reach legends, hover labels and shape
    names: plotly.js must draw them as written, without turning their tags into links or styles."""
    alert = {**STALL_ALERT, "rule": HOSTILE}
    s = {"stall_s": series("stall_s", [0, 1], [0.0, 1.0], spread=1.0)}
    figs = [
        indicator_figure(PANELS[2], s, alerts=[alert], events=[Event(1, 1, 1, "note", HOSTILE, 0.0)], last_step=9),
        compare_figure(PANELS[2], [run(1, HOSTILE), run(2, "b")], {1: s, 2: s}, alerts_by_run={1: [alert]}),
        metrics_figure([series(HOSTILE, [0, 1], [1.0, 2.0])]),
    ]
    for fig in figs:
        for text in drawn_texts(fig):
            assert plotly_shows(text)[1] == [], text
    shown = [plotly_shows(t.name)[0] for f in figs for t in f.data]
    assert HOSTILE in shown  # the metric's line in metrics_figure
    assert f"{HOSTILE} · stall_s" in shown
    assert plotly_shows(figs[0].layout.shapes[-1].name)[0] == f"note {HOSTILE}"


def test_long_series_use_webgl_and_non_finite_values_leave_gaps():
    n = GL_THRESHOLD + 1
    fig = indicator_figure(PANELS[6], {"entropy": series("entropy", list(range(n)), [1.0] * (n - 1) + [None])})
    assert {t.type for t in fig.data} == {"scattergl"}
    assert fig.data[2].y[-1] is None


def test_alert_spans_are_shaded_on_the_panels_they_concern():
    s = {"stall_s": series("stall_s", list(range(100)), [0.0] * 100)}
    resolved = {**STALL_ALERT, "id": 8, "state": "resolved", "started_step": 10, "ended_step": 20}
    stall = indicator_figure(PANELS[2], s, alerts=[STALL_ALERT, resolved], last_step=99)
    rects = [sh for sh in stall.layout.shapes if sh.type == "rect"]
    assert [(r.x0, r.x1, r.fillcolor) for r in rects] == [(40, 99, "#d62728"), (10, 20, "#8c8c8c")]
    entropy = indicator_figure(PANELS[6], {}, alerts=[STALL_ALERT], last_step=99)
    assert [sh for sh in entropy.layout.shapes if sh.type == "rect"] == []
    assert alert_span({"started_step": 5, "state": "firing"}, None) == (5, 5)
    assert alert_span({"state": "firing"}, 9) is None


def test_alert_panels_by_label_rule_cause_or_everywhere():
    assert alert_panels(STALL_ALERT) == ("stall",)
    assert alert_panels({"rule": "reward_hacking"}) == ("reward",)
    assert alert_panels({"rule": "mine", "causes": [{"id": "exploration_collapse"}]}) == ("pass_at_k", "pass_at_1", "entropy")
    assert alert_panels({"rule": "mine", "summary": "entropy fell"}) == ("entropy",)
    assert len(alert_panels({"rule": "nonfinite_values"})) == 8


def test_events_are_drawn_as_markers_and_an_empty_panel_says_so():
    fig = indicator_figure(PANELS[0], {}, events=[Event(1, 1, 50, "resume", "from ckpt", 0.0)])
    assert [(s.x0, s.name) for s in fig.layout.shapes if s.type == "line" and s.xref == "x"] == [(50, "resume from ckpt")]
    assert "no data yet" in fig.layout.annotations[0].text


def test_extend_payload_appends_to_all_three_traces_with_a_bound():
    p = PANELS[7]  # reward_train, reward_heldout
    data, idx, max_points = extend_payload(p, {"reward_heldout": series("reward_heldout", [10, 20], [0.5, 0.6],
                                                                        spread=0.1)})
    assert idx == [3, 4, 5] and max_points == MAX_POINTS_PER_TRACE
    assert data["x"] == [[10, 20]] * 3 and data["y"][2] == [0.5, 0.6]
    assert data["y"][0] == pytest.approx([0.4, 0.5]) and data["y"][1] == pytest.approx([0.6, 0.7])
    # Raw points (no envelope) extend the value line only.
    data, idx, _ = extend_payload(p, {"reward_train": series("reward_train", [10], [0.5])})
    assert idx == [2] and data == {"x": [[10]], "y": [[0.5]]}
    assert extend_payload(p, {}) is None
    assert extend_payload(p, {"reward_train": Series("reward_train")}) is None


def test_ema_is_debiased_and_skips_gaps():
    assert ema([1.0, 2.0], 0.0) == [1.0, 2.0]
    out = ema([1.0, None, 3.0], 0.5)
    assert out[0] == pytest.approx(1.0) and out[1] is None and out[2] == pytest.approx((0.25 + 1.5) / 0.75)


def test_compare_figure_overlays_runs_on_step_time_or_relative_axes():
    runs = [run(1, "a"), run(2, "b")]
    data = {1: {"entropy": series("entropy", [0, 1, 2], [3.0, 2.0, 1.0])},
            2: {"entropy": series("entropy", [5, 6], [1.0, 1.0])}}
    fig = compare_figure(PANELS[6], runs, data, smoothing=0.5)
    assert [t.name for t in fig.data] == ["a", "b"] and fig.data[0].line.color != fig.data[1].line.color
    assert fig.data[0].y[0] == pytest.approx(3.0) and fig.data[0].y[2] > 1.0  # smoothed
    rel = compare_figure(PANELS[6], runs, data, xaxis="relative")
    assert list(rel.data[1].x) == [0.0, 1.0]
    wall = compare_figure(PANELS[6], runs, data, xaxis="time")
    assert wall.data[0].x[0].startswith("2025-") and wall.layout.uirevision == "compare-time"
    spiky = {1: {"importance_weight_max": series("importance_weight_max", [0, 64], [1.0, 1.0], spread=4.0)}}
    assert list(compare_figure(PANELS[0], runs, spiky).data[0].y) == [5.0, 5.0]  # bucket maxima for a *_max metric
    shaded = compare_figure(PANELS[2], runs, {1: {"stall_s": series("stall_s", [0], [1.0])}},
                            alerts_by_run={1: [STALL_ALERT]})
    assert len(shaded.layout.shapes) == 1


def test_config_diff_flattens_and_keeps_only_differences():
    diff = config_diff({"a": {"lr": 1e-6, "k": 8, "opt": {"beta": 0.9}}, "b": {"lr": 3e-6, "k": 8, "opt": {"beta": 0.9},
                                                                             "seed": 1}})
    assert diff == [("lr", [1e-6, 3e-6]), ("seed", [None, 1])]


def test_feeders_name_framework_keys():
    keys = feeders("importance_weight_max")
    assert "verl: rollout_corr/rollout_is_max" in keys
    assert any(k.startswith("openrlhf: derived from") and k.endswith("(asynchronous runs)") for k in feeders("stall_s"))
    assert "verl: timing_s/gen (asynchronous runs)" in feeders("stall_s")


def test_evidence_and_url_helpers():
    assert evidence_text(STALL_ALERT["causes"][0]["evidence"][0]) == "median_over(stall_s, 5) = 30 (steps 45–49)"
    assert evidence_text({"metric": "kl", "window": 3, "value": 0.5}) == "kl over 3 steps = 0.5"
    assert parse_run_ids("3, 1,x,3,,2") == [3, 1, 2]
    assert parse_run_ids(",".join(str(i) for i in range(20))) == list(range(8))
    assert compare_search("1,2", 0.6, "time") == "?runs=1,2&smooth=0.6&x=time"
    assert compare_search("1,2", 0, "step") == "?runs=1,2"
    assert compare_href([3, 1]) == "/dashboard/compare?runs=3,1" and compare_href(None) == "/dashboard/compare"


# -- pages, from a real store ----------------------------------------------------------


def push(client, run_id: int, steps: range, **overrides: float) -> None:
    pts = []
    for s in steps:
        m = {"importance_weight_max": 1.2, "staleness_mean": 0.5, "stall_s": 30.0 if s >= 40 else 0.0,
             "rollout_s": 60.0 if s >= 40 else 20.0, "train_s": 30.0, "trainer_mfu": 0.4, "pass_at_1": 0.3,
             "entropy": 2.0 - s / 100, "reward_train": 0.1, "custom/thing": 1.0}
        m.update(overrides)
        pts.append({"step": s, "metrics": m})
    assert client.post(f"/api/v1/runs/{run_id}/metrics", json={"points": pts}).status_code == 200


@pytest.fixture
def app_client(sqlite_url):
    with make_client(database_url=sqlite_url, alert_timer_seconds=0) as c:
        yield c


def test_empty_store_explains_how_to_send_metrics(app_client):
    store = app_client.app.state.store
    page = route(store, "/dashboard/", "")
    assert ids.EMPTY_RUNS in by_id(page)
    text = text_of(page)
    assert "curl" in text and "ParallaxClient" in text and "push_to_gateway" in text


def test_runs_page_lists_filters_and_badges(app_client):
    store = app_client.app.state.store
    a = new_run(app_client, "a", config={"framework": "verl"}, tags=["base"])
    b = new_run(app_client, "b")
    push(app_client, a, range(50))
    page = route(store, "/dashboard/", "")
    table = by_id(page)[ids.RUNS_TABLE]
    text = text_of(table)
    # framework column; the verdict: the faulty run's cause (with the rule and steps on hover), the other healthy
    assert "verl" in text and "unbalanced_groups" in text and "healthy" in text
    titles = [c.title for c in walk(table) if getattr(c, "title", None)]
    assert any("rollout_stall" in t and "ongoing" in t for t in titles)
    # the verdict stays after the run ends and its alerts resolve
    app_client.patch(f"/api/v1/runs/{a}", json={"status": "finished"})
    text = text_of(by_id(route(store, "/dashboard/", ""))[ids.RUNS_TABLE])
    assert "unbalanced_groups" in text and "finished" in text
    links = [c.href for c in walk(table) if getattr(c, "href", None)]
    assert links == [f"/dashboard/runs/{a}", f"/dashboard/runs/{b}"]
    filtered = by_id(route(store, "/dashboard/", "?tag=base"))[ids.RUNS_TABLE]
    assert len([c for c in walk(filtered) if getattr(c, "className", None) == "run-row"]) == 1
    assert by_id(route(store, "/dashboard/", "?tag=base"))[ids.FILTER_TAG].value == "base"


def test_vendored_plotly_basic_is_the_plotly_js_of_plotly_py_and_compare_links_reload(app_client):
    """Pages but the compare page draw with assets/vendor/plotly-basic.min.js (assets/plotly_early.js): it must be
    the plotly.js version plotly.py (and so Dash's plotly.min.js on the compare page) has. The compare link loads
    its page anew, so that page gets the full bundle (WebGL) even after a run page."""
    from pathlib import Path

    from plotly.offline import get_plotlyjs_version

    from parallax import dashboard

    assets = Path(dashboard.__file__).parent / "assets"
    head = (assets / "vendor" / "plotly-basic.min.js").read_text(encoding="utf-8")[:200]
    assert f"plotly.js (basic - minified) v{get_plotlyjs_version()}" in head
    assert "assets/vendor/plotly-basic.min.js" in (assets / "plotly_early.js").read_text(encoding="utf-8")
    new_run(app_client, "a")
    link = by_id(route(app_client.app.state.store, "/dashboard/", ""))[ids.COMPARE_LINK]
    assert link.refresh is True


def test_run_page_has_eight_panels_diagnosis_config_and_live_state(app_client):
    store = app_client.app.state.store
    rid = new_run(app_client, "a", config={"framework": "verl", "k": 4}, tags=["t1"])
    push(app_client, rid, range(50))
    page = route(store, f"/dashboard/runs/{rid}", "?refresh=2")
    found = by_id(page)
    graphs = [c for c in walk(page) if type(c).__name__ == "Graph" and c.id.startswith("panel-")]
    assert [g.id for g in graphs] == [ids.panel(p.key) for p in PANELS]
    assert graphs[4].figure.layout.title.text == "pass@4"
    stall = graphs[2].figure
    assert any(s.type == "rect" for s in stall.layout.shapes)  # the firing stall alert is shaded
    diag = text_of(found[ids.DIAGNOSIS])
    assert "rollout_stall" in diag and "unbalanced_groups" in diag and "2.00:1" in diag
    assert "1 fault: unbalanced_groups (warning, steps" in text_of(found[ids.VERDICT])
    assert '"framework": "verl"' in found[ids.RUN_CONFIG].children
    assert found[ids.RUN_TICK].interval == 2000
    live_state = found[ids.RUN_STATE].data
    assert {k: live_state[k] for k in ("run", "since")} == {"run": rid, "since": {m: 49 for m in (
        "importance_weight_max", "staleness_mean", "stall_s", "rollout_s", "train_s", "trainer_mfu", "pass_at_1",
        "entropy", "reward_train")}}
    assert [a[1] for a in live_state["alerts"]] == ["firing"]  # what the live refresh compares to redraw the diagnosis
    text = text_of(page)
    assert "This run logs no pass_at_k" in text and "val-core/{dataset}/acc/best@{k}/mean" in text
    assert "This run logs no staleness_max" not in text  # only the indicator itself asks for feeders
    assert found[ids.EXTRA_PICK].options == ["custom/thing"]  # other logged metrics, on demand
    json.dumps(page.to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder)


def test_run_page_downsamples_first_load(app_client):
    store = app_client.app.state.store
    rid = new_run(app_client, "long")
    for lo in range(0, 5000, 1000):
        push(app_client, rid, range(lo, lo + 1000), stall_s=0.0)
    graphs = [c for c in walk(route(store, f"/dashboard/runs/{rid}", "")) if type(c).__name__ == "Graph"
              and c.id.startswith("panel-")]
    entropy = graphs[6].figure
    assert 0 < len(entropy.data[2].x) <= FIRST_LOAD_POINTS and entropy.data[2].type == "scatter"  # SVG draws faster


def test_live_update_fetches_only_new_points(app_client):
    store = app_client.app.state.store
    rid = new_run(app_client, "a")
    push(app_client, rid, range(10))
    page = route(store, f"/dashboard/runs/{rid}", "")
    state = by_id(page)[ids.RUN_STATE].data
    extends, same, status, diagnosis = live_update(store, state)
    assert extends == [no_update] * 8 and same is no_update and "last step 9" in status and diagnosis is no_update
    push(app_client, rid, range(10, 13))
    app_client.post(f"/api/v1/runs/{rid}/metrics", json={"points": [{"step": 12, "metrics": {"pass_at_k": 0.5}}]})
    extends, state2, _, _ = live_update(store, state)
    entropy = extends[6]
    assert entropy[0]["x"] == [[10, 11, 12]] and entropy[1] == [2] and entropy[2] == MAX_POINTS_PER_TRACE
    assert extends[4][0]["x"] == [[12]]  # a metric that appears later starts at its first point
    assert state2["since"]["entropy"] == 12 and state2["since"]["pass_at_k"] == 12
    assert live_update(store, state2)[0] == [no_update] * 8
    assert live_update(store, None)[0] == [no_update] * 8


def test_a_new_alert_reaches_an_open_run_page_at_the_next_refresh(app_client):
    store = app_client.app.state.store
    rid = new_run(app_client, "a")
    push(app_client, rid, range(10), stall_s=0.0)
    state = by_id(route(store, f"/dashboard/runs/{rid}", ""))[ids.RUN_STATE].data
    assert live_update(store, state)[3] is no_update  # no alert yet: nothing to redraw
    nan = '{"points": [{"step": 10, "metrics": {"loss": NaN}}]}'
    r = app_client.post(f"/api/v1/runs/{rid}/metrics", content=nan, headers={"content-type": "application/json"})
    assert r.status_code == 200
    _, new_state, _, diagnosis = live_update(store, state)  # the page loaded before the alert fired
    text = text_of(Div(diagnosis))
    assert "nonfinite_values" in text and "numerical_blowup" in text and "Verdict" in text
    assert live_update(store, new_state)[3] is no_update  # drawn once, not at every refresh
    app_client.patch(f"/api/v1/runs/{rid}", json={"status": "finished"})  # resolves: the diagnosis says so
    text = text_of(Div(live_update(store, new_state)[3]))
    assert "resolved" in text and "numerical_blowup" in text


def test_live_refresh_through_dash_is_small(app_client):
    """A live refresh of ten new steps, as the browser asks for it, stays well under 20 KB."""
    rid = new_run(app_client, "a")
    push(app_client, rid, range(1000))
    store = app_client.app.state.store
    state = by_id(route(store, f"/dashboard/runs/{rid}", ""))[ids.RUN_STATE].data
    push(app_client, rid, range(1000, 1010))
    outputs = [{"id": ids.panel(p.key), "property": "extendData"} for p in PANELS]
    outputs += [{"id": ids.RUN_STATE, "property": "data"}, {"id": ids.RUN_STATUS, "property": "children"},
                {"id": ids.DIAGNOSIS, "property": "children"}]
    deps = app_client.get("/dashboard/_dash-dependencies").json()
    [output] = [d["output"] for d in deps if f"{ids.RUN_STATE}.data" in d["output"]]
    body = {
        "output": output,
        "outputs": outputs,
        "inputs": [{"id": ids.RUN_TICK, "property": "n_intervals", "value": 1}],
        "state": [{"id": ids.RUN_STATE, "property": "data", "value": state}],
        "changedPropIds": [f"{ids.RUN_TICK}.n_intervals"],
    }
    r = app_client.post("/dashboard/_dash-update-component", json=body)
    assert r.status_code == 200, r.text
    assert len(r.content) < 20_000
    resp = r.json()["response"]
    assert resp[ids.panel("entropy")]["extendData"][0]["x"] == [list(range(1000, 1010))]


def test_alerts_page_and_actions(app_client):
    store = app_client.app.state.store
    rid = new_run(app_client, "a")
    push(app_client, rid, range(50))
    page = route(store, "/dashboard/alerts", "?state=firing")
    buttons = [c.id for c in walk(page) if type(c).__name__ == "Button"]
    [alert] = store.list_alerts(state="firing")
    assert buttons == [{"type": ids.ACK, "index": alert["id"]}, {"type": ids.SILENCE, "index": alert["id"]}]
    assert alert_action(store, ids.ACK, alert["id"]).startswith("Acknowledged")
    assert store.get_alert(alert["id"])["acked_by"] == "dashboard"
    assert alert_action(store, ids.SILENCE, alert["id"], now=1000.0).startswith("Silenced rollout_stall")
    [silence] = store.list_silences()
    assert (silence["rule"], silence["run_id"], silence["until"]) == ("rollout_stall", rid, 4600.0)
    assert "No pending alerts." in text_of(route(store, "/dashboard/alerts", "?state=pending"))
    assert alert_action(store, ids.ACK, 999) == "Alert 999 no longer exists."


def test_compare_page_and_unknown_pages(app_client):
    store = app_client.app.state.store
    a = new_run(app_client, "a", config={"lr": 1e-6})
    b = new_run(app_client, "b", config={"lr": 3e-6})
    push(app_client, a, range(20))
    push(app_client, b, range(30))
    page = route(store, "/dashboard/compare", f"?runs={a},{b},999&smooth=0.3&x=relative")
    found = by_id(page)
    graphs = [c for c in walk(page) if type(c).__name__ == "Graph"]
    assert len(graphs) == 8 and [t.name for t in graphs[6].figure.data] == ["a", "b"]
    assert found[ids.COMPARE_SMOOTHING].value == 0.3 and found[ids.COMPARE_XAXIS].value == "relative"
    assert "lr" in text_of(found[ids.CONFIG_DIFF])
    assert "compare-empty" in by_id(route(store, "/dashboard/compare", f"?runs={a}"))
    assert "not-found" in by_id(route(store, "/dashboard/runs/999", ""))
    assert "not-found" in by_id(route(store, "/dashboard/runs/abc", ""))
    assert "not-found" in by_id(route(store, "/dashboard/nope", ""))


def test_other_metrics_on_demand_and_csv_export(app_client):
    store = app_client.app.state.store
    rid = new_run(app_client, "a")
    push(app_client, rid, range(5))
    page = route(store, f"/dashboard/runs/{rid}", "")
    assert by_id(page)[ids.EXTRA_PICK].options == ["custom/thing"]
    fig = extra_chart(store, rid, ["custom/thing"])
    assert [t.name for t in fig.data] == ["custom/thing"] and list(fig.data[0].x) == [0, 1, 2, 3, 4]
    text = csv_export(store, rid, ["custom/thing"])
    lines = text.splitlines()
    assert lines[0] == "metric,step,value,min,max,time"
    assert sum(1 for line in lines if line.startswith("custom/thing,")) == 5
    assert sum(1 for line in lines if line.startswith("entropy,")) == 5
    assert not any(line.startswith("pass_at_k,") for line in lines)  # not logged: no rows


def test_csv_export_quotes_metric_names_a_spreadsheet_would_evaluate(app_client):
    store = app_client.app.state.store
    rid = new_run(app_client, "formulas")
    names = ["-A1", "@SUM", "-2.5", "ok:x", 'q{v="=HYPERLINK(1)"}']
    body = {"points": [{"step": s, "metrics": {n: -0.5 - s for n in names}} for s in range(2)]}
    assert app_client.post(f"/api/v1/runs/{rid}/metrics", json=body).status_code == 200
    rows = list(csv.reader(io.StringIO(csv_export(store, rid, names))))
    shown = {r[0] for r in rows[1:]}
    assert {"'-A1", "'@SUM", "'-2.5", "ok:x", 'q{v="=HYPERLINK(1)"}'} <= shown
    assert not any(r[0].startswith(("=", "+", "-", "@", "\t", "\r")) for r in rows)
    negative = [r for r in rows if r[0] == "'-A1"]
    assert [r[2] for r in negative] == ["-0.5", "-1.5"]  # values stay numbers


def test_alert_actions_need_the_write_token_when_one_is_set(sqlite_url):
    assert may_write(None, None) and may_write("s3cret", None, "s3cret") and not may_write("s3cret", "nope", None)
    with make_client(database_url=sqlite_url, token="s3cret", alert_timer_seconds=0) as c:
        auth = {"Authorization": "Bearer s3cret"}
        rid = c.post("/api/v1/runs", json={"project": "p", "name": "a"}, headers=auth).json()["id"]
        pts = [{"step": s, "metrics": {"stall_s": 30.0, "train_s": 30.0, "rollout_s": 60.0}} for s in range(50)]
        assert c.post(f"/api/v1/runs/{rid}/metrics", json={"points": pts}, headers=auth).status_code == 200
        store = c.app.state.store
        [alert] = store.list_alerts(state="firing")
        page = route(store, "/dashboard/alerts", "", token_required=True)
        assert by_id(page)[ids.ALERTS_TOKEN] is not None
        deps = c.get("/dashboard/_dash-dependencies").json()
        [dep] = [d for d in deps if d["output"].startswith(f"..{ids.ALERTS_MESSAGE}.children")]

        def click(typed):
            body = {
                "output": dep["output"],
                "outputs": [{"id": ids.ALERTS_MESSAGE, "property": "children"},
                            {"id": ids.ALERTS_TABLE, "property": "children"}],
                "inputs": [[{"id": {"type": ids.ACK, "index": alert["id"]}, "property": "n_clicks", "value": 1}],
                           [{"id": {"type": ids.SILENCE, "index": alert["id"]}, "property": "n_clicks", "value": None}]],
                "state": [{"id": ids.URL, "property": "search", "value": ""},
                          {"id": ids.ALERTS_TOKEN, "property": "value", "value": typed}],
                "changedPropIds": [json.dumps({"index": alert["id"], "type": ids.ACK}, separators=(",", ":"))
                                   + ".n_clicks"],
            }
            r = c.post("/dashboard/_dash-update-component", json=body)  # a dashboard request passes as a read
            assert r.status_code == 200, r.text
            return r.text

        assert "write token" in click("wrong") and store.get_alert(alert["id"])["acked_at"] is None
        assert "Acknowledged" in click("s3cret") and store.get_alert(alert["id"])["acked_by"] == "dashboard"


# -- harness audit ------------------------------------------------------------------------

tok = test_audit.tok  # the fixture: a small BPE tokenizer trained in the test, with a Qwen-like chat template


def audit_section(store: Any, run_id: int) -> Any:
    return by_id(route(store, f"/dashboard/runs/{run_id}", ""))[ids.AUDIT]


def test_run_page_without_trajectories_says_how_to_send_them(app_client):
    store = app_client.app.state.store
    rid = new_run(app_client, "a")
    push(app_client, rid, range(5))
    section = audit_section(store, rid)
    text = text_of(section)
    assert "Harness audit" in text and "No trajectories yet" in text
    assert f"/api/v1/runs/{rid}/trajectories" in text and "parallax audit FILE.jsonl" in text
    assert not [c for c in walk(section) if "tok" in str(getattr(c, "className", "") or "").split()]


def test_run_page_audit_shows_a_template_that_drops_reasoning(app_client, tok):
    store = app_client.app.state.store
    rid = new_run(app_client, "a")
    docs = [test_audit.rollout(tok, 3, "tito", step=1)]
    docs += [test_audit.rollout(tok, 3, "template", step=2) for _ in range(2)]
    assert app_client.post(f"/api/v1/runs/{rid}/trajectories", json={"trajectories": docs}).status_code == 200
    section = audit_section(store, rid)
    parts = by_id(section)
    text = text_of(section)
    assert "No trajectories yet" not in text and "3 trajectories, 9 turns, steps 1–2" in text
    # The template check fails with its count; the prefix and token checks pass.
    template = text_of(parts["audit-template"])
    assert "FAIL" in template and "Template keeps reasoning" in template and "— 4 of 6 turns broke" in template
    assert "PASS" in text_of(parts["audit-prefix"]) and "0 of 6 turns broke" in text_of(parts["audit-prefix"])
    assert "PASS" in text_of(parts["audit-tokens"]) and "0 of 9 turns differ" in text_of(parts["audit-tokens"])
    examples = [c for c in walk(parts["audit-template"])
                if getattr(c, "className", None) == "audit-example audit-template"]
    assert len(examples) == 4
    ex = text_of(examples[0])
    assert "earlier reasoning removed by the template" in ex and "reasoning_removed" in ex
    assert "step 2" in ex and "turn 1" in ex and "missing from the next prompt" in ex
    # The expected window marks the <think> token (the first difference) and everything after it as differing.
    think = test_audit.enc(tok, "<think>")[0]
    summary = store.audit_summary(rid)
    first = next(e for e in summary["examples"] if e["check"] == "template")
    at = first["position"] - first["window_start"]
    windows = [c for c in walk(examples[0]) if str(getattr(c, "className", "")).startswith("tok-window")]
    assert [w.className for w in windows] == ["tok-window tok-expected", "tok-window tok-actual"]
    for w, ids_ in zip(windows, (first["expected"], first["actual"])):
        toks = [c for c in walk(w) if getattr(c, "className", None) in ("tok", "tok tok-diff")]
        assert [int(t.children) for t in toks] == ids_
        assert [t.className == "tok tok-diff" for t in toks] == [i >= at for i in range(len(ids_))]
    expected_diff = [c for c in walk(windows[0]) if getattr(c, "className", None) == "tok tok-diff"]
    assert expected_diff and int(expected_diff[0].children) == think
    # Passing checks show no examples.
    assert not [c for c in walk(parts["audit-prefix"]) if getattr(c, "className", None) == "tok tok-diff"]
    json.dumps(section.to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder)


def test_harness_audit_layout_for_text_only_rollouts(app_client):
    store = app_client.app.state.store
    rid = new_run(app_client, "a")
    doc = {"step": 3, "turns": [{"prompt_text": "hi", "completion_text": "<think>x</think>ok"},
                                {"prompt_text": "hiok", "completion_text": "fine"}]}
    assert app_client.post(f"/api/v1/runs/{rid}/trajectories", json={"trajectories": [doc]}).status_code == 200
    parts = by_id(harness_audit(store.audit_summary(rid)))
    tokens = text_of(parts["audit-tokens"])
    assert "FAIL" in tokens and "2 of 2 turns differ" in tokens and "rollouts not stored as tokens" in tokens
    template = text_of(parts["audit-template"])
    assert "1 of 1 turns broke" in template and "'hi<think>x</think>ok'" in template and "'hiok'" in template
