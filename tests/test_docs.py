"""The numbers a user reads first agree with the code and the measurements behind them.

The default budget is stated in the README, the Makefile and the command line's help; the
README's headline figures are read from ``benchmarks/results/*.json``; the commands and links
it names exist."""
import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest

from async_plotter import cli
from async_plotter.supervision.budget import DEFAULT_BUDGET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as file:
        return file.read()


def _results(name: str) -> dict:
    return json.loads(_read("benchmarks", "results", name))


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


README = _read("README.md")
MAKEFILE = _read("Makefile")


def test_the_readme_is_short_and_self_contained():
    assert len(README.splitlines()) <= 450
    assert "../shared" not in README and "DESIGN.md" not in README


def test_the_default_budget_is_the_same_everywhere():
    percent = f"{DEFAULT_BUDGET:.0%}"
    assert f"`budget={DEFAULT_BUDGET:g}` (default)" in README
    assert f"{percent} of the machine by default" in README
    comment = "\n".join(line for line in MAKEFILE.splitlines() if line.startswith("#"))
    assert f"a {percent} CPU budget" in comment
    # Any other percentage or fraction stated as the default budget is a stale copy.
    assert re.findall(r"a (\d+)% CPU budget", comment) == [percent[:-1]]


def test_the_video_lengths_are_the_same_everywhere():
    """``video_length="auto"``: the README's knob table and ``Plotter``'s docstring state the
    seconds the worker clips videos to, its first one included."""
    from async_plotter.trainer.config import DEFAULT_VIDEO_SECONDS
    from async_plotter.trainer.plotter_handle import Plotter
    from async_plotter.worker.rollout_process import FIRST_VIDEO_SECONDS

    assert f"shows {DEFAULT_VIDEO_SECONDS:g} s of the env's own time on every env" in README
    assert f"shows {FIRST_VIDEO_SECONDS:g} s (`min_video_seconds` if longer)" in README
    docstring = " ".join(Plotter.__doc__.split())
    assert (f"``DEFAULT_VIDEO_SECONDS`` ({DEFAULT_VIDEO_SECONDS:g}) seconds of simulated time on "
            f"every env, {FIRST_VIDEO_SECONDS:g} for the run's first video") in docstring


def test_the_commands_deadlines_are_stated_as_the_code_has_them():
    """docs/design.md says after how long a stuck stop or exit ends a command: the figures
    ``until_stopped`` arms."""
    from async_plotter.until_stopped import EXIT_DEADLINE_SECONDS, STOP_DEADLINE_SECONDS

    design = " ".join(_read("docs", "design.md").split())
    assert (f"A stop still stuck after {STOP_DEADLINE_SECONDS:g} s, or an interpreter's exit "
            f"after {EXIT_DEADLINE_SECONDS:g} s") in design


def test_the_carried_state_checks_limits_are_stated_as_the_code_has_them():
    """The README's known gap names the build and play time past which the env is not played, and
    docs/design.md the episodes and steps it plays."""
    from async_plotter.env import carried_state as played

    assert played.MAX_PLAY_SECONDS == played.MAX_BUILD_SECONDS  # the README states one figure
    assert (f"takes {played.MAX_BUILD_SECONDS:g} s to build or to play {played.WARM_UP_EPISODES} "
            "short episodes, is not checked") in " ".join(README.split())
    design = " ".join(_read("docs", "design.md").split())
    assert (f"plays {played.WARM_UP_EPISODES} episodes of up to {played.WARM_UP_STEPS} steps, "
            "then it and two fresh copies play one more from seed "
            f"{played.SEED} with the same {played.COMPARED_STEPS} actions") in design
    assert f"each left out in turn (`StepNormalizer (mean, seen)`, `Curriculum (episodes)`; for " \
        f"a hook, `... leaves out seen`), for at most {played.MAX_NARROWING_SECONDS:g} s" in design


def test_the_earlier_runs_kept_are_stated_as_the_code_has_them():
    """The README and docs/design.md say how many earlier runs a folder keeps."""
    from async_plotter.trainer.run_folder import EARLIER_RUNS_KEPT

    assert f"the newest {EARLIER_RUNS_KEPT} runs are kept" in README
    design = " ".join(_read("docs", "design.md").split())
    assert f"the newest {EARLIER_RUNS_KEPT} runs are kept there" in design


def test_a_string_setting_s_room_is_stated_as_the_code_has_it():
    """docs/design.md says how many bytes a string setting travels in."""
    from async_plotter.env.settings_travel import STRING_BYTES

    design = " ".join(_read("docs", "design.md").split())
    assert f"a string as its UTF-8 bytes (a slot of {STRING_BYTES} bytes" in design


def test_the_spin_rule_is_stated_as_the_code_has_it():
    """docs/design.md says how much CPU a silent, started process may use before it is
    restarted as spinning: the share the supervisor applies."""
    from async_plotter.supervision.supervisor import SPIN_SHARE

    words = {0.25: "a quarter of a", 0.5: "half a", 1.0: "a whole"}
    design = " ".join(_read("docs", "design.md").split())
    assert f"({words.get(SPIN_SHARE, SPIN_SHARE)} `hang_timeout` of its own CPU more" in design


@pytest.mark.parametrize("command", ["view", "serve"])
def test_the_command_line_help_states_the_default_budget(command):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(out.getvalue().split())
    assert f"the trainer's budget, {DEFAULT_BUDGET:g} unless it set one" in text


def test_the_command_line_describes_every_command_it_has():
    """``async-plotter --help`` said "Watch a policy train from another machine, through a Redis
    server", when render and replay work on files alone."""
    result = subprocess.run([sys.executable, "-m", "async_plotter.cli", "--help"],
                            capture_output=True,
                            text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    description = " ".join(result.stdout.split("\n\n")[1].split())  # after the usage
    assert "Redis" in description and "state recordings" in description, description
    for command in ("view", "list", "serve", "render", "replay", "acl"):
        assert re.search(rf"\b{command}\b", description), (command, description)


def test_the_readme_make_commands_exist():
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", MAKEFILE, re.MULTILINE))
    named = set(re.findall(r"`make ([\w-]+)`", README)) | set(
        re.findall(r"^make ([\w-]+)", README, re.MULTILINE))
    assert {"demo", "test"} <= named
    assert named <= targets, named - targets


def test_the_make_test_duration_is_stated_once_the_same_way():
    assert ("about 15\n             # minutes from a fresh clone on 2 idle cores, set-up included"
            in README)
    assert "about 15 minutes from a fresh clone on 2 idle cores, set-up included" in MAKEFILE


def test_linked_files_exist():
    for document in ["README.md"] + [
            os.path.join("docs", name)
            for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md")
    ]:
        folder = os.path.dirname(os.path.join(ROOT, document))
        for target in re.findall(r"\]\(([^)#\s]+)\)", _read(document)):
            if "://" not in target:
                assert os.path.exists(os.path.join(folder, target)), (document, target)
    for name in ("design.md", "benchmarks.md", "security.md"):
        assert f"(docs/{name})" in README


def test_the_headline_figures_are_the_measured_ones():
    table = _section(README, "## Headline figures")
    whole_runs = []
    for name in ("plot_overhead_cut_at_close.json", "plot_overhead_cut_at_close_long_itr.json",
                 "plot_overhead_50s_runs_dec06.json"):
        runs = _results(name)["summary"]
        swimmer, cheetah_run = runs["Swimmer-v5"]["defaults"], runs["HalfCheetah-v5"]["defaults"]
        whole_runs.append(
            f"{swimmer['training_ratio']:.2f}x / {cheetah_run['training_ratio']:.2f}x of plotting "
            f"off (end to end {swimmer['end_to_end_ratio']:.2f}x / "
            f"{cheetah_run['end_to_end_ratio']:.2f}x), {swimmer['history_share'] * 100:.0f}% / "
            f"{cheetah_run['history_share'] * 100:.0f}% of the policies recorded, "
            f"{swimmer['videos_per_10_itr']:.1f} / {cheetah_run['videos_per_10_itr']:.1f} videos "
            "per 10 iterations")
    reference = _results("plot_overhead_50s_runs_dec06.json")["summary"]
    a_a = [
        reference[env]["off-again"]["training_ratio"] for env in ("Swimmer-v5", "HalfCheetah-v5")
    ]
    fixed = [
        reference[env]["defaults"]["fixed_extra_s"] for env in ("Swimmer-v5", "HalfCheetah-v5")
    ]
    whole_runs += [
        f"two runs with plotting off {a_a[0]:.3f}x / {a_a[1]:.3f}x apart",
        f"start-up + close {fixed[0]:.1f} s / {fixed[1]:.1f} s",
    ]
    one_sampler = _results("plot_overhead_one_sampler.json")["summary"]["Swimmer-v5"]["defaults"]
    update = {row["params"]: row for row in _results("update_cost.json")["rows"]}[1000000]
    redis = {row["params"]: row for row in _results("redis_latency.json")["results"]}[1000000]
    frame = _results("web_hostile.json")["slowloris"]["with_attackers"]["stream_first_frame"]
    serve = {row["case"]: row for row in _results("serve_cost.json")["results"]}
    cartpole = _results("rl_correctness.json")["cartpole"]
    view = _results("view_cost.json")
    cheetah = {row["view"]: row for row in view["rows"] if row["env"] == "HalfCheetah-v5"}
    ratios = view["ratios"]["HalfCheetah-v5"]
    init = {row["case"]: row for row in _results("plotter_init.json")["rows"]}
    keras_init = init["Keras 2x64 MLP, Swimmer-v5 id (TF imported)"]
    mlp_init = init["RL host's GaussianMLPPolicy (32, 32), Swimmer-v5 id"]
    step = {row["policy"]: row for row in _results("policy_step.json")["rows"]}
    keras_step, mlp_step = step["Keras Sequential"], step["rl GaussianMLPPolicy"]
    normalized_step = step["Keras Sequential, normalized"]
    skip_step = step["Keras functional, skip connection"]
    residual_step = step["Keras functional, residual blocks"]
    ops_step = step["Keras functional, keras.ops with arguments"]
    keras_run = _results("plot_overhead_keras_numpy.json")["summary"]["Hopper-v5-keras"]
    now, then = keras_run["defaults"], keras_run["before"]
    expected = [
        f"{init['numpy policy, Swimmer-v5 id']['median_s'] * 1000:.0f} ms / "
        f"{keras_init['median_s'] * 1000:.0f} ms ({keras_init['over_before']:.2f}x the previous "
        f"commit for Keras, {mlp_init['over_before']:.2f}x for our MLP policies",
        f"numpy copy {keras_step['worker_ms']:.3f} ms, {keras_step['compiled_over_worker']:.0f}x "
        f"less CPU than its traced call, our MLP policies' {mlp_step['worker_ms']:.3f} ms; with "
        f"`Normalization` and two `LayerNormalization` layers {normalized_step['worker_ms']:.3f} ms "
        f"({normalized_step['compiled_over_worker']:.0f}x), with a skip connection "
        f"{skip_step['worker_ms']:.3f} ms ({skip_step['compiled_over_worker']:.0f}x), with two "
        f"residual blocks {residual_step['worker_ms']:.3f} ms "
        f"({residual_step['compiled_over_worker']:.0f}x), with `keras.ops.leaky_relu(x, 0.1)` "
        f"and its actions scaled by an array {ops_step['worker_ms']:.3f} ms "
        f"({ops_step['compiled_over_worker']:.0f}x)",
        f"{now['training_ratio']:.2f}x of plotting off (was {then['training_ratio']:.2f}x; end to "
        f"end {now['end_to_end_ratio']:.2f}x, was {then['end_to_end_ratio']:.2f}x)",
        f"booted in {now['boot_seconds']:.1f} s ({then['boot_seconds']:.1f} s), "
        f"{now['history_share'] * 100:.0f}% of the policies recorded "
        f"({then['history_share'] * 100:.0f}%), "
        f"{now['motion_seconds_per_10_itr'] / then['motion_seconds_per_10_itr']:.2f}x the seconds",
        *whole_runs,
        f"{one_sampler['training_ratio']:.3f}x of off, "
        f"{one_sampler['videos_per_10_itr']:.2f} videos per 10 iterations",
        f"{update['update_plot_wall_s'] * 1e6:.0f} us ({update['update_over_copy']:.2f}x a bare copy)",
        f"{redis['ours_latency_ms_median']:.1f} ms median",
        f"{frame['median_ms']:.0f} ms median, {frame['p95_ms']:.0f} ms p95",
        f"{serve['idle']['cpu_percent_of_a_core']:.2f}% of a core / "
        f"{serve['serve 1']['ratio_to_view_1']:.2f}x one viewer",
        f"mean return {cartpole['final_return_mean']:.1f}",
        f"HalfCheetah {ratios['render_cpu_2d_over_3d']:.2f}x / {ratios['cpu_2d_over_3d']:.2f}x / "
        f"{cheetah['2d']['bytes_per_second'] / cheetah['3d']['bytes_per_second']:.2f}x less",
    ]
    for figure in expected:
        assert figure in table, figure


def _structure():
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import structure  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(os.path.join(ROOT, "scripts"))
    return structure


def test_the_policy_section_s_step_figures_are_the_measured_ones():
    """The numpy copy's saving a step, as `benchmarks/policy_step.py` last measured it: a Keras
    chain against its traced call, the RL host's MLP policies against their get_action."""
    step = {row["policy"]: row for row in _results("policy_step.json")["rows"]}
    keras_chain, mlp = step["Keras Sequential"], step["rl GaussianMLPPolicy"]
    stated = (f"act as a numpy copy ({keras_chain['compiled_over_worker']:.0f}x and "
              f"{mlp['eager_over_worker']:.0f}x less CPU a step than")
    assert stated in README.replace("\n", " ")


def test_the_pooled_cost_is_the_measured_one():
    """The README's cost of a Swimmer run at the defaults is the pooled one
    (``benchmarks/pooled_overhead.py``): the A/A control against the defaults, round by round,
    and the whole run's ratio."""
    pooled = _results("pooled_overhead_50s_runs.json")["pooled"]
    control = pooled["off-again"]["against_reference"]
    difference, error = control["steady_difference"]
    whole = pooled["defaults"]["figures"]["end_to_end_ratio"][0]
    gaps = " ".join(_section(README, "## Known gaps").split())
    assert (f"{whole:.2f}x (Swimmer, pooled by `benchmarks/pooled_overhead.py`: "
            f"+{-difference * 100:.1f} ± {error * 100:.1f}% an iteration over plotting off once "
            f"more, {control['rounds']} rounds)") in gaps


def test_the_layout_shows_the_house_as_it_is():
    """docs/design.md's Layout states the figures ``scripts/structure.py`` measures and has a
    row for every room, so that a move that leaves it stale fails here."""
    figures = _structure().picture(os.path.join(ROOT, "async_plotter"))
    layout = " ".join(_section(_read("docs", "design.md"), "## Layout").split())
    circles = len(figures["back_arrows"]) // 2
    stated = (f"{figures['rooms']} rooms on {figures['floors']} floors, {figures['arrows']} "
              f"arrows, {circles or 'no'} circle{'' if circles == 1 else 's'}")
    assert stated in layout
    within = len(figures["module_back_arrows_within"]) // 2
    assert f"{within or 'none'} inside a room" in layout
    for room in figures["floor_of"]:
        name = room.split(".", 1)[1].replace(".", "/")
        folder = os.path.isdir(os.path.join(ROOT, "async_plotter", name))
        assert f" {name}{'/' if folder else '.py'} " in layout, room


def test_the_structure_picture_shows_a_circle_inside_a_room(tmp_path):
    """Two modules of one package importing each other: no arrow between rooms, one circle
    between modules, said to be within a room."""
    package = tmp_path / "pkg"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "room" / "__init__.py").write_text("")
    (package / "room" / "a.py").write_text("from pkg.room import b\n")
    (package / "room" / "b.py").write_text("def later():\n    from pkg.room.a import x\n")
    (package / "low.py").write_text("")
    (package / "room" / "c.py").write_text("from pkg import low\n")
    figures = _structure().picture(str(package))
    assert figures["back_arrows"] == [] and figures["arrows"] == 1
    assert figures["module_back_arrows_within"] == [("pkg.room.a", "pkg.room.b"),
                                                    ("pkg.room.b", "pkg.room.a")]
