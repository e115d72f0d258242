"""The compiled batch path of conditions (alerts.expr.compiled): the same values as evaluating each step alone."""

from __future__ import annotations

import random

import pytest

from parallax.alerts.engine import SeriesContext
from parallax.alerts.expr import parse_expr
from parallax.alerts.expr.parse import ExprError
from parallax.alerts.expr.compiled import compile_batch
from parallax.alerts.expr import nodes as N
from parallax.alerts.expr.nodes import Batch
from parallax.alerts.rules import load_rules

NAN, INF = float("nan"), float("inf")

EXPRS = [
    "median_over(x, 5) > 1.5 * baseline(x, 40, 10) or mean_over(y, 3) < 0",
    "not (last(x) > 1) and coalesce(max_over(z, 4) > 2, False)",
    "coalesce(last(z), last(y), 7) / (last(x) - last(x))",
    "-last(x) + abs(last(y)) * clamp(last(x), 0, 1) - log(max_over(x, 5))",
    "0 < last(x) <= 2 < max_over(y, 10)",
    "1 < last(z) < 3 or last(y) != last(y) or last(x) == 1",
    "config('k', 2) * last(x) if count_over(x, 10) >= 8 else min(last(y), last(x), noise(y, 20))",
    "std_over(x, 6) > 0 and slope(y, 8) > -1 and delta(x, 3) < 5 and spacing(y, 6) >= 1",
    "quantile_over(x, 30, 0.9, 5) - quantile_over(x, 30, 0.1) > 0.5 and exists(y)",
    "count_nonfinite(x, 5) + count_nonfinite(y, 5) > 0 or last_step(z) > step() - 3",
    "sum_over(x, 4) / mean_over(y, 4) > config('ratio') or absent_for() > 10 and steps_since_resume() < 5",
    "max(last(x), 1) - min(last(y), 0) > 1e308",
    "last(huge) * last(huge) > 0 or std_over(huge, 5) > 1",
    "max(last(x) > 0, 0.5) + min(last(y) > 1, last(z) < 0, 2) + abs(last(x) > 1) + log(last(y) > 0) > 0.9",
    "max_over(x, 5, 2) + min_over(y, 4, 1) + mean_over(x, 6, 3) + sum_over(y, 3, 1) > count_over(z, 5, 2)"
    " + count_nonfinite(x, 4, 1) or exists(z) and median_over(x, 4, 3) < baseline(y, 6, 2)",
    "clamp(last(z), last(x) > 0, max(last(y), 0.5)) - abs(-last(y)) + log(last(x)) > 0 or max(last(z), 1) < 2",
    "step() + 1 - 3 * floor((step() + 1) / 3) == 0 or floor(last(x)) + sqrt(last(y)) > 1 or floor(last(huge)) > 0",
]


def _series(rng: random.Random, n: int) -> dict:
    out = {}
    for metric in ("x", "y", "z", "huge"):
        steps, values = [], []
        for s in range(n):
            if rng.random() < 0.2 and metric == "z":
                continue
            if metric == "huge":
                v = rng.choice([1e200, -1e200, 1e300, 3.0])
            else:
                v = rng.gauss(1, 1)
                r = rng.random()
                if r < 0.05:
                    v = rng.choice([None, NAN, INF, -INF])
                elif r < 0.1:
                    v = rng.choice([0.0, 1.0, 2.0, 1.5])
            steps.append(s)
            values.append(v)
        out[metric] = (steps, values)
    return out


def _batch(series, steps, config):
    pairs: dict = {}
    ctxs = [SeriesContext(series, step=s, config=config, seconds_since_report=float(s % 20), resume_step=3,
                          pairs=pairs, pair_cache={}) for s in steps]
    Batch(ctxs)
    return ctxs


@pytest.mark.parametrize("source", EXPRS)
def test_compiled_matches_evaluate(source):
    expr = parse_expr(source)
    assert compile_batch(expr._root) is not None  # the path under test is taken
    rng = random.Random(hash(source) % 1000)
    for trial in range(30):
        series = _series(rng, rng.randint(1, 80))
        config = rng.choice([{}, {"k": 3}, {"ratio": "0.5", "k": True}])
        steps = sorted(rng.sample(range(-2, 85), rng.randint(1, 30)))
        ctxs = _batch(series, steps, config)
        sub = [c for c in ctxs if rng.random() < 0.8] or ctxs
        got = expr.evaluate_many(sub)
        want = [expr.evaluate(SeriesContext(series, step=c.step, config=config,
                                             seconds_since_report=float(c.step % 20), resume_step=3)) for c in sub]
        assert repr(got) == repr(want), (source, steps)


PAIR_EXPRS = [
    "count_over(x - y, 8) >= 8 and last(x - y) < 0.75 * baseline(x - y, 6, 1) or max_over(x - y, 2) > noise(x - y, 40)",
    "last(at(x, y)) - baseline(at(x, y), 6, 1) > 0 and min_over(x - y, 2) > baseline(x - y, 6, 2) or last(y) > 2",
    "slope(x - y, 5) > 0 or coalesce(last(at(x, y)), -1) > 0.5",
    # a second pair series read at some steps only (checked order-free at its first read, not before the run)
    "last(x) > 1.5 and last(at(z, y)) - max_over(at(z, y), 1, 1) > 0 or last(x - y) > 1",
]


def _pair_series(rng: random.Random, n: int, every: int) -> dict:
    xs, ys, zs = ([], []), ([], []), ([], [])
    for s in range(n):
        v = rng.gauss(1, 1)
        if rng.random() < 0.05:
            v = rng.choice([None, NAN, INF, -INF])
        xs[0].append(s)
        xs[1].append(v)
        if rng.random() < 0.9:
            zs[0].append(s)
            zs[1].append(rng.gauss(0, 1))
        if s % every == 0 and rng.random() < 0.95:
            w = rng.gauss(0.5, 1)
            if rng.random() < 0.05:
                w = rng.choice([None, NAN, INF])
            ys[0].append(s)
            ys[1].append(w)
    return {"x": xs, "y": ys, "z": zs}


def _pair_run(expr, series, steps, rng, *, batched: bool):
    """The expression at each of ``steps``, in batches (the compiled path) or step by step, over one run's
    pair_cache: the values and the cache left behind."""
    cache: dict = {}
    out = []
    i = 0
    while i < len(steps):
        k = rng.randint(1, 30)
        chunk = steps[i:i + k]
        i += k
        if batched:
            pairs: dict = {}
            ctxs = [SeriesContext(series, step=s, pairs=pairs, pair_cache=cache) for s in chunk]
            Batch(ctxs)
            out += expr.evaluate_many(ctxs)
        else:
            out += [expr.evaluate(SeriesContext(series, step=s, pair_cache=cache)) for s in chunk]
    return out, cache


def test_pair_windows_compile():
    assert compile_batch(parse_expr("last(x - y) > 0 and last(x) > 0")._root) is not None
    assert compile_batch(parse_expr("last(at(x, y)) > 0")._root) is not None
    assert compile_batch(parse_expr("last(x) > 0 and last(y) < 1")._root).pairs == []


@pytest.mark.parametrize("source", PAIR_EXPRS)
def test_pair_windows_batched_match_step_by_step(source):
    # dense and sparse right metrics, runs long enough that the left window (PAIR_LEFT_POINTS) cuts off old
    # intervals and the cache is pruned: the batches (compiled where order_free, the tree elsewhere) give each
    # step's value and leave the cache as the steps one by one do
    expr = parse_expr(source)
    for trial, (n, every) in enumerate([(120, 1), (400, 1), (300, 7), (1400, 30), (1300, 1), (2300, 45)]):
        series = _pair_series(random.Random(trial), n, every)
        steps = list(range(0, n + 3))
        got, got_cache = _pair_run(expr, series, steps, random.Random(trial + 100), batched=True)
        want, want_cache = _pair_run(expr, series, steps, random.Random(trial + 100), batched=False)
        assert repr(got) == repr(want), (source, n, every)
        assert repr(got_cache) == repr(want_cache)


def _ctxs(series, steps, cache):
    pairs: dict = {}
    ctxs = [SeriesContext(series, step=s, pairs=pairs, pair_cache=cache) for s in steps]
    return Batch(ctxs), ctxs


def test_order_free_guard():
    window = parse_expr("last(x - y)")._root
    dense = {"x": (list(range(1500)), [1.0] * 1500), "y": (list(range(1500)), [0.5] * 1500)}
    assert _ctxs(dense, range(1400, 1450), {})[0].order_free(window)
    # the right metric every 40 steps: its 64 points span 2,560 of the left one's, more than a step reads
    sparse = {"x": dense["x"], "y": (list(range(0, 1500, 40)), [0.5] * 38)}
    assert not _ctxs(sparse, range(1400, 1450), {})[0].order_free(window)
    assert _ctxs(sparse, range(600, 650), {})[0].order_free(window)  # under 1,000 left points: all read
    # a cache the batch could push past its limit: pruned at some call, which depends on the order
    full = {("x", "y", "-"): {-k: (None, 0.0, 0.0) for k in range(150)}}
    assert not _ctxs(dense, range(1400, 1450), full)[0].order_free(window)
    assert _ctxs(dense, range(1400, 1405), full)[0].order_free(window)


def test_pair_condition_not_order_free_runs_on_the_tree():
    expr = parse_expr("last(x - y) > 0 or count_over(x - y, 3) > 1")
    compiled = compile_batch(expr._root)
    sparse = {"x": (list(range(1500)), [1.0] * 1500), "y": (list(range(0, 1500, 40)), [0.5] * 38)}
    batch, ctxs = _ctxs(sparse, range(1400, 1410), {})
    assert compiled.run(ctxs, batch) is None  # not order-free: the compiled function does not run
    assert expr.evaluate_many(ctxs) == [expr.evaluate(SeriesContext(sparse, step=s)) for s in range(1400, 1410)]
    batch, ctxs = _ctxs(sparse, range(600, 610), {})
    assert compiled.run(ctxs, batch) == [True] * 10


@pytest.mark.parametrize("name", ["last", "max_over", "min_over", "count_over", "count_nonfinite", "mean_over",
                                  "sum_over", "exists", "median_over", "baseline"])
def test_batch_statistics_match_on_finite(name):
    # the batch's loops over finite windows (nodes._simple, nodes._medians) give each window's on_finite value
    from parallax.alerts.expr import nodes as N

    rng = random.Random(name)
    for n, skip in [(1, 0), (3, 0), (5, 2), (4, 1), (40, 10), (6, 5)]:
        try:
            node = parse_expr(f"{name}(x, {n}, {skip})" if skip or name == "baseline" else f"{name}(x, {n})")._root
        except ExprError:  # last(x), exists(x): one form only
            node = parse_expr(f"{name}(x)")._root
        values = [None if rng.random() < 0.2 else [rng.choice([rng.gauss(0, 1), 1e308, 2.0, 0])
                                                   for _ in range(rng.randint(0, n + skip))] for _ in range(30)]
        col = [N._MISSING] * len(values)
        (N._medians if name in ("median_over", "baseline") else N._simple)(node, values, col)
        want = [N._MISSING if xs is None else node.on_finite(xs, node) for xs in values]
        assert repr(col) == repr(want), (name, n, skip)


@pytest.mark.parametrize("name", sorted(["last", "count_over", "count_nonfinite", "exists", "max_over", "min_over",
                                         "mean_over", "sum_over", "median_over", "baseline", "quantile_over",
                                         "std_over", "noise"]))
def test_batch_columns_read_straight_from_the_series_match_each_step_alone(name):
    # a batch computes a window's column from the metric's values and where each step's window ends in them
    # (nodes._direct: no copy where the count or the last value is the answer, the max/min of a long window from
    # the part every step shares): the value each step gets alone, for windows shorter and longer than the
    # series, with and without skip, over dense and sparse steps; and where a NaN, an infinity or a None lies
    # within some step's window (the batch checks the span once and takes the slow path there)
    rng = random.Random(name)
    for trial in range(12):
        size = rng.choice([0, 1, 7, 60, 400])
        steps = sorted(rng.sample(range(3 * size + 5), size))
        values = [rng.choice([rng.gauss(0, 1), rng.gauss(5, 50), 1e308, 2.0, 0.0, -0.0, 3]) for _ in steps]
        if trial % 4 in (1, 3):  # the max and min at either end of the windows, or at the end of their shared part
            values.sort(reverse=trial % 4 == 3)
        if trial % 3 == 2 and values:
            values[rng.randrange(len(values))] = rng.choice([None, float("nan"), float("inf")])
        series = {"x": (steps, values)}
        for n, skip in [(1, 0), (3, 0), (5, 2), (30, 0), (40, 10), (300, 3), (300, 40)]:
            if name in ("last", "exists", "count_nonfinite") and skip:
                continue
            args = {"last": "x", "exists": "x", "count_nonfinite": f"x, {n}"}.get(name, f"x, {n}, {skip}")
            if name == "quantile_over":
                args = f"x, {n}, 0.9, {skip}"
            if name in ("std_over", "noise") and n < 3:
                continue
            expr = parse_expr(f"{name}({args}) + max_over(x, 3)")  # two windows: the finite check kept between them
            last = steps[-1] if steps else 0
            for batch_steps in (list(range(max(0, last - 12), last + 3)), sorted(rng.sample(range(last + 3), 9))
                                if last + 3 >= 9 else [0, 1]):
                got = expr.evaluate_many(_batch(series, batch_steps, {}))
                want = [expr.evaluate(SeriesContext(series, step=s)) for s in batch_steps]
                assert repr(got) == repr(want), (name, n, skip, trial)


def test_scalars_inline():
    # max/min/clamp/abs/log computed in the generated code (the builtins on the numbers), not through nodes._f_*
    compiled = compile_batch(parse_expr("max(last(x), 1) + min(last(y), 2, 3) + clamp(last(x), 0, 1) "
                                        "+ abs(last(y)) + log(last(x)) > 0")._root)
    names = set(compiled.fn.__code__.co_names)
    assert {"max", "min", "abs", "_log"} <= names
    assert not any(callable(v) and getattr(v, "__name__", "").startswith("_f_")
                   for v in compiled.fn.__globals__.values())


def test_overflow_falls_back_to_the_tree():
    # std_over of values 1e200 apart overflows (a math error): the compiled function gives up and the tree's
    # answer stands (the condition unknown there, as evaluate says)
    expr = parse_expr("std_over(huge, 3) > 0 or last(x) > 0")
    series = {"huge": ([0, 1, 2, 3], [1e200, -1e200, 1e200, 3.0]), "x": ([0, 1, 2, 3], [1.0, -1.0, 1.0, -1.0])}
    ctxs = _batch(series, [1, 2, 3], {})
    got = expr.evaluate_many(ctxs)
    want = [expr.evaluate(SeriesContext(series, step=s)) for s in (1, 2, 3)]
    assert got == want
    assert None in got


def test_default_pack_conditions_compile_where_they_can():
    compiled = {r.name for r in load_rules() if compile_batch(r.condition._root) is not None}
    assert "importance_weight_spike" in compiled and "trainer_silent" in compiled
    assert "reward_hacking" in compiled and "exploration_collapse" in compiled  # pair windows: where order-free


def test_empty_configs_of_each_step_read_once():
    # the engine gives each step a config of its own ({} when the run has none): config() reads as the default
    expr = parse_expr("config('a', 4) > 3")
    series = {"x": ([0, 1], [1.0, 2.0])}
    ctxs = [SeriesContext(series, step=s, config={}) for s in (0, 1)]
    assert ctxs[0].config is not ctxs[1].config
    assert expr.evaluate_many(ctxs) == [True, True]
    ctxs = [SeriesContext(series, step=0, config={}), SeriesContext(series, step=1, config={"a": 1})]
    assert expr.evaluate_many(ctxs) == [True, False]


def test_a_pair_series_no_step_reaches_is_not_checked():
    # the compiled run checks a pair series order-free at its first read: one behind a test that fails at every
    # step of the batch costs nothing (reward_hacking's jump test reads the KL's and the lengths' at() series only
    # past tests a run evaluated at every step fails)
    expr = parse_expr("step() < 0 and last(at(z, y)) > 0 or last(x - y) > 0")
    series = _pair_series(random.Random(5), 200, 10)
    batch, ctxs = _ctxs(series, range(150, 160), {})
    got = expr.evaluate_many(ctxs)
    assert ("x", "y", "-") in batch.free and ("z", "y", "at") not in batch.free
    assert repr(got) == repr([expr.evaluate(SeriesContext(series, step=s, pair_cache={})) for s in range(150, 160)])


def test_a_pair_series_not_order_free_at_its_first_read_sends_the_batch_to_the_tree():
    # the right metric y every 40 steps; x - y order-free (x every 10 steps: a step's left window reaches back past
    # every point the batch computes), z - y not (z at every step: a later step's left window cuts off points an
    # earlier step needs). z - y is first read at step 1420, after the compiled run computed x - y's points for the
    # steps before: the batch goes to the tree, which gives the step-by-step values and leaves the same cache.
    expr = parse_expr("last(x - y) > -100 and (step() < 1420 or last(z - y) > -100)")
    n = 1500
    series = {"x": (list(range(0, n, 10)), [1.0] * len(range(0, n, 10))),
              "y": (list(range(0, n, 40)), [0.5] * len(range(0, n, 40))),
              "z": (list(range(n)), [2.0] * n)}
    cache: dict = {}
    batch, ctxs = _ctxs(series, range(1400, 1450), cache)
    got = expr.evaluate_many(ctxs)
    assert batch.free == {("x", "y", "-"): True, ("z", "y", "-"): False}  # each checked at its first read
    want_cache: dict = {}
    want = [expr.evaluate(SeriesContext(series, step=s, pair_cache=want_cache)) for s in range(1400, 1450)]
    assert repr(got) == repr(want) and all(v is True for v in got)
    assert repr(cache) == repr(want_cache)


def test_a_pair_window_is_computed_once_per_span_of_its_series():
    # y every 5 steps: the 20 steps of the batch read 4 spans of the pair series (each step the points up to the
    # last y at or before it), so each pair statistic is computed 4 times, not 20, with each step's own value
    expr = parse_expr("trend(x - y, 6) > 100 or noise(x - y, 8) > 100 or last(at(x, y)) > 100")
    series = {"x": (list(range(700)), [0.01 * s + (s % 7) * 0.1 for s in range(700)]),
              "y": (list(range(0, 700, 5)), [0.002 * s + (s % 3) * 0.05 for s in range(0, 700, 5)])}
    calls = {}
    for node in N._walk(expr._root):
        if isinstance(node, N.PairWindow):
            fn, values_fn = node.fn, node.values_fn

            def counted(points, node, _f=fn, _key=node.key):
                calls[_key] = calls.get(_key, 0) + 1
                return _f(points, node)

            def counted_values(values, node, _f=values_fn, _key=node.key):
                calls[_key] = calls.get(_key, 0) + 1
                return _f(values, node)

            node.fn = counted
            node.values_fn = counted_values if values_fn is not None else None
    steps = range(600, 620)
    batch, ctxs = _ctxs(series, steps, {})
    got = compile_batch(expr._root).run(ctxs, batch)
    assert len(calls) == 3 and set(calls.values()) == {4}
    values = {key: batch.columns[key] for key in calls}
    for key, col in values.items():
        assert len(set(map(repr, col))) > 1  # the spans' values differ: each step reads its own
    calls.clear()
    want = [expr.evaluate(SeriesContext(series, step=s, pair_cache={})) for s in steps]
    assert got == want
    for s, i in zip(steps, range(20)):
        alone = SeriesContext(series, step=s, pair_cache={})
        for node in N._walk(expr._root):
            if isinstance(node, N.PairWindow):
                assert repr(node.ev(alone)) == repr(values[node.key][i])


@pytest.mark.parametrize("source", ["noise(y, 8) > 100", "median_over(y, 5) > 100", "quantile_over(y, 6, 0.9) > 100",
                                    "spacing(y, 3) > 100", "trend(y, 6) > 100"])
def test_a_window_over_a_sparse_metric_is_computed_once_per_point_of_it(source):
    # y every 3-6 steps: the batch's 20 steps end their windows at 5 points of it; each window is computed 5 times
    # (from the values where all are finite, from the points otherwise), each step given its own value
    expr = parse_expr(source)
    rng = random.Random(3)
    ys = list(range(0, 600, 5)) + [600, 603, 608, 611, 617] + list(range(620, 700, 4))
    series = {"x": (list(range(700)), [0.01 * s for s in range(700)]), "y": (ys, [rng.gauss(0, 1) for _ in ys])}
    window = next(n for n in N._walk(expr._root) if isinstance(n, N.Window))
    calls = []
    fn, on_finite = window.fn, window.on_finite
    window.fn = lambda points, node: calls.append(1) or fn(points, node)
    if on_finite is not None:
        window.on_finite = lambda xs, node: calls.append(1) or on_finite(xs, node)
    stats = N.ON_FINITE.get(window.name)
    if stats is not None:  # the batch's straight path reads the statistic from this table
        N.ON_FINITE[window.name] = lambda xs, node: calls.append(1) or stats(xs, node)
    if window.name == "median_over":  # and sorts a median's window itself
        N.sorted = lambda xs: calls.append(1) or sorted(xs)
    try:
        steps = range(600, 620)
        batch, ctxs = _ctxs(series, steps, {})
        got = compile_batch(expr._root).run(ctxs, batch)
        col = batch.columns[window.key]
    finally:
        if stats is not None:
            N.ON_FINITE[window.name] = stats
        N.__dict__.pop("sorted", None)
    assert len(calls) == 5
    assert len(set(map(repr, col))) > 1
    window.fn, window.on_finite = fn, on_finite
    for s, v, g in zip(steps, col, got):
        alone = SeriesContext(series, step=s)
        assert repr(window.ev(alone)) == repr(v)
        assert g == expr.evaluate(alone)
