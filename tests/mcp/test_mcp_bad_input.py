"""Every MCP tool, every argument, odd values (wrong types too): a tool error or a result, never a
traceback, never a dead server, and the user's files, index and refs untouched throughout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import ClientSession

from tests.conftest import user_state
from tests.mcp.test_mcp import serve, text

ODD: list[Any] = [
    "",
    " ",
    "-",
    "..",
    "../outside.txt",
    "/etc/passwd",
    ".git/config",
    "a\nb",
    "x" * 5000,
    "\x1b]52;c;cHduZWQ=\x07",
    "é/ü",
    ":(nonsense)",
    -1,
    0,
    2**63,
    1.5,
    None,
    True,
    [],
    {},
    ["a", 1],
]
SANE = {
    "path": "a.txt",
    "content": "x\n",
    "old_string": "hello",
    "new_string": "bye",
    "command": "true",
    "pattern": "hello",
}


def test_no_odd_argument_breaks_a_tool_or_the_server(repo: Path) -> None:
    before = user_state(repo)

    async def body(s: ClientSession) -> list[str]:
        bad: list[str] = []
        started = await s.call_tool("start_run", {"label": "mcp-odd"})
        assert not started.is_error, text(started)
        tools = (await s.list_tools()).tools
        calls = 0
        for tool in tools:
            schema = tool.input_schema or {}
            props = schema.get("properties") or {}
            required = schema.get("required") or []
            for name in props:
                for value in ODD:
                    args = {r: SANE.get(r, "x") for r in required if r != name}
                    args[name] = value
                    calls += 1
                    result = await s.call_tool(tool.name, args)
                    said = text(result)
                    if "Traceback" in said or "Internal error" in said:
                        bad.append(f"{tool.name}({name}={str(value)[:30]!r}): {said[:200]}")
        alive = await s.call_tool("list_runs", {})
        assert not alive.is_error, text(alive)
        assert calls > 300, calls
        return bad

    bad = serve(repo)(body)
    assert not bad, "\n".join(bad)
    assert user_state(repo) == before  # nothing reached the user's files, index or refs
