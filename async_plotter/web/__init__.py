"""Watch in a browser: a live page served by the render process (``Plotter(..., http=8080)``).

``address`` checks where to serve, ``feed`` passes the newest frames and status between threads,
``server`` is the HTTP server (MJPEG stream + server-sent events; ``sinks/http.py`` plugs it into
the render process), ``page.html`` is the page, ``videos`` lists and sends the recorded videos of a folder
(the page's history strip), and ``client`` reads the streams from Python.
"""
