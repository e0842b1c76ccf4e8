"""Writing snapshots so that an interruption never leaves a truncated file, and reading them
back."""
import os
import uuid
from typing import Any, Dict, Union

import cloudpickle

PathLike = Union[str, "os.PathLike[str]"]


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file in the same folder, flush it to disk, then rename it.

    ``os.replace`` is atomic on POSIX and Windows: readers (and a Ctrl-C at any moment) see either
    the old file or the new one, never half of one.
    """
    path = os.fspath(path)
    # Same folder (os.replace cannot cross file systems), a name no other writer uses, and
    # open(..., "xb") rather than mkstemp so the file gets the usual umask permissions, not 0600.
    tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save_snapshot(path: PathLike, snapshot: Dict[str, Any]) -> None:
    """Pickle ``snapshot`` (cloudpickle: env factories may be lambdas) atomically to ``path``."""
    atomic_write_bytes(path, cloudpickle.dumps(snapshot))


def load_snapshot(path: PathLike) -> Dict[str, Any]:
    """Load a snapshot written during training.

    The policy pickles as its constructor arguments only, so it comes back freshly initialised;
    this loads the saved parameters into it (key ``policy_params``).
    """
    with open(path, "rb") as f:
        snapshot = cloudpickle.load(f)
    policy = snapshot.get("policy")
    params = snapshot.get("policy_params")
    if policy is not None and params is not None:
        policy.set_param_values(params)
    return snapshot
