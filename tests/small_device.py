"""A real small device for the faults of a full disk: a tmpfs mounted for one test (needs root,
as CI and make test run)."""
import contextlib
import os
import subprocess

import pytest

#: what ``fill`` writes: the file that takes every byte left
FILLER = "filler"


@contextlib.contextmanager
def small_device(folder, size):
    """Mount a tmpfs of ``size`` (``"150k"``) on ``folder`` (made here) for the block."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    os.makedirs(folder, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                              str(folder)],
                             capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder):
    """Take every byte left on the device."""
    with open(os.path.join(folder, FILLER), "ab", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError:
            pass


def make_room(folder):
    """Give back what ``fill`` took."""
    os.unlink(os.path.join(folder, FILLER))
