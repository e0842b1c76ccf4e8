"""Who may use a page's server: the one set of access rules of every front (the live page, the
3D view and its replay, ``serve``), checked on a request's complete headers before any route.

* Off loopback, a token: ``?token=``, ``Authorization: Bearer``, ``X-Async-Plotter-Token``, or
  the cookie ``remember_token`` sets (viser's client opens its socket without the page's query
  string); a cookie counts only on a request from this server's own pages, since a browser sends
  it whatever page asks.
* On loopback without a token, the user's browser is the only credential: the Host must be a
  loopback name (DNS rebinding: another name resolving to 127.0.0.1), and a request a browser
  marks ``Sec-Fetch-Site: cross-site`` or ``same-site``, or whose ``Origin`` is not this server,
  is refused, so a page on another origin can neither read nor hold a stream (an ``<img>`` tag
  sends those headers) nor open a WebSocket.
* A header these rules read, given twice, is ambiguous (``ambiguous``).
"""
import hmac
from http import HTTPStatus
from typing import Any, Dict, Optional, Tuple
from urllib.parse import urlsplit

from aiohttp import web

from async_plotter.web.address import HttpConfig, is_loopback

#: the cookie that carries the token for viser's socket, per port (cookies ignore ports)
TOKEN_COOKIE = "async_plotter_token_{port}"
# Headers that access depends on: two of one are ambiguous.
_SINGLE = ("host", "origin", "authorization", "sec-fetch-site", "x-async-plotter-token")


def ambiguous(request: web.Request) -> bool:
    """Whether a header these rules read is given more than once."""
    return any(len(request.headers.getall(name, ())) > 1 for name in _SINGLE)


def refusal(config: HttpConfig,
            request: web.Request) -> Optional[Tuple[int, str, Optional[Dict[str, str]]]]:
    """Why the request is refused (status, text, extra headers), or None if it may proceed."""
    headers = request.headers
    token = config.token
    if token is None:
        host_header = headers.get("host") or "127.0.0.1"
        host = _host_name(host_header)
        if not is_loopback(host):
            return HTTPStatus.FORBIDDEN, f"Host {host!r} refused: serving on loopback", None
        reason = _foreign(headers, host_header)
        if reason:
            return HTTPStatus.FORBIDDEN, f"cross-origin request refused ({reason})", None
        return None
    given = request.query.get("token", "") or _bearer(headers.get("authorization", ""))
    given = given or headers.get("x-async-plotter-token", "")
    if not given:
        given = request.cookies.get(_cookie_name(request), "")
        if given and _foreign(headers, headers.get("host") or ""):
            return HTTPStatus.FORBIDDEN, "cross-origin request refused", None
    if not given:
        return (HTTPStatus.UNAUTHORIZED, "a token is required: open /?token=<token>", {
            "WWW-Authenticate": 'Bearer realm="async_plotter"'
        })
    if not hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
        return HTTPStatus.FORBIDDEN, "wrong token", None
    return None


def remember_token(request: web.Request, response: web.StreamResponse) -> None:
    """Set a token given in the request's query as this server's cookie (``HttpOnly``,
    ``SameSite=Strict``), for a page whose own requests drop the query (viser's socket)."""
    token = request.query.get("token", "")
    if token:
        response.set_cookie(_cookie_name(request),
                            token,
                            httponly=True,
                            samesite="Strict",
                            path="/")


def _cookie_name(request: web.Request) -> str:
    """The cookie that carries the token to this server (one per port)."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    return TOKEN_COOKIE.format(port=sockname[1] if sockname else 0)


def _foreign(headers: Any, host_header: str) -> str:
    """Why a browser's request comes from another site's page (``Sec-Fetch-Site``, or an
    ``Origin`` that is not this server), or ``""``."""
    site = headers.get("sec-fetch-site", "").lower()
    if site in ("cross-site", "same-site"):
        return site
    origin = headers.get("origin")
    if origin is not None and not _same_origin(origin, host_header):
        return "Origin"
    return ""


def _same_origin(origin: str, host_header: str) -> bool:
    """Whether an ``Origin`` header names this server as the request's Host does."""
    try:
        parts = urlsplit(origin)
        origin_port = parts.port or 80
    except ValueError:
        return False
    if parts.scheme != "http" or not parts.hostname:
        return False  # includes "null" (sandboxed frames, file: pages)
    host = _host_name(host_header)
    port_text = host_header[len(host) + (2 if host_header.startswith("[") else 0):].lstrip(":")
    host_port = int(port_text) if port_text.isdigit() else 80
    return parts.hostname.lower() == host.lower() and origin_port == host_port


def _host_name(header: str) -> str:
    """The name in a Host header: ``"[::1]:8080"`` -> ``"::1"``, ``"localhost:80"`` ->
    ``"localhost"``."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if ":" in header else header


def _bearer(header: str) -> str:
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""
