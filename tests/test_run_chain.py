"""A resumed run's curve on serve's page goes on from the runs it resumes: each iteration once,
from the run that did it last (``serve/run_chain.py``)."""
import random

import pytest

from tests.redis_server import redis_server  # noqa: F401 - the fixture

from async_plotter.channel.redis.wire import RESUMES_AFTER, resumed_after
from async_plotter.serve.run_chain import METRICS, RETURNS, ChainedCurve, on_chain


def run(name, iterations):
    return [(name, iteration) for iteration in iterations]


def drawn(curve, metric="AverageReturn"):
    return [(tag, iteration) for iteration, values, tag in curve._points if metric in values]


def by_definition(points, current, after):
    """The rule as said: a point is on the curve if it is the current run's, or it is at most
    ``after`` and no later run (one whose first point follows another run's) started at its
    iteration or before."""
    keep = []
    for index, (run_name, iteration) in enumerate(points):
        if run_name == current:
            keep.append(True)
            continue
        if after is None or iteration is None or iteration > after:
            keep.append(False)
            continue
        keep.append(not any(later_iteration is not None and later_run != run_name
                            and points[later - 1][0] != later_run and later_iteration <= iteration
                            for later, (later_run, later_iteration) in enumerate(points)
                            if later > index))
    return keep


def test_a_chain_of_resumes_shows_each_iteration_once_from_the_run_that_did_it_last():
    # A trained to 10; B resumed it after 5 and got to 12; C resumed B after 8.
    points = run("A", range(11)) + run("B", range(6, 13)) + run("C", range(9, 12))
    kept = [point for point, keep in zip(points, on_chain(points, "C", 8)) if keep]
    assert kept == run("A", range(6)) + run("B", range(6, 9)) + run("C", range(9, 12))
    # A run that resumes nothing starts the curve afresh, as before.
    assert [point for point, keep in zip(points, on_chain(points, "C", None))
            if keep] == run("C", range(9, 12))


def test_the_one_pass_agrees_with_the_rule_on_any_stream():
    rng = random.Random(0)
    for _ in range(2000):
        points = [(rng.choice("ABCD"), rng.choice([None, *range(8)]))
                  for _ in range(rng.randrange(12))]
        after = rng.choice([None, *range(8)])
        assert on_chain(points, "D", after) == by_definition(points, "D", after), (points, after)


def test_a_page_open_across_the_resume_and_one_opened_after_it_draw_the_same_curve():

    def metrics(curve, name, iterations):
        for iteration in iterations:
            curve.add(METRICS, name, iteration, {"AverageReturn": float(iteration)})

    live = ChainedCurve()  # open while A trains, and when B resumes it after 5
    live.follow("A", None)
    metrics(live, "A", range(11))
    live.follow("B", 5)
    assert drawn(live.curve) == run("A", range(6))  # at once, before B's first row
    metrics(live, "B", range(6, 9))
    late = ChainedCurve()  # opened after: B's structure first, then the stream from its start
    late.follow("B", 5)
    metrics(late, "A", range(11))
    assert drawn(late.curve) == []  # A's rows wait for B's first: a run between may redo them
    metrics(late, "B", range(6, 9))
    assert drawn(live.curve) == drawn(late.curve) == run("A", range(6)) + run("B", range(6, 9))
    # The history's returns are a stream of their own: B's first (its initial policy, shown
    # as iteration 5) supersedes A's from 5 on.
    for name, iterations in (("A", range(-1, 11)), ("B", range(5, 8))):
        for iteration in iterations:
            late.add(RETURNS, name, iteration, {"ShownReturn": 1.0})
    assert drawn(late.curve, "ShownReturn") == run("A", range(-1, 5)) + run("B", range(5, 8))
    assert drawn(late.curve) == run("A", range(6)) + run("B", range(6, 9))


@pytest.mark.parametrize("meta,after", [({
    RESUMES_AFTER: 7
}, 7), ({
    RESUMES_AFTER: None
}, None), ({}, None), (None, None), ({
    RESUMES_AFTER: True
}, None), ({
    RESUMES_AFTER: -1
}, None), ({
    RESUMES_AFTER: "7"
}, None)])
def test_what_a_structure_says_it_resumes_is_read_strictly(meta, after):
    assert resumed_after(meta) == after


def test_serves_page_shows_a_resumed_run_and_the_run_it_resumes_as_one_curve(
        redis_server, tmp_path):  # noqa: F811
    """Real trainers over a real redis-server: a run to iteration 5, then one resumed from its
    snapshot of iteration 2 (a preempted job started again). serve's page showed the resumed
    run's rows alone (and Redis had dropped the first run's); now the metrics of iterations 0-2
    of the first and 3-4 of the resumed one, and the history's returns likewise, whether the page
    was open across the resume or opened after it."""
    from async_plotter import Plotter
    from async_plotter.channel.redis.signing import Verifier
    from async_plotter.serve.catalog import Catalog
    from tests.conftest import wait_for
    from tests.policies import LinearPolicy

    def train(iterations, **resume):
        policy = LinearPolicy(4, 1)
        with Plotter("InvertedPendulum-v5",
                     policy,
                     max_path_length=20,
                     video_dir=str(tmp_path / "videos"),
                     channel=redis_server.url,
                     experiment="preempted",
                     priority="normal",
                     verbose=0,
                     **resume) as plotter:
            for iteration in iterations:
                policy.fill(0.1 * iteration)
                plotter.update_plot(policy,
                                    iteration=iteration,
                                    metrics={"AverageReturn": 10.0 * (len(resume) + 1) + iteration})
                wait_for(lambda: any(
                    entry.get("iteration") == iteration for entry in plotter.stats["history"]),
                         60,
                         message=f"iteration {iteration}'s history recording")

    def curve(catalog):
        rows = {row["name"]: row for row in catalog.rows()}
        found = rows.get("preempted", {}).get("curve", {})
        # The initial policy's return (-1) is there where it was recorded before the first update.
        return found.get("points"), [x for x, _ in found.get("shown", []) if x >= 0]

    metrics = [[0, 10.0], [1, 11.0], [2, 12.0], [3, 23.0], [4, 24.0]]
    chained = (metrics, [0, 1, 2, 3, 4])
    open_across = Catalog(redis_server.url, Verifier(None, trust_unsigned=True))
    open_across.acquire()
    try:
        train(range(6))
        first = ([[iteration, 10.0 + iteration] for iteration in range(6)], list(range(6)))
        wait_for(lambda: curve(open_across) == first,
                 30,
                 message=f"the first run's curve: {curve(open_across)}")
        train(range(3, 5), resume_after=2)
        wait_for(lambda: curve(open_across) == chained,
                 30,
                 message=f"one curve (the page open across the resume): {curve(open_across)}")
    finally:
        open_across.close()
    opened_after = Catalog(redis_server.url, Verifier(None, trust_unsigned=True))
    opened_after.acquire()
    try:
        wait_for(lambda: curve(opened_after) == chained,
                 30,
                 message=f"one curve (the page opened after): {curve(opened_after)}")
    finally:
        opened_after.close()
