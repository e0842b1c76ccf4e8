"""Cameras frame every env at least as well as its own ``render()``.

The frames come from a real Plotter's render process (videos read back); Gymnasium's own frames
are rendered in a subprocess: this test process may have imported TensorFlow (another test file),
and TensorFlow and software GL segfault together. Set ``ASYNC_PLOTTER_FRAME_DIR`` to keep PNGs.
"""
import functools
import json
import os
import subprocess
import sys

import gymnasium
import imageio.v2 as imageio
import numpy as np
import pytest

from async_plotter import Serializable, Plotter
from async_plotter.render.camera import plan_camera
from tests.conftest import wait_for

pytestmark = pytest.mark.slow


class Flailing(Serializable):
    """A fixed sinusoidal gait (the same each run): it makes Ant and HalfCheetah travel."""

    def __init__(self, act_dim, period=8):
        Serializable.quick_init(self, locals())
        self.act_dim, self.period = act_dim, period
        self.phase = np.linspace(0, 2 * np.pi, act_dim, endpoint=False)
        self.step = 0
        self.w = np.zeros(1, np.float32)  # nothing to learn

    def get_param_values(self):
        return self.w

    def set_param_values(self, flat):
        self.w = np.asarray(flat, np.float32).copy()

    def get_action(self, obs):
        self.step += 1
        action = np.sin(2 * np.pi * self.step / self.period + self.phase)
        return action, {"mean": action}


def record(env_id, policy, tmp_path, steps, env=None, **kwargs):
    """Frames of the initial policy's video, from a real plot worker, at the size of Gymnasium's
    own frames (the cheap preset would otherwise draw 2/3 of it), of every step."""
    kwargs.setdefault("frame_size", (480, 480))
    kwargs.setdefault("video_length", None)
    videos = tmp_path / env_id
    with Plotter(env or env_id,
                 policy,
                 max_path_length=steps,
                 video_dir=str(videos),
                 fps=200,
                 seed=0,
                 min_video_seconds=0,
                 **kwargs) as plotter:
        wait_for(lambda: plotter.stats["videos"] >= 1, 120, message=f"a video of {env_id}")
        path = plotter.stats["last_video"]
    reader = imageio.get_reader(path)
    try:
        frames = [frame for frame in reader]
    finally:
        reader.close()
    keep(f"{env_id}_ours", frames[0])
    return frames


def gymnasium_frame(env_id, tmp_path):
    """``gymnasium.make(env_id, render_mode="rgb_array").render()`` after ``reset(seed=0)``."""
    out = tmp_path / f"{env_id}_own.npy"
    script = ("import gymnasium, numpy as np, sys\n"
              "env = gymnasium.make(sys.argv[1], render_mode='rgb_array')\n"
              "env.reset(seed=0)\n"
              "np.save(sys.argv[2], env.render())\n")
    subprocess.run(
        [sys.executable, "-c", script, env_id, str(out)],
        check=True,
        timeout=120,
        env=dict(os.environ, MUJOCO_GL="egl"))
    frame = np.load(out)
    keep(f"{env_id}_own", frame)
    return frame


def keep(name, frame):
    folder = os.environ.get("ASYNC_PLOTTER_FRAME_DIR")
    if folder:
        imageio.imwrite(os.path.join(folder, f"{name}.png"), frame)


def foreground(frame, tolerance=40):
    """Pixels that differ from the frame's most common colour (its background)."""
    pixels = frame.reshape(-1, 3).astype(int)
    colours, counts = np.unique(pixels // 8, axis=0, return_counts=True)
    background = colours[np.argmax(counts)] * 8 + 4
    return np.abs(frame.astype(int) - background).sum(axis=-1) > tolerance


def centroid(mask):
    rows, cols = np.nonzero(mask)
    return cols.mean() / mask.shape[1], rows.mean() / mask.shape[0]


def body_pixels(frame):
    """The MuJoCo locomotion bodies' orange-brown (the floor is black and pale green/white)."""
    r, g, b = (frame[..., i].astype(int) for i in range(3))
    return (r > 110) & (r > g + 25) & (r > b + 50)


@pytest.mark.parametrize(
    "env_id, act_dim, options",
    [
        ("Ant-v5", 8,
         dict(terminate_when_unhealthy=False)),  # an Ant on its back stays in the video
        ("HalfCheetah-v5", 6, {}),
    ])
def test_walkers_stay_in_frame_for_300_steps(env_id, act_dim, options, tmp_path, no_leftovers):
    # The gait really travels: replayed here without rendering (physics only).
    env = gymnasium.make(env_id, **options)
    env.reset(seed=0)
    start = env.unwrapped.data.body("torso").xpos[:2].copy()
    gait = Flailing(act_dim)
    for _ in range(300):
        env.step(gait.get_action(None)[0])
    travelled = float(np.linalg.norm(env.unwrapped.data.body("torso").xpos[:2] - start))
    assert travelled > 2.0, f"the test gait should move {env_id}; it moved {travelled:.2f} m"

    frames = record(env_id,
                    Flailing(act_dim),
                    tmp_path,
                    300,
                    env=functools.partial(gymnasium.make, env_id, **options))
    assert len(frames) == 301
    keep(f"{env_id}_last", frames[-1])
    for index in range(0, len(frames), 10):
        body = body_pixels(frames[index])
        assert body.sum() > 500, f"frame {index}: the body left the frame ({body.sum()} pixels)"
        x, y = centroid(body)
        assert 0.15 < x < 0.85 and 0.15 < y < 0.85, f"frame {index}: body at ({x:.2f}, {y:.2f})"


def test_inverted_double_pendulum_is_centred_and_larger(tmp_path, no_leftovers):
    from tests.policies import LinearPolicy

    ours = record("InvertedDoublePendulum-v5", LinearPolicy(9, 1), tmp_path, 5)[0]
    own = gymnasium_frame("InvertedDoublePendulum-v5", tmp_path)
    assert ours.shape == own.shape
    ours_mask, own_mask = foreground(ours), foreground(own)
    (x, y), (own_x, own_y) = centroid(ours_mask), centroid(own_mask)
    assert abs(x - 0.5) < 0.1 and abs(y - 0.5) < 0.15, (x, y)  # before: the top quarter
    assert abs(x - own_x) < 0.1 and abs(y - own_y) < 0.15, ((x, y), (own_x, own_y))
    assert ours_mask.sum() >= own_mask.sum(), "at least as large as in Gymnasium's own frame"


def test_pusher_is_centred_without_a_black_lower_half(tmp_path, no_leftovers):
    from tests.policies import LinearPolicy

    ours = record("Pusher-v5", LinearPolicy(23, 7), tmp_path, 5)[0]
    own = gymnasium_frame("Pusher-v5", tmp_path)

    def black(image):
        return image.max(axis=-1) < 20

    lower = slice(ours.shape[0] // 2, None)
    assert black(own)[lower].mean() > 0.6  # Gymnasium's own: the void past the table's edge
    assert black(ours)[lower].mean() < 0.3, black(ours)[lower].mean()
    x, _ = centroid(~black(ours))
    assert abs(x - 0.5) < 0.15, x
    grey_arm = (np.ptp(ours.astype(int), axis=-1) < 12) & (ours.min(axis=-1) > 40)
    red_goal = (ours[..., 0] > 150) & (ours[..., 1] < 60)
    assert grey_arm.sum() > 1000 and red_goal.sum() > 50


def test_camera_argument_chooses_the_view(tmp_path, no_leftovers):
    from tests.policies import LinearPolicy

    default = record("InvertedDoublePendulum-v5", LinearPolicy(9, 1), tmp_path / "a", 3)[0]
    close = record("InvertedDoublePendulum-v5",
                   LinearPolicy(9, 1),
                   tmp_path / "b",
                   3,
                   camera=dict(distance=1.5, elevation=-5.0))[0]
    assert foreground(close).sum() > 2 * foreground(default).sum(), "closer means larger"


def test_camera_plans_without_gl():
    model = gymnasium.make("Hopper-v5").unwrapped.model
    assert plan_camera(model) == {"kind": "fixed", "id": 0}  # locomotion: the XML's track
    assert plan_camera(model, 0) == {"kind": "fixed", "id": 0}
    assert plan_camera(model, {"trackbodyid": 1, "distance": 3.0})["kind"] == "tracking"
    assert plan_camera(model, {"distance": 3.0})["kind"] == "free"
    pendulum = gymnasium.make("InvertedDoublePendulum-v5").unwrapped.model
    assert plan_camera(pendulum)["kind"] == "free"  # a cart on a rail does not travel
    track = plan_camera(pendulum, "track")  # no camera named track: follow the cart's body
    assert track["kind"] == "tracking" and track["body"] == 1
    json.dumps(plan_camera(pendulum, {"lookat": [0.0, 0.0, 1.0]}))  # plain data
