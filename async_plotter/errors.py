"""Named errors. Each is raised in the trainer, at the call that was wrong, before any work is
lost."""


class PlotterError(Exception):
    """Base class of every error this library raises."""


#: set on an exception a run has already logged as its failure
_LOGGED = "_async_plotter_logged"


def mark_logged(error: BaseException) -> None:
    """``error`` ended a run that logged it as its failure (``run_experiment_lite``): a command
    that catches it need not say it again."""
    setattr(error, _LOGGED, True)


def was_logged(error: BaseException) -> bool:
    """Whether :func:`mark_logged` marked ``error``."""
    return getattr(error, _LOGGED, False)


class PlotterClosedError(PlotterError, RuntimeError):
    """The plotter was used after ``close()``."""


class PolicyProtocolError(PlotterError, TypeError):
    """The policy has neither rllab's protocol nor a Keras / ``tf.Module`` interface."""


class PolicyNotRebuildableError(PlotterError, TypeError):
    """The policy's structure cannot be shipped to and rebuilt in another process."""


class ParameterMismatchError(PlotterError, ValueError):
    """A parameter vector's size or dtype differs from the first one the plotter saw."""


class EnvSpecError(PlotterError, ValueError):
    """The environment cannot be identified or rebuilt in another process."""


class NoDisplayError(PlotterError, RuntimeError):
    """A window was requested but no display is reachable."""


class VideoDirError(PlotterError, OSError):
    """The video directory cannot be created or written."""


class FolderInUseError(VideoDirError):
    """Another live run (a Plotter, ``run_experiment_lite``, a viewer; in this process or
    another) writes into the folder (``video_dir``, ``log_dir``): two runs in one folder would
    overwrite each other's files."""


class InvalidArgumentError(PlotterError, ValueError):
    """An argument has the wrong type or value."""


class EnvBuildError(PlotterError, RuntimeError):
    """The environment could not be built or reset in the trainer; the worker would fail alike."""


class EnvRenderError(PlotterError, ValueError):
    """An env that draws its own frames returns no RGB array from ``render()``."""


class PolicyMismatchError(PlotterError, ValueError):
    """The worker's copy of the policy, rebuilt from what is sent to it, would act differently
    from the trainer's policy: the videos would show another policy."""


class PolicyShapeError(PlotterError, ValueError):
    """The policy does not fit the env: it rejects the env's observations, or its action does not
    match the env's action space."""


class CameraError(PlotterError, ValueError):
    """``camera=`` names a camera (or body) the env's model does not have."""


class EnvMismatchError(PlotterError, ValueError):
    """The worker's copy of the env would give the policy other observations than the trainer's
    env gives it (a wrapper's state that does not travel, or travels and is not taken): the
    videos would show another policy."""


class EnvStepError(PlotterError, RuntimeError):
    """The env failed to step with the policy's action as the plot worker gives it (converted to
    the action space, clipped to its bounds): checked once in the trainer, where the worker
    would fail at every step."""


class ResumeError(PlotterError, ValueError):
    """``run_experiment_lite(resume_from=...)`` cannot go on from that snapshot: it is not one
    of a run's, or the algorithm cannot take it (another policy, nothing left to train)."""


class SnapshotNotFoundError(ResumeError, FileNotFoundError):
    """``resume_from`` names no snapshot: no such file, or a run's folder without one."""


class RunFilesNotWrittenError(PlotterError, OSError):
    """A run finished, but a fault of its folder (a full device) left its ``progress.csv`` or
    its newest snapshot unwritten: raised after everything else is closed, the training having
    gone on through the fault."""
