"""A real HTTP server on 127.0.0.1 (ephemeral port, one thread per request)
that serves scripted answers and records what it was asked.

G8's tests point ``--spark-github-url`` at it: the request goes through the
real socket, urllib and our redirect/size/time handling, with nothing mocked.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ISSUES_PATH = "/repos/NVIDIA/dgx-spark-playbooks/issues"


@dataclass
class Answer:
    """What the server does for one path.

    ``body`` is sent after ``delay`` seconds; ``silent`` accepts the request
    and never answers; ``trickle`` sends the headers, then one byte every
    ``trickle`` seconds; ``stream`` sends ``stream`` bytes with no
    Content-Length (unless ``length`` says otherwise).
    """

    status: int = 200
    body: bytes = b"[]"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    silent: bool = False
    trickle: float = 0.0
    stream: int = 0
    length: int | None = None
    echo_auth: bool = False


@dataclass
class Seen:
    path: str
    headers: dict[str, str]


class LocalServer:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.answers: dict[str, Answer | Callable[[LocalServer], Answer]] = {}
        self.seen: list[Seen] = []
        self.stop = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep the test output clean
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                server.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}))
                answer = server.answers.get(path, Answer(status=404, body=b'{"message": "Not Found"}'))
                if callable(answer):
                    answer = answer(server)
                try:
                    server.respond(self, answer)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass

        self.httpd = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False  # type: ignore[attr-defined]
        self.host = host
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def respond(self, handler: http.server.BaseHTTPRequestHandler, a: Answer) -> None:
        if a.silent:
            self.stop.wait(30)
            return
        if a.delay:
            self.stop.wait(a.delay)
        body = a.body
        if a.echo_auth:
            body = body.replace(b"{auth}", handler.headers.get("Authorization", "").encode())
        handler.send_response(a.status)
        for name, value in a.headers.items():
            handler.send_header(name, value)
        if a.stream:
            if a.length is not None:
                handler.send_header("Content-Length", str(a.length))
            handler.end_headers()
            block = b" " * (1 << 20)
            sent = 0
            while sent < a.stream and not self.stop.is_set():
                handler.wfile.write(block)
                sent += len(block)
            return
        handler.send_header("Content-Type", "application/json; charset=utf-8")
        handler.send_header("Content-Length", str(a.length if a.length is not None else len(body)))
        handler.end_headers()
        if a.trickle:
            for byte in body:
                if self.stop.is_set():
                    return
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(a.trickle)
            return
        handler.wfile.write(body)

    def requests_to(self, path: str = ISSUES_PATH) -> list[Seen]:
        return [s for s in self.seen if s.path.split("?", 1)[0] == path]

    def __enter__(self) -> LocalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
