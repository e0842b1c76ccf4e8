"""Packaging for async_plotter.

TensorFlow is an extra on purpose: ``[cpu]`` brings ``tensorflow-cpu`` and ``[gpu]`` brings
``tensorflow``; installing both would leave two copies fighting over the same import name.
"""
import os

from setuptools import find_packages, setup


def _readme() -> str:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md")
    with open(path, encoding="utf-8") as readme:
        return readme.read()


setup(
    name="async_plotter",
    version="0.1.0",
    description="Watch a TensorFlow policy act in MuJoCo while it trains, without slowing training",
    long_description=_readme(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["async_plotter", "async_plotter.*"]),
    package_data={
        "async_plotter.web": ["page.html"],
        "async_plotter.serve": ["page.html"]
    },
    install_requires=[
        "numpy>=1.23",
        "cloudpickle>=3.0",
        "gymnasium[mujoco,classic-control]>=1.0",
        "mujoco>=3.1",
        "imageio>=2.31",
        "imageio-ffmpeg>=0.4.9",
        "matplotlib>=3.7",
        "pillow>=9.1",
        # the live page's and serve's HTTP server (and serve's client for the relayed streams)
        "aiohttp>=3.10,<4",
        # TensorBoard event files, written by the render process whenever tensorboard_dir is set
        # and by every run_experiment_lite run: tensorboardX frames them without TensorFlow, and
        # uses crc32c's compiled checksum when present (35x faster than its pure-Python one).
        "tensorboardX>=2.6",
        "crc32c>=2.3",
        # process CPU times and trees for the CPU budget, on Linux, macOS and Windows
        "psutil>=5.9",
    ],
    extras_require={
        "cpu": ["tensorflow-cpu>=2.15"],
        "gpu": ["tensorflow>=2.15"],
        # Not hiredis: it parses a 1e6-parameter GET faster, but with it installed redis-py
        # also packs commands through it, and publishing cost the trainer's sender thread
        # 17-18 ms of CPU per update instead of 4.8, end to end 27-30 ms instead of 22-25
        # (benchmarks/redis_latency.py, run with and without it, interleaved).
        "redis": ["redis>=5.0"],
        # Reading and serving event files; writing them needs neither this nor TensorFlow.
        "tensorboard": ["tensorboard>=2.15"],
        # The 3D live view (Plotter(view="3d"), async-plotter replay): viser's server and its
        # built three.js client, mjviser's MuJoCo scene for it. The 2D page needs neither.
        # mjviser is pinned exactly (any 0.0.x may rename what view3d/poses.py reads; that fast
        # path is detected at start, mjviser's public path taken otherwise); viser's minor
        # version too: guard.py wraps the function its server starts with.
        "view3d": ["viser>=1.1.1,<1.2", "mjviser==0.0.14"],
        # A viewer machine that replays a run's history from Redis (states only): no TensorFlow.
        "view": ["redis>=5.0", "viser>=1.1.1,<1.2", "mjviser==0.0.14"],
        "test": [
            "pytest>=7", "pytest-timeout>=2.2", "pytest-xdist>=3.5", "psutil>=5.9", "yapf>=0.40",
            "redis>=5.0",
            "websockets>=12", "tensorboard>=2.15",
            # the real gym package (0.26, numpy-2 broken in places) whose envs users still bring
            "gym==0.26.2"
        ],
    },
    entry_points={"console_scripts": ["async-plotter=async_plotter.cli:main"]},
)
