"""What the Redis server refuses by design, said as such: a command outside the user's ACL role
(``AccessDenied``, from a ``NOPERM`` reply), the user or its password, a TLS certificate.

Unlike an outage, a refusal lasts until someone changes the settings, so it is said naming what
to fix: the command and key refused and the role the user needs (``acl``), or the certificate's
problem. A viewer stops on it; a trainer warns once and retries slowly, training going on.
"""
import re
import ssl
from typing import Any, Optional, Tuple

from async_plotter.channel.redis.acl import DOCS
from async_plotter.channel.redis.urls import redact, url_user


class AccessDenied(Exception):
    """The Redis server refused a command to this connection's user: its ACL role lacks the
    command, the key or the channel (a ``NOPERM`` reply).

    Attributes: ``command`` (e.g. ``"SET"``), ``target`` (the key or channel, or None) and
    ``reply`` (the server's words).
    """

    def __init__(self, command: str, target: Optional[str], reply: str) -> None:
        super().__init__(command, target, reply)
        self.command = command
        self.target = target
        self.reply = reply

    @property
    def what(self) -> str:
        """The refused command with its key or channel, e.g. ``SET async_plotter:a:params``."""
        return self.command if self.target is None else f"{self.command} {self.target}"

    def __str__(self) -> str:
        return f"{self.what} was refused: {self.reply}"


# Redis 6-7.0: "this user has no permissions to run the 'xadd' command"; 7.2 and later: "User u
# has no permissions to run the 'xadd' command", "No permissions to access a key".
_NAMED_COMMAND = re.compile(r"run the '([^']+)' command")
# A command a script may not run comes back as a plain error, not NOPERM.
_SCRIPT_REFUSAL = "can't run this command"


def denial(args: Tuple[Any, ...], error: Exception) -> Optional[AccessDenied]:
    """``AccessDenied`` naming what was refused, if ``error`` (the reply to the command
    ``args``) is a permission refusal; None for any other error."""
    import redis

    reply = str(error)
    if not (isinstance(error, redis.exceptions.NoPermissionError) or _SCRIPT_REFUSAL in reply):
        return None
    sent = _text(args[0]).upper() if args else "?"
    named = _NAMED_COMMAND.search(reply)
    command = named.group(1).upper() if named else sent
    if command != sent:
        return AccessDenied(command, None, reply)  # e.g. SELECT, sent while connecting
    target = _target(sent, args)
    if _SCRIPT_REFUSAL in reply:
        target = f"{target} (a command its script runs)"
    return AccessDenied(command, target, reply)


def _target(command: str, args: Tuple[Any, ...]) -> Optional[str]:
    """The key or channel a command of the channel names first."""
    if command in ("EVAL", "EVAL_RO", "EVALSHA", "EVALSHA_RO"):
        index = 3  # script, number of keys, first key
    elif command in ("SCAN", "PING"):
        return None
    else:
        index = 1
    return _text(args[index])[:200] if len(args) > index else None


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value[:256]).decode("utf-8", "replace")
    return str(value)


def refusal(error: BaseException, url: str) -> Optional[str]:
    """What the server refused, in words naming the fix, when ``error`` means it refuses this
    connection's settings (the user's ACL role, the user or its password, the TLS certificate
    it was shown or showed); None when it is an outage or anything else.

    Such a refusal lasts until someone changes the settings: a viewer stops on it, a trainer
    warns once and retries slowly, training going on.
    """
    import redis

    server = f"Redis at {redact(url)}"
    user = url_user(url)
    if isinstance(error, AccessDenied):
        return f"{server} refused {error.what} to user {user!r} ({error.reply})"
    if isinstance(error, redis.exceptions.AuthenticationError):
        return (f"{server} refused user {user!r} or its password ({error}); the URL carries "
                "both: redis://USER:PASSWORD@host:port/db")
    certificate = _certificate_error(error)
    if certificate is not None:
        reason = getattr(certificate, "verify_message", None) or str(certificate)
        return (f"{server}: its TLS certificate was refused ({reason}); name the CA that signed "
                "it in the URL, ?ssl_ca_certs=/path/to/ca.pem, and connect by the host name "
                "the certificate holds")
    return None


def role_refusal(error: BaseException, url: str, role: str) -> Optional[str]:
    """``refusal``, saying which ACL role (``role``) the user needs when a command was
    refused."""
    problem = refusal(error, url)
    if problem is not None and isinstance(error, AccessDenied):
        problem += (f". Give user {url_user(url)!r} {role} (its ACL SETUSER line: {DOCS}, or "
                    "`async-plotter acl`)")
    return problem


def explain_failure(error: BaseException, url: str, role: str) -> str:
    """One sentence for any failure talking to the server at ``url``: a refusal naming its fix
    (``role_refusal``), else that the server is unreachable, and why."""
    problem = role_refusal(error, url, role)
    if problem is not None:
        return problem
    return (f"Redis at {redact(url)} is unreachable ({type(error).__name__}: {error})"
            f"{tls_hint(error)}")


def tls_hint(error: BaseException) -> str:
    """A hint for a TLS handshake that failed without a certificate being refused here (the
    server closed it), or ``""``."""
    failed = _chained(error, ssl.SSLError)
    if failed is None:
        return ""
    return (f" (TLS: {failed}; a server that requires client certificates, as Redis does by "
            "default, needs &ssl_certfile=...&ssl_keyfile=... in the URL)")


def _certificate_error(error: BaseException) -> Optional[BaseException]:
    found = _chained(error, ssl.SSLCertVerificationError)
    if found is None and "CERTIFICATE_VERIFY_FAILED" in str(error):
        found = error  # a redis-py that did not chain the ssl error
    return found


def _chained(error: BaseException, kind: type) -> Optional[BaseException]:
    """The first exception of type ``kind`` in ``error``'s cause/context chain."""
    seen = 0
    current: Optional[BaseException] = error
    while current is not None and seen < 10:
        if isinstance(current, kind):
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    return None
