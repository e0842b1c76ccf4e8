"""Reading one headed value from Redis without trusting it first: ``ProbedKey``, for the worker's
updates and the viewer's structures.

1. probe ``STRLEN`` and the header (``link.probe``): an empty key, or a length and header already
   decided, costs nothing more, however many notifications arrive;
2. refuse from the unverified header what is not worth downloading (too large, a stated length
   other than the real one, a signature flag refused whatever the value, the caller's ``vet``);
3. download exactly the probed length (``link.read_exact``) and verify it (``open_value``);
4. deliver it, or refuse it with one reason (``reject``).

What the unverified header decides only ever refuses; a connection error decides nothing.
"""
from typing import Any, Callable, Generic, Optional, Tuple, TypeVar

from async_plotter.channel.redis.link import probe, read_exact
from async_plotter.channel.redis.signing import PayloadRejected, Verifier
from async_plotter.channel.redis.wire import check_length

Head = TypeVar("Head")
Value = TypeVar("Value")


class Skip(Exception):
    """Decided without a complaint: nothing to deliver (the value already delivered, written
    again, or one for another structure)."""


class Later(Exception):
    """Not decided yet: ``vet`` defers the download, and the key is probed again later."""


class ProbedKey(Generic[Head, Value]):
    """Steps 1 to 4 above for the ``what`` (``"update"``, ``"structure"``) at ``key``.

    Args:
        head_bytes: bytes of the header read by the probe.
        parse_head: the header from those bytes, with ``total`` (the whole length it states) and
            ``signed``; ``PayloadRejected`` if it is not one.
        max_bytes: longer values are refused before anything else is read; ``bound`` says where
            the bound comes from, for the log line.
        verifier: its flag-only rules refuse a value before it is downloaded.
        reject: called with the reason of each refusal (the caller counts and logs).
    """

    def __init__(self, key: str, what: str, head_bytes: int, parse_head: Callable[[bytes], Head],
                 max_bytes: int, bound: str, verifier: Verifier, reject: Callable[[str], None]):
        self.key = key
        self._what = what
        self._head_bytes = head_bytes
        self._parse_head = parse_head
        self._max_bytes = max_bytes
        self._bound = bound
        self._verifier = verifier
        self._reject = reject
        # (length, header) of the value last probed and decided: not fetched again.
        self._decided: Optional[Tuple[int, bytes]] = None
        #: values downloaded, and their bytes (for tests and benchmarks)
        self.downloads = 0
        self.downloaded_bytes = 0

    def fetch(self, client: Any, vet: Callable[[Head], None],
              open_value: Callable[[bytes], Value]) -> Optional[Value]:
        """The value if it is new and passes every check, else None (refusals go to ``reject``).

        ``vet(head)`` checks the unverified header and ``open_value(value)`` verifies the value
        downloaded and returns what to deliver; either raises ``PayloadRejected`` to refuse or
        ``Skip`` to decide silently, and ``vet`` raises ``Later`` to leave the value undecided.
        Connection errors propagate.
        """
        import redis

        try:
            length, prefix = probe(client, self.key, self._head_bytes)
        except redis.exceptions.ResponseError as error:
            self._reject(self._foreign(error))
            return None
        if length == 0 or (length, prefix) == self._decided:
            return None  # none yet (or expired), or the one already accepted or refused
        value: Optional[Value] = None
        try:
            value = self._download(client, length, prefix, vet, open_value)
        except Later:
            return None
        except redis.exceptions.ResponseError as error:
            self._reject(self._foreign(error))
        except PayloadRejected as error:
            self._reject(str(error))
        except Skip:
            pass
        # Decided (a connection error would have left): this header is not fetched again.
        self._decided = (length, prefix)
        return value

    def _download(self, client: Any, length: int, prefix: bytes, vet: Callable[[Head], None],
                  open_value: Callable[[bytes], Value]) -> Optional[Value]:
        what = self._what
        if length > self._max_bytes:
            raise PayloadRejected(f"the {what} is oversized: {length} bytes, more than the "
                                  f"{self._max_bytes} {self._bound}")
        head: Any = self._parse_head(prefix)
        check_length(what, length, head.total, str(head.total))
        self._verifier.check_flag(head.signed, what)
        vet(head)
        value = read_exact(client, self.key, length, what)
        if value is None:
            return None  # gone since the probe
        self.downloads += 1
        self.downloaded_bytes += len(value)
        return open_value(value)

    def _foreign(self, error: Exception) -> str:
        return f"the key holds something else than {_article(self._what)} ({error})"


def _article(what: str) -> str:
    return ("an " if what[:1] in "aeiou" else "a ") + what
