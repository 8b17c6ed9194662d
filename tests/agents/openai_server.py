"""A scripted OpenAI Responses API server on 127.0.0.1 for driving the real Codex CLI in tests.

Codex talks to a custom model provider (``[model_providers.X]`` with ``base_url`` and
``wire_api = "responses"`` in its ``config.toml``) with ``POST {base_url}/responses``: a JSON body
(``model``, ``instructions``, ``input`` items, ``tools``, ``stream: true``...) answered by server-sent
events, one JSON object per ``data:`` line whose ``type`` is ``response.created``,
``response.output_item.added`` / ``response.output_item.done`` (an ``item``: a ``message`` with
``output_text`` content or a ``function_call`` with ``call_id``, ``name`` and JSON-string
``arguments``), ``response.output_text.delta`` and finally ``response.completed`` (Codex treats a
stream that ends without it as an error and retries). The tool results come back in the next
request's ``input`` as ``function_call_output`` items carrying the same ``call_id``.

The server answers each ``/responses`` request with the next turn of its script; when the script is
exhausted it answers with a short text so Codex ends its turn. ``GET .../models`` (the model list
Codex may ask a provider for) gets an empty list; anything else a 404. Given as ``HTTPS_PROXY``
too, it refuses every ``CONNECT`` (and plain proxied request) and records it, so a test sees any
attempt to reach the internet. Every request is recorded (method, path, decoded JSON body) for the
test to assert on, e.g. which tools Codex offered.

Bounded: the server thread stops with the ``with`` block, and bodies above 32 MiB are refused.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.agents.loopback import Loopback

MAX_BODY = 32 * 1024 * 1024
DONE_TEXT = "Done."
MODEL = "gpt-test"


@dataclass
class FunctionCall:
    """One function call the scripted model makes; ``call_id`` is made up when not given."""

    name: str
    arguments: dict[str, Any]
    call_id: str = field(default_factory=lambda: "call_" + secrets.token_hex(8))
    namespace: str | None = None
    custom_input: str | None = None  # a free-form (custom_tool_call) tool's input instead of JSON arguments


@dataclass
class Turn:
    """One scripted answer: some text, then function calls (or none, which ends Codex's turn)."""

    text: str = ""
    calls: list[FunctionCall] = field(default_factory=list)


def call(name: str, **arguments: Any) -> Turn:
    """A turn that makes one function call."""
    return Turn(calls=[FunctionCall(name, dict(arguments))])


def custom(name: str, text: str) -> Turn:
    """A turn that calls one free-form tool (e.g. Codex's code-mode ``exec``, whose input is JavaScript)."""
    return Turn(calls=[FunctionCall(name, {}, custom_input=text)])


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    #: When it arrived (``time.monotonic()``): how long an agent took to its first request.
    at: float = field(default_factory=time.monotonic)

    @property
    def is_turn(self) -> bool:
        """True for the agent loop's model requests (``POST .../responses``)."""
        return self.method == "POST" and self.path.split("?", 1)[0].endswith("/responses")

    def tool_names(self) -> list[str]:
        """The names of the tools the request offers the model (function tools and namespaced ones)."""
        names: list[str] = []
        for tool in (self.body or {}).get("tools", []) or []:
            if not isinstance(tool, dict):
                continue
            if tool.get("name"):
                names.append(str(tool["name"]))
            for inner in tool.get("tools", []) or []:  # a namespace of tools (e.g. one MCP server's)
                if isinstance(inner, dict) and inner.get("name"):
                    names.append(f"{tool.get('name', '')}{inner['name']}")
        return names

    def outputs(self) -> dict[str, Any]:
        """The ``function_call_output`` items of the request's input, by call_id."""
        out: dict[str, Any] = {}
        for item in (self.body or {}).get("input", []) or []:
            if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
                out[str(item.get("call_id"))] = item.get("output")
        return out


def output_text(output: Any) -> str:
    """The text of a ``function_call_output``'s output (a string or a list of content items)."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return output_text(output.get("content", output.get("text", "")))
    if isinstance(output, list):
        return "\n".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
    return ""


@dataclass
class ResponsesServer:
    """The script, the recorded requests and the address: ``with ResponsesServer(turns) as server:``."""

    turns: list[Turn]
    requests: list[Recorded] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: int = 0
    _loop: Loopback | None = None
    _closed: threading.Event = field(default_factory=threading.Event)

    @property
    def base_url(self) -> str:
        """What the provider's ``base_url`` should be (Codex appends ``/responses``)."""
        assert self._loop is not None
        return f"http://127.0.0.1:{self._loop.port}/v1"

    @property
    def proxy_url(self) -> str:
        """The same server as an HTTP(S) proxy that refuses everything (``HTTPS_PROXY``): what else was asked for."""
        assert self._loop is not None
        return f"http://127.0.0.1:{self._loop.port}"

    def model_requests(self) -> list[Recorded]:
        """The recorded ``/responses`` requests, in order."""
        with self._lock:
            return [r for r in self.requests if r.is_turn]

    def output(self, call_id: str) -> Any:
        """What Codex sent back to the model for one function call, or None when it never did."""
        for request in reversed(self.model_requests()):
            found = request.outputs()
            if call_id in found:
                return found[call_id]
        return None

    def next_turn(self) -> Turn:
        """The script's next answer (a short text once it is exhausted)."""
        with self._lock:
            if self._next >= len(self.turns):
                return Turn(text=DONE_TEXT)
            self._next += 1
            return self.turns[self._next - 1]

    def __enter__(self) -> ResponsesServer:
        self._loop = Loopback(_handler(self)).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        assert self._loop is not None
        self._loop.stop()


def events(turn: Turn, model: str) -> Iterator[dict[str, Any]]:
    """The Responses API stream events of one scripted turn, in order."""
    response_id = "resp_" + secrets.token_hex(8)
    base = {"id": response_id, "object": "response", "model": model, "status": "in_progress", "output": []}
    yield {"type": "response.created", "response": base}
    items: list[dict[str, Any]] = []
    if turn.text:
        item_id = "msg_" + secrets.token_hex(8)
        index = len(items)
        message = {"type": "message", "id": item_id, "role": "assistant", "status": "completed"}
        yield {"type": "response.output_item.added", "output_index": index, "item": {**message, "content": []}}
        yield {
            "type": "response.output_text.delta",
            "item_id": item_id,
            "output_index": index,
            "content_index": 0,
            "delta": turn.text,
        }
        done = {**message, "content": [{"type": "output_text", "text": turn.text, "annotations": []}]}
        yield {"type": "response.output_item.done", "output_index": index, "item": done}
        items.append(done)
    for fc in turn.calls:
        index = len(items)
        item: dict[str, Any] = {"id": "fc_" + secrets.token_hex(8), "call_id": fc.call_id, "name": fc.name}
        if fc.custom_input is not None:
            item.update(type="custom_tool_call", input=fc.custom_input, status="completed")
        else:
            item.update(type="function_call", arguments=json.dumps(fc.arguments), status="completed")
        if fc.namespace is not None:
            item["namespace"] = fc.namespace
        yield {"type": "response.output_item.added", "output_index": index, "item": item}
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
        items.append(item)
    usage = {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 8,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 20,
    }
    yield {"type": "response.completed", "response": {**base, "status": "completed", "output": items, "usage": usage}}


def _handler(server: ResponsesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 30

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            pass  # requests are recorded in server.requests, not printed

        def _record(self, body: Any) -> Recorded:
            request = Recorded(self.command, self.path, body, {k.lower(): v for k, v in self.headers.items()})
            with server._lock:
                server.requests.append(request)
            return request

        def _json(self, status: int, data: Any) -> None:
            payload = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self._record(None)
            if self.path.split("?", 1)[0].endswith("/models"):
                self._json(200, {"object": "list", "data": [], "models": []})
                return
            self._json(404, {"error": {"message": "not scripted", "type": "not_found"}})

        def do_CONNECT(self) -> None:  # noqa: N802 - a client using the server as its HTTPS proxy
            self._record(None)
            self._json(403, {"error": {"message": "no network in tests", "type": "forbidden"}})
            self.close_connection = True

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._json(413, {"error": {"message": "too large", "type": "invalid_request_error"}})
                return
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            request = self._record(body)
            if server._closed.is_set():
                self._json(503, {"error": {"message": "closed", "type": "server_error"}})
                return
            if not request.is_turn:
                self._json(404, {"error": {"message": "not scripted", "type": "not_found"}})
                return
            model = str((body or {}).get("model") or MODEL)
            turn = server.next_turn()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in events(turn, model):
                self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True

    return Handler
