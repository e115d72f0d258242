"""The rule expression language: parsing, semantics of every function, errors with their column."""

from __future__ import annotations

import builtins
import math

import pytest

from parallax.alerts.expr import FUNCTIONS, Expr, ExprError, parse_expr

NAN, INF = float("nan"), float("inf")


class Ctx:
    """An EvalContext over {metric: [(step, value)]}; values may be None or non-finite."""

    def __init__(self, series=None, *, step=100, config=None, since_report=None, since_resume=None, interval=None):
        self.series = series or {}
        self.step = step
        self.config = config if config is not None else {}
        self._since_report = since_report
        self._since_resume = since_resume
        self._interval = interval
        self.calls: list[tuple[str, int]] = []

    def points(self, metric, n):
        self.calls.append((metric, n))
        pts = [(s, v) for s, v in self.series.get(metric, []) if s <= self.step]
        return pts[-n:] if n > 0 else []

    def seconds_since_report(self):
        return self._since_report

    def steps_since_resume(self):
        return self._since_resume


class CtxWithInterval(Ctx):
    def report_interval(self):
        return self._interval


def pts(*values, start=0, every=1):
    return [(start + i * every, v) for i, v in enumerate(values)]


X = pts(1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0)  # steps 0..9
SERIES = {
    "x": X,
    "gaps": pts(1.0, NAN, 3.0, INF, 5.0),
    "withnone": pts(1.0, None, 3.0),
    "lastnan": pts(1.0, 2.0, NAN),
    "sparse": pts(0.5, 0.6, 0.7, 0.4, start=9, every=25),  # steps 9, 34, 59, 84
    "flat": pts(*[2.0] * 10),
    "actor/entropy": pts(1.5, 1.4),
    "spiky": pts(*[1.0, 1.1, 0.9, 1.0, 1.05] * 2, 50.0, *[1.0, 1.1, 0.9, 1.0, 1.05] * 2),  # one spike in 21 points
}


def ev(source, **kw):
    return parse_expr(source).evaluate(Ctx(SERIES, **kw))


@pytest.mark.parametrize(
    "source, expected",
    [
        ("1 + 2 * 3", 7.0),
        ("(1 + 2) * 3", 9.0),
        ("-2 - -3", 1.0),
        ("10 / 4", 2.5),
        ("x", 10.0),  # a bare name is last(name)
        ("last(x)", 10.0),
        ('last("actor/entropy")', 1.4),  # names with / : . @ - are quoted
        ("mean_over(x, 4)", 8.5),
        ("max_over(x, 3)", 10.0),
        ("min_over(x, 3)", 8.0),
        ("median_over(x, 4)", 8.5),
        ("median_over(x, 5)", 8.0),
        ("sum_over(x, 3)", 27.0),
        ("std_over(x, 3)", 1.0),
        ("count_over(x, 4)", 4.0),
        ("count_over(x, 50)", 10.0),  # a window longer than the series reads what is there
        ("slope(x, 5)", 1.0),  # per step
        ("slope(sparse, 4)", pytest.approx(-0.0008)),  # per step, on a sparse metric's own points
        ("trend(x, 5)", 1.0),  # the median of the slopes between every two points: a line's own slope
        ("trend(sparse, 4)", pytest.approx(0.004 / 3)),  # the last point's drop tilts it less than the least squares'
        ("robust_slope(x, 5)", 1.0),  # a line has no noise: its least-squares slope
        ("delta(x, 3)", 3.0),
        ("baseline(x, 4)", 8.5),  # the last 4 points
        ("baseline(x, 4, 2)", 6.5),  # the 4 points before the 2 most recent: 5 6 7 8
        ("baseline(x, 4, skip=6)", 2.5),  # 1 2 3 4
        ("noise(flat, 10)", 0.0),
        ("noise(x, 10)", 0.0),  # a straight line has no noise
        ("count_nonfinite(gaps, 5)", 2.0),
        ("count_nonfinite(withnone, 3)", 1.0),
        ("count_nonfinite(never_logged, 5)", 0.0),  # nothing logged, nothing non-finite
        ("mean_over(gaps, 5)", 3.0),  # non-finite points are skipped by the statistics
        ("max_over(gaps, 5)", 5.0),
        ("exists(x)", True),
        ("exists(never_logged)", False),
        ("last(sparse)", 0.4),
        ("median_over(sparse, 3)", 0.6),  # windows count the metric's own points
        ("abs(-3)", 3.0),
        ("min(3, 1, 2)", 1.0),
        ("max(3, 1, 2)", 3.0),
        ("clamp(5, 0, 1)", 1.0),
        ("clamp(-5, 0, 1)", 0.0),
        ("log(1)", 0.0),
        ("sqrt(2.25)", 1.5),
        ("sqrt(0)", 0.0),
        ("floor(2.7)", 2.0),
        ("floor(-2.5)", -3.0),
        ("step() + 1 - 7 * floor((step() + 1) / 7)", 3.0),  # 101 modulo 7
        ("coalesce(last(never_logged), 7)", 7.0),
        ("coalesce(last(x), 7)", 10.0),
        ("x if x > 5 else 0", 10.0),
        ("1 < 2 < 3", True),
        ("1 < 3 < 2", False),
        ("not 0", True),
        ("True and 1 > 0", True),
        ("(x > 5) * 2 + 1", 3.0),  # booleans count as 0/1 in arithmetic
        ("step()", 100.0),
    ],
)
def test_values(source, expected):
    assert ev(source) == expected


@pytest.mark.parametrize(
    "source",
    [
        "last(never_logged)",
        "never_logged > 1",
        "mean_over(never_logged, 5) + 1",
        "1 / (x - x)",  # division by zero is unknown, not an exception
        "log(0)",
        "sqrt(-1)",  # a root of a negative is unknown
        "floor(1 / (x - x))",  # the floor of an unknown is unknown
        "last(lastnan)",  # the most recent point is non-finite
        "std_over(flat, 2) / std_over(flat, 2)",  # 0 / 0
        "delta(x, 10)",  # needs 11 points
        "slope(flat, 2) / 0 + 1",
        "baseline(x, 20, 5)",  # 5 points before the last 5: fewer than half of 20
        "noise(withnone, 3)",  # 2 finite points
        "min(1, last(never_logged))",
        "absent_for()",  # the context does not know
        "config(\"missing\")",
        "steps_since_resume()",
        "report_interval()",  # the context does not provide it
        "x * 1e308 * 10",  # overflow is unknown
        "not last(never_logged)",
        "last(never_logged) if x > 1 else 1",
        "1 if last(never_logged) else 2",
    ],
)
def test_unknown_is_none(source):
    assert ev(source) is None


@pytest.mark.parametrize(
    "source, expected",
    [
        # Kleene logic: a known answer wins over an unknown operand
        ("x > 5 or last(never_logged) > 1", True),
        ("last(never_logged) > 1 or x > 5", True),
        ("x > 50 or last(never_logged) > 1", None),
        ("x > 50 and last(never_logged) > 1", False),
        ("last(never_logged) > 1 and x > 50", False),
        ("x > 5 and last(never_logged) > 1", None),
        ("1 < last(never_logged) < 0", None),
        ("2 < 1 < last(never_logged)", False),
    ],
)
def test_three_valued_logic(source, expected):
    assert ev(source) is expected


def test_baseline_is_robust_to_a_spike_and_noise_ignores_it():
    assert ev("baseline(spiky, 21)") == pytest.approx(1.0)
    assert ev("noise(spiky, 21)") < 0.2
    assert ev("max_over(spiky, 21)") == 50.0
    assert ev("median_over(spiky, 5)") == pytest.approx(1.0)
    assert ev("median_over(spiky, 15)") == pytest.approx(1.0)


def test_noise_estimates_a_normal_sigma():
    import random

    rng = random.Random(3)
    values = pts(*[0.01 * i + rng.gauss(0, 2.0) for i in range(400)])
    sigma = parse_expr("noise(y, 400)").evaluate(Ctx({"y": values}, step=1000))
    assert sigma == pytest.approx(2.0, rel=0.15)


def test_windows_stop_at_the_evaluated_step():
    assert ev("last(x)", step=4) == 5.0
    assert ev("count_over(x, 100)", step=4) == 5.0


@pytest.mark.parametrize(
    "config, source, expected",
    [
        ({"k": 8}, 'config("k")', 8.0),
        ({}, 'config("k", 8)', 8.0),
        ({"k": None}, 'config("k", 8)', 8.0),
        ({"staleness_bound": "2"}, 'config("staleness_bound")', 2.0),
        ({"framework": "verl"}, 'config("framework", 1)', 1.0),  # not a number: the default
        ({"async": True}, 'config("async")', True),
        ({"algo": {"clip": 0.2}}, 'config("algo.clip")', 0.2),
        ({"algo.clip": 0.3, "algo": {"clip": 0.2}}, 'config("algo.clip")', 0.3),
        ({"k": 8}, 'config(key="k", default=4) * 2', 16.0),
    ],
)
def test_config(config, source, expected):
    assert parse_expr(source).evaluate(Ctx(SERIES, config=config)) == expected


def test_context_functions():
    assert parse_expr("absent_for()").evaluate(Ctx(since_report=42.0)) == 42.0
    assert parse_expr("steps_since_resume()").evaluate(Ctx(since_resume=3)) == 3.0
    assert parse_expr("report_interval()").evaluate(CtxWithInterval(interval=12.5)) == 12.5


@pytest.mark.parametrize(
    "source, metrics, windows, uses_time",
    [
        ("x", {"x"}, {"x": 1}, False),
        ("max_over(iw, 5) > 10 and last(stale) < 1", {"iw", "stale"}, {"iw": 5, "stale": 1}, False),
        ("baseline(a, 40, 10) + mean_over(a, 5)", {"a"}, {"a": 50}, False),
        ("delta(a, 10)", {"a"}, {"a": 11}, False),
        ('last("actor/entropy") + exists(b)', {"actor/entropy", "b"}, {"actor/entropy": 1, "b": 1}, False),
        ("absent_for() > 600", set(), {}, True),
        ('config("k", 8) > 1', set(), {}, False),
    ],
)
def test_metrics_windows_and_time(source, metrics, windows, uses_time):
    e = parse_expr(source)
    assert e.source == source
    assert e.metrics == frozenset(metrics)
    assert e.windows == windows
    assert e.uses_time is uses_time


def test_points_are_fetched_with_the_window():
    ctx = Ctx(SERIES)
    parse_expr("baseline(x, 4, 2) + last(x)").evaluate(ctx)
    assert ctx.calls == [("x", 6), ("x", 1)]


def test_expressions_compare_by_source():
    assert parse_expr("x > 1") == parse_expr("x > 1")
    assert hash(parse_expr("x > 1")) == hash(parse_expr("x > 1"))
    assert parse_expr("x > 1") != parse_expr("x > 2")


def test_headline_is_the_left_side_of_the_first_comparison():
    ctx = Ctx(SERIES)
    assert parse_expr("max_over(x, 3) > 5 and x < 100").headline(ctx) == 10.0
    assert parse_expr("mean_over(x, 2)").headline(ctx) == 9.5


def test_multi_line_expressions():
    assert ev("max_over(x, 3)\n  > 5\n  and x < 100") is True


def test_evaluation_never_uses_eval_or_exec(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("eval/exec/compile called")

    e = parse_expr("max_over(x, 5) > 3 and coalesce(config(\"k\"), 8) == 8 and abs(-1) == 1")
    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(builtins, "compile", forbidden)
    assert e.evaluate(Ctx(SERIES)) is True


@pytest.mark.parametrize(
    "source, column, fragment",
    [
        ("", 0, "empty"),
        ("x +", 3, "syntax error"),
        ("max_over(x, 5) >", 16, "syntax error"),
        ("maxover(x, 5)", 0, "did you mean max_over"),
        ("x > 1 and foo(x)", 10, "unknown function 'foo'"),
        ("actor.entropy > 1", 0, "quote a metric name"),
        ("x[0]", 0, "indexing"),
        ("(lambda: 1)()", 1, "only the built-in functions"),
        ("__import__('os')", 0, "unknown function '__import__'"),
        ("eval('1')", 0, "unknown function 'eval'"),
        ("x.__class__", 0, "quote a metric name"),
        ("'actor/entropy' > 1", 0, "quoted metric name goes inside a function"),
        ("mean_over(x, n)", 13, "window length must be a whole number"),
        ("mean_over(x, 2.5)", 13, "whole number"),
        ("mean_over(x, 0)", 13, "between 1"),
        ("slope(x, 1)", 9, "between 2"),
        ("noise(x, 2)", 9, "between 3"),
        ("baseline(x, 5, -1)", 15, "skip must be"),
        ("mean_over(x)", 0, "needs a window length"),
        ("last(x, 5)", 8, "at most 1 arguments"),
        ("last(x + 1)", 5, "expected a metric name"),
        ('last("a b")', 5, "invalid metric name"),
        ("baseline(x, 5, skipp=1)", 21, "no parameter 'skipp'"),
        ("abs(1, 2)", 0, "takes 1 arguments"),
        ("min(1)", 0, "at least 2"),
        ("abs(x=1)", 6, "no keyword arguments"),
        ("config(k)", 7, "quoted string"),
        ('config("k", x)', 12, "default must be a number"),
        ("x ** 2", 0, "operator Pow is not allowed"),
        ("x % 2", 0, "operator Mod"),
        ("x in y", 0, "comparison In"),
        ("x is y", 0, "comparison Is"),
        ("[x]", 0, "lists"),
        ("{x: 1}", 0, "dicts"),
        ("f'{x}'", 0, "f-strings"),
        ("None", 0, "NoneType constants"),
        ("1 / 0", 0, "division by zero"),
        ("last", 0, "is a function"),
        ("(y := 1)", 1, "':=' is not allowed"),
        ("max_over(*x)", 9, "*args"),
        ("x" * 5000, 4000, "longer than"),
    ],
)
def test_errors_give_the_column(source, column, fragment):
    with pytest.raises(ExprError) as info:
        parse_expr(source)
    assert fragment in info.value.message
    assert info.value.column == column
    assert str(info.value) == f"column {column}: {info.value.message}"


def test_error_column_on_a_later_line():
    with pytest.raises(ExprError) as info:
        parse_expr("max_over(x, 5) > 3\nand foo(x)")
    assert info.value.column == len("max_over(x, 5) > 3\nand ")


def test_non_string_source():
    with pytest.raises(ExprError):
        parse_expr(3)  # type: ignore[arg-type]


def test_deep_nesting_is_refused_not_crashing():
    with pytest.raises(ExprError):
        parse_expr("(" * 300 + "1" + ")" * 300)


def test_function_table():
    assert {"last", "mean_over", "max_over", "min_over", "median_over", "slope", "delta", "baseline",
            "count_nonfinite", "absent_for", "config", "exists", "abs", "min", "max"} <= FUNCTIONS
    assert isinstance(parse_expr("1"), Expr)
    assert not math.isnan(ev("noise(spiky, 21)"))


TRICKY = [
    "x > 1 and log(last(x) - 5) > 0",  # log of a negative only where 'and' would not read it
    "last(x) > 8 or 1 / (last(x) - last(x)) > 0",  # division by zero in the branch 'or' skips
    "1 / (last(x) - 5) if last(x) != 5 else -1",
    "coalesce(last(sparse), last(withnone), median_over(gaps, 3), 7)",
    "not (last(lastnan) > 1) and count_nonfinite(gaps, 5) >= 1",
    "0 < last(x) <= 5 < max_over(x, 3)",
    "-abs(slope(x, 4)) + clamp(delta(x, 3), 0, 2) * min(std_over(x, 4), noise(spiky, 20))",
    "config('a.b', 2) * baseline(x, 4, 2) > step() / 10",
    "last(x) * 1e308 * 10 > 0",  # overflow to infinity: unknown
    "exists(sparse) and not exists(nothing) and count_over(sparse, 3) == 3",
]


@pytest.mark.parametrize("source", TRICKY)
def test_evaluate_many_is_evaluate_at_each_step(source):
    """The engine's pass over a batch's steps walks the tree once for all steps: same values, same short-circuits
    (the log of a negative, a division by zero in a branch not taken), at every step."""
    e = parse_expr(source)
    ctxs = [Ctx(SERIES, step=s, config={"a": {"b": 3}}) for s in range(-1, 105, 3)]
    assert e.evaluate_many(ctxs) == [e.evaluate(c) for c in ctxs]
    assert e.evaluate_many([]) == []


def test_evaluate_many_matches_evaluate_for_every_expression_of_the_default_pack():
    from parallax.alerts.rules import load_rules
    from parallax.alerts.suites.synthetic import generate

    rules = load_rules()
    exprs = [e for r in rules for e in (r.condition, *r.values.values(), *(c.score for c in r.causes),
                                         *(x for c in r.causes for x in c.evidence))]
    compared = 0
    for sc in generate(seed=5, healthy=1, per_cause=1):
        series = {m: sorted(p.items()) for m, p in sc.series.items()}
        steps = range(0, sc.last_step + 1, 2)
        for e in exprs:
            ctxs = [Ctx(series, step=s, config=sc.config) for s in steps]
            want = [e.evaluate(c) for c in ctxs]
            got = e.evaluate_many(ctxs)
            assert got == want, (sc.name, e.source)
            compared += sum(v is not None for v in want)
    assert compared > 10_000  # most of them have values: the comparison is not between Nones


def test_pair_windows_are_the_same_from_a_run_wide_cache_as_computed_afresh():
    import random

    from parallax.alerts.engine import SeriesContext

    rng = random.Random(7)
    train = {s: rng.random() if rng.random() > 0.05 else float("nan") for s in range(300)}
    heldout = {s: rng.random() for s in range(4, 300, 7)}
    data = {m: (sorted(p), [None if v != v else v for _, v in sorted(p.items())]) for m, p in
            {"reward_train": train, "reward_heldout": heldout}.items()}
    exprs = [parse_expr(src) for src in (
        "last(reward_train - reward_heldout)", "baseline(reward_train - reward_heldout, 6, 2)",
        "noise(reward_train - reward_heldout, 40)", "min_over(at(reward_train, reward_heldout), 2)",
        "count_over(reward_train - reward_heldout, 64)", "slope(reward_train - reward_heldout, 8, 2)")]
    cache: dict = {}
    for step in range(300):
        shared = SeriesContext(data, step=step, pair_cache=cache)
        fresh = SeriesContext(data, step=step)
        assert [e.evaluate(shared) for e in exprs] == [e.evaluate(fresh) for e in exprs], step
    assert cache  # the run-wide cache was used
    with pytest.raises(ExprError, match="at most 64"):
        parse_expr("noise(reward_train - reward_heldout, 60, 10)")


def test_slope_of_a_pair_is_the_gaps_trend_per_step_at_the_sparse_metrics_steps():
    from parallax.alerts.engine import SeriesContext

    # the training reward every step; the held-out score every 10 steps; the gap grows 0.002 a step
    train = {s: 0.3 + 0.004 * s for s in range(101)}
    heldout = {s: 0.3 + 0.002 * s for s in range(10, 101, 10)}
    data = {m: (sorted(p), [p[k] for k in sorted(p)]) for m, p in {"reward_train": train, "reward_heldout": heldout}.items()}
    ctx = SeriesContext(data, step=100)
    # the pair's point at each evaluation: the mean of the training reward since the previous one (10 steps, 4.5
    # steps behind on average), minus the held-out score there
    slope = parse_expr("slope(reward_train - reward_heldout, 8, 2)").evaluate(ctx)
    assert slope == pytest.approx(0.002)
    assert parse_expr("slope(at(reward_train, reward_heldout), 5)").evaluate(ctx) == pytest.approx(0.004)
    assert parse_expr("trend(reward_train - reward_heldout, 8, 2)").evaluate(ctx) == pytest.approx(0.002)
    with pytest.raises(ExprError, match="takes one metric"):
        parse_expr("delta(reward_train - reward_heldout, 3)")


def test_trend_is_the_gaps_line_that_an_onsets_own_jump_does_not_tilt():
    from parallax.alerts.engine import SeriesContext

    # the gap widens 0.001 a step over ten evaluations 10 steps apart, with a little noise; then an exploit lifts
    # the last two by 0.15 and 0.25
    noise = [0.004, -0.003, 0.002, -0.004, 0.003, -0.002, 0.004, -0.003, 0.002, -0.004]
    gap = [-0.05 + 0.01 * i + e for i, e in enumerate(noise)] + [0.05 + 0.15, 0.06 + 0.25]
    steps = [10 * (i + 1) for i in range(len(gap))]
    ctx = SeriesContext({"gap": (steps, gap)}, step=steps[-1])
    before = SeriesContext({"gap": (steps[:-2], gap[:-2])}, step=steps[-3])
    # with the two lifted evaluations in the window, least squares more than doubles; the median slope barely moves
    assert parse_expr("slope(gap, 12)").evaluate(ctx) > 2 * parse_expr("slope(gap, 12)").evaluate(before)
    assert parse_expr("trend(gap, 12)").evaluate(ctx) == pytest.approx(0.001, abs=0.0004)
    assert parse_expr("trend(gap, 10)").evaluate(before) == pytest.approx(0.001, abs=0.0003)


def test_robust_slope_holds_one_heavy_tailed_point_and_keeps_a_fresh_climbs_weight():
    from parallax.alerts.engine import SeriesContext

    # a flat series with a little noise whose oldest point of 20 dips by 0.3 (17 sigma of its point-to-point noise),
    # as a healthy training reward's one heavy-tailed step does: the least-squares slope climbs with the dip's leverage
    wiggle = [0.008, -0.006, 0.011, -0.009, 0.004, -0.012, 0.007, -0.005, 0.010, -0.008,
              0.006, -0.011, 0.009, -0.004, 0.012, -0.007, 0.005, -0.010, 0.008, -0.006]
    dipped = [0.25 + w for w in wiggle]
    dipped[0] -= 0.3
    steps = list(range(len(dipped)))
    ctx = SeriesContext({"r": (steps, dipped)}, step=steps[-1])
    ls = parse_expr("slope(r, 20)").evaluate(ctx)
    assert ls > 0.004  # the dip alone reads as a climb of 0.08 over the window
    # held within 5 sigma of the line, the dip keeps a fraction of its pull
    assert 0 < parse_expr("robust_slope(r, 20)").evaluate(ctx) < 0.4 * ls
    # a climb that began 10 steps into the window, 0.01 a step, no point far off its line: the least-squares slope
    climb = [0.25 + w + (0.01 * (i - 10) if i > 10 else 0.0) for i, w in enumerate(wiggle)]
    ctx = SeriesContext({"r": (steps, climb)}, step=steps[-1])
    assert parse_expr("robust_slope(r, 20)").evaluate(ctx) == pytest.approx(parse_expr("slope(r, 20)").evaluate(ctx))
    # too few points to hold anything against: unknown
    assert parse_expr("robust_slope(r, 20)").evaluate(SeriesContext({"r": ([0, 1], [0.1, 0.2])}, step=1)) is None
