"""The real agents on a run from another clone (issue 33): its worktree's project settings are not loaded.

Clone A makes a run whose worktree holds the agent's project settings with a hook that leaves a mark
(``HOOK-RAN``) in the worktree, pushes it, and clone B fetches it. In B a plain ``sandbox run RUN -- AGENT``
(your own command, not ``resume --continue``) runs the real Gemini CLI, Claude Code or Codex against the
scripted model server: the sandbox's own hooks record the call, the planted hook never runs. Once B
adopts the run as its own (``sandbox adopt``) the same settings load and the hook leaves its mark:
what kept it out was the run's provenance.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import cliserver
from tests.agents import gemini_server as gs
from tests.agents.anthropic_server import ModelServer, Turn, bash
from tests.agents.claude_harness import SANDBOX, TIMEOUT, claude_args, claude_env, stop_services
from tests.agents.test_gemini import agent_env, log
from tests.conftest import git, sandbox_cmd

pytestmark = pytest.mark.agents

MARK = "HOOK-RAN"


@pytest.fixture(autouse=True)
def _services(repo: Path) -> Iterator[None]:
    yield
    stop_services(repo)


@pytest.fixture
def gemini_home(tmp_path: Path) -> Path:
    """A HOME for Gemini CLI with API-key auth selected (nothing of the developer's own)."""
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    return home


def _fetched_with(tmp_path: Path, repo: Path, folder: str, settings: dict[str, object]) -> tuple[Path, str]:
    """A run of ``repo`` (clone A) whose worktree holds ``folder/settings.json``, fetched into clone B: (B, run)."""
    started = sandbox_cmd("start", "--json", cwd=repo)
    assert started.returncode == 0, started.stderr
    run_id = str(json.loads(started.stdout)["run"])
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps(settings))
    plant = f"mkdir -p {folder} && cp {planted} {folder}/settings.json"
    done = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", plant, cwd=repo)
    assert done.returncode == 0, done.stderr
    return _push_and_fetch(tmp_path, repo, run_id), run_id


def _push_and_fetch(tmp_path: Path, repo: Path, run_id: str) -> Path:
    """The run pushed from ``repo`` (clone A) to a new remote and fetched into a new clone B: B."""
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(repo, "remote", "add", "origin", str(bare))
    git(repo, "push", "-q", "origin", "HEAD:refs/heads/main")
    assert sandbox_cmd("push", run_id, "origin", cwd=repo).returncode == 0
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(bare), str(b))
    fetched = sandbox_cmd("fetch", "origin", run_id, cwd=b)
    assert fetched.returncode == 0, fetched.stderr
    return b


def _worktree(b: Path, run_id: str) -> Path:
    return Path(sandbox_cmd("path", run_id, cwd=b).stdout.decode().strip())


def test_gemini_on_a_fetched_run_loads_none_of_its_worktree_settings(
    tmp_path: Path, repo: Path, gemini_home: Path, gemini_bin: str
) -> None:
    hook = {"name": "planted", "type": "command", "command": f'touch "${{GEMINI_PROJECT_DIR:-.}}/{MARK}"; echo {{}}'}
    planted = {"hooks": {"BeforeTool": [{"matcher": ".*", "hooks": [hook]}]}}
    b, run_id = _fetched_with(tmp_path, repo, ".gemini", planted)

    def session(*yes: str) -> subprocess.CompletedProcess[bytes]:
        turns = [gs.call("run_shell_command", command="echo done >> done.txt", description="scripted"), gs.text("ok")]
        with gs.serve(turns) as server:
            return sandbox_cmd(
                "run", run_id, *yes, "--", gemini_bin, "-p", "do the task", "--yolo",
                cwd=b, env=agent_env(server, gemini_home), timeout=TIMEOUT,
            )  # fmt: skip

    try:
        proc = session("--yes")
        err = proc.stderr.decode()
        assert proc.returncode == 0, err
        assert ".gemini/ is empty inside the sandbox" in err and "fetched from origin" in err
        wt = _worktree(b, run_id)
        assert (wt / "done.txt").read_text() == "done\n" and not (wt / MARK).exists()
        assert [e["tool_name"] for e in log(b, run_id)][-1:] == ["run_shell_command"]  # the sandbox's hooks ran
        # Made this clone's own, the same settings load and the planted hook runs.
        assert sandbox_cmd("adopt", run_id, cwd=b).returncode == 0
        again = session()
        assert again.returncode == 0, again.stderr.decode()
        assert (wt / MARK).exists() and b"is empty inside the sandbox" not in again.stderr
    finally:
        stop_services(b)


def test_claude_code_on_a_fetched_run_runs_none_of_its_project_hooks(
    tmp_path: Path, repo: Path, claude_bin: str
) -> None:
    hook = {"type": "command", "command": f'touch "$CLAUDE_PROJECT_DIR/{MARK}"'}
    planted = {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}}
    b, run_id = _fetched_with(tmp_path, repo, ".claude", planted)
    home = tmp_path / "claude-home"

    def session(*yes: str) -> subprocess.CompletedProcess[str]:
        turns = [bash("echo done >> done.txt"), Turn(text="ok")]
        with ModelServer(turns) as server:
            argv = claude_args(claude_bin, "bypassPermissions", home / f"debug-{len(yes)}.log")
            return cliserver.sandbox(
                "run", run_id, *yes, "--", *argv, cwd=b, env=claude_env(server, home), input=b"", timeout=TIMEOUT,
                text=True,
            )  # fmt: skip

    try:
        proc = session("--yes")
        assert proc.returncode == 0, proc.stderr
        assert "--setting-sources user --strict-mcp-config" in proc.stderr and "fetched from origin" in proc.stderr
        wt = _worktree(b, run_id)
        assert (wt / "done.txt").read_text() == "done\n" and not (wt / MARK).exists()
        assert [e["tool_name"] for e in log(b, run_id)][-1:] == ["Bash"]  # the sandbox's own hooks ran
        assert sandbox_cmd("adopt", run_id, cwd=b).returncode == 0
        again = session()
        assert again.returncode == 0, again.stderr
        assert (wt / MARK).exists() and "--setting-sources" not in again.stderr
    finally:
        stop_services(b)  # the host its sessions started (else it idles on for 15 minutes)


def test_codex_on_a_fetched_run_starts_none_of_its_project_mcp_servers(
    tmp_path: Path, repo: Path, codex_bin: str
) -> None:
    from tests.agents.openai_server import ResponsesServer
    from tests.agents.test_codex_mcp import NO_TRAFFIC, mcp
    from tests.agents.test_continue_codex import codex_env

    planted = {"mcp_servers": {"planted": {"command": "sh", "args": ["-c", f"touch {MARK}; exec sleep 5"]}}}
    b, run_id = _fetched_with_toml(tmp_path, repo, planted)

    # Codex starts MCP servers beside the session: a short session can end before the planted one has run.
    # Where it must have run, the session first waits for its mark (bounded), so the check is not a race.
    wait = f"i=0; while [ ! -e {MARK} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"

    def session(
        n: int, *yes: str, trusted: Path | None = None, planted_ran: bool = False
    ) -> subprocess.CompletedProcess[str]:
        turns = [mcp("run_command", command=wait)] if planted_ran else []
        with ResponsesServer([*turns, mcp("write_file", path=f"done-{n}.txt", content="done\n")]) as server:
            env = codex_env(tmp_path / "c", server, b)
            if trusted is not None:  # Codex loads a project's .codex/config.toml only where it is trusted
                with open(Path(env["CODEX_HOME"]) / "config.toml", "a") as fh:
                    fh.write(f'\n[projects.{json.dumps(str(trusted))}]\ntrust_level = "trusted"\n')
            return cliserver.sandbox(
                "run", run_id, *yes, "--", codex_bin, "exec", *NO_TRAFFIC, "--color=never", "Do the task.",
                cwd=b, env=env, input=b"", timeout=TIMEOUT, text=True,
            )  # fmt: skip

    try:
        first = session(1, "--yes")  # makes the worktree here
        assert first.returncode == 0, first.stderr + first.stdout
        wt = _worktree(b, run_id)
        proc = session(2, "--yes", trusted=wt)  # the worktree trusted in your Codex settings: still not loaded
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert ".codex/ is empty inside the sandbox" in proc.stderr and "fetched from origin" in proc.stderr
        assert (wt / "done-2.txt").exists() and not (wt / MARK).exists()
        assert sandbox_cmd("adopt", run_id, cwd=b).returncode == 0
        again = session(3, trusted=wt, planted_ran=True)
        assert again.returncode == 0, again.stderr + again.stdout
    finally:
        stop_services(b)
    assert (wt / MARK).exists() and "is empty inside the sandbox" not in again.stderr


def _fetched_with_toml(tmp_path: Path, repo: Path, config: dict[str, dict[str, dict[str, object]]]) -> tuple[Path, str]:
    """:func:`_fetched_with` of ``.codex/config.toml`` (tables of tables, as TOML)."""
    lines = []
    for table, entries in config.items():
        for name, values in entries.items():
            lines.append(f"[{table}.{name}]")
            lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    started = sandbox_cmd("start", "--json", cwd=repo)
    run_id = str(json.loads(started.stdout)["run"])
    planted = tmp_path / "planted.toml"
    planted.write_text("\n".join(lines) + "\n")
    plant = f"mkdir -p .codex && cp {planted} .codex/config.toml"
    assert sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", plant, cwd=repo).returncode == 0
    return _push_and_fetch(tmp_path, repo, run_id), run_id


def test_claude_code_started_by_exec_through_a_shell_runs_none_of_a_fetched_runs_project_hooks(
    tmp_path: Path, repo: Path, claude_bin: str
) -> None:
    """``sandbox exec RUN -- sh -c '... claude ...'``: the sandbox sees only a shell (no switch of Claude
    Code's is added), yet the worktree's ``.claude/`` and ``.mcp.json`` are empty inside, so neither the
    planted hook nor the planted MCP server runs (and Claude Code takes the empty ``.mcp.json`` as none);
    adopted, the same command runs both."""
    hook = {"type": "command", "command": f'touch "$CLAUDE_PROJECT_DIR/{MARK}"'}
    planted = {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}, "enableAllProjectMcpServers": True}
    b, run_id = _fetched_with(tmp_path, repo, ".claude", planted)
    # exec's sandbox has a /tmp of its own: a clone of this project under /tmp shows its agents by allow_read.
    modules = json.dumps(str(Path(claude_bin).parent.parent))
    (b / ".sandbox.toml").write_text(f"[isolation]\nallow_read = [{modules}]\n")
    server = {"mcpServers": {"planted": {"command": "sh", "args": ["-c", "touch MCP-RAN; exec sleep 5"]}}}
    plant = f"printf '%s' '{json.dumps(server)}' > .mcp.json"  # written here: the run still holds A's events
    assert sandbox_cmd("exec", run_id, "--", "sh", "-c", plant, cwd=b).returncode == 0

    def session(n: int) -> subprocess.CompletedProcess[str]:
        return _claude_through_exec(b, run_id, claude_bin, n)

    try:
        proc = session(1)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert ".claude/, .mcp.json are empty inside the sandbox" in proc.stderr, proc.stderr
        assert "--setting-sources" not in proc.stderr
        wt = _worktree(b, run_id)
        assert (wt / "done-1.txt").read_text() == "done\n" and not (wt / MARK).exists()
        assert not (wt / "MCP-RAN").exists()
        assert sandbox_cmd("adopt", run_id, cwd=b).returncode == 0
        again = session(2)
        assert again.returncode == 0, again.stderr + again.stdout
        assert (wt / "done-2.txt").exists() and (wt / MARK).exists() and "is empty inside" not in again.stderr
        assert (wt / "MCP-RAN").exists()
    finally:
        stop_services(b)


def test_gemini_on_a_fetched_run_loads_none_of_its_env_file(
    tmp_path: Path, repo: Path, gemini_home: Path, gemini_bin: str
) -> None:
    """Gemini CLI loads the worktree's ``.env`` into its own environment (the sandbox trusts the worktree
    for it), and each shell command it runs inherits it: ``BASH_ENV`` there runs a script of the file's
    choosing before the model's command. On a run from elsewhere ``.env`` is empty inside; adopted, it loads."""
    b, run_id = _fetched_with(tmp_path, repo, "docs", {"harmless": True})
    plant = f'printf "touch {MARK}\\n" > evil.sh && printf "BASH_ENV=%s/evil.sh\\n" "$PWD" > .env'
    assert sandbox_cmd("exec", run_id, "--", "sh", "-c", plant, cwd=b).returncode == 0  # the run stays foreign

    def session(n: int, *yes: str) -> subprocess.CompletedProcess[bytes]:
        turns = [gs.call("run_shell_command", command=f"echo done >> done-{n}.txt", description="s"), gs.text("ok")]
        with gs.serve(turns) as server:
            return sandbox_cmd(
                "run", run_id, *yes, "--", gemini_bin, "-p", "do the task", "--yolo",
                cwd=b, env=agent_env(server, gemini_home), timeout=TIMEOUT,
            )  # fmt: skip

    proc = session(1, "--yes")
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "(.env is empty inside the sandbox)" in err
    wt = _worktree(b, run_id)
    assert (wt / "done-1.txt").read_text() == "done\n" and not (wt / MARK).exists()
    assert sandbox_cmd("adopt", run_id, cwd=b).returncode == 0
    again = session(2)
    assert again.returncode == 0, again.stderr.decode()
    assert (wt / "done-2.txt").exists() and (wt / MARK).exists()


def test_claude_code_started_deep_in_a_fetched_runs_tree_runs_none_of_the_hooks_found_there(
    tmp_path: Path, repo: Path, claude_bin: str
) -> None:
    """``sandbox exec RUN -- sh -c 'cd pkg/deep && claude ...'``: the run's tree holds ``pkg/deep/.claude/``,
    nothing at the root; the command starts at the root, so only the run's recorded tree says where to mask
    (tests/confine/test_foreign_deep_masks.py). The planted hook does not run; adopted, the same command runs it
    (Claude Code does load the settings of the folder it starts in)."""
    hook = {"type": "command", "command": f"touch {MARK}"}
    planted = {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}}
    b, run_id = _fetched_with(tmp_path, repo, "pkg/deep/.claude", planted)
    modules = json.dumps(str(Path(claude_bin).parent.parent))
    (b / ".sandbox.toml").write_text(f"[isolation]\nallow_read = [{modules}]\n")

    def session(n: int) -> subprocess.CompletedProcess[str]:
        return _claude_through_exec(b, run_id, claude_bin, n, cd="pkg/deep")

    try:
        proc = session(1)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        assert "pkg/deep/.claude/ is empty inside the sandbox" in proc.stderr, proc.stderr
        deep = _worktree(b, run_id) / "pkg" / "deep"
        assert (deep / "done-1.txt").read_text() == "done\n" and not (deep / MARK).exists()
        assert sandbox_cmd("adopt", run_id, cwd=b).returncode == 0
        again = session(2)
        assert again.returncode == 0, again.stderr + again.stdout
        assert (deep / "done-2.txt").exists() and (deep / MARK).exists() and "is empty inside" not in again.stderr
    finally:
        stop_services(b)


def _claude_through_exec(
    b: Path, run_id: str, claude_bin: str, n: int, cd: str = "."
) -> subprocess.CompletedProcess[str]:
    """``sandbox exec RUN -- sh -c '... cd CD && claude -p ...'`` with a scripted turn writing ``done-N.txt``.

    The wrapper gives Claude Code what it needs inside (a writable HOME in the private /tmp, the scripted
    server): exec passes on only an allowlist of your environment, and sees a shell, not Claude Code."""
    with ModelServer([bash(f"echo done >> done-{n}.txt"), Turn(text="ok")]) as server:
        wrapper = (
            f"export HOME=/tmp/h ANTHROPIC_BASE_URL={server.url} ANTHROPIC_API_KEY=sk-ant-test-0000 "
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 IS_SANDBOX=1; "
            f'mkdir -p "$HOME"; cd {cd} && exec {claude_bin} -p "Do the task." --dangerously-skip-permissions'
        )
        return subprocess.run(
            [SANDBOX, "exec", run_id, "--network", "on", "--", "sh", "-c", wrapper], cwd=b,
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT, check=False,
        )  # fmt: skip
