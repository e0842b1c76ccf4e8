"""TensorFlow reinforcement learning that uses :mod:`async_plotter` (the reference user of the
core).

Policies, baselines, samplers (serial and multi-process), VPG, TRPO and ``run_experiment_lite``::

    from async_plotter.rl import TRPO, CategoricalMLPPolicy, run_experiment_lite

    algo = TRPO("CartPole-v1", CategoricalMLPPolicy("CartPole-v1"), batch_size=4000, n_itr=100)
    run_experiment_lite(algo, n_parallel=2, plot=True)

Names are imported on first use, so ``import async_plotter.rl`` stays cheap and a process that only
needs, say, the sample processing never loads TensorFlow.
"""
import importlib
from typing import TYPE_CHECKING, Any, Dict, List

_EXPORTS: Dict[str, str] = {
    "EnvSpec": "envs",
    "EnvMaker": "envs",
    "DiagGaussian": "distributions",
    "Categorical": "distributions",
    "GaussianMLPPolicy": "policies",
    "CategoricalMLPPolicy": "policies",
    "Baseline": "baselines",
    "LinearFeatureBaseline": "baselines",
    "ZeroBaseline": "baselines",
    "SampleBatch": "batch",
    "Sampler": "samplers",
    "SerialSampler": "samplers",
    "ParallelSampler": "samplers",
    "rollout": "samplers",
    "ProcessedSamples": "sample_processing",
    "process_samples": "sample_processing",
    "discount_cumsum": "sample_processing",
    "gae_advantages": "sample_processing",
    "BatchPolopt": "batch_polopt",
    "VPG": "vpg",
    "TRPO": "trpo",
    "run_experiment_lite": "experiment",
    "ExperimentResult": "experiment",
    "load_snapshot": "snapshot",
    "ResumeError": "resume",
    "SnapshotNotFoundError": "resume",
    "RunFilesNotWrittenError": "recorder",
}

__all__: List[str] = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> List[str]:
    return sorted(list(globals()) + __all__)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from async_plotter.rl.baselines import Baseline, LinearFeatureBaseline, ZeroBaseline
    from async_plotter.rl.batch import SampleBatch
    from async_plotter.rl.batch_polopt import BatchPolopt
    from async_plotter.rl.distributions import Categorical, DiagGaussian
    from async_plotter.rl.envs import EnvMaker, EnvSpec
    from async_plotter.rl.experiment import ExperimentResult, run_experiment_lite
    from async_plotter.rl.policies import CategoricalMLPPolicy, GaussianMLPPolicy
    from async_plotter.rl.sample_processing import (ProcessedSamples, discount_cumsum,
                                                    gae_advantages, process_samples)
    from async_plotter.rl.samplers import ParallelSampler, Sampler, SerialSampler, rollout
    from async_plotter.rl.snapshot import load_snapshot
    from async_plotter.errors import (ResumeError, RunFilesNotWrittenError, SnapshotNotFoundError)
    from async_plotter.rl.trpo import TRPO
    from async_plotter.rl.vpg import VPG
