"""A token bucket of CPU-seconds, how a CPU budget is kept: tokens flow in at ``rate`` a second
up to ``capacity``; what was used is charged afterwards, so the bucket may go into debt and the
long-run average never exceeds ``rate``. The trainer's governor (``budget.py``) charges every
tick; serve's recorder (``serve/recorder.py``) each recording, whole."""
import time


class TokenBucket:
    """CPU-seconds in hand, full at the start; one owner charges it (no lock)."""

    def __init__(self, rate: float, capacity: float) -> None:
        self.rate, self.capacity, self.tokens = float(rate), float(capacity), float(capacity)
        self._refilled = time.monotonic()

    def refill(self) -> float:
        """Add what flowed in since the last refill; the tokens now."""
        now = time.monotonic()
        self.tokens = min(self.tokens + (now - self._refilled) * self.rate, self.capacity)
        self._refilled = now
        return self.tokens

    def charge(self, seconds: float) -> None:
        """Take ``seconds`` of CPU used."""
        self.tokens -= seconds

    def seconds_until(self, tokens: float) -> float:
        """Seconds until the bucket holds ``tokens`` (0 if it does)."""
        return max(tokens - self.tokens, 0.0) / max(self.rate, 1e-9)
