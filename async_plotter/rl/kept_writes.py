"""A run's own files through the faults of a long run: its folder removed while it trains (``rm
-rf runs/``), a full device. Training never stops for them: a write that fails is said once,
what it would have written stays in memory, and the next write tries again; a removed folder is
made again. What is still unwritten when the run ends is a named error then, not before."""
import logging
import os
from typing import Callable, Optional

from async_plotter.appends import identity

logger = logging.getLogger(__name__)


class KeptWrite:
    """The writes of one of the run's files: each is tried; the first failure of a streak is
    logged as a warning (``what`` could not be written, ``then`` what happens instead), the
    next success as the file being written again. ``error`` holds the failure while it lasts.
    """

    def __init__(self, what: str, then: str) -> None:
        self.what = what
        self.then = then
        #: the last write's failure, None once one succeeds
        self.error: Optional[OSError] = None

    def attempt(self, write: Callable[[], object], last: bool = False) -> bool:
        """Call ``write``; whether it succeeded. Only ``OSError`` is a fault of the folder: any
        other exception is a bug and propagates. ``last``: the run's last try (its warning says
        nothing of a next one)."""
        try:
            write()
        except OSError as error:
            if self.error is None:
                logger.warning("could not write %s (%s)%s", self.what, error,
                               "" if last else f"; {self.then}")
            self.error = error
            return False
        if self.error is not None:
            self.error = None
            logger.info("%s written again", self.what)
        return True


class FolderWatch:
    """Notices that a folder was removed (and perhaps made again by someone else) since it was
    last asked, and makes it again."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._identity = identity(path)

    def made_again(self) -> bool:
        """Whether the folder is another one than when last asked: it was removed (made again
        here if it is still missing). False while it cannot be made; the writes into it then
        fail, each with its own warning."""
        now = identity(self.path)
        if now == self._identity:
            return False
        if now is None:
            try:
                os.makedirs(self.path, exist_ok=True)
            except OSError:
                return False
            now = identity(self.path)
        self._identity = now
        return True
