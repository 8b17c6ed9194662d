"""Every git the sandbox runs is built by one function, with lazy fetch and transports off.

A run's git dir is the agent's to write. With a sparse index and a promisor remote of its own
making, plain git meets a tree that is not there, lazily fetches it and so runs the agent's
``uploadpack`` command, outside any confinement, with the user's rights (issue 20, item 8).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import sys
from pathlib import Path

from conftest import git, make_repo, sandbox_cmd

from sandbox.store import gitcli, sparse

ROOT = Path(__file__).resolve().parents[2] / "sandbox"
#: Modules that may spell a git command line themselves, and why.
EXEMPT = {
    # The demo plays the user at their own terminal: its git commands are the user's, shown as typed.
    "cli/demo.py",
}


def start(repo: Path) -> tuple[str, Path]:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    return out["run"], Path(out["worktree"])


def plant_lazy_fetch(worktree: Path, marker: Path, remote: Path) -> None:
    """What a hostile agent can do in its own git dir: a sparse index whose sparse directory names a
    tree that is missing, and a promisor remote whose ``uploadpack`` writes ``marker``."""
    (worktree / "zz").mkdir()
    (worktree / "zz" / "h").write_text("3\n")
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", "zz")
    tree = git(worktree, "rev-parse", "HEAD:zz").strip()
    for key, value in (
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", "origin"),
        ("remote.origin.url", str(remote)),
        ("remote.origin.promisor", "true"),
        ("remote.origin.uploadpack", f"touch {marker}; git-upload-pack"),
        # protocol.allow=never alone would be loosened by this; GIT_ALLOW_PROTOCOL is not.
        ("protocol.file.allow", "always"),
    ):
        git(worktree, "config", key, value)
    git(worktree, "sparse-checkout", "init", "--cone", "--sparse-index")
    git(worktree, "sparse-checkout", "set", "a")
    gitdir = Path(git(worktree, "rev-parse", "--absolute-git-dir").strip())
    (gitdir / "objects" / tree[:2] / tree[2:]).unlink()


def test_lazy_fetch_never_runs_the_agents_command(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a/f": "1\n", "b/g": "2\n"})
    _run_id, worktree = start(repo)
    marker = tmp_path / "fetched"
    plant_lazy_fetch(worktree, marker, repo)
    assert sparse.may_be_sparse(str(worktree))

    # The same git command line without our settings runs the agent's command: the trap is real.
    import subprocess

    plain = subprocess.run(
        ["git", "--no-optional-locks", "-c", "core.hooksPath=/dev/null", "ls-files", "-t", "-s", "-z"],
        cwd=worktree,
        capture_output=True,
        check=False,
    )
    assert marker.exists(), plain.stderr.decode()
    marker.unlink()

    # The sandbox's own readers of the run's index: the sparse exclusions, and a plain listing.
    found = sparse.excluded(str(worktree))
    assert "b/g" in found
    gitcli.git(["ls-files", "-t", "-s", "-z"], str(worktree), check=False)
    gitcli.git(["cat-file", "-e", git(worktree, "rev-parse", "HEAD^{tree}").strip()], str(worktree), check=False)
    assert not marker.exists()


def test_command_pins_transports_and_lazy_fetch_off() -> None:
    argv, env = gitcli.command(["status"], {"GIT_ALLOW_PROTOCOL": "file"})
    assert argv[0] == "git" and argv[-1] == "status"
    for setting in ("protocol.allow=never", "core.fsmonitor=false", "core.hooksPath=/dev/null"):
        assert argv[argv.index(setting) - 1] == "-c"
    assert env["GIT_ALLOW_PROTOCOL"] == "" and env["GIT_NO_LAZY_FETCH"] == "1"
    argv, env = gitcli.command(["fetch", "origin"], network=True)
    assert "protocol.allow=never" not in argv and env["GIT_NO_LAZY_FETCH"] == "1"


def _git_command_lines(tree: ast.AST) -> list[int]:
    """Lines of list/tuple displays that start with the literal ``"git"`` (a git command line)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == "git":
                found.append(node.lineno)
    return found


def test_every_git_command_line_is_built_by_one_function() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in EXEMPT:
            continue
        lines = _git_command_lines(ast.parse(path.read_text(), str(path)))
        if rel == "store/gitcli.py":
            assert len(lines) == 1, "gitcli spells the git command line once, in command()"
            continue
        offenders.extend(f"sandbox/{rel}:{line}" for line in lines)
    assert offenders == [], "build git command lines with sandbox.store.gitcli.command(): " + ", ".join(offenders)


def test_every_git_a_command_runs_has_transports_off(tmp_path: Path) -> None:
    """A ``git`` first on PATH that records each command line and environment, then runs git."""
    shim = tmp_path / "bin"
    shim.mkdir()
    log = tmp_path / "calls.jsonl"
    real = shutil.which("git")
    assert real is not None
    (shim / "git").write_text(
        f"#!{sys.executable} -S\n"
        "import json, os, sys\n"
        f"with open({str(log)!r}, 'a') as fh:\n"
        "    e = os.environ.get\n"
        "    fh.write(json.dumps({'argv': sys.argv[1:], 'allow': e('GIT_ALLOW_PROTOCOL'),"
        " 'lazy': e('GIT_NO_LAZY_FETCH'), 'params': e('GIT_CONFIG_PARAMETERS', '')}) + '\\n')\n"
        f"os.execv({real!r}, [{real!r}, *sys.argv[1:]])\n"
    )
    (shim / "git").chmod(stat.S_IRWXU)
    repo = make_repo(tmp_path / "repo", {"a/f": "1\n", "b/g": "2\n"})
    env = {"PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    proc = sandbox_cmd("start", "--json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    run_id = json.loads(proc.stdout)["run"]
    (Path(json.loads(proc.stdout)["worktree"]) / "b" / "new").write_text("new\n")
    for args in (("diff", run_id), ("apply", run_id, "--yes"), ("status", run_id)):
        sandbox_cmd(*args, cwd=repo, env=env)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    ours = [c for c in calls if "protocol.allow=never" in c["argv"] or "'protocol.allow=never'" in c["params"]]
    assert len(calls) >= 2
    assert ours == calls, [c["argv"] for c in calls if c not in ours]
    assert all(c["allow"] == "" and c["lazy"] == "1" for c in calls)
