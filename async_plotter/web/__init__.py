"""Watch in a browser: a live page served by the render process (``Plotter(..., http=8080)``).

``address`` checks where to serve, ``feed`` passes the newest frames and status between threads,
``server`` is the HTTP server (MJPEG stream + server-sent events, and the recorded videos of a
folder for the page's history strip; ``sinks/http.py`` plugs it into the render process),
``page.html`` is the page, and ``client`` reads the streams from Python.
"""
