"""The MCP ``rewind`` tool and the run's conversations resource (issue #22), through the SDK's own client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mcp import ClientSession

from tests.mcp.test_mcp import serve, text


def test_rewind_tool_puts_files_back_and_names_the_calls_to_drop(repo: Path) -> None:
    async def body(s: ClientSession) -> dict[str, Any]:
        r = await s.call_tool("start_run", {"label": "rewind"})
        wt = Path(r.structured_content["worktree"])
        first = (await s.call_tool("write_file", {"path": "a.txt", "content": "one\n"})).structured_content["call_id"]
        r = await s.call_tool("run_command", {"command": "echo two > b.txt"})
        assert not r.is_error, text(r)
        second = r.structured_content["call_id"]
        r = await s.call_tool("rewind", {"call_id": second})
        assert not r.is_error, text(r)
        answer = r.structured_content
        assert answer["drop_from_conversation"] == [second]
        assert [e["call_id"] for e in answer["side_effects"]] == [second]
        assert (wt / "a.txt").read_text() == "one\n" and not (wt / "b.txt").exists()
        bad = await s.call_tool("rewind", {"call_id": "no-such-call"})
        assert bad.is_error and "\n" not in text(bad).strip()
        run_id = r.structured_content["run_id"]
        listed = await s.read_resource(f"sandbox://runs/{run_id}/conversations")  # type: ignore[arg-type]
        assert json.loads(listed.contents[0].text)["conversations"] == []  # type: ignore[union-attr]
        return {"first": first}

    serve(repo)(body)
