"""A confined agent rewires its worktree and git dir; the user's later commands stay the user's.

Two rewirings the agent may make (its worktree and git dir are writable to it, confined or not),
followed by every user command that reads or writes a run: status, log, diff, resume, list, exec,
checkpoint, apply, undo, redo, rollback, compensate, drop, gc. The user's index, HEAD, config,
refs, hooks and files must stay byte-identical wherever the command is not apply/undo/redo (which
write only files of the user's tree, and only the run's changes), and nothing the agent configured
may run outside its sandbox (the marker of a planted command is on the private /tmp inside).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import git, sandbox_cmd, tree_digest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def gitdir_state(repo: Path) -> dict[str, object]:
    """The user's git state, byte for byte, except the sandbox's own refs and files."""
    common = repo / ".git"
    files = {}
    for name in ("index", "HEAD", "config", "packed-refs", "FETCH_HEAD", "ORIG_HEAD"):
        path = common / name
        files[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    hooks = sorted(os.listdir(common / "hooks")) if (common / "hooks").exists() else []
    refs = [
        line
        for line in git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
        if not line.startswith("refs/sandbox/")
    ]
    return {"files": files, "hooks": hooks, "refs": refs, "stash": git(repo, "stash", "list")}


def start(repo: Path) -> tuple[str, Path]:
    out = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)
    return out["run"], Path(out["worktree"])


def exec_sh(repo: Path, run_id: str, script: str, confined: bool = True) -> None:
    """``script`` in the run; ``confined=False``: as an agent running unconfined (only such a one can
    still write the run's git config and the worktree's ``.git`` file: sandbox.store.gitguard)."""
    isolate = [] if confined else ["--isolate", "off"]
    proc = sandbox_cmd("exec", run_id, *isolate, "--", "sh", "-c", script, cwd=repo, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()


def every_command(repo: Path, run_id: str) -> dict[str, int]:
    """Each user command once; their exit codes (none may crash or hang)."""
    codes = {}
    for args in (
        ["status", run_id],
        ["log", run_id],
        ["diff", run_id],
        ["resume", run_id],
        ["list"],
        ["exec", run_id, "--", "sh", "-c", "echo later > later.txt"],
        ["checkpoint", run_id, "--label", "late"],
        ["diff", run_id, "--stat"],
    ):
        proc = sandbox_cmd(*args, cwd=repo, timeout=60)
        assert "Traceback" not in proc.stderr.decode(), (args, proc.stderr.decode())
        assert proc.returncode in (0, 1, 2), (args, proc.returncode, proc.stderr.decode())
        codes[args[0]] = proc.returncode
    return codes


def test_the_worktrees_dot_git_pointed_at_the_users_git_dir(repo: Path) -> None:
    """The agent writes ``gitdir: <the user's .git>`` into its worktree's ``.git`` file."""
    run_id, _wt = start(repo)
    before = gitdir_state(repo)
    exec_sh(repo, run_id, f"echo new > n.txt; rm src/util.py; printf 'gitdir: {repo / '.git'}\\n' > .git", False)
    every_command(repo, run_id)
    assert gitdir_state(repo) == before
    for args in (["apply", run_id], ["undo", run_id], ["redo", run_id], ["undo", run_id]):
        proc = sandbox_cmd(*args, cwd=repo, timeout=60)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr.decode(), (args, proc.stderr.decode())
        assert gitdir_state(repo) == before, args
    for args in (["drop", "--force", run_id], ["gc"]):
        sandbox_cmd(*args, cwd=repo, timeout=60)
        assert gitdir_state(repo) == before, args


def test_filter_drivers_and_ident_the_agent_configures_never_run_at_apply_undo_or_rollback(
    repo: Path, tmp_path: Path
) -> None:
    """``.gitattributes`` sends every file through a driver the agent defines in its own git
    config (clean, smudge and process); apply, undo, rollback and compensate must not run it."""
    mark = tmp_path / "pwned"
    run_id, _wt = start(repo)
    assert sandbox_cmd("checkpoint", run_id, "--label", "c0", cwd=repo).returncode == 0
    cmd = f'sh -c \\"echo pwned >> {mark}; cat\\"'
    exec_sh(
        repo,
        run_id,
        "printf '* filter=evil\\n*.txt ident\\n' > .gitattributes"
        f' && git config filter.evil.clean "{cmd}" && git config filter.evil.smudge "{cmd}"'
        f' && git config filter.evil.process "{cmd}" && printf "\\$Id\\$\\nline\\n" > b.txt',
        confined=False,
    )
    exec_sh(repo, run_id, "echo more >> b.txt && echo x >> src/app.py")
    before = gitdir_state(repo)
    every_command(repo, run_id)
    for args in (
        ["apply", run_id],
        ["undo", run_id],
        ["redo", run_id],
        ["undo", run_id],
        ["undo", run_id],
        ["rollback", run_id, "--files", "--to", "c0"],
        ["compensate", run_id, "@"],
    ):
        proc = sandbox_cmd(*args, cwd=repo, timeout=60)
        assert "Traceback" not in proc.stderr.decode(), (args, proc.stderr.decode())
        assert not mark.exists(), f"the agent's filter driver ran outside its sandbox ({args[0]})"
    assert gitdir_state(repo) == before


def test_settings_the_agent_writes_in_its_worktree_never_loosen_its_confinement(repo: Path, tmp_path: Path) -> None:
    """``.sandbox.toml`` and ``pyproject.toml`` ``[tool.sandbox]`` are read from the user's tree only:
    written in the worktree they do not turn isolation off, even for a command started there."""
    run_id, wt = start(repo)
    exec_sh(
        repo,
        run_id,
        "printf '[isolation]\\nisolate = false\\nnetwork_exec = true\\nwritable = [\"/\"]\\n' > .sandbox.toml"
        " && printf '[tool.sandbox.isolation]\\nisolate = false\\n' > pyproject.toml",
    )
    mark = tmp_path / "escaped"
    for cwd in (wt, repo):
        proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", f"echo x > {mark}", cwd=cwd, timeout=60)
        assert proc.returncode == 0, proc.stderr.decode()
        assert not mark.exists(), f"a command started in {cwd} ran unconfined"
    inputs = [e["input"] for e in json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo).stdout)]
    assert [i.get("isolation") for i in inputs] == ["bwrap, network off"] * 3


def test_a_worktree_directory_swapped_for_a_symlink_into_the_users_tree_is_never_written_through(
    repo: Path,
) -> None:
    """The agent replaces its ``src`` by a symlink to the user's ``src``; the user then rolls the
    run's files back, undoes and redoes in the run: the sandbox (unconfined) writes the worktree and
    must replace the link, never write through it into the user's tree."""
    run_id, wt = start(repo)
    exec_sh(repo, run_id, "echo agent > src/app.py")
    assert sandbox_cmd("checkpoint", run_id, "--label", "c1", cwd=repo).returncode == 0
    before = (tree_digest(repo), gitdir_state(repo))
    for args in (["rollback", run_id, "--files", "--to", "c1"], ["undo", run_id], ["redo", run_id]):
        exec_sh(repo, run_id, f"rm -rf src && ln -s {repo / 'src'} src")
        proc = sandbox_cmd(*args, cwd=repo, timeout=60)
        assert "Traceback" not in proc.stderr.decode(), (args, proc.stderr.decode())
        assert (tree_digest(repo), gitdir_state(repo)) == before, f"{args[0]} wrote through the agent's symlink"


@pytest.mark.parametrize("target", ["abs-git-config", "rel-git-hooks", "other-run"])
def test_a_symlink_planted_and_applied_is_only_ever_a_link(repo: Path, target: str) -> None:
    """The agent plants a link to the user's ``.git/config`` (absolute), to ``.git/hooks`` (relative)
    or to another run's worktree; the user applies it (a link is content), then a later call turns
    the link into a file, or writes below it: applying that replaces the link, never its target."""
    run_id, _wt = start(repo)
    other_id, other_wt = start(repo)
    points_to = {
        "abs-git-config": str(repo / ".git" / "config"),
        "rel-git-hooks": ".git/hooks",
        "other-run": str(other_wt / "src"),
    }[target]
    other_before = tree_digest(other_wt)
    exec_sh(repo, run_id, f"ln -s '{points_to}' planted")
    before = gitdir_state(repo)
    proc = sandbox_cmd("apply", run_id, cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    assert os.readlink(repo / "planted") == points_to
    exec_sh(repo, run_id, "rm planted && printf '[core]\\n\\thooksPath = /tmp/evil\\n' > planted")
    proc = sandbox_cmd("apply", run_id, cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    assert not (repo / "planted").is_symlink() and "hooksPath" in (repo / "planted").read_text()
    exec_sh(repo, run_id, f"rm planted && ln -s '{points_to}' planted")
    sandbox_cmd("apply", run_id, cwd=repo)
    exec_sh(repo, run_id, "rm planted && mkdir planted && echo x > planted/pre-commit")
    proc = sandbox_cmd("apply", run_id, cwd=repo)
    assert "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
    assert gitdir_state(repo) == before
    assert tree_digest(other_wt) == other_before
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


@pytest.mark.parametrize("plant", ["deep-json", "fifo", "symlink-out"])
def test_hooks_install_over_agent_settings_refuses_in_one_line(repo: Path, tmp_path: Path, plant: str) -> None:
    """``sandbox run`` (and ``hooks install``) merge into the worktree's agent settings, which the
    agent wrote: nested deeper than Python parses, a FIFO, or a link out of the worktree."""
    run_id, _wt = start(repo)
    outside = tmp_path / "settings.json"
    outside.write_text("{}\n")
    script = {
        "deep-json": "mkdir -p .claude && python3 -c \"print('[' * 99999 + ']' * 99999)\""
        " > .claude/settings.local.json",
        "fifo": "mkdir -p .claude && mkfifo .claude/settings.local.json",
        "symlink-out": f"mkdir -p .claude && ln -s {outside} .claude/settings.local.json",
    }[plant]
    exec_sh(repo, run_id, script)
    proc = sandbox_cmd("hooks", "install", "claude-code", run_id, cwd=repo, timeout=30)
    err = proc.stderr.decode()
    assert proc.returncode not in (0, 3) and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and "settings.local.json" in err, err
    assert outside.read_text() == "{}\n"
