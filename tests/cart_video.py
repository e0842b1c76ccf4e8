"""Which way CartPole's cart went in a video."""
import numpy as np


def cart_moves(path):
    """+1 if the cart ends right of where it started in the video, -1 if left (CartPole draws
    the cart as the black box on a black track line)."""
    import imageio

    frames = imageio.mimread(path, memtest=False)
    first, last = _cart_x(frames[0]), _cart_x(frames[-1])
    assert abs(last - first) > 3, f"the cart did not move in {path}: {first:.1f} -> {last:.1f} px"
    return 1 if last > first else -1


def _cart_x(frame):
    dark = np.asarray(frame)[..., :3].max(axis=-1) < 60
    rows = dark.mean(axis=1) < 0.5  # the track line spans the whole width
    columns = np.nonzero(dark[rows])[1]
    return float(columns.mean())
