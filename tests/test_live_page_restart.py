"""A render process killed from outside comes back serving the same live page: the same address
and token (the trainer keeps the page's socket, ``web/listener.py``), an open page in a browser
and a stream client reconnect by themselves, and the half-written video the killed process left
in the video folder is removed when the next one starts (``render/partial_files.py``)."""
import logging
import os
import signal

import pytest

from async_plotter import Plotter
from async_plotter.web.client import StreamError, open_stream, read_mjpeg
from tests.conftest import wait_for
from tests.policies import LinearPolicy
from tests.test_web_browser import chromium  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

TOKEN = "the-same-token"


def page_state(session):
    """What the page in the browser shows: the update, the connection pill, the picture; ``{}``
    while the page is still being parsed (the picture comes before the update's field)."""
    return session.evaluate("""(() => {
        const [view, update, conn] = ['view', 'update', 'conn'].map(
            (id) => document.getElementById(id));
        return (view === null || update === null || conn === null) ? {} : {
            update: update.textContent,
            connection: conn.textContent,
            width: view.naturalWidth,
        };
    })()""")


def test_a_killed_render_process_serves_the_same_page_and_leaves_no_partial_file(
        tmp_path, no_leftovers, chromium, caplog):  # noqa: F811 - chromium stops first
    caplog.set_level(logging.INFO, logger="async_plotter")
    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=300,
                 fps=20,
                 frame_size=(160, 120),
                 video_dir=str(tmp_path),
                 http=0,
                 http_token=TOKEN,
                 window=False,
                 seed=0,
                 priority="low") as plotter:
        url = plotter.wait_for_http_url(60)
        chromium.call("Page.navigate", url=f"{url}?token={TOKEN}")
        wait_for(lambda:
                 (lambda s: s.get("width") and s["update"] == "0" and s["connection"] == "live")
                 (page_state(chromium)),
                 30,
                 message="the page to show the initial policy")
        # The initial policy's video is being written (12 s of Swimmer at real time).
        partial = tmp_path / ".partial_update_0000.mp4"
        wait_for(partial.exists, 30, message="a video being written")

        os.kill(plotter.stats["worker_pids"]["render"], signal.SIGKILL)
        # A newer policy meanwhile: the restarted worker records it, not the initial one again,
        # so nobody will finish the killed process's file.
        policy.fill(0.3)
        plotter.update_plot(policy, iteration=1)

        # A client connecting while no render process runs is served by the next one.
        frame = next(read_mjpeg(url + "stream.mjpg", TOKEN, timeout=60))
        assert frame.update == 1
        assert plotter.stats["restarts"] == 1
        assert plotter.stats["http_url"] == url
        assert not partial.exists(), os.listdir(tmp_path)
        # The page open in the browser reconnected by itself and shows the newer policy.
        wait_for(lambda:
                 (lambda s: s.get("width") and s["update"] == "1" and s["connection"] == "live")
                 (page_state(chromium)),
                 30,
                 message="the open page to show the newer policy")
        # The token still guards the page.
        with pytest.raises(StreamError) as refused:
            open_stream(url + "stream.mjpg")
        assert refused.value.status == 401
    said = [r.getMessage() for r in caplog.records if "live view at" in r.getMessage()]
    assert said == [f"live view at {url}"], said
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".partial_")]


def test_the_3d_page_socket_reconnects_to_the_same_address_after_a_restart(no_leftovers):
    # viser's client opens its socket at the page's own address again every second while
    # disconnected; the restarted render process's front must answer it there, behind the
    # same token.
    pytest.importorskip("viser")
    from tests.clients import view3d_socket

    policy = LinearPolicy(8, 2)
    with Plotter("Swimmer-v5",
                 policy,
                 max_path_length=300,
                 fps=20,
                 frame_size=(160, 120),
                 http=0,
                 http_token=TOKEN,
                 view="3d",
                 window=False,
                 seed=0,
                 priority="low") as plotter:
        url = plotter.wait_for_http_url(60)
        headers = {"X-Async-Plotter-Token": TOKEN}
        with view3d_socket(url, headers=headers, timeout=30) as socket:
            assert socket.recv(timeout=30), "the scene"
            os.kill(plotter.stats["worker_pids"]["render"], signal.SIGKILL)
        wait_for(lambda: plotter.stats["restarts"] == 1 and plotter.stats["alive"],
                 60,
                 message="the restart")
        with view3d_socket(url, headers=headers, timeout=60) as socket:
            assert socket.recv(timeout=30), "the scene, from the restarted render process"
        assert plotter.stats["http_url"] == url
