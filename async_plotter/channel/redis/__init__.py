"""Parameters over a Redis server, for viewers on other machines.

``writer`` (the trainer's ``RedisWriter``), ``reader`` (the worker's ``RedisReader``), ``watcher``
(what a viewer follows: structure and metrics of one experiment, and the list of all), ``wire``
(byte layouts, keys, and the checks every payload passes), ``signing`` (HMAC tags and secrets),
``link`` (connections, bounded reads, reconnecting subscriptions), ``urls`` (checking and
redacting server URLs, TLS options included), ``refusals`` (what the server refuses by design,
said naming the fix), ``acl`` (the commands, keys and channels each side needs: its ACL role) and
``probed`` (the checks made before, while and after downloading a structure or update).
Nothing here imports the worker; only ``redis`` (the ``[redis]`` extra) is needed beyond numpy.
"""
