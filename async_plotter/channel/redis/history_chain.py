"""A resumed run's history over Redis goes on from the runs it resumes, as its folder does.

A run resumed from its snapshot of iteration K (``RunTarget.resumes_after``) keeps what the
runs before it recorded up to K (``trainer/run_folder.py`` does the same on disk). Over Redis:

* the trainer (``trim``), before its run's first value, removes from the recordings' index and
  the returns' stream what the runs before it recorded after K, so that Redis holds one history,
  each iteration from the run that did it last (a chain of resumes included). The index is
  scored by iteration (``index_score``), so that is one range;
* a viewer reads K from the run's model (sealed with it as its iteration, ``sealed.seal_model``)
  and takes a recording or a return when ``in_history`` says it is of the run's history: its own,
  or one of an earlier run's it keeps (``earlier_runs_keep``); of two recordings of one
  iteration, the later run's wins.

The snapshot's policy itself (iteration K) is recorded again by the resumed run: it then has
two rows, as a policy a restarted worker recorded again has (``returns.csv``: the later is its).
"""
from typing import Any, List, Optional

from async_plotter.channel.redis.sealed import Sealed, peek_header
from async_plotter.render.history import INITIAL_POLICY_ITERATION

#: stream entries read at once while trimming
_ROWS_A_READ = 1000


def index_score(update: int, iteration: Optional[int]) -> int:
    """A recording's score in the index: its iteration (-1 for the initial policy), else its
    update: the newest are the highest, across the runs of a chain too."""
    if iteration is not None:
        return iteration
    return INITIAL_POLICY_ITERATION if update == 0 else update


def earlier_runs_keep(update: int, iteration: Optional[int], after: Optional[int]) -> bool:
    """Whether a run resumed after iteration ``after`` (None: not resumed) keeps the recording or
    return of an earlier run of ``update`` and ``iteration``: those up to ``after``, and the
    first run's initial policy. An update sent without an iteration has no place in the chain."""
    if after is None:
        return False
    if iteration is None:
        return update == 0
    return iteration <= after


def in_history(model: Sealed, run_id: int, run_started_ns: int, update: int,
               iteration: Optional[int]) -> bool:
    """Whether a recording or return of run ``run_id`` (started at ``run_started_ns``) is of the
    history of the run whose model is ``model``: its own, or an earlier run's that it keeps (a
    newer run's is not, until its model is read)."""
    return run_id == model.run_id or (run_started_ns < model.run_started_ns
                                      and earlier_runs_keep(update, iteration, model.iteration))


def trim(client: Any, index: str, recording_key: Any, returns: str, after: int) -> None:
    """Remove what a run resumed after iteration ``after`` does again: the recordings scored
    above it in ``index`` (with their keys, ``recording_key(member)``) and the rows of the
    ``returns`` stream it does not keep. ``AccessDenied`` where the user's role lacks
    ``ZRANGEBYSCORE``, ``ZREM``, ``XRANGE`` or ``XDEL``."""
    members = [bytes(member) for member in client.zrangebyscore(index, f"({after}", "+inf")]
    if members:
        pipe = client.pipeline(transaction=False)
        pipe.zrem(index, *members)
        pipe.delete(*[recording_key(member.decode("ascii", "replace")) for member in members])
        pipe.execute()
    dropped = _rows_not_kept(client, returns, after)
    for start in range(0, len(dropped), _ROWS_A_READ):
        client.xdel(returns, *dropped[start:start + _ROWS_A_READ])


def _rows_not_kept(client: Any, returns: str, after: int) -> List[bytes]:
    """The ids of the stream's rows a run resumed after ``after`` does not keep; an entry that
    is not a sealed row stays (a viewer refuses it, as before)."""
    dropped: List[bytes] = []
    start = "-"
    while True:
        entries = client.xrange(returns, start, "+", count=_ROWS_A_READ)
        for entry_id, fields in entries:
            head = peek_header(fields.get(b"v", b""))
            if head is not None and not earlier_runs_keep(head.number, head.iteration, after):
                dropped.append(bytes(entry_id))
        if len(entries) < _ROWS_A_READ:
            return dropped
        start = "(" + bytes(entries[-1][0]).decode("ascii")
