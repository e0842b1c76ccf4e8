"""Commands that run until stopped (``replay``, ``view``, ``serve``) stop on one Ctrl-C or
SIGTERM, whenever it comes, through ``until_stopped.until_interrupted``."""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import default_sigint

# A Ctrl-C while ``replay`` started: in a finalizer, Python printed its KeyboardInterrupt and lost
# it (the command then served for ever); in trimesh's import guard, which keeps any error for
# later, it became a TypeError (exit 1).
_SIGNAL_INSIDE = textwrap.dedent("""
    import os, signal, sys, time
    from async_plotter.until_stopped import until_interrupted

    def signal_me():
        os.kill(os.getpid(), signal.{signal})
        time.sleep(1.0)  # a handler runs here

    class Finalized:
        def __del__(self):
            signal_me()

    def guarded_import():
        try:
            signal_me()
            return "module"
        except BaseException as error:
            return error

    with until_interrupted(lambda: print("stopped", flush=True)) as stop:
        {inside}
        print("started", flush=True)
        stop.wait()
    """)


def _python(script):
    """The command line that runs ``script`` (indented as in this file) in a fresh Python."""
    return [sys.executable, "-c", textwrap.dedent(script)]


def _started(script, preexec_fn=default_sigint):
    """``script`` running, its output piped, once it printed "started"."""
    process = subprocess.Popen(_python(script),
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE,
                               text=True,
                               preexec_fn=preexec_fn)
    line = process.stdout.readline()
    if line != "started\n":
        process.kill()
        raise AssertionError(f"it printed {line!r} first; its stderr: {process.communicate()[1]}")
    return process


@pytest.mark.parametrize("inside", ["Finalized()", "assert guarded_import() == 'module'"],
                         ids=["finalizer", "import-guard"])
@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_inside_a_library_still_stops_the_command_cleanly(name, inside):
    process = subprocess.run(
        [sys.executable, "-c",
         _SIGNAL_INSIDE.format(signal=name, inside=inside)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=default_sigint)
    assert process.stdout.split() == ["started", "stopped"], (process.stdout, process.stderr)
    assert process.returncode == 0, process.stderr
    assert not process.stderr.strip(), process.stderr


def test_a_background_jobs_ignored_ctrl_c_stays_ignored_and_sigterm_stops_it():
    """A command started with SIGINT ignored (``cmd &`` in a script) is not stopped by the
    script's Ctrl-C, as without this library; SIGTERM still stops it cleanly."""
    process = _started("""
        from async_plotter.until_stopped import until_interrupted
        with until_interrupted(lambda: print("stopped", flush=True)) as stop:
            print("started", flush=True)
            stop.wait()
        """,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        process.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(1.5)
        process.send_signal(signal.SIGTERM)
        assert process.communicate(timeout=30)[0] == "stopped\n"
        assert process.returncode == 0
    finally:
        process.kill()


def test_a_stop_that_hangs_ends_the_command_with_every_threads_stack():
    """Stopping never hangs: a shutdown stuck past its deadline ends the process (exit 1),
    saying where each thread was."""
    process = _started("""
        import time
        import async_plotter.until_stopped as until_stopped
        until_stopped.STOP_DEADLINE_SECONDS = 2.0

        def stuck_shutdown():
            time.sleep(600)

        with until_stopped.until_interrupted(stuck_shutdown) as stop:
            print("started", flush=True)
            stop.wait()
        """)
    try:
        process.send_signal(signal.SIGINT)
        stderr = process.communicate(timeout=30)[1]
    finally:
        process.kill()
    assert process.returncode == 1, stderr
    assert "Timeout" in stderr and "stuck_shutdown" in stderr, stderr


def test_a_command_whose_exit_hangs_ends_with_every_threads_stack():
    """After the command's work, the interpreter's exit waits for threads it cannot stop (a
    library's, not made a daemon): the command still ends, with exit code 1 and their stacks."""
    started = time.monotonic()
    process = subprocess.run(_python("""
        import sys, threading, time
        from async_plotter import cli

        cli.EXIT_DEADLINE_SECONDS = 2.0

        def never_ending_library_thread():
            time.sleep(600)

        threading.Thread(target=never_ending_library_thread).start()
        sys.argv = ["async-plotter", "acl"]
        sys.exit(cli.main())
        """),
                             capture_output=True,
                             text=True,
                             timeout=60)
    assert process.returncode == 1 and "ACL SETUSER" in process.stdout, process.stderr
    assert "never_ending_library_thread" in process.stderr, process.stderr
    assert time.monotonic() - started < 50
