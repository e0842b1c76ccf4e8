"""The history thread's watch (``worker/stall.py``): a thread that stopped getting anywhere is
named, with where it is; one that is slow, or that waits for work, is not."""
import threading
import time

from async_plotter.worker.stall import StallWatch
from tests.conftest import wait_for

LIMIT = 1.0


def _watched(work):
    watch = StallWatch(LIMIT)
    thread = threading.Thread(target=work, args=(watch, ), daemon=True)
    thread.start()
    return watch, thread


def _looks(watch, thread, seconds):
    """What ``stalled`` says when asked every 50 ms (the main loop asks every step)."""
    said = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not said:
        why = watch.stalled(thread)
        if why:
            said.append(why)
        time.sleep(0.05)
    return said


def test_a_thread_waiting_for_ever_mid_step_is_named_with_where_it_waits():
    never = threading.Event()

    def work(watch):
        watch.mark("the recording of iteration 7")
        never.wait()

    watch, thread = _watched(work)
    said = _looks(watch, thread, 10 * LIMIT)
    assert said and said[0].startswith("the recording of iteration 7 made no progress (waiting: ")
    assert said[0].endswith(" work") and "test_stall.py:" in said[0], said  # where it waits


def test_a_spinning_thread_is_named_by_its_cpu():
    stop = threading.Event()

    def work(watch):
        watch.mark("the recording of update 2")
        while not stop.is_set():
            pass

    watch, thread = _watched(work)
    try:
        said = _looks(watch, thread, 20 * LIMIT)
    finally:
        stop.set()
    assert said and said[0].startswith("the recording of update 2 made no progress (spinning: ")


def test_slow_steps_and_waiting_for_work_are_not_hangs():
    stop, work_comes = threading.Event(), threading.Event()

    def work(watch):
        for _ in range(int(3 * LIMIT / 0.2)):
            watch.mark("slow steps")
            time.sleep(0.2)  # each step asleep, but each one ends
        watch.idle()
        work_comes.wait()  # waiting for an update: nothing in progress
        stop.set()

    watch, thread = _watched(work)
    assert _looks(watch, thread, 6 * LIMIT) == []
    work_comes.set()
    wait_for(stop.is_set, 10, message="the thread to end")
