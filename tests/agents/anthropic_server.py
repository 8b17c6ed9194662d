"""A scripted Anthropic Messages API server on 127.0.0.1 for driving the real Claude Code.

Claude Code (``ANTHROPIC_BASE_URL``) sends its agent loop to ``POST /v1/messages`` (streaming SSE) and
a few side requests (token counts, a title, quota probes...). The server answers the agent loop from a
per-test script, one :class:`Turn` per request that carries tools, and everything else harmlessly; it
records every request so a test can assert what the model was told (e.g. a deny reason reached it).

Bounded: the server runs in a daemon thread for the duration of a ``with`` block; every request is
handled within that block or refused once it has closed.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.agents.loopback import Loopback

MODEL = "claude-sonnet-4-5"


@dataclass
class ToolUse:
    """One tool_use block the scripted model asks for; ``id`` is made up when not given."""

    name: str
    input: dict[str, Any]
    id: str = field(default_factory=lambda: "toolu_" + secrets.token_hex(12))


@dataclass
class Turn:
    """One scripted answer of the model: some text, then tool uses (stop_reason tool_use) or none."""

    text: str = ""
    tools: list[ToolUse] = field(default_factory=list)


def write(path: str, content: str) -> Turn:
    """A turn asking for one Write."""
    return Turn(tools=[ToolUse("Write", {"file_path": path, "content": content})])


def edit(path: str, old: str, new: str) -> Turn:
    """A turn asking for one Edit."""
    return Turn(tools=[ToolUse("Edit", {"file_path": path, "old_string": old, "new_string": new})])


def bash(command: str, description: str = "run a command") -> Turn:
    """A turn asking for one Bash call."""
    return Turn(tools=[ToolUse("Bash", {"command": command, "description": description})])


def read(path: str) -> Turn:
    """A turn asking for one Read."""
    return Turn(tools=[ToolUse("Read", {"file_path": path})])


@dataclass
class Request:
    """One request the server received: method, path and decoded JSON body (None when not JSON)."""

    method: str
    path: str
    body: Any

    @property
    def is_agent_turn(self) -> bool:
        """True for the agent loop's requests (they offer tools); side requests offer none."""
        return isinstance(self.body, dict) and bool(self.body.get("tools"))

    def tool_results(self) -> dict[str, dict[str, Any]]:
        """The tool_result blocks of the request's messages, by tool_use_id."""
        out: dict[str, dict[str, Any]] = {}
        for message in (self.body or {}).get("messages", []):
            content = message.get("content")
            if isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        out[str(block.get("tool_use_id"))] = block
        return out


def result_text(block: dict[str, Any]) -> str:
    """The text of one tool_result block (its content is a string or a list of text blocks)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class ModelServer:
    """The server: ``with ModelServer(turns) as server:`` then point ``ANTHROPIC_BASE_URL`` at ``server.url``.

    ``turns`` answer the agent loop's requests in order; each is a :class:`Turn` or a function of the
    :class:`Request` returning one. When the script runs out, the model ends its turn with "Done.".
    """

    def __init__(self, turns: list[Turn | Callable[[Request], Turn]] | None = None) -> None:
        self.turns = list(turns or [])
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        self._next = 0
        self._loop: Loopback | None = None
        self._closed = threading.Event()
        self._made: list[ToolUse] = []

    # -- what the tests read -------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL for ``ANTHROPIC_BASE_URL``."""
        assert self._loop is not None
        return f"http://127.0.0.1:{self._loop.port}"

    def agent_requests(self) -> list[Request]:
        """The agent loop's requests, in order."""
        with self.lock:
            return [r for r in self.requests if r.is_agent_turn]

    def side_requests(self) -> list[Request]:
        """Every other request (token counts, titles, probes...)."""
        with self.lock:
            return [r for r in self.requests if not r.is_agent_turn]

    def tool_result(self, tool_use_id: str) -> dict[str, Any] | None:
        """The tool_result Claude Code sent back for a tool use, or None when it never did."""
        for request in reversed(self.agent_requests()):
            found = request.tool_results().get(tool_use_id)
            if found is not None:
                return found
        return None

    def tool_uses(self) -> list[ToolUse]:
        """Every tool use the script handed out so far."""
        with self.lock:
            done = self.turns[: self._next]
        return [tool for turn in done if isinstance(turn, Turn) for tool in turn.tools] + self._made

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> ModelServer:
        self._loop = Loopback(_handler(self)).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        assert self._loop is not None
        self._loop.stop()

    # -- answering -----------------------------------------------------------------------------

    def next_turn(self, request: Request) -> Turn:
        """The script's next answer for an agent-loop request."""
        with self.lock:
            if self._next >= len(self.turns):
                return Turn(text="Done.")
            step = self.turns[self._next]
            self._next += 1
        if isinstance(step, Turn):
            return step
        turn = step(request)
        with self.lock:
            self._made.extend(turn.tools)
        return turn


def _blocks(turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    blocks += [{"type": "tool_use", "id": t.id, "name": t.name, "input": t.input} for t in turn.tools]
    if not blocks:
        blocks.append({"type": "text", "text": "OK."})
    return blocks


def _message(turn: Turn, model: str) -> dict[str, Any]:
    return {
        "id": "msg_" + secrets.token_hex(12),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(turn),
        "stop_reason": "tool_use" if turn.tools else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 8},
    }


def _sse(turn: Turn, model: str) -> Iterator[bytes]:
    """The SSE events of one streamed message (the shape of the Messages API's streaming)."""

    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    message = _message(turn, model)
    blocks = message.pop("content")
    stop_reason = message.pop("stop_reason")
    yield event("message_start", {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}})
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield event("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        yield event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield event("content_block_stop", {"type": "content_block_stop", "index": index})
    yield event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 8},
        },
    )
    yield event("message_stop", {"type": "message_stop"})


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            pass  # requests are recorded in server.requests, not printed

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(min(length, 64 * 1024 * 1024)) if length else b""
            try:
                return json.loads(raw) if raw else None
            except ValueError:
                return None

        def _json(self, status: int, data: Any) -> None:
            payload = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _record(self, body: Any) -> Request:
            request = Request(self.command, self.path, body)
            with server.lock:
                server.requests.append(request)
            return request

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self._record(None)
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not scripted"}})

        def do_HEAD(self) -> None:  # noqa: N802
            self._record(None)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            body = self._body()
            request = self._record(body)
            if server._closed.is_set():
                self._json(503, {"type": "error", "error": {"type": "overloaded_error", "message": "closed"}})
                return
            path = self.path.split("?", 1)[0]
            if path.endswith("/count_tokens"):
                self._json(200, {"input_tokens": 42})
                return
            if not path.endswith("/v1/messages"):
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not scripted"}})
                return
            model = str((body or {}).get("model") or MODEL)
            turn = server.next_turn(request) if request.is_agent_turn else Turn(text="Sandbox test")
            if not (isinstance(body, dict) and body.get("stream")):
                self._json(200, _message(turn, model))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for chunk in _sse(turn, model):
                self.wfile.write(chunk)
                self.wfile.flush()
            self.close_connection = True

    return Handler
