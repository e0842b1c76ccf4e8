"""A resumed run's curve goes on from the run it resumes, each iteration once, from the run that
did it last: on serve's page and a viewer's over Redis (``serve/run_chain.py``), and on the
resumed Plotter's own live page."""
import json
import random
import re
import signal
import subprocess
import urllib.parse
import urllib.request

import pytest

from async_plotter import InvalidArgumentError, Plotter, PlotterClosedError
from tests.conftest import settles, wait_for
from tests.policies import LinearPolicy
from tests.redis_helpers import read_log, start_viewer
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


def train(url, videos, iterations, **resume):
    """A trainer that publishes to ``url`` (None: here alone) as experiment "preempted", keeps
    its videos and history in ``videos``, and shows ``iterations``, each until its history
    recording exists; resumed (``resume_after=``), its AverageReturn is 20 + the iteration, else
    10 + it."""
    policy = LinearPolicy(4, 1)
    published = {} if url is None else dict(channel=url, experiment="preempted")
    with Plotter("InvertedPendulum-v5",
                 policy,
                 max_path_length=20,
                 video_dir=str(videos),
                 priority="normal",
                 verbose=0,
                 **published,
                 **resume) as plotter:
        show(plotter, policy, iterations, 10.0 * (len(resume) + 1))


def show(plotter, policy, iterations, base):
    """Each of ``iterations`` shown (AverageReturn ``base`` + it), until its recording exists."""
    for iteration in iterations:
        policy.fill(0.1 * iteration)
        plotter.update_plot(policy,
                            iteration=iteration,
                            metrics={"AverageReturn": base + iteration})
        wait_for(
            lambda: any(entry.get("iteration") == iteration for entry in plotter.stats["history"]),
            60,
            message=f"iteration {iteration}'s history recording")


#: the first run's AverageReturn and the iterations of its history's returns, and those of the
#: first run resumed after iteration 2 (the initial policy's return, -1, is left out: it is there
#: where it was recorded before the first update)
FIRST = ([[iteration, 10.0 + iteration] for iteration in range(6)], list(range(6)))
CHAINED = ([[0, 10.0], [1, 11.0], [2, 12.0], [3, 23.0], [4, 24.0]], list(range(5)))


def first_then_resumed(url, videos, drawn):
    """The first run, then the run resumed from its snapshot of iteration 2, each waited for
    until ``drawn()`` shows what it should."""
    train(url, videos, range(6))
    settles(drawn, FIRST, 60)
    train(url, videos, range(3, 5), resume_after=2)
    settles(drawn, CHAINED, 30)


def test_serves_page_shows_a_resumed_run_and_the_run_it_resumes_as_one_curve(
        redis_server, tmp_path):  # noqa: F811
    """Real trainers over a real redis-server: a run to iteration 5, then one resumed from its
    snapshot of iteration 2 (a preempted job started again). serve's page showed the resumed
    run's rows alone (and Redis had dropped the first run's); now the metrics of iterations 0-2
    of the first and 3-4 of the resumed one, and the history's returns likewise, whether the page
    was open across the resume or opened after it."""
    from async_plotter.channel.redis.signing import Verifier
    from async_plotter.serve.catalog import Catalog

    def curve(catalog):
        rows = {row["name"]: row for row in catalog.rows()}
        found = rows.get("preempted", {}).get("curve", {})
        return found.get("points"), [x for x, _ in found.get("shown", []) if x >= 0]

    open_across = Catalog(redis_server.url, Verifier(None, trust_unsigned=True))
    open_across.acquire()
    try:
        first_then_resumed(redis_server.url, tmp_path / "videos", lambda: curve(open_across))
    finally:
        open_across.close()
    opened_after = Catalog(redis_server.url, Verifier(None, trust_unsigned=True))
    opened_after.acquire()
    try:
        settles(lambda: curve(opened_after), CHAINED, 30)
    finally:
        opened_after.close()


def page_curve(url):
    """The curve an opened live page draws first: its AverageReturn points and the iterations
    of its shown returns (the events stream's first "metrics" event)."""
    parts = urllib.parse.urlsplit(url)
    events = urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/events"))
    with urllib.request.urlopen(events, timeout=10) as stream:
        event = None
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "metrics":
                points = json.loads(line.split(":", 1)[1])["points"]
                return ([[p["iteration"], p["values"]["AverageReturn"]] for p in points
                         if "AverageReturn" in p["values"]], [
                             p["iteration"] for p in points
                             if "ShownReturn" in p["values"] and p["iteration"] >= 0
                         ])
    return None


def test_a_viewers_live_page_draws_a_resumed_run_and_the_run_it_resumes_as_one_curve(
        redis_server, tmp_path):  # noqa: F811
    """``async-plotter view --http`` follows a trainer and then its resumed run (the same
    policy's structure, so the same worker goes on). Its page drew both runs' points on top of
    each other (iterations 3-5 of the first run beside 3-4 of the second) and only the new
    run's once a page was opened after; now one curve, as serve's page."""
    log = str(tmp_path / "viewer.log")
    viewer = start_viewer(redis_server.url, "preempted", log, "--http", "0", "--priority", "normal",
                          "--trust-unsigned")

    def drawn():
        address = re.search(r"live view at (\S+)", read_log(log))
        return page_curve(address.group(1)) if address else None

    try:
        first_then_resumed(redis_server.url, tmp_path / "videos", drawn)
        # A run that resumes nothing starts the page's curve afresh (it was drawn over the last).
        train(redis_server.url, tmp_path / "videos", range(2))
        settles(drawn, ([[0, 10.0], [1, 11.0]], [0, 1]), 30)
    finally:
        viewer.send_signal(signal.SIGINT)
        try:
            viewer.wait(30)
        except subprocess.TimeoutExpired:
            viewer.kill()
            viewer.wait()


def test_a_page_that_drew_a_curve_is_told_to_draw_it_again_once_it_starts_again():
    from async_plotter.learning_curve import LearningCurve

    curve = LearningCurve()
    for iteration in range(3):
        curve.add(iteration, {"AverageReturn": 1.0})
    points, reset = curve.since(0)
    seen = curve.total
    assert len(points) == 3 and not reset and curve.since(seen) == ([], False)
    curve.clear()
    curve.add(0, {"AverageReturn": 2.0})
    points, reset = curve.since(seen)  # a page open across the restart
    assert reset and [point["values"]["AverageReturn"] for point in points] == [2.0]
    assert curve.since(curve.total) == ([], False)  # one that drew it since


def test_a_resumed_plotters_live_page_goes_on_from_the_runs_curve(tmp_path):
    """A Plotter resuming a run after iteration 2 (``resume_after``, as ``run_experiment_lite``'s
    resume makes it) in that run's folder: its live page's curve starts with the run's kept
    returns (``history/returns.csv``) and the metrics ``add_metrics`` gives it (the RL host gives
    its ``progress.csv`` rows); before, with the resumed run's own points alone."""
    videos = tmp_path / "videos"
    train(None, videos, range(6))
    policy = LinearPolicy(4, 1)
    with Plotter("InvertedPendulum-v5",
                 policy,
                 max_path_length=20,
                 video_dir=str(videos),
                 http=0,
                 priority="normal",
                 verbose=0,
                 resume_after=2) as plotter:
        for iteration in range(3):
            plotter.add_metrics({"AverageReturn": 10.0 + iteration}, iteration=iteration)
        url = plotter.wait_for_http_url(60)
        settles(lambda: page_curve(url), (CHAINED[0][:3], [0, 1, 2]), 60)
        show(plotter, policy, range(3, 5), 20.0)
        settles(lambda: page_curve(url), CHAINED, 30)
        with pytest.raises(InvalidArgumentError, match=r"metrics\['loss'\] must be a number"):
            plotter.add_metrics({"loss": "low"}, iteration=5)
    with pytest.raises(PlotterClosedError, match="add_metrics\\(\\) called after close\\(\\)"):
        plotter.add_metrics({"loss": 1.0})


def test_a_curve_restart_posted_while_a_point_is_sent_reaches_the_render_process():
    """The viewer's thread restarts the curve while the supervisor's thread forwards (here:
    inside the very send of a point, the interleaving that lost it when the restart cleared the
    queue from the viewer's thread); a render process started afterwards gets nothing from
    before the restart."""
    import multiprocessing

    from async_plotter.render.stream import StreamKind
    from async_plotter.supervision.metrics_relay import MetricsRelay

    relay = MetricsRelay()
    ours, theirs = multiprocessing.Pipe()

    class RestartedMidSend:

        def __init__(self):
            self.restarted = False

        def send(self, message):
            ours.send(message)
            if not self.restarted:
                self.restarted = True
                relay.restart_curve()
                relay.post(1, {"AverageReturn": 2.0})

    relay.post(0, {"AverageReturn": 1.0})
    relay.forward(RestartedMidSend())
    received = []
    while theirs.poll(0.5):
        received.append(theirs.recv())
    assert [kind for kind, _ in received
            ] == [StreamKind.METRICS, StreamKind.CURVE_RESTART, StreamKind.METRICS], received
    relay.resend_all()  # a new render process
    relay.forward(ours)
    resent = []
    while theirs.poll(0.5):
        resent.append(theirs.recv())
    assert resent == [(StreamKind.METRICS, (1, {"AverageReturn": 2.0}))]
