"""Refresh fixtures/gemini/*.json from what the real Gemini CLI sends its hooks.

``.venv/bin/python -m tests.agents.refresh_gemini_fixtures`` (after ``make agents``): runs the pinned
binary headless in a throwaway trusted folder against the scripted server, with a hook that logs
every BeforeTool/AfterTool payload, then writes one fixture per tool call: ``{"tool", "before",
"after"}``. The folder becomes ``__CWD__`` and the throwaway home ``/home/user``, so the fixtures
hold no path of this machine. Not a test; the tests read what it writes.
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

from tests.agents import gemini_server as gs
from tests.agents.conftest import BIN_DIR

OUT = Path(__file__).resolve().parent.parent.parent / "fixtures" / "gemini"

#: fixture name -> the call the scripted model makes (paths relative to the folder)
CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("write_file", "write_file", {"file_path": "src/greet.py",
                                  "content": "def greet(name):\n    return f'hi {name}'\n"}),
    ("replace", "replace", {"file_path": "src/greet.py", "old_string": "hi", "new_string": "hello",
                            "instruction": "Say hello instead of hi."}),
    ("run_shell_command", "run_shell_command", {"command": "echo from-gemini > shell.txt",
                                                "description": "Write shell.txt"}),
    ("run_shell_command_failure", "run_shell_command", {"command": "false", "description": "Fail"}),
    ("read_file", "read_file", {"file_path": "src/greet.py"}),
    ("google_web_search", "google_web_search", {"query": "git worktree"}),
]  # fmt: skip
PATH_ARGS = ("file_path",)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="gemini-fixtures-") as tmp:
        root = Path(os.path.realpath(tmp))
        folder, home = root / "project", root / "home"
        (folder / "src").mkdir(parents=True)
        (folder / ".gemini").mkdir()
        (home / ".gemini").mkdir(parents=True)
        auth = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
        (home / ".gemini" / "settings.json").write_text(json.dumps(auth))
        log = root / "payloads.jsonl"
        command = f"{shlex.quote(sys.executable)} -c " + shlex.quote(
            "import sys; open(sys.argv[1], 'a').write(sys.stdin.read().strip() + '\\n'); print('{}')"
        ) + f" {shlex.quote(str(log))}"  # fmt: skip
        hook = {"name": "log", "type": "command", "command": command, "timeout": 60000}
        settings = {"hooks": {e: [{"matcher": ".*", "hooks": [hook]}] for e in ("BeforeTool", "AfterTool")}}
        (folder / ".gemini" / "settings.json").write_text(json.dumps(settings))
        trust = root / "trusted.json"
        trust.write_text(json.dumps({str(folder): "TRUST_FOLDER"}))
        turns = []
        for _name, tool, args in CALLS:
            args = {k: str(folder / v) if k in PATH_ARGS else v for k, v in args.items()}
            turns.append(gs.call(tool, **args))
        with gs.serve(turns) as server:
            env = {
                "PATH": os.environ.get("PATH", ""),
                "HOME": str(home),
                "GOOGLE_GEMINI_BASE_URL": server.base_url,
                "GEMINI_API_KEY": "test-key",
                "GEMINI_CLI_TRUSTED_FOLDERS_PATH": str(trust),
            }
            proc = subprocess.run(
                [str(BIN_DIR / "gemini"), "-p", "do the task", "--yolo"],
                cwd=folder,
                env=env,
                capture_output=True,
                timeout=300,
                check=False,
            )
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr.decode())
            return 1
        payloads = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        pairs = list(zip(payloads[0::2], payloads[1::2], strict=True))
        if len(pairs) != len(CALLS):
            sys.stderr.write(f"expected {len(CALLS)} calls, got {len(pairs)}\n")
            return 1
        for (name, tool, _args), (before, after) in zip(CALLS, pairs, strict=True):
            assert before["hook_event_name"] == "BeforeTool" and after["hook_event_name"] == "AfterTool"
            assert before["tool_name"] == after["tool_name"] == tool
            text = json.dumps({"tool": tool, "before": before, "after": after}, indent=2, ensure_ascii=False)
            text = text.replace(str(folder), "__CWD__").replace(str(home), "/home/user")
            (OUT / f"{name}.json").write_text(text + "\n")
            print(f"fixtures/gemini/{name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
