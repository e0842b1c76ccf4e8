"""Signing what travels through Redis: HMAC-SHA256 over a secret shared by trainer and viewers.

A structure is a pickle, and unpickling runs code: without signatures anyone who can write to
the server could run code on every viewer (docs/security.md). Each tag covers the payload's kind
and experiment, so a value cannot be replayed as another kind or into another experiment (older
runs: ``wire.RunKey``); unsigned payloads carry a plain SHA-256, which catches corruption. The
rule at every layer: a key means signatures are required, always; without one nothing is
accepted unless the caller says ``trust_unsigned=True``; both together raise.
"""
import hashlib
import hmac
import logging
import os
from typing import Optional, Union

logger = logging.getLogger("async_plotter")

#: the environment variable holding the shared secret
SECRET_ENV = "ASYNC_PLOTTER_SECRET"
#: bytes of a tag (HMAC-SHA256 or SHA-256)
TAG_BYTES = 32
# Offline guessing of a short secret is cheap for anyone who can read a payload and its tag.
_SHORT_SECRET = 16


class PayloadRejected(Exception):
    """A value read from Redis is not acceptable; the message says why, for one log line."""


def resolve_secret(secret: Optional[Union[str, bytes]]) -> Optional[bytes]:
    """The key to sign with: ``secret`` itself, else ``$ASYNC_PLOTTER_SECRET``, else None.

    Raises ``TypeError`` or ``ValueError`` for a secret of the wrong type or an empty one (callers
    turn them into their own argument errors).
    """
    if secret is None:
        secret = os.environ.get(SECRET_ENV) or None
        if secret is None:
            return None
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    elif isinstance(secret, (bytes, bytearray)):
        secret = bytes(secret)
    else:
        raise TypeError(f"secret must be a str, bytes or None, got {type(secret).__name__}")
    if not secret:
        raise ValueError("secret must not be empty")
    return secret


def read_secret_file(path: str) -> bytes:
    """The secret stored in ``path`` (surrounding whitespace and the final newline ignored).

    Raises ``ValueError`` with a message naming the file if it cannot be read or is empty.
    """
    try:
        with open(path, "rb") as handle:
            secret = handle.read().strip()
    except OSError as error:
        raise ValueError(f"cannot read the secret file {path!r}: {error.strerror or error}")
    if not secret:
        raise ValueError(f"the secret file {path!r} is empty")
    return secret


def warn_if_weak(secret: Optional[bytes]) -> None:
    """Log a warning for a secret short enough to guess offline."""
    if secret is not None and len(secret) < _SHORT_SECRET:
        logger.warning(
            "the shared secret is only %d bytes long; anyone who can read the Redis server can "
            "try to guess it offline. Use at least %d random bytes, e.g. the output of "
            "python -c 'import secrets; print(secrets.token_hex(32))'", len(secret), _SHORT_SECRET)


def _domain(kind: bytes, experiment: str) -> bytes:
    return b"async_plotter/1 " + kind + b"\0" + experiment.encode("utf-8") + b"\0"


def compute_tag(key: Optional[bytes], kind: bytes, experiment: str, *pieces: bytes) -> bytes:
    """HMAC-SHA256 of the pieces under ``key``, or a plain SHA-256 checksum without a key."""
    digest = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
    digest.update(_domain(kind, experiment))
    for piece in pieces:
        digest.update(piece)  # hashlib releases the GIL for large buffers
    return digest.digest()


class Verifier:
    """The viewer's rules for what it accepts.

    * viewer has the secret: the payload must be signed and its HMAC must match. Unsigned payloads
      are refused, always (``trust_unsigned`` together with a key is a ``ValueError``: a secret
      that an unsigned payload could bypass would protect nothing).
    * no secret, ``trust_unsigned=False`` (the default): everything is refused, since nothing can
      be checked and loading a structure runs code.
    * no secret, ``trust_unsigned=True``: unsigned payloads whose SHA-256 checksum matches, and
      signed ones (their signature cannot be checked), are accepted.
    """

    def __init__(self, key: Optional[bytes], trust_unsigned: bool = False) -> None:
        if key is not None and trust_unsigned:
            raise ValueError(
                "trust_unsigned conflicts with the secret given: with a secret, signatures are "
                "required, always. Drop trust_unsigned (--trust-unsigned), or the secret.")
        self.key = key
        self.trust_unsigned = bool(trust_unsigned)

    def check_flag(self, signed: bool, what: str) -> None:
        """Raise ``PayloadRejected`` for a payload refused whatever it holds: anything without a
        secret nor trust, an unsigned one with a secret. Readers ask before downloading it."""
        if self.key is None and not self.trust_unsigned:
            raise PayloadRejected(
                f"this viewer has no secret to check the {what} with, and was not told to trust "
                f"unsigned payloads; set {SECRET_ENV} or pass --secret-file")
        if not signed and self.key is not None:
            raise PayloadRejected(
                f"the {what} is unsigned and this viewer has a secret, so it requires a "
                f"signature; give the trainer the same {SECRET_ENV}")

    def check(self, signed: bool, tag: bytes, kind: bytes, experiment: str, *pieces: bytes) -> None:
        """Raise ``PayloadRejected`` unless the payload passes the rules above."""
        what = kind.decode()
        self.check_flag(signed, what)
        if signed:
            if self.key is None:
                return  # trust_unsigned: nothing can be checked
            expected = compute_tag(self.key, kind, experiment, *pieces)
            if not hmac.compare_digest(expected, bytes(tag)):
                raise PayloadRejected(
                    f"the {what}'s signature does not match: it was signed with another secret, "
                    "or it was forged or altered")
            return
        expected = compute_tag(None, kind, experiment, *pieces)
        if not hmac.compare_digest(expected, bytes(tag)):
            raise PayloadRejected(f"the unsigned {what}'s checksum does not match: it is corrupted "
                                  "or was altered")
