"""The real Codex CLI using ``sandbox mcp``'s tools, configured by the README's ``config.toml`` snippet.

Codex (``codex exec``, headless) gets a private ``CODEX_HOME`` whose ``config.toml`` holds the
README's Codex snippet as it stands (read from README.md: read-only sandbox, no built-in shell,
``[mcp_servers.sandbox]`` = ``sandbox mcp -C REPO --new`` with ``required = true``), and a model
provider pointing at the scripted Responses API server (:mod:`tests.agents.openai_server`), which is
also every proxy: Codex must ask for nothing but model turns. Codex offers the server's tools as the
namespace ``mcp__sandbox`` (a ``function_call`` names the tool and carries ``"namespace"``).

* Only the MCP tools: the scripted model writes, edits, runs a command that succeeds and one that
  fails, reads, and tries the built-in ``exec_command`` anyway: the ledger has one call per changing
  tool use, the user's tree is byte-identical until ``sandbox apply``, which brings exactly those
  files (``undo`` takes them back).
* The shell left on: the read-only sandbox (Codex's own bubblewrap + seccomp, which works in this
  container) refuses its write and ``codex exec`` refuses its request to escalate.
* A catalogue model (code mode): the tools are JavaScript functions of Codex's ``exec`` tool, and
  ``apply_patch`` is refused by the read-only sandbox.
* Without ``required = true`` the first model request has no sandbox tools (why the README says it).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.claude_harness import SANDBOX, TIMEOUT, sandbox, stop_services
from tests.agents.openai_server import FunctionCall, Recorded, ResponsesServer, Turn, call, custom, output_text
from tests.agents.test_claude_code import _apply_and_undo
from tests.conftest import tree_digest, user_state

pytestmark = pytest.mark.agents

NAMESPACE = "mcp__sandbox"  # how Codex 0.171 offers (and expects back) the sandbox server's tools
# The model slug: one outside Codex's bundled catalogue, so Codex offers plain function tools; a
# catalogue model (CODE_MODE_MODEL) gets them through its JavaScript "code mode" exec tool instead.
MODEL = "gpt-test"
CODE_MODE_MODEL = "gpt-6.1-sol"
KEY_VAR, KEY = "OPENAI_TEST_KEY", "sk-test-0000"  # a name Codex's ENV passes (OPENAI_*)
NO_TRAFFIC = ("--disable", "plugins", "--disable", "apps")  # Codex's own reaching out (see codex_config)


def mcp(name: str, **args: object) -> Turn:
    """A turn asking for one tool of the ``sandbox`` MCP server."""
    return Turn(calls=[FunctionCall(name, dict(args), namespace=NAMESPACE)])


def readme_snippet(repo: Path) -> str:
    """The README's Codex ``config.toml`` snippet, with this venv's ``sandbox`` and the test's repository."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = readme.index("```toml\n", readme.index("**Codex** (`~/.codex/config.toml`")) + len("```toml\n")
    snippet = readme[start : readme.index("```", start)]
    assert 'command = "sandbox"' in snippet and '"/path/to/repo"' in snippet, snippet
    return snippet.replace('command = "sandbox"', f"command = {json.dumps(SANDBOX)}").replace(
        '"/path/to/repo"', json.dumps(str(repo))
    )


def codex_config(server: ResponsesServer, repo: Path, *, model: str = MODEL, snippet: str | None = None) -> str:
    """``$CODEX_HOME/config.toml``: the scripted provider, then the README's snippet as it stands.

    Codex's own reaching out (a curated-plugin sync from github.com and chatgpt.com, ChatGPT
    connectors, analytics to ab.chatgpt.com) is turned off here and by ``--disable plugins
    --disable apps`` on the command line (a second ``[features]`` table would not be TOML).
    """
    return f"""\
model = "{model}"
model_provider = "scripted"
check_for_update_on_startup = false

{readme_snippet(repo) if snippet is None else snippet}
[analytics]
enabled = false

[model_providers.scripted]
name = "scripted"
base_url = "{server.base_url}"
env_key = "{KEY_VAR}"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"""


def run_codex(
    codex_bin: str, repo: Path, tmp_path: Path, server: ResponsesServer, *flags: str, config: str | None = None
) -> str:
    """``codex exec`` in the user's repository with a private CODEX_HOME; its stdout + stderr.

    It must succeed and have asked for nothing but model turns (no connection through the proxy).
    """
    home = tmp_path / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(config or codex_config(server, repo))
    # Codex refuses to put its sandbox helper (codex-linux-sandbox, a link to itself) under the
    # temporary directory, where tmp_path is; with TMPDIR elsewhere its own sandbox works here.
    tmpdir = tmp_path / "codex-tmp"
    tmpdir.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    env.update({"CODEX_HOME": str(home), KEY_VAR: KEY, "TMPDIR": str(tmpdir), "NO_COLOR": "1"})
    # Anything bound for the internet goes to the scripted server as a proxy, which refuses and records it.
    for var in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        env[var] = env[var.lower()] = server.proxy_url
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
    proc = subprocess.run(
        [codex_bin, "exec", *NO_TRAFFIC, *flags, "--strict-config", "--color=never", "-C", str(repo), "Do the task."],
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    elsewhere = [f"{r.method} {r.path}" for r in server.requests if not r.is_turn]
    assert not elsewhere, elsewhere  # nothing but model requests: no plugin sync, analytics, update check
    return proc.stdout + proc.stderr


def offered(request: Recorded) -> set[str]:
    """The tool names one model request offers: top-level functions and ``namespace/name``."""
    names: set[str] = set()
    for tool in request.body.get("tools", []):
        names.add(str(tool.get("name", tool.get("type"))))
        names.update(f"{tool['name']}/{inner['name']}" for inner in tool.get("tools", []) or [])
    return names


def the_run(repo: Path) -> str:
    """The one run ``sandbox mcp --new`` started in ``repo`` (from ``sandbox list --json``)."""
    listed = sandbox("list", "--json", cwd=repo)
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert len(runs) == 1, runs
    return str(runs[0]["run"])


@pytest.fixture(autouse=True)
def _services(repo: Path) -> Iterator[None]:
    yield
    stop_services(repo)


def test_codex_with_the_readme_snippet_and_only_the_mcp_tools(codex_bin: str, repo: Path, tmp_path: Path) -> None:
    turns = [
        mcp("write_file", path="src/new.py", content="def new():\n    return 1\n"),
        mcp("edit_file", path="src/app.py", old_string="print('app')", new_string="print('edited')"),
        mcp("run_command", command="echo built > out.txt"),
        mcp("run_command", command="echo broken >&2; exit 3"),
        mcp("read_file", path="src/app.py"),
        call("exec_command", cmd=f"echo x > {repo / 'escape.txt'}"),  # the built-in shell, turned off
        mcp("show_diff", stat_only=True),
    ]
    ids = [t.calls[0].call_id for t in turns]
    user_before, files_before = user_state(repo), tree_digest(repo)
    with ResponsesServer(turns) as server:
        run_codex(codex_bin, repo, tmp_path, server)
        requests = server.model_requests()
        results = {cid: server.output(cid) for cid in ids}
    assert len(requests) == len(turns) + 1  # one request per scripted turn, then the closing text
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in requests)  # env_key's variable

    # What Codex offered: the server's tools in their namespace (from the first request on), and
    # neither the built-in shell nor apply_patch.
    tools = offered(requests[0])
    for name in ("write_file", "edit_file", "run_command", "read_file", "show_diff", "list_files", "search"):
        assert f"{NAMESPACE}/{name}" in tools, sorted(tools)
    assert not {"exec_command", "write_stdin", "shell", "apply_patch"} & tools, sorted(tools)
    assert all(offered(r) == tools for r in requests)

    # What the model was told, tool by tool (Codex prefixes "Wall time: ...\nOutput:\n").
    for cid in ids:
        assert results[cid] is not None, cid
    texts = {cid: output_text(results[cid]) for cid in ids}
    assert '"changed":true' in texts[ids[0]].replace(" ", "")
    failed = json.loads(texts[ids[3]][texts[ids[3]].index("{") :])
    assert failed["status"] == "failed" and failed["exit_code"] == 3 and "broken" in failed["output"]
    assert "print('edited')" in texts[ids[4]]
    assert texts[ids[5]] == "unsupported call: exec_command"
    assert "src/new.py" in texts[ids[6]] and "out.txt" in texts[ids[6]]
    assert not (repo / "escape.txt").exists()

    # The ledger: one call per changing tool use, in order, with its files; reads are not recorded.
    run_id = the_run(repo)
    logged = sandbox("log", run_id, "--json", cwd=repo)
    assert logged.returncode == 0, logged.stderr
    entries = json.loads(logged.stdout)
    assert [(e["tool_name"], e["status"], [f["path"] for f in e["files"]]) for e in entries] == [
        ("write_file", "succeeded", ["src/new.py"]),
        ("edit_file", "succeeded", ["src/app.py"]),
        ("run_command", "succeeded", ["out.txt"]),
        ("run_command", "failed", []),
    ]
    # Each call is recorded under the model's call id and Codex's session (both from the request's _meta).
    assert [e["call_id"] for e in entries] == [ids[0], ids[1], ids[2], ids[3]]
    assert len({e["agent_session"] for e in entries}) == 1 and entries[0]["agent_session"]
    assert user_state(repo) == user_before and tree_digest(repo) == files_before  # nothing reached the user
    _apply_and_undo(
        repo,
        run_id,
        {"src/new.py": "def new():\n    return 1\n", "src/app.py": "print('edited')\n", "out.txt": "built\n"},
    )


def test_codex_builtin_shell_is_kept_off_the_tree_by_its_read_only_sandbox(
    codex_bin: str, repo: Path, tmp_path: Path
) -> None:
    """The shell left on (``--enable shell_tool``): Codex's read-only sandbox is what stops it."""
    escape = repo / "escape.txt"
    shell = call("exec_command", cmd=f"echo x > {escape}; echo exit=$?")
    escalate = call(
        "exec_command", cmd=f"echo x > {escape}", sandbox_permissions="require_escalated", justification="write it"
    )
    wrote = mcp("write_file", path="ok.txt", content="through the sandbox\n")
    files_before = tree_digest(repo)
    with ResponsesServer([shell, escalate, wrote]) as server:
        out = run_codex(codex_bin, repo, tmp_path, server, "--enable", "shell_tool")
        tools = offered(server.model_requests()[0])
        said = {t.calls[0].call_id: output_text(server.output(t.calls[0].call_id)) for t in (shell, escalate, wrote)}
    assert "approval: never" in out  # codex exec's default: nothing can be approved, so nothing escalates
    assert "exec_command" in tools  # Codex's default: the built-in shell is offered...
    refused = said[shell.calls[0].call_id]
    assert "Read-only file system" in refused and "exit=1" in refused, refused  # ...and cannot write
    assert "cannot ask for escalated permissions" in said[escalate.calls[0].call_id]
    assert not escape.exists() and tree_digest(repo) == files_before
    assert '"changed":true' in said[wrote.calls[0].call_id].replace(" ", "")
    _apply_and_undo(repo, the_run(repo), {"ok.txt": "through the sandbox\n"})


def test_without_required_codex_exec_asks_the_model_before_the_tools_are_listed(
    codex_bin: str, repo: Path, tmp_path: Path
) -> None:
    """Why the README's snippet says ``required = true``: without it the first turn has no sandbox tools.

    ``sandbox mcp`` lists its tools in about a second; on a quiet machine Codex can still be later, so
    the server here starts 5 s late (as a slow machine would), making the race's outcome certain."""
    lines = [line for line in readme_snippet(repo).splitlines() if not line.startswith("required")]
    args = next(line for line in lines if line.startswith("args = "))
    command = next(line for line in lines if line.startswith("command = "))
    late = "sleep 5; exec " + " ".join(
        shlex.quote(a) for a in [json.loads(command.split("=", 1)[1]), *json.loads(args.split("=", 1)[1])]
    )
    lines = [line for line in lines if line not in (args, command)] + [
        'command = "sh"',
        f"args = {json.dumps(['-c', late])}",
    ]
    snippet = "\n".join(lines)
    with ResponsesServer([]) as server:
        run_codex(codex_bin, repo, tmp_path, server, config=codex_config(server, repo, snippet=snippet + "\n"))
        first = offered(server.model_requests()[0])
    assert NAMESPACE not in first and "list_mcp_resources" in first, sorted(first)


CODE_MODE_SCRIPT = """\
text(JSON.stringify(ALL_TOOLS.map((t) => t.name)));
const sb = tools;
text(JSON.stringify(await sb.mcp__sandbox__write_file({path: "src/new.py", content: "def new():\\n    return 1\\n"})));
const edit = {path: "src/app.py", old_string: "print('app')", new_string: "print('edited')"};
text(JSON.stringify(await sb.mcp__sandbox__edit_file(edit)));
text(JSON.stringify(await sb.mcp__sandbox__run_command({command: "echo built > out.txt"})));
text(JSON.stringify(await sb.mcp__sandbox__read_file({path: "src/app.py"})));
try {
  await sb.apply_patch("*** Begin Patch\\n*** Add File: escape.txt\\n+x\\n*** End Patch\\n");
  text("PATCHED");
} catch (e) {
  text("PATCH REFUSED: " + String(e));
}
"""


def test_codex_code_mode_model_reaches_the_mcp_tools_and_apply_patch_is_refused(
    codex_bin: str, repo: Path, tmp_path: Path
) -> None:
    """A catalogue model: the tools are JavaScript functions of ``exec``; the read-only sandbox stops apply_patch."""
    script = custom("exec", CODE_MODE_SCRIPT)
    files_before, user_before = tree_digest(repo), user_state(repo)
    with ResponsesServer([script]) as server:
        run_codex(codex_bin, repo, tmp_path, server, config=codex_config(server, repo, model=CODE_MODE_MODEL))
        first = server.model_requests()[0]
        parts = server.output(script.calls[0].call_id)  # one text item per text() of the script
    assert "tools" not in first.body  # code mode: the tools travel in an "additional_tools" input item
    said = output_text(parts)
    names = json.loads(parts[1]["text"])  # parts[0] is "Script completed", the wall time, "Output:"
    assert {f"mcp__sandbox__{n}" for n in ("write_file", "edit_file", "run_command", "read_file")} <= set(names)
    assert "apply_patch" in names and "exec_command" not in names, names  # the built-in shell is off
    assert "PATCH REFUSED: patch rejected: writing is blocked by read-only sandbox" in said, said
    assert "print('edited')" in said and '"changed":true' in said
    assert not (repo / "escape.txt").exists()
    assert tree_digest(repo) == files_before and user_state(repo) == user_before

    run_id = the_run(repo)
    logged = sandbox("log", run_id, "--json", cwd=repo)
    assert logged.returncode == 0, logged.stderr
    assert [(e["tool_name"], e["status"]) for e in json.loads(logged.stdout)] == [
        ("write_file", "succeeded"),
        ("edit_file", "succeeded"),
        ("run_command", "succeeded"),
    ]
    _apply_and_undo(
        repo,
        run_id,
        {"src/new.py": "def new():\n    return 1\n", "src/app.py": "print('edited')\n", "out.txt": "built\n"},
    )
