"""``benchmarks/pooled_overhead.py``: the runs of several result files pooled, each mode under
the name asked for, with the mean and standard error the README quotes."""
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def result_file(path, runs):
    """A ``plot_overhead.py`` result holding ``runs``: (mode, env, steady, end to end), all of
    one round."""
    per_run = [{
        "mode": mode,
        "env": env,
        "round": 1,
        "steady_ratio": steady,
        "end_to_end_ratio": whole,
        "fixed_extra_s": 2.0,
        "history_share": 1.0,
        "videos_per_10_itr": 1.5
    } for mode, env, steady, whole in runs]
    with open(path, "w") as out:
        json.dump({"settings": {}, "results": {"per_run": per_run}}, out)
    return str(path)


def test_runs_are_pooled_under_the_names_asked_for_against_the_control(tmp_path):
    first = result_file(tmp_path / "a.json", [("defaults", "Swimmer-v5", 1.02, 1.06),
                                              ("off-again", "Swimmer-v5", 1.00, 1.00),
                                              ("defaults", "HalfCheetah-v5", 2.0, 2.0)])
    second = result_file(tmp_path / "b.json", [("before", "Swimmer-v5", 1.06, 1.10),
                                               ("defaults", "Swimmer-v5", 9.0, 9.0),
                                               ("off-again", "Swimmer-v5", 0.98, 0.98)])
    out = tmp_path / "pooled.json"
    printed = subprocess.run([
        sys.executable,
        os.path.join(ROOT, "benchmarks", "pooled_overhead.py"), "--set",
        f"{first}:defaults,off-again", "--set", f"{second}:before=defaults,off-again", "--out",
        str(out)
    ],
                             capture_output=True,
                             text=True,
                             check=True).stdout
    pooled = json.loads(out.read_text())["pooled"]
    # The second file's `defaults` was not asked for; its `before` counts as `defaults`; the
    # other env's runs are left out.
    assert pooled["defaults"]["runs"] == 2 and pooled["off-again"]["runs"] == 2
    mean, error = pooled["defaults"]["figures"]["steady_ratio"]
    assert math.isclose(mean, 1.04) and math.isclose(error, 0.02)
    over, over_error = pooled["defaults"]["over_control"]["steady_ratio"]
    assert math.isclose(over, 0.05) and math.isclose(over_error, math.hypot(0.02, 0.01))
    assert "| defaults | 2 (2) | 1.040 ± 0.020 |" in printed
    # Round by round against `defaults` of the same set: A/A lower by 0.02 and by 0.08.
    paired = pooled["off-again"]["against_reference"]
    assert paired["rounds"] == 2 and paired["rounds_lower"] == 2
    assert math.isclose(paired["steady_difference"][0], -0.05)
    assert "off-again: -0.050 ± 0.030 over 2 rounds, lower in 2" in printed


def test_a_set_without_modes_is_refused_by_name(tmp_path):
    refused = subprocess.run([
        sys.executable,
        os.path.join(ROOT, "benchmarks", "pooled_overhead.py"), "--set",
        str(tmp_path / "a.json")
    ],
                             capture_output=True,
                             text=True)
    assert refused.returncode == 2
    assert "expected FILE:mode[=name]" in refused.stderr
