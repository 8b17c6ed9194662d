"""A run from another clone's agent settings deeper in its tree (issue 33's leftover): a program that gets there
by ``cd`` first (``sh -c 'cd pkg/deep && claude'``, a wrapper script) finds them empty too, for every command
started on the run: ``sandbox exec`` (recorded in the exec process or by the repository's host), ``sandbox run``,
the MCP server's ``run_command``; ``doctor`` lists them, a link out of the worktree among them is refused, and a
run of this clone's own sees them. Where they are comes from the run's recorded tree (git's trees searched once
per tree, :mod:`sandbox.confine.settingstree`), never a walk of the worktree.

The run is made as tests/confine/test_foreign_masks.py makes one: clone A plants the settings, pushes the
run, clone B fetches it with ``sandbox fetch``; the probes are real shell commands under real bubblewrap.
"""

from __future__ import annotations

import json
from pathlib import Path

import pygit2

from sandbox.agent import host, wire
from sandbox.confine import foreign, settingstree
from sandbox.models import SettingsFound, from_json
from sandbox.store.project import Project
from tests.conftest import commit_all, make_repo, replace_stored_object, sandbox_cmd, scaled, wait_until
from tests.recovery.test_continue_trust import clone_a, into_b, needs_bwrap, open_run

#: Planted deep in the run's tree only: nothing at the root, nothing where a command starts.
DEEP = {"pkg/deep/.claude/settings.json": '{"hooks": "evil"}', "a/b/.mcp.json": '{"mcpServers": "evil"}'}
#: What a program that goes down first reads: an agent started in pkg/deep reads its .claude/.
PROBE = "cd pkg/deep && cat .claude/settings.json; cd ../../a/b && cat .mcp.json; echo END"


def _plant(files: dict[str, str]) -> str:
    return " && ".join(f"mkdir -p $(dirname {path}) && printf '%s' '{text}' > {path}" for path, text in files.items())


def _fetched_with_deep_settings(tmp_path: Path) -> tuple[Path, str, Path]:
    """A run of clone A with agent settings only deep in its tree, fetched into clone B: (B, the run, its worktree)."""
    a = clone_a(tmp_path)
    started = sandbox_cmd("start", "--json", cwd=a)
    assert started.returncode == 0, started.stderr
    run_id = str(json.loads(started.stdout)["run"])
    done = sandbox_cmd("exec", run_id, "--", "sh", "-c", _plant(DEEP), cwd=a)
    assert done.returncode == 0, done.stderr
    b = into_b(tmp_path, a, run_id)
    worktree = Path(sandbox_cmd("path", run_id, cwd=b).stdout.decode().strip())
    assert (worktree / "pkg/deep/.claude/settings.json").read_text() == DEEP["pkg/deep/.claude/settings.json"]
    return b, run_id, worktree


def _calls(b: Path, run_id: str) -> int:
    return len(open_run(b, run_id).state().order)


@needs_bwrap
def test_exec_that_goes_down_first_on_a_fetched_run_finds_its_deep_agent_settings_empty(tmp_path: Path) -> None:
    b, run_id, worktree = _fetched_with_deep_settings(tmp_path)
    common = Project.discover(str(b))[0].common_dir
    try:
        for hosted in (False, True):
            if hosted:  # recorded by the repository's host: its answer names where the run's tree holds them
                assert sandbox_cmd("serve", run_id, cwd=b).returncode == 0
                wait_until(lambda: wire.host_alive(common), scaled(30))
            done = sandbox_cmd("exec", run_id, "--", "sh", "-c", PROBE, cwd=b)
            err = done.stderr.decode()
            assert b"evil" not in done.stdout and done.stdout.endswith(b"END\n"), (hosted, done.stdout, err)
            assert "are not loaded (a/b/.mcp.json, pkg/deep/.claude/ are empty inside the sandbox)" in err, err
            # Started deeper still, by the worktree's path: the same.
            below = sandbox_cmd(
                "exec", run_id, "--", "sh", "-c", "cat deep/.claude/settings.json", cwd=worktree / "pkg"
            )
            assert b"evil" not in below.stdout, (hosted, below.stdout)
            # Only hidden inside: the worktree's files are as the run has them.
            assert (worktree / "a/b/.mcp.json").read_text() == DEEP["a/b/.mcp.json"]
        assert f"{run_id} start run_command" in Path(wire.host_dir(common), wire.LOG).read_text()
        # Unconfined nothing could hide them: refused, host up or not, before anything is recorded (the
        # host refuses the start: the client, which sees only where the command starts, learns of the deeper
        # ones from the host's answer).
        before = _calls(b, run_id)
        refused = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", PROBE, cwd=b)
        assert refused.returncode == 1 and b"evil" not in refused.stdout and b"END" not in refused.stdout
        assert b"without '--isolate off'" in refused.stderr, refused.stderr
        assert _calls(b, run_id) == before
        host.stop_host(common)
        wait_until(lambda: not wire.host_alive(common), scaled(30))
        before = _calls(b, run_id)
        refused = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", PROBE, cwd=b)
        assert refused.returncode == 1 and b"END" not in refused.stdout, refused.stderr
        assert b"without '--isolate off'" in refused.stderr and _calls(b, run_id) == before
    finally:
        host.stop_host(common)


@needs_bwrap
def test_a_deep_agent_settings_link_out_of_the_worktree_is_refused(tmp_path: Path) -> None:
    b, run_id, worktree = _fetched_with_deep_settings(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "settings.json").write_text('{"hooks": "outside"}')
    target = worktree / "pkg/deep/.claude"
    (target / "settings.json").unlink()
    target.rmdir()
    target.symlink_to(elsewhere)  # a program inside would follow it
    common = Project.discover(str(b))[0].common_dir
    before = _calls(b, run_id)
    linked = sandbox_cmd("exec", run_id, "--", "sh", "-c", PROBE, cwd=b)
    assert linked.returncode == 1 and b"outside" not in linked.stdout and b"END" not in linked.stdout
    assert b"pkg/deep/.claude as a link out of it" in linked.stderr, linked.stderr
    assert _calls(b, run_id) == before  # refused before anything is recorded
    told = json.loads(sandbox_cmd("--json", "doctor", run_id, cwd=b).stdout)
    assert "pkg/deep/.claude as a link out of it" in told["foreign_refusal"]
    try:
        assert sandbox_cmd("serve", run_id, cwd=b).returncode == 0
        wait_until(lambda: wire.host_alive(common), scaled(30))
        hosted = sandbox_cmd("exec", run_id, "--", "sh", "-c", PROBE, cwd=b)
        assert hosted.returncode == 1 and b"outside" not in hosted.stdout and b"END" not in hosted.stdout
        assert b"pkg/deep/.claude as a link out of it" in hosted.stderr, hosted.stderr
    finally:
        host.stop_host(common)


@needs_bwrap
def test_sandbox_run_and_the_mcp_servers_run_command_find_a_fetched_runs_deep_settings_empty(tmp_path: Path) -> None:
    from mcp import ClientSession

    from tests.mcp.test_mcp import serve

    b, run_id, _worktree = _fetched_with_deep_settings(tmp_path)
    wrapper = tmp_path / "bin" / "my-agent.sh"  # a wrapper that goes down before starting its agent
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\n{PROBE}\n")
    wrapper.chmod(0o755)
    done = sandbox_cmd("run", run_id, "--", str(wrapper), cwd=b)
    err = done.stderr.decode()
    assert done.returncode == 0 and b"evil" not in done.stdout and b"END" in done.stdout, (done.stdout, err)
    assert "a/b/.mcp.json, pkg/deep/.claude/ are empty inside the sandbox" in err, err

    @serve(b, "--run", run_id)
    async def answer(s: ClientSession) -> object:
        r = await s.call_tool("run_command", {"command": PROBE})
        return r.structured_content

    shown = json.dumps(answer)
    assert "END" in shown and "evil" not in shown, shown
    host.stop_host(Project.discover(str(b))[0].common_dir)


@needs_bwrap
def test_doctor_lists_a_fetched_runs_deep_agent_settings_and_a_run_of_its_own_sees_them(tmp_path: Path) -> None:
    b, run_id, _worktree = _fetched_with_deep_settings(tmp_path)
    data = json.loads(sandbox_cmd("--json", "doctor", run_id, cwd=b).stdout)
    assert data["foreign_masked"] == ["a/b/.mcp.json", "pkg/deep/.claude/"] and data["foreign_refusal"] is None
    text = sandbox_cmd("doctor", run_id, cwd=b).stdout.decode()
    assert "each one its recorded tree has them in); there now: a/b/.mcp.json, pkg/deep/.claude/" in text, text
    # Clone A's run is its own there: its agents load them.
    a = tmp_path / "a"
    own = sandbox_cmd("exec", run_id, "--", "sh", "-c", PROBE, cwd=a)
    assert own.returncode == 0 and own.stdout.count(b"evil") == 2, own.stderr
    assert b"empty inside the sandbox" not in own.stderr
    assert json.loads(sandbox_cmd("--json", "doctor", run_id, cwd=a).stdout)["foreign_masked"] is None


def test_the_tree_search_finds_every_settings_path_and_follows_a_moved_head_through_changed_subtrees(
    tmp_path: Path,
) -> None:
    files = {
        "README.md": "x",
        ".env": "X=1",
        "pkg/deep/.claude/settings.json": "{}",
        "pkg/deep/.claude/inner/.env": "inside one found: masked with it",
        "a/b/.mcp.json": "{}",
        "a/b/c/d/e/.codex/config.toml": "x",
        "z/.gemini": "a file, not a folder",
        "same/one.txt": "1",
        "same/.env": "2",
    }
    path = make_repo(tmp_path / "r", files)
    repo = pygit2.Repository(str(path))
    first = str(repo.head.peel(pygit2.Tree).id)
    found = settingstree.search(repo, first)
    assert found == [".env", "a/b/.mcp.json", "a/b/c/d/e/.codex", "pkg/deep/.claude", "same/.env", "z/.gemini"]
    # The head moves: one settings path gone, one added deeper; the unchanged subtrees' come from before.
    (path / "a/b/.mcp.json").unlink()
    (path / "new/x/y").mkdir(parents=True)
    (path / "new/x/y/.env").write_text("Y=2")
    commit_all(path, "moved")
    second = str(repo.head.peel(pygit2.Tree).id)
    moved = settingstree.search(repo, second, SettingsFound(tree=first, paths=found))
    assert moved == settingstree.search(repo, second)
    assert moved == [".env", "a/b/c/d/e/.codex", "new/x/y/.env", "pkg/deep/.claude", "same/.env", "z/.gemini"]
    # A search kept of a tree this repository does not hold: the whole tree is searched.
    gone = SettingsFound(tree="1" * 40, paths=["bogus/.env"])
    assert settingstree.search(repo, second, gone) == moved


def test_a_runs_recorded_settings_are_kept_per_tree_and_the_masks_follow_them_down(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    started = sandbox_cmd("start", "--json", cwd=repo)
    run_id = str(json.loads(started.stdout)["run"])
    assert sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", _plant(DEEP), cwd=repo).returncode == 0
    run = open_run(repo, run_id)
    assert settingstree.recorded(run) == ["a/b/.mcp.json", "pkg/deep/.claude"]
    kept = from_json(SettingsFound, (Path(run.dir) / settingstree.CACHE).read_bytes())
    assert kept.tree == str(run.repo[run.head()].peel(pygit2.Tree).id) and kept.paths == settingstree.recorded(run)
    real = Path(run.worktree).resolve()
    # The masks: what is there now in each recorded path's directory and those above it, the start dir's too.
    (real / "a/.env").write_text("made since, above a recorded one")
    (real / "a/b/c").mkdir()
    (real / "a/b/c/.gemini").mkdir()  # below, in no directory the tree names: not looked for
    paths = foreign.settings_paths(run.worktree, "", settingstree.recorded(run))
    assert paths == [f"{real}/a/.env", f"{real}/a/b/.mcp.json", f"{real}/pkg/deep/.claude"]
    assert foreign.settings_paths(run.worktree, "a/b/c", ["a/b/.mcp.json"]) == [
        f"{real}/a/.env",
        f"{real}/a/b/.mcp.json",
        f"{real}/a/b/c/.gemini",
    ]


@needs_bwrap
def test_a_damaged_recorded_tree_is_reported_not_read_as_holding_no_settings(tmp_path: Path) -> None:
    """Where the settings are cannot be known from a garbled tree: a command is refused in one line, doctor says
    why, and nothing is masked as if the tree held none."""
    b, run_id, _worktree = _fetched_with_deep_settings(tmp_path)
    run = open_run(b, run_id)
    head = run.repo[run.state().head].peel(pygit2.Tree)
    replace_stored_object(b, str(head["pkg"].id), b"garbage that is no tree")
    done = sandbox_cmd("exec", run_id, "--", "true", cwd=b)
    err = done.stderr.decode()
    assert done.returncode == 1 and "recorded tree of run" in err and "git fsck" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    told = sandbox_cmd("--json", "doctor", run_id, cwd=b)
    assert "recorded tree of run" in json.loads(told.stdout)["foreign_refusal"], told.stderr
