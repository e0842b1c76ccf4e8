"""Writing snapshots so that an interruption never leaves a truncated file, and reading them
back."""
import os
import re
import uuid
from typing import Any, Dict, Optional, Tuple, Union

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


class _TrainedPolicy:
    """Pickles as ``policy`` given ``params`` when unpickled. A policy pickles as its recipe (its
    constructor's arguments) and comes back freshly initialised; this way a snapshot read with a
    plain ``pickle.load`` (rllab's ``joblib.load(path)["policy"]``) holds the trained policy."""

    def __init__(self, policy: Any, params: Any) -> None:
        self.policy, self.params = policy, params

    def __reduce__(self) -> Tuple[Any, Tuple[Any, Any]]:
        return _trained, (self.policy, self.params)


def _trained(policy: Any, params: Any) -> Any:
    policy.set_param_values(params)
    return policy


#: the snapshot of snapshot_mode "last", written again each iteration
LAST_SNAPSHOT = "params.pkl"
#: the snapshots of snapshot_mode "all", one per iteration: ``itr_<N>.pkl``
_NUMBERED_SNAPSHOT = re.compile(r"itr_(\d+)\.pkl")


def snapshot_name(itr: Optional[int]) -> str:
    """The file name of iteration ``itr``'s snapshot (``itr_7.pkl``), or ``params.pkl`` for
    None (snapshot_mode "last")."""
    return LAST_SNAPSHOT if itr is None else f"itr_{itr}.pkl"


def snapshot_iteration(name: str) -> Optional[int]:
    """The iteration of a numbered snapshot's file name (``itr_7.pkl``: 7), else None."""
    match = _NUMBERED_SNAPSHOT.fullmatch(name)
    return int(match[1]) if match else None


def save_snapshot(path: PathLike, snapshot: Dict[str, Any]) -> None:
    """Pickle ``snapshot`` (cloudpickle: env factories may be lambdas) atomically to ``path``;
    its ``policy`` loads with its ``policy_params``."""
    if snapshot.get("policy") is not None and snapshot.get("policy_params") is not None:
        snapshot = dict(snapshot,
                        policy=_TrainedPolicy(snapshot["policy"], snapshot["policy_params"]))
    atomic_write_bytes(path, cloudpickle.dumps(snapshot))


def load_snapshot(path: PathLike) -> Dict[str, Any]:
    """Load a snapshot written during training.

    The policy comes back with the parameters it had (``policy_params``), as with a plain
    ``pickle.load``; this also gives them to the policy of a snapshot written before it did.
    """
    with open(path, "rb") as f:
        snapshot = cloudpickle.load(f)
    policy = snapshot.get("policy")
    params = snapshot.get("policy_params")
    if policy is not None and params is not None:
        policy.set_param_values(params)
    return snapshot
