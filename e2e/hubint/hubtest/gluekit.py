"""What the glue's Python unit tests (e2e/hubint/*/glue_test.py) share: the glue executed as the Hub's config
executes it, and a fake gpuhub service on 127.0.0.1. hubtest.GlueUnit puts this directory on PYTHONPATH."""

import http.server
import json
import os
import socket
import threading

from tornado.httpclient import AsyncHTTPClient
from traitlets.config import Config

# z2jh's jupyterhub_config.py selects the curl client, whose request_timeout starts only when a request leaves
# the client's queue (the glue's timeouts are written for it); the tests call the glue with the same client.
AsyncHTTPClient.configure("tornado.curl_httpclient.CurlAsyncHTTPClient")

GLUE = os.environ.get("GPUHUB_GLUE", "../../../chart/gpuhub/files/gpuhub_hub_config.py")


def exec_glue(configure=None):
    """Runs the glue on a fresh Config, after configure(c) has set what the test's Hub config would; returns c."""
    c = Config()
    if configure is not None:
        configure(c)
    with open(GLUE) as f:
        exec(compile(f.read(), GLUE, "exec"), {"c": c})
    return c


class FakeService(http.server.ThreadingHTTPServer):
    """A gpuhub service the glue calls: each request goes to answer(handler, method, body), which returns the
    (status, answer) to send; a str answer is sent as is, anything else as JSON. Status None closes the connection
    with no answer (a service killed mid-request)."""

    request_queue_size = 64  # a burst of forms connects at once; the default 5 drops SYNs (1 s retries)

    def __init__(self, answer):
        self._respond = answer
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def _serve(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        status, answer = self.server._respond(self, method, body)
        if status is None:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            pass  # the glue gave up waiting (its timeout tests)

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def log_message(self, *args):
        pass
