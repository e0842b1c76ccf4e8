"""The iteration numbers a run's outputs carry (``iter_NNNN.mp4``, ``history/iter_NNNN.npz``,
the curve's points).

A number names one policy. The same number again names the newest policy of that iteration
(a script sending its last iteration once more at its end), and an earlier number with the
parameters it had is that policy again: both keep their names. An earlier number with other
parameters means the script's count started again (a second phase of training counting from 0):
its files would overwrite the first phase's, so from there on the plotter numbers on after the
newest, and says so. Telling the two apart costs the trainer a look at 32 of the parameters."""
import logging
from typing import Dict

import numpy as np

logger = logging.getLogger(__name__)

#: parameters looked at, spread over the vector, and as many at its end (where the output
#: layer and the log-std, which every step of training moves, usually are)
_LOOKED_AT = 16


def _looked_at(size: int) -> np.ndarray:
    """The indices of the parameters looked at in a vector of ``size``."""
    spread = np.arange(0, size, max(1, size // _LOOKED_AT))[:_LOOKED_AT]
    return np.unique(np.concatenate([spread, np.arange(max(0, size - _LOOKED_AT), size)]))


class IterationNumbers:
    """Maps the iterations ``update_plot`` is given to the numbers its outputs carry."""

    def __init__(self) -> None:
        self._fingerprints: Dict[int, int] = {}
        self._offset = 0  # added to the script's count once it started again
        self._newest = -1
        self._last_given = -1
        self._size = 0
        self._indices = _looked_at(0)  # made again for a vector of another length

    def _fingerprint(self, flat: np.ndarray) -> int:
        """Equal vectors give equal fingerprints; training that moves any looked-at parameter
        changes it."""
        if flat.size != self._size:
            self._size, self._indices = flat.size, _looked_at(flat.size)
        # A hash, not the bytes: a run's every iteration keeps one (an int, as its number).
        return hash(flat.take(self._indices).tobytes())

    def __len__(self) -> int:
        """How many iterations were shown (each phase's counted)."""
        return len(self._fingerprints)

    def shown(self, iteration: int) -> int:
        """Where ``iteration`` of the script's count goes (a point with no policy,
        ``add_metrics``): numbered on as its policies are, once the count started again."""
        return iteration + self._offset

    def number(self, iteration: int, flat: np.ndarray) -> int:
        """The number the outputs of ``iteration``'s policy (parameters ``flat``) carry."""
        number = iteration + self._offset
        fingerprint = self._fingerprint(flat)
        earlier = self._fingerprints.get(number)
        if earlier is not None and earlier != fingerprint and number < self._newest:
            say = logger.warning if self._offset == 0 else logger.debug
            self._offset = self._newest + 1 - iteration
            number = self._newest + 1
            say(
                "update_plot(iteration=%d) came after iteration %d, with other parameters than "
                "iteration %d had: the count started again. So that no video or history "
                "recording of the earlier iterations is overwritten, it is shown as iteration "
                "%d, and each later iteration N as N + %d. To choose the numbers, count on "
                "across phases (iteration=phase * n + itr), or use a Plotter per phase", iteration,
                self._last_given, iteration, number, self._offset)
        self._last_given = iteration
        self._fingerprints[number] = fingerprint
        self._newest = max(self._newest, number)
        return number
