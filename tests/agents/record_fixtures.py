"""Refresh fixtures/claude-code/ from what the real Claude Code sends to its hooks.

``python -m tests.agents.record_fixtures`` (needs ``make agents``) runs the real binary against the
scripted model server in a scratch project, with a hook that only appends each payload to a file,
then writes one fixture per tool (``pre``, ``post`` and ``failure`` payloads) and one per session event
(``events/*.json``). What varies from run to run is replaced: the project directory by ``__CWD__``,
the session id, transcript path and prompt id by fixed values; tool_use ids are the scripted ones.

Claude Code checks some inputs before any hook runs (a Write to a directory, an Edit whose
old_string is missing): no PostToolUseFailure exists for those, and the older ``failure`` payload is
kept. Tools this Claude Code version no longer offers (Glob, Grep, LS, MultiEdit, NotebookEdit, ...)
and ones that need the network (WebFetch, WebSearch, MCP servers) keep their older fixtures.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.agents.anthropic_server import ModelServer, ToolUse, Turn  # noqa: E402

CLAUDE = ROOT / "tests" / "agents" / "node_modules" / ".bin" / "claude"
OUT = ROOT / "fixtures" / "claude-code"
SESSION = "5f0c9e8a-1b2c-4d3e-9f00-1234567890ab"
PROMPT = "0d9c4b1e-7a55-4f0e-9c2b-abcdef012345"
EVENTS = ["PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionDenied", "PermissionRequest"]
EVENTS += ["Stop", "SessionEnd", "SessionStart", "UserPromptSubmit"]


def calls(cwd: Path) -> list[tuple[str, str, ToolUse]]:
    """(tool, which payload, tool use) in the order the scripted model asks for them."""

    def use(name: str, n: int, code: str, data: dict[str, Any]) -> ToolUse:
        return ToolUse(name, data, id=f"toolu_0{n}{code}")

    w, e, b, r = "WriteA1b2C3d4E5f6G7h8", "EditB2c3D4e5F6g7H8i9", "BashE5f6G7h8I9j0K1l2", "ReadF6g7H8i9J0k1L2m3"
    app = str(cwd / "src/app.py")
    build = "mkdir -p build && echo built > build/out.txt && echo data > data.txt"
    failing = "echo \"make: *** No rule to make target 'test'.  Stop.\" >&2; exit 2"
    return [
        ("Write", "ok", use("Write", 1, w, {"file_path": str(cwd / "src/greet.py"), "content": "def greet():\n"})),
        ("Write", "failure", use("Write", 2, w, {"file_path": str(cwd / "src"), "content": "x\n"})),
        ("Edit", "ok", use("Edit", 1, e, {"file_path": app, "old_string": "app", "new_string": "App"})),
        ("Edit", "failure", use("Edit", 2, e, {"file_path": app, "old_string": "nope", "new_string": "x"})),
        ("Bash", "ok", use("Bash", 1, b, {"command": build, "description": "Build the project"})),
        ("Bash", "failure", use("Bash", 2, b, {"command": failing, "description": "Run the tests"})),
        ("Read", "ok", use("Read", 1, r, {"file_path": app})),
        ("Read", "failure", use("Read", 2, r, {"file_path": str(cwd / "missing.py")})),
    ]


def normalise(value: Any, cwd: str) -> Any:
    """``value`` with the scratch directory, session and prompt ids replaced by fixed values."""
    text = json.dumps(value).replace(cwd, "__CWD__")
    data = json.loads(text)
    if isinstance(data, dict):
        if "session_id" in data:
            data["session_id"] = SESSION
        if "transcript_path" in data:
            data["transcript_path"] = f"/home/user/.claude/projects/-sandbox-worktree/{SESSION}.jsonl"
        if "prompt_id" in data:
            data["prompt_id"] = PROMPT
    return data


def record(mode: str, turns: list[Turn], cwd: Path, log: Path, home: Path) -> None:
    """One headless session in ``cwd`` that logs every hook payload to ``log``."""
    hook = f"{shlex.quote(sys.executable)} -c " + shlex.quote(
        f"import sys; open({str(log)!r}, 'a').write(sys.stdin.read().strip() + chr(10))"
    )
    settings = {"hooks": {e: [{"matcher": "*", "hooks": [{"type": "command", "command": hook}]}] for e in EVENTS}}
    (cwd / ".claude").mkdir(exist_ok=True)
    (cwd / ".claude" / "settings.local.json").write_text(json.dumps(settings))
    with ModelServer(turns) as server:
        env = dict(os.environ, HOME=str(home), ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="sk-ant-fixtures")
        env.update(CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1", IS_SANDBOX="1")
        flags = ["--dangerously-skip-permissions"] if mode == "bypassPermissions" else ["--permission-mode", mode]
        subprocess.run(
            [str(CLAUDE), "-p", "Do the task.", *flags],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
            check=False,
        )


def main() -> None:
    if not os.access(CLAUDE, os.X_OK):
        raise SystemExit("The real Claude Code is not installed; run 'make agents'.")
    with tempfile.TemporaryDirectory(prefix="claude-fixtures-") as tmp:
        cwd, home, log = Path(tmp) / "project", Path(tmp) / "home", Path(tmp) / "hooks.jsonl"
        (cwd / "src").mkdir(parents=True)
        (cwd / "src" / "app.py").write_text("print('app')\n")
        home.mkdir()
        plan = calls(cwd)
        record("acceptEdits", [Turn(tools=[u]) for _t, w, u in plan if w == "ok"], cwd, log, home)
        # Failures in bypass mode: acceptEdits asks before a failing command, and -p cannot answer.
        record("bypassPermissions", [Turn(tools=[u]) for _t, w, u in plan if w != "ok"], cwd, log, home)
        clean = {"command": "rm -rf build", "description": "Clean"}
        refused = ToolUse("Bash", clean, id="toolu_03BashE5f6G7h8I9j0K1l2")
        record("plan", [Turn(tools=[refused])], cwd, log, home)
        payloads = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    by_id: dict[tuple[str, str], dict[str, Any]] = {}
    events: dict[str, dict[str, Any]] = {}
    for p in payloads:
        name = p["hook_event_name"]
        if "tool_use_id" in p and name in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
            by_id[(p["tool_use_id"], name)] = normalise(p, str(cwd))
        else:
            events.setdefault(name, normalise(p, str(cwd)))
    if os.environ.get("RECORD_DEBUG"):
        print(sorted(by_id), sorted(events))
    for tool in ("Write", "Edit", "Bash", "Read"):
        ok = next(u for t, w, u in plan if t == tool and w == "ok")
        bad = next(u for t, w, u in plan if t == tool and w == "failure")
        doc = {
            "tool": tool,
            "pre": by_id[(ok.id, "PreToolUse")],
            "post": by_id[(ok.id, "PostToolUse")],
        }
        if (bad.id, "PostToolUseFailure") in by_id:  # Claude Code checks some inputs before any hook
            doc["failure"] = by_id[(bad.id, "PostToolUseFailure")]
        else:
            doc["failure"] = json.loads((OUT / f"{tool}.json").read_text())["failure"]
        (OUT / f"{tool}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (OUT / "events").mkdir(exist_ok=True)
    for name, payload in sorted(events.items()):
        (OUT / "events" / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {OUT}: Write, Edit, Bash, Read and events/{', '.join(sorted(events))}")


if __name__ == "__main__":
    main()
