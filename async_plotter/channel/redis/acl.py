"""The Redis ACL roles of the channel: exactly what a trainer and a viewer need.

Each side needs only these commands, keys and channels (a ``MONITOR`` of a trainer, ``view`` and
``list`` shows nothing else; tests/test_redis_acl_tls.py runs them and ``serve``'s catalog under
these roles and finds the server's ``ACL LOG`` empty):

* a trainer of experiment ``E`` writes and reads only ``async_plotter:E:*`` keys and publishes on
  ``async_plotter:E:*`` channels: ``SET``, ``GETRANGE`` (re-assertion reads a header), ``DEL``,
  ``EXISTS``, ``PEXPIRE``, ``XADD`` (metrics) and ``PUBLISH``;
* a viewer reads ``async_plotter:*`` keys and subscribes to ``async_plotter:*`` channels:
  ``SUBSCRIBE``, ``STRLEN`` and ``GETRANGE`` (bounded reads), and ``EVAL_RO`` running ``XRANGE``
  and ``XREVRANGE`` (metrics, each entry's size checked on the server); ``list`` and ``serve``
  also ``SCAN`` for ``async_plotter:*:structure`` and ``PTTL``;
* both ``PING`` (redis-py's health checks). ``AUTH`` and ``HELLO`` are always allowed.

Nothing else: no ``KEYS``, ``CONFIG``, ``CLIENT`` or ``SELECT`` (unless the URL names a database
other than 0; see docs/security.md). Redis channel patterns do not tell ``PUBLISH`` from
``SUBSCRIBE``: a viewer cannot publish because it lacks the command. Experiment names hold no
glob characters and no ``:``, so ``async_plotter:E:*`` matches E's keys and no other
experiment's. A command refused anyway is said by ``refusals``.
"""
import re
import secrets
from typing import Sequence

from async_plotter.channel.redis.wire import KEY_PREFIX, valid_experiment

#: every command a trainer (``Plotter(channel=...)``) sends
TRAINER_COMMANDS = ("ping", "set", "getrange", "del", "exists", "pexpire", "xadd", "publish")
#: every command ``async-plotter view`` and its worker send
VIEWER_COMMANDS = ("ping", "subscribe", "strlen", "getrange", "eval_ro", "xrange", "xrevrange")
#: what ``list`` and ``serve`` need beyond that, to find the experiments and show their expiry
LISTING_COMMANDS = ("scan", "pttl")

#: where the roles are explained; every refusal's message points there
DOCS = "docs/security.md"


def trainer_acl(experiment: str, user: str, password: str) -> str:
    """The ``ACL SETUSER`` line of a user that may publish ``experiment`` and nothing else."""
    if not valid_experiment(experiment):
        raise ValueError(f"{experiment!r} is not a valid experiment name")
    pattern = f"{KEY_PREFIX}:{experiment}:*"
    return _setuser(user, password, f"~{pattern}", f"&{pattern}", TRAINER_COMMANDS)


def viewer_acl(user: str, password: str) -> str:
    """The ``ACL SETUSER`` line of a user that may view, list and serve every experiment, and
    only read: it can create, change or delete no key and publish nothing."""
    pattern = f"{KEY_PREFIX}:*"
    return _setuser(user, password, f"%R~{pattern}", f"&{pattern}",
                    VIEWER_COMMANDS + LISTING_COMMANDS)


def new_password() -> str:
    """A random password that needs no quoting in a URL or in redis-cli."""
    return secrets.token_urlsafe(32)


def _setuser(user: str, password: str, keys: str, channels: str, commands: Sequence[str]) -> str:
    for what, text in (("user", user), ("password", password)):
        if not text or not re.fullmatch(r"[A-Za-z0-9._~-]+", text):
            raise ValueError(f"the {what} must be letters, digits, '.', '_', '~' or '-' (it goes "
                             f"into a URL unquoted), got {text!r}")
    allowed = " ".join(f"+{command}" for command in commands)
    # reset: no password, keys or channels, every command off; then exactly these.
    return f"ACL SETUSER {user} reset on >{password} {keys} {channels} {allowed}"
