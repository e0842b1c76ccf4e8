"""Connecting to Redis the way every part of the channel needs it.

* redis-py retries a failed command up to 10 times by default; here every connection error reaches
  our own loops at once, which back off, reconnect and re-read the keys (a retried command cannot
  know that a restarted server lost the keys).
* A dead server is reported once per outage, not once per attempt.
* URLs are logged without their password.
"""
import logging
import random
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

logger = logging.getLogger("async_plotter")

SCHEMES = ("redis", "rediss", "unix")
_CONNECT_TIMEOUT = 5.0
# Per socket operation, not per command: a 40 MB value on a slow link still gets through.
_SOCKET_TIMEOUT = 30.0
# How often an idle subscriber pings the server, so that a silently dead link is noticed.
_HEALTH_CHECK_INTERVAL = 10.0
# Large values arrive in fewer, larger reads than redis-py's default 64 KiB.
_READ_SIZE = 1024 * 1024


def connection_errors() -> tuple:
    """The exceptions meaning "the server is unreachable or went away": reconnect and retry."""
    import redis

    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def connect(url: str) -> Any:
    """A ``redis.Redis`` client for ``url``; it connects on first use."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(url,
                                socket_connect_timeout=_CONNECT_TIMEOUT,
                                socket_timeout=_SOCKET_TIMEOUT,
                                socket_keepalive=True,
                                socket_read_size=_READ_SIZE,
                                health_check_interval=_HEALTH_CHECK_INTERVAL,
                                retry=Retry(NoBackoff(), 0))


def probe(client: Any, key: str, head_bytes: int) -> Tuple[int, bytes]:
    """``(length, first head_bytes bytes)`` of the string at ``key``, in one round trip of a few
    bytes: ``(0, b"")`` if there is none.

    Readers decide from this, before downloading anything, whether the value is worth fetching:
    its stated size must match its real one (``STRLEN``), and a header they have already seen
    (accepted or refused) is not fetched again, however many notifications say otherwise.
    """
    pipe = client.pipeline(transaction=False)
    pipe.strlen(key)
    pipe.getrange(key, 0, head_bytes - 1)
    length, head = pipe.execute()
    return int(length or 0), bytes(head or b"")


def read_exact(client: Any, key: str, length: int, what: str) -> Optional[bytes]:
    """The string at ``key`` if it is exactly ``length`` bytes long, else ``PayloadRejected``;
    None if it is gone.

    One ``GETRANGE`` for at most ``length + 1`` bytes: a value replaced by a larger one since
    ``probe`` still costs no more than the size that was checked.
    """
    from async_plotter.channel.redis.signing import PayloadRejected

    value = client.getrange(key, 0, length)
    if not value:
        return None
    if len(value) != length:
        raise PayloadRejected(f"the {what} changed size while being read ({len(value)} bytes, "
                              f"{length} expected)")
    return value


# Filters a stream range on the server, so that an oversized entry costs the reader a few bytes,
# not its size: Redis has no STRLEN for stream entries, and XRANGE sends them whole.
_BOUNDED_XRANGE = """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', tonumber(ARGV[2]))
local limit = tonumber(ARGV[3])
for i, entry in ipairs(entries) do
  local fields = entry[2]
  local size = 0
  for j = 1, #fields do size = size + #fields[j] end
  if #fields > 8 or size > limit then
    entries[i] = {entry[1], {'oversized', tostring(size)}}
  end
end
return entries
"""
# The id of a stream's newest entry, without its fields.
_LAST_STREAM_ID = """
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if #last == 0 then return false end
return last[1][1]
"""


def bounded_xrange(client: Any, key: str, start: str, count: int,
                   entry_limit: int) -> List[Tuple[bytes, Dict[bytes, bytes]]]:
    """At most ``count`` entries of the stream at ``key`` from ``start`` (``"-"`` or
    ``"(ID"``); an entry whose fields add up to more than ``entry_limit`` bytes arrives as
    ``{b"oversized": b"<size>"}``. So one call downloads at most about ``count * entry_limit``
    bytes, whatever the stream holds."""
    raw = client.eval(_BOUNDED_XRANGE, 1, key, start, int(count), int(entry_limit))
    entries = []
    for entry_id, flat in raw or []:
        fields = dict(zip(flat[0::2], flat[1::2]))
        entries.append((bytes(entry_id), fields))
    return entries


def last_stream_id(client: Any, key: str) -> Optional[bytes]:
    """The id of the newest entry of the stream at ``key``, or None for an empty or missing one."""
    last = client.eval(_LAST_STREAM_ID, 1, key)
    return bytes(last) if last else None


def close_quietly(*things: Any) -> None:
    """Close clients and pub/sub objects, ignoring errors (the connection may be dead already)."""
    for thing in things:
        if thing is None:
            continue
        try:
            thing.close()
        except Exception:  # noqa: BLE001 - closing a broken connection raises all sorts
            pass


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``, for log lines."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def url_problem(url: Any) -> Optional[str]:
    """Why ``url`` cannot name a Redis server, or None if it can."""
    example = "'redis://host:6379/0' (or rediss:// for TLS)"
    if not isinstance(url, str):
        return f"must be a URL string such as {example}, got {type(url).__name__}"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"{redact(url)!r} is not a valid URL ({error}); use {example}"
    if parts.scheme not in SCHEMES:
        shown = parts.scheme or "none"
        return (f"{redact(url)!r} has scheme {shown!r}; use {example}, or unix:///path/to.sock")
    if parts.scheme == "unix":
        return None if parts.path else f"{redact(url)!r} names no socket path"
    if not parts.hostname:
        return f"{redact(url)!r} names no host; use {example}"
    if port is not None and port <= 0:
        return f"{redact(url)!r} has port {port}"
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        return f"{redact(url)!r}: the database after the host must be a number, got {db!r}"
    try:
        import redis
    except ImportError:
        return ("needs the redis package, which is not installed: "
                "pip install 'async_plotter[redis]'")
    try:
        # Builds (without connecting) what a client would: unknown query options fail here.
        redis.ConnectionPool.from_url(url).make_connection()
    except (TypeError, ValueError) as error:
        return f"{redact(url)!r} is not a valid Redis URL: {error}"
    return None


class Backoff:
    """Growing delays between reconnection attempts: 0.1 s doubling up to ``cap``, with jitter
    so that many viewers do not hammer a restarted server in lockstep."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self._first = first
        self._cap = cap
        self._attempts = 0

    def next_delay(self) -> float:
        """The delay before the next attempt."""
        delay = min(self._first * 2**self._attempts, self._cap)
        self._attempts = min(self._attempts + 1, 30)
        return delay * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        """Connected again: the next outage starts with short delays."""
        self._attempts = 0


class OutageLog:
    """One warning when a connection is lost, one info line when it is back."""

    def __init__(self, who: str, url: str) -> None:
        self._who = who
        self._url = redact(url)
        self.down = False

    def failed(self, error: BaseException, consequence: str) -> None:
        """Record a failure; only the first of an outage is logged."""
        if not self.down:
            self.down = True
            logger.warning("%s: Redis at %s is unreachable (%s: %s); %s", self._who, self._url,
                           type(error).__name__, error, consequence)

    def recovered(self) -> None:
        """Record a success, logging it if it ends an outage."""
        if self.down:
            self.down = False
            logger.info("%s: connected to Redis at %s again", self._who, self._url)


def run_subscription(url: str,
                     channel: str,
                     who: str,
                     stop: threading.Event,
                     on_connect: Callable[[Any], None],
                     on_events: Callable[[Any, Set[str]], None],
                     on_idle: Optional[Callable[[], None]] = None,
                     idle_interval: float = 0.5) -> None:
    """Listen to ``channel`` until ``stop`` is set, surviving server restarts. Run it in a thread.

    After every (re)connection, once subscribed, ``on_connect(client)`` re-reads the keys: the
    subscription exists first, so nothing written after the read can be missed. Each batch of
    notifications that arrived together becomes one ``on_events(client, kinds)`` call, so a burst
    of updates costs one read of the newest. ``on_idle()`` runs at least every ``idle_interval``
    seconds. The wait is on the socket itself: a notification wakes the thread at once.
    """
    import redis

    errors = connection_errors() + (redis.exceptions.RedisError, )
    backoff = Backoff()
    outage = OutageLog(who, url)
    while not stop.is_set():
        client = pubsub = None
        try:
            client = connect(url)
            pubsub = client.pubsub()
            pubsub.subscribe(channel)
            _await_subscribed(pubsub)
            on_connect(client)
            outage.recovered()
            backoff.reset()
            while not stop.is_set():
                message = pubsub.get_message(timeout=idle_interval)
                if on_idle is not None:
                    on_idle()
                kinds = _event_kinds(message)
                # Coalesce the burst that arrived meanwhile (bounded, in case it never ends).
                for _ in range(_MAX_COALESCED):
                    message = pubsub.get_message(timeout=0)
                    if message is None:
                        break
                    kinds |= _event_kinds(message)
                if kinds:
                    on_events(client, kinds)
        except errors as error:
            if stop.is_set():
                break
            outage.failed(error, "reconnecting in the background")
            _wait(stop, backoff.next_delay(), on_idle, idle_interval)
        except Exception:  # noqa: BLE001 - a bug must not silently end the subscription
            logger.exception("%s: unexpected error while listening to Redis; reconnecting", who)
            _wait(stop, backoff.next_delay(), on_idle, idle_interval)
        finally:
            close_quietly(pubsub, client)


_MAX_COALESCED = 10000


def _await_subscribed(pubsub: Any, timeout: float = _CONNECT_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=max(deadline - time.monotonic(), 0.0))
        if message is not None and message.get("type") == "subscribe":
            return
    import redis

    raise redis.exceptions.TimeoutError("the server did not confirm the subscription")


def _event_kinds(message: Optional[dict]) -> Set[str]:
    if message is None or message.get("type") != "message":
        return set()
    from async_plotter.channel.redis.wire import event_kind

    return {event_kind(message.get("data"))}


def _wait(stop: threading.Event, delay: float, on_idle: Optional[Callable[[], None]],
          interval: float) -> None:
    """Sleep ``delay`` seconds unless stopped, still calling ``on_idle`` every ``interval``."""
    deadline = time.monotonic() + delay
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        stop.wait(min(remaining, interval))
        if on_idle is not None:
            on_idle()
