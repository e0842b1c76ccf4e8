"""A frame sink that reports, from inside the render process, which modules that process holds.

It lives in its own small module so that the render process can import it by name without
importing a test module (and whatever that imports)."""
import json
import os
import sys

from async_plotter import FrameSink


class ModulesProbe(FrameSink):
    """After every episode and at close, writes ``path`` (JSON): the render process's pid, the
    ``tensorflow`` modules it has loaded, and whether it has loaded the TensorBoard writer (the
    test matches the pid with the one in the name of the event file that holds the images)."""

    def __init__(self, path):
        self.path = path

    def end_episode(self, episode, end):
        self._report()

    def close(self):
        self._report()

    def _report(self):
        report = {
            "pid": os.getpid(),
            "tensorflow": sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow"),
            "tensorboard_writer": "async_plotter.tensorboard.writer" in sys.modules,
        }
        partial = self.path + ".partial"
        with open(partial, "w") as out:
            json.dump(report, out)
        os.replace(partial, self.path)
