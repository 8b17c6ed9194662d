"""Every command started on a run from another clone, whatever the program, does not see the worktree's
agent settings (issue 33): ``.claude/``, ``.mcp.json``, ``.gemini/``, ``.codex/`` and ``.env`` are empty inside the
confinement for ``sandbox exec RUN -- ANYTHING`` (recorded in the exec process or by the repository's
host) and for ``sandbox run RUN -- WRAPPER`` (a program the sandbox does not know, calling an agent), and
``--isolate off`` is refused while there are any. A run of this clone's own sees them.

The run is made as tests/recovery/test_continue_trust.py makes one: clone A plants the settings, pushes
the run, clone B fetches it with ``sandbox fetch``; the probe is a real shell script under real bubblewrap.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox.agent import host, wire
from sandbox.confine import foreign
from sandbox.store.project import Project
from tests.conftest import make_repo, sandbox_cmd, scaled, wait_until
from tests.recovery.test_continue_trust import clone_a, into_b, needs_bwrap, open_run

#: What clone A plants in its run's worktree: each agent's project settings, and one in a subdirectory.
PLANTED = {
    ".claude/settings.json": '{"hooks": "evil"}',
    ".mcp.json": '{"mcpServers": "evil"}',
    ".gemini/settings.json": '{"hooks": "evil"}',
    ".codex/config.toml": "evil = true",
    ".env": "BASH_ENV=/evil.sh",
    "pkg/.claude/settings.json": '{"hooks": "nested"}',
}
#: A wrapper of an agent, as a user keeps one outside the worktree: it reads the settings an agent would.
READER = (
    "for f in .claude/settings.json .mcp.json .gemini/settings.json .codex/config.toml .env "
    'pkg/.claude/settings.json; do if [ -s "$f" ]; then echo "SEEN $f: $(cat "$f")"; '
    'else echo "HIDDEN $f"; fi; done'
)


def _plant_script() -> str:
    return " && ".join(f"mkdir -p $(dirname {path}) && printf '%s' '{text}' > {path}" for path, text in PLANTED.items())


def _fetched_with_all_settings(tmp_path: Path) -> tuple[Path, str]:
    """A run of clone A holding every agent's settings in its worktree, fetched into clone B: (B, the run)."""
    a = clone_a(tmp_path)
    started = sandbox_cmd("start", "--json", cwd=a)
    assert started.returncode == 0, started.stderr
    run_id = str(json.loads(started.stdout)["run"])
    done = sandbox_cmd("exec", run_id, "--", "sh", "-c", _plant_script(), cwd=a)
    assert done.returncode == 0, done.stderr
    return into_b(tmp_path, a, run_id), run_id


def _wrapper(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "my-claude.sh"
    path.write_text(f"#!/bin/sh\n{READER}\n")
    path.chmod(0o755)
    return path


def _seen(out: bytes) -> list[str]:
    return [line.split(":")[0].removeprefix("SEEN ") for line in out.decode().splitlines() if line.startswith("SEEN")]


def _hidden(out: bytes) -> list[str]:
    return [line.removeprefix("HIDDEN ") for line in out.decode().splitlines() if line.startswith("HIDDEN")]


def _calls(b: Path, run_id: str) -> int:
    return len(open_run(b, run_id).state().order)


@needs_bwrap
def test_exec_of_any_command_on_a_fetched_run_sees_none_of_its_agent_settings(tmp_path: Path) -> None:
    b, run_id = _fetched_with_all_settings(tmp_path)
    common = Project.discover(str(b))[0].common_dir
    worktree = Path(sandbox_cmd("path", run_id, cwd=b).stdout.decode().strip())
    try:
        for hosted in (False, True):
            if hosted:  # the second exec is recorded by the repository's host (its answer says whose the run is)
                assert sandbox_cmd("serve", run_id, cwd=b).returncode == 0
                wait_until(lambda: wire.host_alive(common), scaled(30))
            done = sandbox_cmd("exec", run_id, "--", "sh", "-c", READER, cwd=b)
            err = done.stderr.decode()
            assert done.returncode == 0, err
            # At the root (where it starts): all five hidden; the subdirectory's too (the run's tree has it).
            assert _seen(done.stdout) == [] and len(_hidden(done.stdout)) == 6, (hosted, done.stdout)
            assert "are not loaded (.claude/, .mcp.json, .gemini/, .codex/, .env, pkg/.claude/ are empty" in err, err
            # Started in pkg/: its own .claude/ hidden too, and the root's.
            below = sandbox_cmd(
                "exec", run_id, "--", "sh", "-c", "cat .claude/settings.json ../.mcp.json", cwd=worktree / "pkg"
            )
            assert b"evil" not in below.stdout and b"nested" not in below.stdout, below.stderr
            # Only hidden inside: the worktree's files are as the run has them.
            assert (worktree / ".claude/settings.json").read_text() == PLANTED[".claude/settings.json"]
            assert (worktree / ".mcp.json").read_text() == PLANTED[".mcp.json"]
        log = Path(wire.host_dir(common), wire.LOG).read_text()
        assert log.count(f"{run_id} start run_command") >= 2 and "via socket: ok" in log  # the host recorded them
        # Unconfined nothing could hide them: refused in one sentence, nothing recorded, host up or not.
        before = _calls(b, run_id)
        refused = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", READER, cwd=b)
        err = refused.stderr.decode()
        assert refused.returncode == 1 and b"SEEN" not in refused.stdout and b"HIDDEN" not in refused.stdout, err
        assert f"Run {run_id} holds work from another clone" in err and "without '--isolate off'" in err, err
        assert _calls(b, run_id) == before
        # One that leads out of the worktree: refused before anything is recorded (a program would follow it).
        (worktree / "pkg" / ".gemini").symlink_to(tmp_path)
        linked = sandbox_cmd("exec", run_id, "--", "true", cwd=worktree / "pkg")
        assert linked.returncode == 1 and b"pkg/.gemini as a link out of it" in linked.stderr, linked.stderr
        assert _calls(b, run_id) == before
    finally:
        host.stop_host(common)


@needs_bwrap
def test_a_wrapper_run_on_a_fetched_run_sees_none_of_its_agent_settings_and_gets_no_login(tmp_path: Path) -> None:
    """``sandbox run RUN -- ./my-claude.sh``: a program the sandbox does not know gets the same masks as the
    agent (it is what would start it); with ``--hooks claude-code`` the run's Claude home is made for it,
    and your login is copied there only when you say so."""
    b, run_id = _fetched_with_all_settings(tmp_path)
    wrapper = _wrapper(tmp_path / "bin")
    done = sandbox_cmd("run", run_id, "--", str(wrapper), cwd=b)
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert _seen(done.stdout) == [] and len(_hidden(done.stdout)) == 6, done.stdout
    assert "empty inside the sandbox" in err and "was fetched from origin" not in err  # nothing to ask
    assert "--setting-sources" not in err  # no switches for a program it does not know
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": "yours"}')
    env = {"HOME": str(home)}
    asked = sandbox_cmd("run", run_id, "--hooks", "claude-code", "--", str(wrapper), cwd=b, env=env)
    err = asked.stderr.decode()
    assert asked.returncode == 2 and b"HIDDEN" not in asked.stdout, err
    assert "pass --yes" in err and "was fetched from origin" in err
    given = sandbox_cmd("run", run_id, "--yes", "--hooks", "claude-code", "--", str(wrapper), cwd=b, env=env)
    assert given.returncode == 0 and len(_hidden(given.stdout)) == 6, given.stderr
    refused = sandbox_cmd("run", run_id, "--isolate", "off", "--", str(wrapper), cwd=b)
    assert refused.returncode == 1 and b"SEEN" not in refused.stdout, refused.stderr
    assert b"without '--isolate off'" in refused.stderr


@needs_bwrap
def test_a_run_of_this_clones_own_sees_its_agent_settings(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    started = sandbox_cmd("start", "--json", cwd=repo)
    run_id = str(json.loads(started.stdout)["run"])
    common = Project.discover(str(repo))[0].common_dir
    assert sandbox_cmd("exec", run_id, "--", "sh", "-c", _plant_script(), cwd=repo).returncode == 0
    done = sandbox_cmd("exec", run_id, "--", "sh", "-c", READER, cwd=repo)
    assert done.returncode == 0 and len(_seen(done.stdout)) == 6, done.stderr
    assert b"empty inside the sandbox" not in done.stderr
    assert sandbox_cmd("serve", run_id, cwd=repo).returncode == 0
    wait_until(lambda: wire.host_alive(common), scaled(30))
    hosted = sandbox_cmd("exec", run_id, "--", "sh", "-c", READER, cwd=repo)  # the host answers: its own
    assert hosted.returncode == 0 and len(_seen(hosted.stdout)) == 6, hosted.stderr
    assert f"{run_id} start run_command" in Path(wire.host_dir(common), wire.LOG).read_text()
    unconfined = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", READER, cwd=repo)
    assert unconfined.returncode == 0 and len(_seen(unconfined.stdout)) == 6, unconfined.stderr
    wrapped = sandbox_cmd("run", run_id, "--", str(_wrapper(tmp_path / "bin")), cwd=repo)
    assert wrapped.returncode == 0 and len(_seen(wrapped.stdout)) == 6, wrapped.stderr
    host.stop_host(common)


def test_the_settings_masked_are_at_the_root_and_down_to_where_the_command_starts(tmp_path: Path) -> None:
    root = tmp_path / "wt"
    for rel in (".claude/x", ".mcp.json", "a/.gemini/x", "a/b/.codex/x", "c/.claude/x"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    real = os.path.realpath(root)
    assert foreign.settings_paths(str(root)) == [f"{real}/.claude", f"{real}/.mcp.json"]
    assert foreign.settings_paths(str(root), "a/b") == [
        f"{real}/.claude",
        f"{real}/.mcp.json",
        f"{real}/a/.gemini",
        f"{real}/a/b/.codex",
    ]
    (root / "a" / ".codex").symlink_to(tmp_path)  # a link out: a program inside would follow it
    with pytest.raises(foreign.ForeignSettingsError, match=r"a/\.codex as a link out of it"):
        foreign.settings_paths(str(root), "a")
    assert foreign.settings_paths(str(root), "c") == [f"{real}/.claude", f"{real}/.mcp.json", f"{real}/c/.claude"]


@needs_bwrap
def test_the_mcp_servers_run_command_on_a_fetched_run_sees_none_of_its_agent_settings(tmp_path: Path) -> None:
    """``sandbox mcp --run RUN`` (your MCP client's tools on a fetched run): ``run_command`` gets the same masks."""
    from mcp import ClientSession

    from tests.mcp.test_mcp import serve

    b, run_id = _fetched_with_all_settings(tmp_path)
    sandbox_cmd("path", run_id, cwd=b)  # its worktree made here

    @serve(b, "--run", run_id)
    async def answer(s: ClientSession) -> object:
        r = await s.call_tool("run_command", {"command": READER})
        return r.structured_content

    shown = json.dumps(answer)
    assert "SEEN" not in shown and shown.count("HIDDEN") == 6, shown
    assert "evil" not in shown
    host.stop_host(Project.discover(str(b))[0].common_dir)


@needs_bwrap
def test_doctor_lists_the_agent_settings_a_fetched_run_has_masked_and_none_for_a_run_of_its_own(
    tmp_path: Path,
) -> None:
    b, run_id = _fetched_with_all_settings(tmp_path)
    worktree = Path(sandbox_cmd("path", run_id, cwd=b).stdout.decode().strip())
    assert (worktree / ".mcp.json").exists()
    told = sandbox_cmd("--json", "doctor", run_id, cwd=b)
    assert told.returncode == 0, told.stderr
    data = json.loads(told.stdout)
    assert data["foreign_masked"] == [".claude/", ".mcp.json", ".gemini/", ".codex/", ".env", "pkg/.claude/"]
    assert data["foreign_refusal"] is None
    text = sandbox_cmd("doctor", run_id, cwd=b).stdout.decode()
    assert "holds work from another clone" in text and ".claude/, .mcp.json, .gemini/, .codex/, .env, pkg/" in text
    own = json.loads(sandbox_cmd("start", "--json", cwd=b).stdout)["run"]
    mine = json.loads(sandbox_cmd("--json", "doctor", own, cwd=b).stdout)
    assert mine["foreign_masked"] is None
