"""Connecting to Redis the way every part of the channel needs it.

* redis-py retries a failed command up to 10 times by default; here every connection error reaches
  our own loops at once, which back off, reconnect and re-read the keys (a retried command cannot
  know that a restarted server lost the keys).
* A dead server is reported once per outage, not once per attempt.
* URLs are logged without their password (``urls``).
* What the server refuses by design (a command outside the user's ACL role, the user or its
  password, a TLS certificate) is not an outage: it is said naming what to fix (``refusals``),
  retried only every ``REFUSED_RETRY`` s, and a viewer stops on it.
"""
import functools
import logging
import random
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

from async_plotter.channel.redis.refusals import (AccessDenied, denial, explain_failure,
                                                  role_refusal)
from async_plotter.channel.redis.urls import redact

logger = logging.getLogger("async_plotter")

_CONNECT_TIMEOUT = 5.0
# Per socket operation, not per command: a 40 MB value on a slow link still gets through.
_SOCKET_TIMEOUT = 30.0
# How often an idle subscriber pings the server, so that a silently dead link is noticed.
_HEALTH_CHECK_INTERVAL = 10.0
# Large values arrive in fewer, larger reads than redis-py's default 64 KiB.
_READ_SIZE = 1024 * 1024
#: seconds between attempts while the server refuses this side's settings (``refusal``): they
#: last until someone changes them, so retrying faster only fills the server's ACL log
REFUSED_RETRY = 5.0


def connection_errors() -> tuple:
    """The exceptions meaning "the server is unreachable or went away": reconnect and retry."""
    import redis

    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def connect(url: str) -> Any:
    """A ``redis.Redis`` client for ``url``; it connects on first use. A command its user may
    not run (alone or in a pipeline) raises ``AccessDenied`` naming it."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return _client_class().from_url(url,
                                    socket_connect_timeout=_CONNECT_TIMEOUT,
                                    socket_timeout=_SOCKET_TIMEOUT,
                                    socket_keepalive=True,
                                    socket_read_size=_READ_SIZE,
                                    health_check_interval=_HEALTH_CHECK_INTERVAL,
                                    retry=Retry(NoBackoff(), 0))


@functools.lru_cache(maxsize=None)
def _client_class() -> type:
    """``redis.Redis`` whose refused commands raise ``AccessDenied`` (built on first use: redis
    is an optional dependency)."""
    import redis

    class Pipeline(redis.client.Pipeline):

        def execute(self, raise_on_error: bool = True) -> List[Any]:
            commands = [args for args, _ in self.command_stack]
            results = super().execute(raise_on_error=False)
            for args, result in zip(commands, results):
                if isinstance(result, redis.exceptions.ResponseError):
                    denied = denial(args, result)
                    if denied is not None:
                        raise denied
                    if raise_on_error:
                        raise result
            return results

    class Client(redis.Redis):

        def execute_command(self, *args: Any, **options: Any) -> Any:
            try:
                return super().execute_command(*args, **options)
            except redis.exceptions.ResponseError as error:
                denied = denial(args, error)
                if denied is None:
                    raise
                raise denied from None

        def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
            return Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)

    return Client


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

# The members of a sorted set's range, each over ARGV[3] bytes replaced by false (nil).
_BOUNDED_ZRANGE = """
local members = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2])
local limit = tonumber(ARGV[3])
for i, member in ipairs(members) do
  if #member > limit then members[i] = false end
end
return members
"""


def bounded_zrange(client: Any, key: str, start: int, stop: int,
                   member_limit: int) -> List[Optional[bytes]]:
    """The members of the sorted set at ``key`` ranked ``start`` to ``stop`` (``ZRANGE``), each
    over ``member_limit`` bytes as None: one call downloads at most about ``(stop - start + 1) *
    member_limit`` bytes, whatever the set holds."""
    raw = _eval_read_only(client, _BOUNDED_ZRANGE, key, int(start), int(stop), int(member_limit))
    return [None if member is None else bytes(member) for member in raw or []]


def bounded_xrange(client: Any, key: str, start: str, count: int,
                   entry_limit: int) -> List[Tuple[bytes, Dict[bytes, bytes]]]:
    """At most ``count`` entries of the stream at ``key`` from ``start`` (``"-"`` or
    ``"(ID"``); an entry whose fields add up to more than ``entry_limit`` bytes arrives as
    ``{b"oversized": b"<size>"}``. So one call downloads at most about ``count * entry_limit``
    bytes, whatever the stream holds."""
    raw = _eval_read_only(client, _BOUNDED_XRANGE, key, start, int(count), int(entry_limit))
    entries = []
    for entry_id, flat in raw or []:
        fields = dict(zip(flat[0::2], flat[1::2]))
        entries.append((bytes(entry_id), fields))
    return entries


def last_stream_id(client: Any, key: str) -> Optional[bytes]:
    """The id of the newest entry of the stream at ``key``, or None for an empty or missing one."""
    last = _eval_read_only(client, _LAST_STREAM_ID, key)
    return bytes(last) if last else None


def stream_ends_before(client: Any, key: str, entry_id: str) -> bool:
    """Whether the stream at ``key`` is missing, empty or ends before the entry ``entry_id``
    that a reader read last (another server, or one whose clock went back): the reader must
    then read it again from its first entry."""
    last = last_stream_id(client, key)
    return last is None or _stream_id_order(last.decode("ascii",
                                                        "replace")) < _stream_id_order(entry_id)


def _stream_id_order(text: str) -> Tuple[int, int]:
    """A stream entry's id (``"1700000000000-3"``) as what orders it."""
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


def _eval_read_only(client: Any, script: str, key: str, *args: Any) -> Any:
    """``EVAL_RO`` of a script that only reads ``key``; ``EVAL`` on servers before Redis 7.0.

    Read-only, so that a viewer whose ACL role may only read keys (``%R~``) can run it: Redis
    requires write permission on the keys given to a plain ``EVAL``."""
    import redis

    try:
        return client.execute_command("EVAL_RO", script, 1, key, *args)
    except redis.exceptions.ResponseError as error:
        if "unknown command" not in str(error).lower():
            raise
    return client.execute_command("EVAL", script, 1, key, *args)


def close_quietly(*things: Any) -> None:
    """Close clients and pub/sub objects, ignoring errors (the connection may be dead already)."""
    for thing in things:
        if thing is None:
            continue
        try:
            thing.close()
        except Exception:  # noqa: BLE001 - closing a broken connection raises all sorts
            pass


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
    """One warning when a connection is lost (or refused: see ``refusal``), one info line when
    it is back.

    ``role`` names the ACL role this side needs (``"the viewer role"``), for refused commands.
    """

    def __init__(self, who: str, url: str, role: str = "the role it needs") -> None:
        self._who = who
        self._raw_url = url
        self._url = redact(url)
        self._role = role
        self.down = False

    def failed(self, error: BaseException, consequence: str) -> None:
        """Record a failure; only the first of an outage is logged."""
        if self.down:
            return
        self.down = True
        logger.warning("%s: %s; %s", self._who, explain_failure(error, self._raw_url, self._role),
                       consequence)

    def refusal(self, error: BaseException) -> Optional[str]:
        """``refusal(error)``, with the role to give the user when a command was refused."""
        return role_refusal(error, self._raw_url, self._role)

    def recovered(self) -> None:
        """Record a success, logging it if it ends an outage."""
        if self.down:
            self.down = False
            logger.info("%s: connected to Redis at %s again", self._who, self._url)


def run_subscription(url: str,
                     channel: Union[str, Sequence[str]],
                     who: str,
                     stop: threading.Event,
                     on_connect: Callable[[Any], None],
                     on_events: Callable[[Any, Set[str]], None],
                     on_idle: Optional[Callable[[], None]] = None,
                     idle_interval: float = 0.5,
                     on_refused: Optional[Callable[[str], None]] = None) -> None:
    """Listen to ``channel`` (or to each of several) until ``stop`` is set, surviving server
    restarts. Run it in a thread.

    After every (re)connection, once subscribed, ``on_connect(client)`` re-reads the keys: the
    subscription exists first, so nothing written after the read can be missed. Each batch of
    notifications that arrived together becomes one ``on_events(client, kinds)`` call, so a burst
    of updates costs one read of the newest. ``on_idle()`` runs at least every ``idle_interval``
    seconds. The wait is on the socket itself: a notification wakes the thread at once.

    When the server refuses this connection's settings (``refusal``: a command outside the
    viewer's ACL role; the user or password; the TLS certificate), ``on_refused(message)`` is
    called and the subscription ends; without ``on_refused`` it warns once and retries every
    ``REFUSED_RETRY`` seconds.
    """
    import redis

    errors = connection_errors() + (redis.exceptions.RedisError, AccessDenied)
    channels = [channel] if isinstance(channel, str) else list(channel)
    backoff = Backoff()
    outage = OutageLog(who, url, "the viewer role")
    while not stop.is_set():
        client = pubsub = None
        try:
            client = connect(url)
            pubsub = client.pubsub()
            pubsub.subscribe(*channels)
            _await_subscribed(pubsub, len(channels))
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
            # The subscription's own replies (SUBSCRIBE, its health-check PING) come through
            # redis-py's pub/sub object, not the client that names refusals.
            if not isinstance(error, AccessDenied):
                error = denial(("SUBSCRIBE", *channels), error) or error
            problem = outage.refusal(error)
            if problem is not None and on_refused is not None:
                on_refused(problem)
                return
            outage.failed(
                error, "reconnecting in the background"
                if problem is None else f"retrying every {REFUSED_RETRY:.0f} s")
            delay = backoff.next_delay()
            _wait(stop, delay if problem is None else max(delay, REFUSED_RETRY), on_idle,
                  idle_interval)
        except Exception:  # noqa: BLE001 - a bug must not silently end the subscription
            logger.exception("%s: unexpected error while listening to Redis; reconnecting", who)
            _wait(stop, backoff.next_delay(), on_idle, idle_interval)
        finally:
            close_quietly(pubsub, client)


_MAX_COALESCED = 10000


def _await_subscribed(pubsub: Any, count: int = 1) -> None:
    deadline = time.monotonic() + _CONNECT_TIMEOUT
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=max(deadline - time.monotonic(), 0.0))
        if message is not None and message.get("type") == "subscribe":
            count -= 1
            if count <= 0:
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
