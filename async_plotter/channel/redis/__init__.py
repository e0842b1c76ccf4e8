"""Parameters, structures and metrics over a Redis server, for viewers on other machines: the
trainer's writer, the worker's reader, the viewer's watcher, the wire format and its checks,
signing, connections, URLs, refusals and ACL roles. Nothing here imports the worker; only
``redis`` (the ``[redis]`` extra) is needed beyond numpy.
"""
