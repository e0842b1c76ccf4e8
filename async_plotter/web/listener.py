"""The live page's listening socket: bound once, in the trainer, for the plotter's whole life.

The page's server runs in the render process, which the supervisor restarts after a crash or a
kill. Were the server to bind its own socket, ``http=0`` would pick another port at every restart
and the tab the user has open would go dead. So the supervisor binds the address once
(``WorkerSupervisor``) and hands the socket to each render process it starts; connections made
while none runs wait in the socket's backlog and are served by the next one. Same address, same
token, and an open page reconnects by itself (``page.html``).
"""
import socket

from async_plotter.web.address import HttpConfig

#: connections the kernel queues for the server (it caps the number at net.core.somaxconn)
LISTEN_BACKLOG = 1024


def bind_listener(config: HttpConfig, what: str = "the live page") -> socket.socket:
    """A socket listening on ``config``'s address (``port=0``: a free one), non-blocking.

    Raises:
        OSError: the address cannot be bound (taken, not this machine's), with a message that
            names it and what to do.
    """
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        # A restarted plotter gets its port back at once (connections of the last one may be
        # in TIME_WAIT).
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((config.host, config.port))
        listener.listen(LISTEN_BACKLOG)
        listener.setblocking(False)
    except OSError as error:
        listener.close()
        raise OSError(
            error.errno, f"cannot serve {what} on {join_host_port(config.host, config.port)}: "
            f"{error.strerror or error}. Choose another port, or http=0 for a free one.") from error
    return listener


def join_host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
