"""A scripted Gemini API server on 127.0.0.1 for driving the real Gemini CLI in tests.

Gemini CLI takes its model server from ``GOOGLE_GEMINI_BASE_URL`` (with ``GEMINI_API_KEY``) and
calls ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` for the conversation (server-sent
events, one ``GenerateContentResponse`` JSON per ``data:`` line) and ``:generateContent`` /
``:countTokens`` for side requests. The server answers each conversation request with the next
turn of its script; a turn is a list of parts (``{"functionCall": {"name", "args"}}`` or
``{"text": ...}``), and when the script is exhausted it answers with a short text so the CLI ends
its turn. Side requests get harmless answers. Every request is recorded (path + decoded JSON) for
the test to assert on, e.g. that the model was told a denial's reason.

Bounded: the server thread stops with the ``with`` block, requests time out after 30 s, and bodies
above 32 MiB are refused.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.agents.loopback import Loopback

MAX_BODY = 32 * 1024 * 1024
DONE_TEXT = "Done."
SIDE_ANSWER = {"complexity_reasoning": "scripted test", "complexity_score": 1, "next_speaker": "user", "reasoning": ""}


def call(name: str, **args: Any) -> list[dict[str, Any]]:
    """A turn that makes one function call."""
    return [{"functionCall": {"name": name, "args": args}}]


def text(message: str) -> list[dict[str, Any]]:
    """A turn that answers with text only (ends the CLI's turn)."""
    return [{"text": message}]


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    body: Any


@dataclass
class GeminiServer:
    """The script, the recorded requests and the address (see the module docstring)."""

    turns: list[list[dict[str, Any]]]
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: int = 0

    @property
    def base_url(self) -> str:
        """What ``GOOGLE_GEMINI_BASE_URL`` should be."""
        return f"http://127.0.0.1:{self.port}"

    def conversation(self) -> list[Recorded]:
        """The recorded conversation requests (streamGenerateContent), in order."""
        return [r for r in self.requests if ":streamGenerateContent" in r.path]

    def function_responses(self) -> list[dict[str, Any]]:
        """Every functionResponse part the CLI sent back to the model, in order, without repeats."""
        seen: list[dict[str, Any]] = []
        for req in self.conversation():
            for content in (req.body or {}).get("contents", []):
                for part in content.get("parts", []):
                    response = part.get("functionResponse")
                    if response is not None and response not in seen:
                        seen.append(response)
        return seen

    def next_turn(self) -> list[dict[str, Any]]:
        """The next scripted turn (a closing text once the script is exhausted)."""
        with self._lock:
            if self._next < len(self.turns):
                turn = self.turns[self._next]
                self._next += 1
                return turn
        return text(DONE_TEXT)


def _response(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-2.5-pro",
    }


def _handler(server: GeminiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = 30
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read server.requests
            pass

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise ValueError("request body too large")
            raw = self.rfile.read(length) if length else b""
            try:
                return json.loads(raw) if raw else None
            except ValueError:
                return raw.decode(errors="replace")

        def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            server.requests.append(Recorded("GET", self.path, None))
            self._send(200, {})

        def do_POST(self) -> None:
            try:
                body = self._body()
            except ValueError:
                self._send(413, {"error": {"code": 413, "message": "too large"}})
                return
            server.requests.append(Recorded("POST", self.path, body))
            path = self.path.split("?", 1)[0]
            if path.endswith(":streamGenerateContent"):
                event = json.dumps(_response(server.next_turn()))
                self._send(200, f"data: {event}\r\n\r\n".encode(), "text/event-stream")
            elif path.endswith(":generateContent"):
                # Side requests (the model router's classifier, next-speaker checks, summaries):
                # one JSON answer that satisfies the ones Gemini CLI 0.61 validates.
                self._send(200, _response(text(json.dumps(SIDE_ANSWER))))
            elif path.endswith(":countTokens"):
                self._send(200, {"totalTokens": 10})
            else:
                self._send(200, {})

    return Handler


@contextmanager
def serve(turns: list[list[dict[str, Any]]]) -> Iterator[GeminiServer]:
    """Run a scripted server for the ``with`` block."""
    state = GeminiServer(turns=list(turns))
    loop = Loopback(_handler(state))
    state.port = loop.port
    loop.start()
    try:
        yield state
    finally:
        loop.stop()
