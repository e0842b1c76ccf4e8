"""The Redis ACL roles of the channel: exactly the commands, keys and channels a trainer of one
experiment and a viewer need (each command's reason: docs/security.md; a test runs every side
under these roles and finds the server's ``ACL LOG`` empty). A command refused anyway is said by
``refusals``.
"""
import re
import secrets
from typing import Sequence

from async_plotter.channel.redis.wire import KEY_PREFIX, valid_experiment

#: every command a trainer (``Plotter(channel=...)``) sends
TRAINER_COMMANDS = ("ping", "set", "getrange", "del", "exists", "pexpire", "xadd", "publish",
                    "zadd", "zcard", "zpopmin", "zrangebyscore", "zrem", "xrange", "xdel",
                    "pubsub|numsub")
#: every command ``async-plotter view`` and its worker send
VIEWER_COMMANDS = ("ping", "subscribe", "strlen", "getrange", "eval_ro", "xrange", "xrevrange",
                   "zrange")
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
