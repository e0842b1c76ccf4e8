"""A worker process's stop (SIGTERM, raised as an exception by its handler) that lands where Python
only reports an exception and goes on (a weakref callback) still stops it, and prints nothing.
Seen in CI: ``serve`` logged "Exception ignored in: <function _get_module_lock.<locals>.cb>" with
the rollout process's ``_Stopped`` traceback when it stopped a worker nobody watched."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent("""
    import signal, sys, time, weakref
    from async_plotter.processes import resend_lost_stops

    class Stop(SystemExit):
        pass

    def stop(signum, frame):
        raise Stop(0)

    signal.signal(signal.SIGTERM, stop)
    if sys.argv[1] == "resend":
        resend_lost_stops(Stop)

    class Thing:
        pass

    def collected(reference):
        print("in the callback", flush=True)
        time.sleep(30)  # SIGTERM arrives here

    thing = Thing()
    reference = weakref.ref(thing, collected)
    try:
        del thing  # runs the callback
        time.sleep(30)
        print("went on", flush=True)
    except Stop:
        print("stopped", flush=True)
""")


@pytest.mark.parametrize("resend", [True, False])
def test_a_stop_swallowed_in_a_weakref_callback_is_raised_again(resend):
    child = subprocess.Popen([sys.executable, "-c", CHILD, "resend" if resend else "plain"],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE,
                             text=True,
                             cwd=REPOSITORY,
                             env=dict(os.environ, PYTHONPATH=REPOSITORY))
    try:
        assert child.stdout.readline().strip() == "in the callback"
        child.send_signal(signal.SIGTERM)
        if not resend:  # what happened before: the stop is lost, the traceback printed
            with pytest.raises(subprocess.TimeoutExpired):
                child.wait(timeout=3)
            assert "Exception ignored in" in _stderr_so_far(child)
            return
        stdout, stderr = child.communicate(timeout=20)
    finally:
        child.kill()
        child.wait()
    assert stdout.strip() == "stopped"
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


def _stderr_so_far(child):
    child.kill()
    return child.communicate(timeout=10)[1]
