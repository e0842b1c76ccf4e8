"""The 3D view's two ways to pose its scene: mjviser's public ``update_from_mjdata`` (viser
sends the updates itself) and the fast path (``view3d/poses.py``: one message of our own a
frame), which is used only where its self-check finds its messages equal to what viser sends
for the public path. Real viser servers and mjviser scenes in this process."""
import logging

import mujoco
import numpy as np
import pytest

pytest.importorskip("viser")
pytest.importorskip("mjviser")

from async_plotter.render.camera import make_camera  # noqa: E402 - after the skip
from async_plotter.view3d.poses import fast_poses  # noqa: E402
from async_plotter.view3d.scene import POSES_ENV, Scene3D  # noqa: E402

pytestmark = pytest.mark.timeout(120)

# A free body with a site, a two-link arm, and a mocap body sharing the hand's geometry: every
# kind of handle the fast path poses (bodies, batched groups, mocap bodies, sites).
TOYS_XML = """
<mujoco>
  <worldbody>
    <geom type="plane" size="2 2 .1"/>
    <body name="ball" pos="0 0 1">
      <freejoint/>
      <geom type="sphere" size=".1"/>
      <site name="tip" pos=".1 0 0" size=".02"/>
    </body>
    <body name="arm" pos="0 0 .5">
      <joint type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 .3 0 0" size=".03"/>
      <body name="hand" pos=".3 0 0">
        <joint type="hinge" axis="1 0 0"/>
        <geom type="box" size=".05 .05 .05"/>
      </body>
    </body>
    <body name="target" mocap="true" pos="1 0 1">
      <geom type="box" size=".05 .05 .05" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
</mujoco>
"""


def scene_of(model):
    data = mujoco.MjData(model)
    scene = Scene3D(model, data, make_camera(model, data, None, -1), "poses")
    return scene, data


def random_state(model, data, rng):
    data.qpos[:] = rng.normal(0, 0.5, model.nq)
    data.qpos[:3] += (1.0, -2.0, 0.5)
    if model.nmocap:
        data.mocap_pos[:] = rng.normal(0, 1, data.mocap_pos.shape)
        quat = rng.normal(size=data.mocap_quat.shape)
        data.mocap_quat[:] = quat / np.linalg.norm(quat, axis=1, keepdims=True)
    mujoco.mj_forward(model, data)  # (a free joint's quaternion is normalized here)


@pytest.mark.parametrize("model", ["toys", "HalfCheetah-v5"])
def test_the_fast_path_sends_what_the_public_path_sends(model, monkeypatch):
    monkeypatch.delenv(POSES_ENV, raising=False)
    if model == "toys":
        model = mujoco.MjModel.from_xml_string(TOYS_XML)
    else:
        import gymnasium

        env = gymnasium.make(model)
        model = env.unwrapped.model
        env.close()
    scene, data = scene_of(model)
    try:
        assert scene.fast is not None, "the fast path was not detected"
        rng = np.random.default_rng(1)
        for _ in range(5):
            random_state(model, data, rng)
            assert scene.fast.self_check(scene.scene, data) == ""
            assert scene.pose(data) is not None  # a message for the front to send
    finally:
        scene.close()


def test_a_changed_mjviser_turns_the_fast_path_off_and_says_so(caplog, monkeypatch):
    monkeypatch.delenv(POSES_ENV, raising=False)
    model = mujoco.MjModel.from_xml_string(TOYS_XML)
    scene, data = scene_of(model)
    try:
        # As if mjviser no longer kept the tracked body at the origin: the public path now
        # shows the world unmoved, the fast path's messages would not.
        scene.scene.camera_tracking_enabled = False
        random_state(model, data, np.random.default_rng(2))
        with caplog.at_level(logging.WARNING, logger="async_plotter.view3d.poses"):
            assert fast_poses(scene.server, scene.scene, data) is None
        assert "update_from_mjdata (the fast path is off" in caplog.text
        assert "/fixed_bodies" in caplog.text  # what differed
    finally:
        scene.close()


def test_forced_public_path_poses_through_mjviser(monkeypatch):
    monkeypatch.setenv(POSES_ENV, "public")
    model = mujoco.MjModel.from_xml_string(TOYS_XML)
    scene, data = scene_of(model)
    try:
        assert scene.fast is None
        random_state(model, data, np.random.default_rng(3))
        recording = scene.server.get_scene_serializer()
        assert scene.pose(data) is None  # nothing for the front: viser sends it
        # The world moved so that the tracked body (the ball) is at the origin.
        ball = model.body("ball").id
        assert np.allclose(scene.scene.fixed_bodies_frame.position, -data.xpos[ball], atol=1e-6)
        assert len(recording.serialize()) > 100  # viser recorded (and sent) the updates
    finally:
        scene.close()


def test_the_panels_curve_starts_again_for_another_run():
    """A viewer following a trainer that started again (another run, ``CURVE_RESTART``) starts
    the 3D panel's learning curve again: what viser holds for the page is the new run's points
    alone, from its first (a resumed run's chain is then handed in again)."""
    model = mujoco.MjModel.from_xml_string(TOYS_XML)
    scene, _ = scene_of(model)
    try:
        for iteration in range(3):
            scene.add_metrics(iteration, {"AverageReturn": 10.0 + iteration})
        assert [list(axis) for axis in scene._curve.data] == [[0, 1, 2], [10, 11, 12]]
        scene.restart_curve()
        assert [list(axis) for axis in scene._curve.data] == [[], []]
        scene.add_metrics(5, {"AverageReturn": 1.0})
        assert [list(axis) for axis in scene._curve.data] == [[5], [1]]
    finally:
        scene.close()
