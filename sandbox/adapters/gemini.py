"""Gemini CLI hooks (BeforeTool, AfterTool) as generic hook events.

Payload fields used (Gemini CLI hooks reference, docs/hooks/reference.md): ``session_id``,
``cwd``, ``hook_event_name``, ``tool_name``, ``tool_input``, and on AfterTool ``tool_response``
(``llmContent``, ``returnDisplay``, optional ``error``). Gemini CLI gives a hook no call id, so a
BeforeTool gets a fresh id prefixed by the session, and its AfterTool is paired with the oldest
started call of that session with the same tool and input.

Exit codes Gemini CLI gives meaning to: 0 success, stdout parsed as JSON (so ``{}`` is printed);
2 blocks the tool (stderr is the reason); any other code is a warning and the CLI continues.
Tool names and their path arguments: docs/tools/file-system.md, shell.md, web-search.md.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sandbox.hookproto import HookEvent, HookInputError, classify_tool

NAME = "gemini"
SETTINGS_PATH = ".gemini/settings.json"
MARKER = "sandbox hook gemini"
SUCCESS_STDOUT = "{}"
EVENTS = {"BeforeTool": "start", "AfterTool": "finish"}

WRITE_TOOLS = {"write_file": "file_path", "replace": "file_path"}
READ_TOOLS = {"read_file", "read_many_files", "list_directory", "glob", "search_file_content", "write_todos"}
EXTERNAL_TOOLS = {"web_fetch", "google_web_search", "web_search", "save_memory"}
COMMAND_TOOLS = {"run_shell_command"}


def classify(tool: str) -> str:
    """The kind of call a Gemini CLI tool makes."""
    return classify_tool(tool, WRITE_TOOLS, COMMAND_TOOLS, READ_TOOLS, EXTERNAL_TOOLS)


def to_event(payload: Any) -> HookEvent | None:
    """The generic event for a Gemini CLI hook payload (None for events not about tool calls)."""
    if not isinstance(payload, dict):
        raise HookInputError("The Gemini CLI hook payload is not a JSON object; nothing recorded.")
    name = payload.get("hook_event_name")
    if name not in EVENTS:
        return None
    tool, cwd = payload.get("tool_name"), payload.get("cwd")
    for key, value in (("tool_name", tool), ("cwd", cwd)):
        if not isinstance(value, str) or not value:
            raise HookInputError(f"The {name} payload has no '{key}'; nothing recorded.")
    assert isinstance(tool, str) and isinstance(cwd, str)
    tool_input = payload.get("tool_input") or {}
    if not isinstance(tool_input, dict):
        raise HookInputError(f"The {name} payload's tool_input is not an object; nothing recorded.")
    session = str(payload.get("session_id") or "nosession")
    prefix = "gemini_" + hashlib.sha256(session.encode()).hexdigest()[:8] + "_"
    kind = classify(tool)
    paths: list[str] = []
    if kind == "write":
        target = tool_input.get(WRITE_TOOLS[tool])
        if isinstance(target, str) and target:
            paths = [target]
    status, error, result = "succeeded", None, None
    if name == "AfterTool":
        response = payload.get("tool_response")
        result = response
        failure = response.get("error") if isinstance(response, dict) else None
        if failure:
            status = "failed"
            error = str(failure.get("message", failure) if isinstance(failure, dict) else failure)
    return HookEvent(
        phase=EVENTS[name],
        cwd=cwd,
        tool=tool,
        call_id=None,
        input=tool_input,
        kind=kind,
        paths=paths,
        status=status,
        error=error,
        result=result,
        pair_prefix=prefix,
        agent=NAME,
    )


def hook_settings(command: str) -> dict[str, list[Any]]:
    """The ``hooks`` entries of Gemini CLI settings that call ``command`` for every tool."""
    hook = {"name": "sandbox", "type": "command", "command": command, "timeout": 60000}
    return {event: [{"matcher": ".*", "hooks": [hook]}] for event in EVENTS}
