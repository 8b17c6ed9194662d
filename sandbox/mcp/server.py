"""``sandbox mcp``: the run's tools as a Model Context Protocol server (the official ``mcp`` SDK).

:func:`build` makes an ``MCPServer`` whose tools call a :class:`~sandbox.mcp.workspace.Workspace`,
one registering function per tool group (as the workspace is one mixin per group);
:func:`serve_stdio` and :func:`serve_http` run it. Each tool body runs in a worker thread (the
recorder and the commands block), one at a time (the workspace's lock).

The stdio transport reads a pipe of ours, fed by a thread from the client's pipe, so the end of
that pipe (the client exited or was killed) is seen the moment it happens, even while a tool runs: running
commands are then stopped and their calls left ``started``, exactly as a crash leaves them, for
``sandbox resume`` to report as ``uncertain``. Over HTTP a dropped connection is not the end of a
session (the client may reconnect), so a call runs to its end there.

This module imports the SDK; nothing else in the package does, so only ``sandbox mcp`` pays for it.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar, cast

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from sandbox.errors import SandboxError, UsageError, damaged_object
from sandbox.mcp.state import Abandoned
from sandbox.mcp.workspace import Workspace
from sandbox.store.objects import DamagedObjectError

T = TypeVar("T")

Idem = Literal["idempotent", "conditional", "non_idempotent"]
Replay = Literal["auto", "ask", "never"]

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_EDIT = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
_ACT = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

INSTRUCTIONS = """\
Every tool here works inside a sandbox run: an isolated copy (worktree) of the user's repository.
Nothing you do reaches the user's files: each change is recorded in the run's ledger as one call,
and the user reviews it (sandbox diff) and brings it into their tree (sandbox apply) themselves.

Start with start_run (or open_run with a run id you were given; list_runs shows them) unless the
server was started with a run. Then use read_file, write_file, edit_file, list_files and search for
files, and run_command for shell commands (confined to the worktree, no network unless the user
allowed it). Paths are relative to the worktree (absolute paths inside it are accepted too).
show_diff and show_log show what the run has done so far; checkpoint saves your progress; after an
interruption, resume_report says which calls are uncertain and must not be repeated blindly.

You cannot apply, undo or drop a run from here: those act on the user's own tree or discard work,
so they stay with the user ('sandbox apply', 'sandbox undo', 'sandbox drop' on their command line).
When you are done, tell the user the run id and suggest they review it with 'sandbox diff RUN'.
"""


def _failed(answer: Mapping[str, object]) -> CallToolResult:
    """``answer`` as a tool result marked ``isError``: the text (JSON) and the same structured content."""
    import json

    text = json.dumps(answer, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=dict(answer), is_error=True)


async def _call(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a workspace method in a worker thread; a :class:`SandboxError` becomes the tool's error.

    A cancelled request does not wait for the thread (``abandon_on_cancel``): the worker goes on
    to its end by itself (a command sees the cancellation and stops, see :meth:`Workspace.cancel`).
    """
    try:
        return await anyio.to_thread.run_sync(functools.partial(func, *args, **kwargs), abandon_on_cancel=True)
    except SandboxError as exc:
        raise ToolError(exc.message) from None
    except DamagedObjectError as exc:
        raise ToolError(damaged_object(exc)) from None
    except Abandoned as exc:
        raise ToolError(f"Abandoned: {exc}; the call is left unfinished for 'sandbox resume'.") from None


async def _read(func: Callable[..., T], *args: Any) -> T:
    """:func:`_call` for a resource: its error is the resource's (the SDK would say only "Error reading
    resource" of a tool's error, and log it as a crash)."""
    try:
        return await _call(func, *args)
    except ToolError as exc:
        raise ResourceError(str(exc)) from None


def _request_id(ctx: Context) -> str | None:
    try:
        return ctx.request_id
    except (AttributeError, ValueError, LookupError):
        return None


def _client_meta(ctx: Context) -> tuple[str | None, str | None]:
    """(the client's id of this tool call, its session id) from the request's ``_meta``, when given.

    Codex 0.171 sends ``callId`` (the model's ``call_id``) and ``sessionId`` (its session, the
    rollout file's id) with every ``tools/call``: the call is recorded under the model's id in that
    session, so the run's ledger maps onto Codex's conversation (:mod:`sandbox.agent.sessions`).
    """
    try:
        meta: Any = ctx.request_context.meta
    except (AttributeError, ValueError, LookupError):
        return None, None
    if meta is not None and not isinstance(meta, dict):
        meta = getattr(meta, "model_extra", None) or {}
    if not isinstance(meta, dict):
        return None, None
    call, session = meta.get("callId"), meta.get("sessionId")
    return (call if isinstance(call, str) else None), (session if isinstance(session, str) else None)


def build(ws: Workspace, *, network: bool = False) -> MCPServer[Any]:
    """The MCP server over ``ws``: its tools, its resources and its instructions."""
    from sandbox.mcp.recovery_tools import register as register_recovery

    server: MCPServer[Any] = MCPServer(
        name="sandbox",
        title="sandbox: an isolated, recorded run of your repository",
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )
    _run_tools(server, ws)
    _file_tools(server, ws)
    _find_tools(server, ws)
    _command_tools(server, ws, network=network)
    _review_tools(server, ws)
    _resources(server, ws)
    register_recovery(server, ws, _call, _read)  # rewind, and the conversations a run holds
    return server


def _run_tools(server: MCPServer[Any], ws: Workspace) -> None:
    """start_run, open_run, list_runs (:mod:`sandbox.mcp.runs`)."""

    # -- runs ------------------------------------------------------------------------------

    @server.tool(
        description=(
            "Start a new sandbox run: a snapshot of the user's working tree (uncommitted and untracked files "
            "included) in an isolated worktree. Every later tool works in it. Returns the run id and worktree."
        ),
        annotations=_ACT,
    )
    async def start_run(
        label: Annotated[str | None, Field(description="A short label to recognise the run by.")] = None,
    ) -> dict[str, object]:
        return dict(await _call(ws.start_run, label))

    @server.tool(
        description=(
            "Work in an existing run (its id, its label, or a unique prefix of its id, from list_runs). "
            "Returns its worktree."
        ),
        annotations=_ACT,
    )
    async def open_run(
        run_id: Annotated[str, Field(description="The run id, its label, or a unique prefix of the id.")],
    ) -> dict[str, object]:
        return dict(await _call(ws.open_run, run_id))

    @server.tool(
        description="List the runs of this repository, with their labels and number of calls.", annotations=_READ
    )
    async def list_runs() -> dict[str, object]:
        return {"runs": await _call(ws.list_runs)}


def _file_tools(server: MCPServer[Any], ws: Workspace) -> None:
    """read_file, write_file, edit_file (:mod:`sandbox.mcp.files`)."""

    @server.tool(
        description=(
            "Read a text file of the run's worktree. Lines come numbered (number, tab, text); read a long file "
            "in parts with offset and limit (files over 10 MiB are refused). Paths are relative to the worktree."
        ),
        annotations=_READ,
        structured_output=False,
    )
    async def read_file(
        path: Annotated[str, Field(description="File path, relative to the worktree.")],
        offset: Annotated[int, Field(description="First line to read, counted from 1.", ge=1)] = 1,
        limit: Annotated[int | None, Field(description="How many lines to read (default and most: 2000).")] = None,
    ) -> str:
        return await _call(ws.read_file, path, offset, limit)

    @server.tool(
        description=(
            "Create or overwrite a file in the run's worktree with the given content (parent directories are "
            "created). Recorded as one call in the run's ledger; the user's own files are not touched."
        ),
        annotations=_WRITE,
    )
    async def write_file(
        path: Annotated[str, Field(description="File path, relative to the worktree.")],
        content: Annotated[str, Field(description="The whole new content of the file.")],
        ctx: Context,
    ) -> dict[str, object]:
        client_call, session = _client_meta(ctx)
        return dict(
            await _call(
                ws.write_file,
                path,
                content,
                request_id=_request_id(ctx),
                client_call=client_call,
                agent_session=session,
            )
        )

    @server.tool(
        description=(
            "Replace an exact string in a file of the run's worktree. old_string must occur exactly once (include "
            "enough surrounding lines to make it unique) unless replace_all is true; copy it exactly, whitespace "
            "and indentation included, without the line numbers read_file adds. Recorded as one call."
        ),
        annotations=_EDIT,
    )
    async def edit_file(
        path: Annotated[str, Field(description="File path, relative to the worktree.")],
        old_string: Annotated[str, Field(description="The exact text to replace.")],
        new_string: Annotated[str, Field(description="The text to put in its place.")],
        ctx: Context,
        replace_all: Annotated[bool, Field(description="Replace every occurrence, not just a unique one.")] = False,
    ) -> dict[str, object]:
        client_call, session = _client_meta(ctx)
        return dict(
            await _call(
                ws.edit_file,
                path,
                old_string,
                new_string,
                replace_all,
                request_id=_request_id(ctx),
                client_call=client_call,
                agent_session=session,
            )
        )


def _find_tools(server: MCPServer[Any], ws: Workspace) -> None:
    """list_files, search (:mod:`sandbox.mcp.find`)."""

    @server.tool(
        description=(
            "List a directory of the run's worktree (directories end with '/'), or with pattern, the files below "
            "it matching a glob ('*.py' matches at any depth, 'src/**/test_*.py', '?', '[abc]')."
        ),
        annotations=_READ,
        structured_output=False,
    )
    async def list_files(
        path: Annotated[str, Field(description="Directory, relative to the worktree ('.' for its top).")] = ".",
        pattern: Annotated[str | None, Field(description="A glob to find files below path.")] = None,
    ) -> str:
        return await _call(ws.list_files, path, pattern)

    @server.tool(
        description=(
            "Search file contents of the run's worktree for a regular expression (Python re, Perl-like syntax; "
            "files ignored by .gitignore are skipped). Answers 'path:line:text' lines, at most max_results."
        ),
        annotations=_READ,
        structured_output=False,
    )
    async def search(
        pattern: Annotated[str, Field(description="Regular expression to look for.")],
        path: Annotated[str, Field(description="Directory or file to search in, relative to the worktree.")] = ".",
        glob: Annotated[str | None, Field(description="Only files matching this glob, e.g. '*.py'.")] = None,
        ignore_case: Annotated[bool, Field(description="Match case-insensitively.")] = False,
        max_results: Annotated[int, Field(description="Most lines to answer (1-1000).", ge=1, le=1000)] = 200,
    ) -> str:
        return await _call(ws.search, pattern, path, glob, ignore_case, max_results)


def _command_tools(server: MCPServer[Any], ws: Workspace, *, network: bool) -> None:
    """run_command (:mod:`sandbox.mcp.commands`); ``network``: whether its commands have the network."""

    @server.tool(
        description=(
            "Run a shell command (/bin/sh -c) in the run's worktree and return its exit code and output (stdout "
            "and stderr together; long output keeps its start and end). It is confined: only the worktree is "
            "writable" + ("" if network else ", and there is no network") + ". Recorded as one call with every "
            "file it changed. Say whether running it twice is safe (idempotency) and whether a resume may run it "
            "again by itself (replay)."
        ),
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=network
        ),
    )
    async def run_command(
        command: Annotated[str, Field(description="The shell command, e.g. 'pytest -q tests/test_x.py'.")],
        ctx: Context,
        timeout_seconds: Annotated[
            float, Field(description="Kill the command after this many seconds (default 120, at most 3600).", gt=0)
        ] = 120.0,
        idempotency: Annotated[
            Idem, Field(description="idempotent: running it twice is harmless; conditional: depends; non_idempotent.")
        ] = "conditional",
        replay: Annotated[
            Replay, Field(description="auto: a resume may re-run it; ask: only after asking; never.")
        ] = "ask",
    ) -> dict[str, object]:
        client_call, session = _client_meta(ctx)
        call_id = ws.call_id_for(_request_id(ctx), client_call)
        try:
            result = await _call(
                ws.run_command, command, timeout_seconds, idempotency, replay, call_id=call_id, agent_session=session
            )
        except anyio.get_cancelled_exc_class():
            ws.cancel(call_id)  # the worker stops the command and records the call failed
            raise
        answer = result.to_json()
        if result.exit_code == 0 and result.status == "succeeded":
            return dict(answer)
        # A command that failed is a failed tool call for the client (isError), with the same answer;
        # the SDK passes a CallToolResult through as it is (the annotation keeps the output schema).
        return cast(dict[str, object], _failed(answer))


def _review_tools(server: MCPServer[Any], ws: Workspace) -> None:
    """show_log, show_diff, resume_report, checkpoint (:mod:`sandbox.mcp.review`)."""

    @server.tool(
        description="The run's ledger: every recorded call in order with its status and files, or one call in full.",
        annotations=_READ,
        structured_output=False,
    )
    async def show_log(
        call_id: Annotated[
            str | None,
            Field(description="Show this call in full: its id, '@' for the last call, '@~1' the one before."),
        ] = None,
    ) -> str:
        return await _call(ws.show_log, call_id)

    @server.tool(
        description=(
            "The run's changes as a unified diff against the snapshot it started from (or one call's changes), "
            "or with stat_only a per-file summary."
        ),
        annotations=_READ,
        structured_output=False,
    )
    async def show_diff(
        call_id: Annotated[
            str | None, Field(description="Only this call's changes (its id, or '@' for the last call).")
        ] = None,
        stat_only: Annotated[bool, Field(description="A per-file summary instead of the patch.")] = False,
    ) -> str:
        return await _call(ws.show_diff, call_id, stat_only)

    @server.tool(
        description=(
            "After an interruption (a crash, a lost connection): resume the run conservatively and report which "
            "calls are uncertain (they may or may not have taken effect), which must not be replayed, and a note "
            "on how to go on. Never repeats anything by itself."
        ),
        annotations=_ACT,
    )
    async def resume_report() -> dict[str, object]:
        return dict(await _call(ws.resume_report))

    @server.tool(
        description=(
            "Save a checkpoint of your progress in the run's ledger: a label, your step id, and any messages and "
            "state you want back after an interruption (resume_report returns the latest)."
        ),
        annotations=_ACT,
    )
    async def checkpoint(
        label: Annotated[str | None, Field(description="What this point is, e.g. 'tests pass'.")] = None,
        step_id: Annotated[str | None, Field(description="Your own id for the step just finished.")] = None,
        messages: Annotated[Any, Field(description="Conversation messages to keep (any JSON).")] = None,
        state: Annotated[Any, Field(description="Your working state to keep (any JSON).")] = None,
    ) -> dict[str, object]:
        return dict(await _call(ws.checkpoint, label, step_id, messages, state))


def _resources(server: MCPServer[Any], ws: Workspace) -> None:
    """The open run's diff and log, and any run's (:meth:`sandbox.mcp.review.ReviewTools.run_text`)."""

    @server.resource("sandbox://run/diff", name="diff", description="The open run's patch.", mime_type="text/x-diff")
    async def current_diff() -> str:
        return await _read(ws.show_diff)

    @server.resource("sandbox://run/log", name="log", description="The open run's ledger.", mime_type="text/plain")
    async def current_log() -> str:
        return await _read(ws.show_log)

    @server.resource(
        "sandbox://runs/{run_id}/diff", name="run-diff", description="A run's patch.", mime_type="text/x-diff"
    )
    async def run_diff(run_id: str) -> str:
        return await _read(ws.run_text, run_id, "diff")

    @server.resource(
        "sandbox://runs/{run_id}/log", name="run-log", description="A run's ledger.", mime_type="text/plain"
    )
    async def run_log(run_id: str) -> str:
        return await _read(ws.run_text, run_id, "log")


# -- transports ---------------------------------------------------------------------------------


def _relay(wire: int, inner: int, ws: Workspace) -> None:
    """Copy the client's pipe to the one the SDK reads, and tell the workspace the moment it ends."""
    try:
        while True:
            data = os.read(wire, 65536)
            if not data:
                break
            while data:
                data = data[os.write(inner, data) :]
    except OSError:
        pass  # the client's end or ours is gone: the same as its end
    finally:
        ws.disconnected.set()  # first: running commands stop, their calls stay unfinished
        os.close(inner)  # then the SDK sees the end and stops serving


def serve_stdio(ws: Workspace, *, network: bool = False) -> list[str]:
    """Serve on stdin/stdout until the client closes its end; the calls abandoned then (if any).

    The SDK reads a pipe of ours on fd 0, fed by a thread from the client's pipe, so the end of the
    client's pipe is seen while a tool runs (the SDK's own reader only notices between requests).
    The SDK points fd 0 at the null device and fd 1 at stderr while it serves: commands can
    neither read nor write the protocol.
    """
    server = build(ws, network=network)
    wire = os.dup(0)
    inner_r, inner_w = os.pipe()
    os.dup2(inner_r, 0)
    os.close(inner_r)
    threading.Thread(target=_relay, args=(wire, inner_w, ws), name="mcp-client-pipe", daemon=True).start()
    try:
        anyio.run(server.run_stdio_async)
    except Exception as exc:  # noqa: BLE001 - a task group wraps what its tasks raise
        if not (ws.disconnected.is_set() and _client_gone(exc)):
            raise
        # The SDK's writer flushed an answer (the abandoned call's) into the pipe the client closed:
        # the end of the session, not an error of ours.
    finally:
        abandoned = ws.abandon_all()
    return abandoned


def _client_gone(exc: BaseException) -> bool:
    """True when ``exc`` is a broken pipe, or a task group's errors that all are."""
    if isinstance(exc, BrokenPipeError | ConnectionResetError):
        return True
    inner: tuple[BaseException, ...] = getattr(exc, "exceptions", ())
    return bool(inner) and all(_client_gone(e) for e in inner)


def listen_http(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:``port``; 0 lets the system pick a free port (read it back with
    ``getsockname()``). Bound before the run starts, so a port in use costs nothing and the port the
    server announces is the one it holds (no window in which another process could take it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"Cannot serve MCP on 127.0.0.1:{port}: {exc.strerror or exc}. Choose another port, or 0 for a free one."
        ) from exc
    return sock


def serve_http(ws: Workspace, sock: socket.socket, token: str, *, network: bool = False) -> None:
    """Serve streamable HTTP on ``sock`` (from :func:`listen_http`; path ``/mcp``) until interrupted,
    to clients that send ``Authorization: Bearer TOKEN`` only.

    Loopback is not a boundary: any process of the machine reaches 127.0.0.1, a confined agent of
    another run with the network on included. The token is what makes a client this server's.
    """
    import uvicorn  # the SDK's own HTTP server (the SDK depends on it); only HTTP needs it

    server = build(ws, network=network)
    app = _BearerOnly(server.streamable_http_app(host="127.0.0.1"), token)
    config = uvicorn.Config(app, log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])


class _BearerOnly:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get a 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            import hmac

            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = b'{"error": "this server needs its bearer token (Authorization: Bearer ...)"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
