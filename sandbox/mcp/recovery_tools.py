"""MCP tools for going back: ``rewind`` (files to just before a call) and the run's stored conversations.

``resume_report`` (in :mod:`sandbox.mcp.server`) gives any client the resume note after a crash;
``rewind`` puts the open run's files back to just before a call, as ``sandbox rewind`` does (a
forward event in the ledger), and answers which calls the client should drop from its own history
(an MCP client keeps its conversation itself: the server cannot fork it) and which of them may have
acted outside the worktree. The resource ``sandbox://runs/{run_id}/conversations`` lists the agent
conversations a run holds (``sandbox run`` stores them; ``sandbox resume RUN --continue`` uses them).

Registered by :func:`register` with one line in :func:`sandbox.mcp.server.build`; no SDK import here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from sandbox.mcp.workspace import Workspace

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


def register(
    server: MCPServer[Any], ws: Workspace, call: Callable[..., Awaitable[Any]], read: Callable[..., Awaitable[Any]]
) -> None:
    """Add the tools and resource of this module to ``server`` (an ``MCPServer``), working on ``ws``: ``call``
    runs a tool's function, ``read`` a resource's (its refusal is the resource's error, said whole)."""

    @server.tool(
        description=(
            "Rewind the open run to just before a call (its id, or any name show_log accepts): the run's files go "
            "back to how they were then (recorded; nothing is erased). Answers the calls to drop from your own "
            "conversation and those that may have acted outside the files (not undone)."
        ),
    )
    async def rewind(
        call_id: Annotated[str, Field(description="The call to go back to just before.")],
    ) -> dict[str, object]:
        answer: dict[str, object] = await call(rewind_open_run, ws, call_id)
        return answer

    @server.resource(
        "sandbox://runs/{run_id}/conversations",
        name="run-conversations",
        description="The agent conversations a run holds (agent, session, size, calls).",
        mime_type="application/json",
    )
    async def run_conversations(run_id: str) -> str:
        text: str = await read(conversations, ws, run_id)
        return text


def rewind_open_run(ws: Workspace, call_id: str) -> dict[str, object]:
    """Rewind the workspace's open run to just before ``call_id`` (files only: the client owns its messages)."""
    from sandbox.recovery.rewind import rewind
    from sandbox.run.names import resolve_call

    with ws.lock:
        run = ws.require_run()
        ws.refuse_if_hosted("rewind", f"sandbox rewind {run.run_id} --to {call_id}")
        call = resolve_call(run, call_id).call_id
        order = run.state().order
        report = rewind(run, call, {})
        return {
            "run_id": run.run_id,
            "call_id": call,
            "drop_from_conversation": order[order.index(call) :],
            "files": [f.path for f in report.files.files] if report.files else [],
            "side_effects": [vars(s) for s in report.side_effects],
            "undo_to": report.undo_to,
            "note": report.prompt(),
        }


def conversations(ws: Workspace, run_id: str) -> str:
    """The stored conversations of a run, as JSON text."""
    from sandbox.agent import transcripts
    from sandbox.run.run import Run

    with ws.lock:
        run = Run.open(ws.project, ws.resolve_own(run_id))  # a pinned server's model reads its own run's only
        out = []
        for agent, session in transcripts.sessions(run):
            stored = transcripts.latest(run, session)
            if stored is not None:
                out.append(
                    {"agent": agent, "session": session, "size": stored.index.size, "calls": list(stored.index.calls)}
                )
    return json.dumps({"run_id": run.run_id, "conversations": out})
