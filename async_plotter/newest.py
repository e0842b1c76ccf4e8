"""Newest wins between two threads: one puts, the other takes, and an item not taken yet is
replaced (the live page's frames for its encoder, a viewer worker's verified updates). Where
many viewers each skip what they had no time for, see ``web.feed.NewestSlots``."""
import threading
from typing import Generic, Optional, TypeVar

Item = TypeVar("Item")


class Newest(Generic[Item]):
    """The newest item put, until it is taken."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._item: Optional[Item] = None
        self._fresh = False
        self._closed = False

    @property
    def fresh(self) -> bool:
        """Whether an item waits (a plain read, no lock: cheap enough for every step)."""
        return self._fresh

    def put(self, item: Item) -> None:
        """Hand ``item`` over in place of any not taken yet (dropped once closed)."""
        with self._ready:
            if not self._closed:
                self._item, self._fresh = item, True
                self._ready.notify_all()

    def take(self, timeout: Optional[float] = None) -> Optional[Item]:
        """The item once there is one (0: at once); None after ``timeout`` s or once closed.
        The taker's reference is then the only one kept."""
        with self._ready:
            self._ready.wait_for(lambda: self._fresh or self._closed, timeout)
            item, self._item, self._fresh = self._item, None, False
            return item

    def close(self) -> None:
        """Wake the taker; ``take`` returns None from now on."""
        with self._ready:
            self._closed, self._item, self._fresh = True, None, False
            self._ready.notify_all()
