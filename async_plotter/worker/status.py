"""Messages a child sends back to the trainer's supervisor: events, progress beats and errors."""
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any


class StatusSender:
    """Child side. Every message is ``(kind, payload_dict)``; sending never raises."""

    def __init__(self, connection: Connection, role: str) -> None:
        self._connection = connection
        self.role = role
        self._last_beat = 0.0

    def send(self, kind: str, **payload: Any) -> None:
        payload["role"] = self.role
        payload["time"] = time.time()
        try:
            self._connection.send((kind, payload))
        except (OSError, ValueError):
            pass  # the trainer is gone; the lifeline will end this process

    def beat(self, interval: float = 1.0) -> None:
        """Tell the supervisor the main loop is making progress (rate-limited)."""
        now = time.monotonic()
        if now - self._last_beat >= interval:
            self._last_beat = now
            self.send("beat")

    def error(self, where: str) -> None:
        """Report the exception being handled, with its traceback."""
        self.send("error", where=where, traceback=traceback.format_exc())
