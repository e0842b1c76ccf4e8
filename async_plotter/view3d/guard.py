"""viser's server, started so that only our own front can talk to it.

viser serves its page and its WebSocket on one port and accepts a WebSocket handshake from any
Origin, with no credential: on 127.0.0.1 any web page the user opens could connect to it (a
browser lets scripts open WebSockets to any address), and any local user could. So it listens
on a free loopback port and refuses every request, HTTP or WebSocket, that does not carry a
secret header only this process knows. Browsers cannot put custom headers on a WebSocket
handshake, so only the live page's server, which proxies for authenticated browsers, gets in.

viser has no hook for this; its ``WebsockServer`` calls ``websockets.asyncio.server.serve`` with
its own ``process_request``. We wrap that function for the moment the server starts (its
thread has called ``serve`` once ``ViserServer()`` returns) and put it back right after. Should
a viser start its server later, the wrapper would miss it: so the front asks viser's port
without the secret before it proxies to it (``open_to_strangers``), and refuses to serve the 3D
view if it answers.
"""
import contextlib
import hmac
import http
import http.client
import io
import threading
from typing import Any, Iterator

#: the header our proxy adds to every request it forwards
SECRET_HEADER = "X-Async-Plotter-Internal"

_patch_lock = threading.Lock()


def start_guarded_viser(secret: str) -> Any:
    """A ``viser.ViserServer`` on a free 127.0.0.1 port that answers only requests carrying
    ``SECRET_HEADER: secret``; its banner is not printed and its share-URL tunnel is off."""
    import viser

    with _patch_lock, _guarded_serve(secret), contextlib.redirect_stdout(io.StringIO()):
        server = viser.ViserServer(host="127.0.0.1", port=0, verbose=False)
    # A client may ask viser for a public share URL (a tunnel through viser's servers): never.
    server.request_share_url = lambda *args, **kwargs: None
    return server


def open_to_strangers(port: int) -> str:
    """How viser's server on 127.0.0.1:``port`` answers a request without ``SECRET_HEADER``,
    if not with the refusal it should (``""``)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/")
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as error:
        return f"cannot be asked ({error!r})"
    finally:
        connection.close()
    return "" if status == http.HTTPStatus.FORBIDDEN else f"answers {status} without the secret"


@contextlib.contextmanager
def _guarded_serve(secret: str) -> Iterator[None]:
    import websockets.asyncio.server as ws_server
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    original = ws_server.serve
    expected = secret.encode("utf-8")

    def refuse() -> Any:
        return Response(http.HTTPStatus.FORBIDDEN, "Forbidden", Headers({"Content-Length": "0"}),
                        b"")

    def guarded(handler: Any, *args: Any, process_request: Any = None, **kwargs: Any) -> Any:

        def check(connection: Any, request: Any) -> Any:
            given = request.headers.get(SECRET_HEADER, "").encode("utf-8")
            if not hmac.compare_digest(given, expected):
                return refuse()
            return process_request(connection, request) if process_request else None

        return original(handler, *args, process_request=check, **kwargs)

    ws_server.serve = guarded
    try:
        yield
    finally:
        ws_server.serve = original
