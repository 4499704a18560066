"""A recording reverse proxy for the client tests: real clients talk to it, it forwards to
``es-rag serve`` unchanged and keeps each request's method, path and JSON body, so that the
golden-body suite holds what the clients really sent (tests/fixtures/es_bodies)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

_HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


class Recorder:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                recorder._keep(self.command, self.path, self.headers, raw)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                with httpx.Client(timeout=120) as http:
                    answer = http.request(
                        self.command, recorder.upstream + self.path, headers=headers, content=raw
                    )
                self.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in _HOP | {"content-encoding"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(answer.content)

            do_GET = do_POST = do_HEAD = do_OPTIONS = do_PUT = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _keep(self, method: str, path: str, headers: Any, raw: bytes) -> None:
        body: Any = None
        if raw:
            text = raw.decode("utf-8", "replace")
            try:
                body = json.loads(text)
            except json.JSONDecodeError:  # _msearch: newline-delimited JSON
                body = [json.loads(line) for line in text.splitlines() if line.strip()]
        with self._lock:
            self.requests.append(
                {
                    "method": method,
                    "path": path,
                    "content_type": headers.get("content-type"),
                    "user_agent": headers.get("user-agent"),
                    "body": body,
                }
            )

    def searches(self) -> list[dict[str, Any]]:
        """The ``_search`` requests with a body."""
        return [r for r in self.requests if "/_search" in r["path"] and r["body"] is not None]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
