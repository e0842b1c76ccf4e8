"""Where the live page is served, checked in the trainer before any process starts.

The page shows a policy being trained and the training curve, so by default it is served on the
loopback interface only. Any other address needs a token: without one, everybody on the network
could watch (and the stream costs the worker CPU). The usual remote recipe needs no token at all:
serve on 127.0.0.1 and tunnel with ``ssh -L 8080:127.0.0.1:8080 host``.
"""
import dataclasses
import ipaddress
import numbers
import os
from typing import Optional, Tuple, Union

from async_plotter.errors import InvalidArgumentError

TOKEN_ENV = "ASYNC_PLOTTER_HTTP_TOKEN"
DEFAULT_HOST = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class HttpConfig:
    """Where the render process serves the live page. Plain data: it is pickled to the worker."""

    host: str
    port: int  # 0: the OS picks a free port; the real one is reported once serving
    #: required on every request when set; kept out of ``repr`` so that logs never show it
    token: Optional[str] = dataclasses.field(default=None, repr=False)

    @property
    def loopback(self) -> bool:
        """Whether only this machine can reach the address."""
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (``127.0.0.0/8``, ``::1``)."""
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def parse_http_address(http: Union[int, str], token: Optional[str]) -> HttpConfig:
    """Check ``Plotter(http=..., http_token=...)`` and turn it into an ``HttpConfig``.

    ``http`` is a port (``8080``, ``"8080"``; ``0`` picks a free one) served on 127.0.0.1, or
    ``"host:port"`` (``"[::1]:8080"`` for IPv6). ``token`` defaults to
    ``$ASYNC_PLOTTER_HTTP_TOKEN``.

    Raises:
        InvalidArgumentError: wrong type, malformed address, port out of range, an empty or
            non-string token, or a non-loopback host without a token.
    """
    host, port = _split(http)
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
        source = f"${TOKEN_ENV}"
    else:
        source = "http_token"
    if token is not None:
        if not isinstance(token, str):
            raise InvalidArgumentError(
                f"http_token must be a string or None, got {type(token).__name__}")
        if not token or token != token.strip():
            raise InvalidArgumentError(
                f"{source} must be a non-empty string without surrounding whitespace")
    if token is None and not is_loopback(host):
        raise InvalidArgumentError(
            f"http={http!r} serves the live page on {host}, which other machines can reach; "
            f"that needs a token: pass http_token='<secret>' or set ${TOKEN_ENV} (browsers then "
            "open http://HOST:PORT/?token=<secret>). Or keep the default 127.0.0.1 and tunnel: "
            "ssh -L 8080:127.0.0.1:8080 <this host>.")
    return HttpConfig(host=host, port=port, token=token)


def _split(http: Union[int, str]) -> Tuple[str, int]:
    if isinstance(http, numbers.Integral) and not isinstance(http, bool):
        return DEFAULT_HOST, _port(int(http), http)
    if not isinstance(http, str):
        raise InvalidArgumentError(
            "http must be a port number (8080; 0 picks a free port) or 'host:port', got "
            f"{type(http).__name__} {http!r}")
    text = http.strip()
    if text.isdigit():
        return DEFAULT_HOST, _port(int(text), http)
    if text.startswith("["):  # [IPv6]:port
        host, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise InvalidArgumentError(f"http={http!r}: write an IPv6 address as '[::1]:8080'")
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or ":" in host:
            raise InvalidArgumentError(
                f"http={http!r} is not 'host:port' (e.g. '127.0.0.1:8080', '0.0.0.0:8080', "
                "'[::1]:8080') or a port number")
    if not host:
        raise InvalidArgumentError(f"http={http!r} has no host before ':'; e.g. "
                                   "'127.0.0.1:8080', or just the port 8080")
    if not port_text.isdigit():
        raise InvalidArgumentError(f"http={http!r}: the port {port_text!r} is not a number")
    return host, _port(int(port_text), http)


def _port(port: int, given: Union[int, str]) -> int:
    if not 0 <= port <= 65535:
        raise InvalidArgumentError(
            f"http={given!r}: port {port} is out of range 0-65535 (0 picks a free port)")
    return port
