"""Redis URLs: checking one before anything connects, and writing it into logs without secrets.

A URL carries everything a connection needs, for ``Plotter(channel=...)`` and the command line
alike: the user and password (``redis://USER:PASSWORD@host:6379/0``; the server's ACL decides what
that user may do, see ``acl``) and, for TLS, redis-py's own query options
(``rediss://host:6380/0?ssl_ca_certs=/path/ca.pem``, with ``&ssl_certfile=...&ssl_keyfile=...``
where the server requires client certificates). ``url_problem`` checks those files exist.
"""
import os
import urllib.parse
from typing import Any, Optional

SCHEMES = ("redis", "rediss", "unix")


def redact(url: str) -> str:
    """``url`` with its password (and a key file's, ``ssl_password``) replaced by ``***``, for
    log lines."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if "ssl_password" in parts.query:
        query = [(name, "***" if name == "ssl_password" else value)
                 for name, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
        parts = parts._replace(query=urllib.parse.urlencode(query, safe="/*"))
        if parts.password is None:
            return urllib.parse.urlunsplit(parts)
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
    problem = _tls_options_problem(url, parts)
    if problem is not None:
        return problem
    try:
        import redis
    except ImportError:
        return ("needs the redis package, which is not installed: "
                "pip install 'async_plotter[redis]'")
    try:
        # Builds (without connecting) what a client would: unknown query options fail here.
        redis.ConnectionPool.from_url(url).make_connection()
    except (TypeError, ValueError, redis.exceptions.RedisError) as error:
        return f"{redact(url)!r} is not a valid Redis URL: {error}"
    return None


# redis-py's TLS query options that name files, which must exist before anything connects.
_TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_ca_path")


def _tls_options_problem(url: str, parts: urllib.parse.SplitResult) -> Optional[str]:
    """Why the URL's TLS options cannot work: given without ``rediss://``, or naming a file
    that cannot be read."""
    options = urllib.parse.parse_qs(parts.query)
    given = sorted(name for name in options if name.startswith("ssl_"))
    if given and parts.scheme != "rediss":
        return (f"{redact(url)!r} has TLS options ({', '.join(given)}) but scheme "
                f"{parts.scheme!r}: TLS needs rediss://")
    for name in _TLS_FILES:
        for path in options.get(name, []):
            exists = os.path.isdir(path) if name == "ssl_ca_path" else os.path.isfile(path)
            if not exists or not os.access(path, os.R_OK):
                return f"{redact(url)!r}: {name}={path!r} cannot be read"
    return None


def url_user(url: str) -> str:
    """The user a URL connects as (``default`` when it names none)."""
    try:
        user = urllib.parse.urlsplit(url).username
    except ValueError:
        user = None
    return urllib.parse.unquote(user) if user else "default"
