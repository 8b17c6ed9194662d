"""An HTTP server of ours on 127.0.0.1 (a free port) in a daemon thread: what each scripted model
server (Anthropic's, Gemini's, the Responses API) serves its script on."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Loopback:
    """``start()`` serves ``handler`` on 127.0.0.1 until ``stop()``; ``port`` is where."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        """The port the kernel chose."""
        return int(self.httpd.server_address[1])

    def start(self) -> Loopback:
        """Serve in the background."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the socket, and wait (bounded) for the thread."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
