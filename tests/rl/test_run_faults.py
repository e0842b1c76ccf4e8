"""A long run's faults in its own folder: removed while it trains, a full device. Training goes
on through them, and the run's files come out whole (real TRPO runs, a real tmpfs)."""
import csv
import glob
import logging
import os
import shutil
import time

import pytest

from async_plotter.errors import FolderInUseError
from async_plotter.rl import TRPO, CategoricalMLPPolicy, RunFilesNotWrittenError, load_snapshot
from async_plotter.rl import run_experiment_lite
from async_plotter.rl.run_scalars import SCALAR_PREFIX
from async_plotter.tensorboard.writer import read_events
from async_plotter.trainer.run_folder import RunFolder
from tests.small_device import fill, make_room, small_device

pytestmark = pytest.mark.slow


class TRPOWithAFault(TRPO):
    """TRPO on CartPole that meets ``fault(itr)`` as each iteration optimizes: between its
    samples and its row."""

    def __init__(self, fault, n_itr):
        super().__init__("CartPole-v1",
                         CategoricalMLPPolicy("CartPole-v1", hidden_sizes=(8, )),
                         batch_size=300,
                         max_path_length=50,
                         n_itr=n_itr)
        self.fault = fault

    def optimize_policy(self, itr, samples):
        self.fault(itr)
        return super().optimize_policy(itr, samples)


def _iterations(log_dir):
    with open(os.path.join(log_dir, "progress.csv"), newline="") as file:
        return [int(row["Iteration"]) for row in csv.DictReader(file)]


def _scalar_steps(log_dir, tag=SCALAR_PREFIX + "AverageReturn"):
    """Every step ``tag`` has in the folder's event files, as TensorBoard would read them."""
    steps = []
    for path in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        for event in read_events(path):
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return sorted(steps)


def _messages(caplog, text):
    return [r for r in caplog.records if text in r.getMessage()]


def test_a_run_folder_removed_while_it_trains_is_made_again_with_all_the_run_kept(
        tmp_path, caplog, no_leftover_children):
    """``rm -rf runs/`` at iteration 2: the run died at its next row (FileNotFoundError on
    progress.csv). Now it goes on; progress.csv and the TensorBoard scalars hold every iteration
    once, written again from memory; the snapshot, debug.log and the final video are there."""
    caplog.set_level(logging.INFO, logger="async_plotter")
    runs = tmp_path / "runs"
    log_dir = runs / "removed"

    refused = []

    def remove_at_2(itr):
        if itr == 2:
            # As rm -rf: the plot worker may rename a file it finished meanwhile (rmtree raises
            # FileNotFoundError on it), or make its folder again.
            deadline = time.monotonic() + 30
            while runs.exists() and time.monotonic() < deadline:
                shutil.rmtree(runs, ignore_errors=True)
        if itr == 3:  # the folder made again is still the run's: another run is refused
            with pytest.raises(FolderInUseError) as raised:
                RunFolder(str(log_dir), 0, "a second run").release()
            refused.append(str(raised.value))

    result = run_experiment_lite(TRPOWithAFault(remove_at_2, n_itr=5),
                                 exp_name="removed",
                                 log_dir=str(log_dir),
                                 plot=True,
                                 tensorboard=True,
                                 final_video_timeout=120)
    assert _iterations(log_dir) == [0, 1, 2, 3, 4]
    assert _scalar_steps(log_dir) == [0, 1, 2, 3, 4]
    assert load_snapshot(log_dir / "params.pkl")["itr"] == 4
    said = _messages(caplog, "was removed while the run went on")
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "from the 3 rows kept" in said[0].getMessage()  # 0, 1 and the one that noticed
    assert "done" in (log_dir / "debug.log").read_text()
    assert result.final_video and os.path.exists(result.final_video)
    assert len(refused) == 1 and "is in use" in refused[0], refused


def test_a_full_device_never_stops_training_and_the_files_are_whole_once_there_is_room(
        tmp_path, caplog, capfd, no_leftover_children):
    """The device fills at iteration 1, room comes back at iteration 3: the run died at the
    first snapshot it could not write (OSError, No space left on device). Now training goes
    on, each file says so once, and everything is written whole again."""
    caplog.set_level(logging.INFO, logger="async_plotter")
    with small_device(tmp_path / "device", "400k") as device:
        log_dir = device / "run"

        def fill_at_1_until_3(itr):
            if itr == 1:
                fill(device)
            if itr == 3:
                make_room(device)

        run_experiment_lite(TRPOWithAFault(fill_at_1_until_3, n_itr=5),
                            exp_name="full",
                            log_dir=str(log_dir),
                            tensorboard=True)
        assert _iterations(log_dir) == [0, 1, 2, 3, 4]
        assert _scalar_steps(log_dir) == [0, 1, 2, 3, 4]
        assert load_snapshot(log_dir / "params.pkl")["itr"] == 4
    snapshot_said = _messages(caplog, "could not write the snapshot")
    assert len(snapshot_said) == 1 and snapshot_said[0].levelno == logging.WARNING
    assert "No space left on device" in snapshot_said[0].getMessage()
    assert _messages(caplog, "the snapshot written again")
    assert "Logging error" not in capfd.readouterr().err


def test_what_a_full_device_leaves_unwritten_at_the_end_is_a_named_error(
        tmp_path, caplog, capfd, no_leftover_children):
    """Full from the last iteration on: the run trains to its end, closes its samplers, then
    raises RunFilesNotWrittenError naming the snapshot it could not write and the newest one
    on disk."""
    with small_device(tmp_path / "device", "400k") as device:
        log_dir = device / "run"

        def fill_at_3(itr):
            if itr == 3:
                fill(device)

        algo = TRPOWithAFault(fill_at_3, n_itr=4)
        with pytest.raises(RunFilesNotWrittenError) as raised:
            run_experiment_lite(algo, exp_name="full", log_dir=str(log_dir))
        assert len(algo.history) == 4
        assert load_snapshot(log_dir / "params.pkl")["itr"] == 2
    message = str(raised.value)
    assert "the snapshot of iteration 3" in message and "No space left on device" in message
    assert "the newest snapshot on disk is iteration 2's, which resume_from goes on from" in message
    assert isinstance(raised.value, OSError)
    assert "Logging error" not in capfd.readouterr().err
