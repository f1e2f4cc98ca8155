"""Real receivers for the alert tests: a webhook (apprise's json:// posts to it) and a /metrics reader."""

from __future__ import annotations

import json
import queue
import re
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Webhook:
    """A local HTTP receiver: every POSTed JSON body lands in `posts`, in arrival order."""

    def __init__(self) -> None:
        self.posts: queue.Queue[dict[str, Any]] = queue.Queue()
        self.raw: list[bytes] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.raw.append(body)
                outer.posts.put(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/hook"

    def next(self, timeout: float) -> dict[str, Any]:
        return self.posts.get(timeout=timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def scrape(url: str) -> dict[str, float]:
    """`/metrics` as {'name{labels}': value} (the text format's sample lines)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            found[key] = float(value)
    return found


METRICS_URL = re.compile(r"metrics on (http://\S+/metrics)")
