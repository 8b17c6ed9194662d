"""Claude Code hooks (PreToolUse, PostToolUse, PostToolUseFailure) as generic hook events.

Payload fields used (Claude Code hooks reference and the Agent SDK's hook input types):
``session_id``, ``cwd``, ``hook_event_name``, ``tool_name``, ``tool_input``, ``tool_use_id``,
``tool_response`` (PostToolUse), ``error`` and ``is_interrupt`` (PostToolUseFailure).
``tool_use_id`` is the call id, so a call's start and finish pair exactly.

Exit codes Claude Code gives meaning to: 0 success; 2 blocks a PreToolUse call (stderr goes to
Claude); any other code is a non-blocking error shown to the user.
"""

from __future__ import annotations

from typing import Any

from sandbox.hookproto import HookEvent, HookInputError, classify_tool

NAME = "claude-code"
SETTINGS_PATH = ".claude/settings.local.json"
MARKER = "sandbox hook claude-code"
SUCCESS_STDOUT = ""
EVENTS = {"PreToolUse": ("start", "succeeded"), "PostToolUse": ("finish", "succeeded"),
          "PostToolUseFailure": ("finish", "failed")}  # fmt: skip

#: File-writing tools and the tool_input field holding the path they write.
WRITE_TOOLS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"}
READ_TOOLS = {"Read", "Glob", "Grep", "LS", "NotebookRead", "TodoRead", "TodoWrite", "BashOutput", "ExitPlanMode"}
EXTERNAL_TOOLS = {"WebFetch", "WebSearch"}
COMMAND_TOOLS = {"Bash"}


def classify(tool: str) -> str:
    """The kind of call a Claude Code tool makes."""
    return classify_tool(tool, WRITE_TOOLS, COMMAND_TOOLS, READ_TOOLS, EXTERNAL_TOOLS)


def to_event(payload: Any) -> HookEvent | None:
    """The generic event for a Claude Code hook payload (None for events not about tool calls)."""
    if not isinstance(payload, dict):
        raise HookInputError("The Claude Code hook payload is not a JSON object; nothing recorded.")
    name = payload.get("hook_event_name")
    if name not in EVENTS:
        return None
    phase, status = EVENTS[name]
    tool, call_id, cwd = payload.get("tool_name"), payload.get("tool_use_id"), payload.get("cwd")
    for key, value in (("tool_name", tool), ("tool_use_id", call_id), ("cwd", cwd)):
        if not isinstance(value, str) or not value:
            raise HookInputError(f"The {name} payload has no '{key}'; nothing recorded.")
    assert isinstance(tool, str) and isinstance(call_id, str) and isinstance(cwd, str)
    if len(call_id) > 200:
        raise HookInputError("The payload's tool_use_id is longer than 200 characters; nothing recorded.")
    tool_input = payload.get("tool_input") or {}
    if not isinstance(tool_input, dict):
        raise HookInputError(f"The {name} payload's tool_input is not an object; nothing recorded.")
    kind = classify(tool)
    paths: list[str] = []
    idempotency = replay = None
    if kind == "write":
        target = tool_input.get(WRITE_TOOLS[tool])
        if isinstance(target, str) and target:
            paths = [target]
        if tool == "Write":  # the whole content is in the input: writing it again is the same
            idempotency, replay = "idempotent", "auto"
    result: Any = None
    error = None
    if name == "PostToolUse":
        result = payload.get("tool_response")
    elif name == "PostToolUseFailure":
        error = str(payload.get("error") or "the tool failed")
        result = {"is_interrupt": bool(payload.get("is_interrupt", False))}
    return HookEvent(
        phase=phase,
        cwd=cwd,
        tool=tool,
        call_id=call_id,
        input=tool_input,
        kind=kind,
        paths=paths,
        status=status,
        error=error,
        result=result,
        idempotency=idempotency,
        replay=replay,
        agent=NAME,
    )


def hook_settings(command: str) -> dict[str, list[Any]]:
    """The ``hooks`` entries of Claude Code settings that call ``command`` for every tool."""
    group = {"matcher": "*", "hooks": [{"type": "command", "command": command, "timeout": 60}]}
    return {event: [group] for event in EVENTS}
