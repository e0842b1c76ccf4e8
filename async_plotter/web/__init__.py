"""The live page (``Plotter(..., http=8080)``), served by the render process: where it is served,
frames and status between threads, the HTTP server and page, and a client for its streams.
"""
