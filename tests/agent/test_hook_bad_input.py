"""Every field of a Claude Code or Gemini CLI hook payload, and of its tool input, replaced by odd
values (wrong types, escapes, paths outside, control characters, a lone surrogate) or left out: the
hook answers with an exit code the agent understands (0; 1, a non-blocking error; 2, a refusal)
and stdout that is empty or JSON, never a traceback, and nothing reaches the user's files, index or
refs."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from sandbox.cli import hookrun
from tests.conftest import user_state
from tests.hook_fixtures import fixture, start_run

GONE = object()  # the field left out
ODD: list[Any] = [
    GONE,
    None,
    "",
    "-",
    "../../outside.txt",
    "/etc/passwd",
    ".git/config",
    "a\nb",
    "\x1b]52;c;cHduZWQ=\x07",
    "\udcff\ud800",
    "x" * 10000,
    -1,
    2**70,
    1.5,
    True,
    [],
    {},
    [{"a": 1}],
]
CASES = [
    ("claude-code", "Write", ("pre", "post")),
    ("claude-code", "Bash", ("pre", "post", "failure")),
    ("gemini", "write_file", ("before", "after")),
    ("gemini", "run_shell_command", ("before", "after")),
]


def mutations(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key in list(doc):
        for value in ODD:
            changed = dict(doc)
            if value is GONE:
                del changed[key]
            else:
                changed[key] = value
            out.append(changed)
    for key in list(doc.get("tool_input") or {}):
        for value in ODD:
            changed = json.loads(json.dumps(doc))
            if value is GONE:
                del changed["tool_input"][key]
            else:
                changed["tool_input"][key] = value
            out.append(changed)
    return out


@pytest.mark.parametrize(("agent", "tool", "events"), CASES, ids=[f"{a}-{t}" for a, t, _ in CASES])
def test_odd_payloads_get_an_answer_the_agent_understands(
    repo: Path, monkeypatch: pytest.MonkeyPatch, agent: str, tool: str, events: tuple[str, ...]
) -> None:
    monkeypatch.setenv("SANDBOX_HOOK_AUTOSTART", "0")  # recorded in this process: no host is spawned
    run = start_run(repo)
    before = user_state(repo)
    doc = fixture(agent, tool, run.worktree)
    bad = []
    seen = 0
    for which in events:
        for payload in mutations(doc[which]):
            seen += 1
            raw = json.dumps(payload).encode()
            out, err = io.StringIO(), io.StringIO()
            code = hookrun.run(agent, False, io.BytesIO(raw), out, err)
            said = f"{agent} {which} {json.dumps(payload)[:160]}: exit {code}: {err.getvalue()[:200]}"
            if code not in (0, 1, 2) or "Traceback" in err.getvalue():
                bad.append(said)
            elif out.getvalue().strip():
                try:
                    json.loads(out.getvalue())
                except ValueError:
                    bad.append(said + f" stdout not JSON: {out.getvalue()[:100]}")
    assert seen > 100
    assert not bad, "\n".join(bad[:20])
    assert user_state(repo) == before
