"""The agent's git is the run's git: git attacks from inside a run's worktree never reach the user.

Each attack is a real process run in a real run's worktree, through ``sandbox exec`` (the way an
agent's tool call runs) and by hand (an agent started in the worktree without the sandbox's
environment). Before and after, the user's refs, stash, config, hooks, worktree list, index and
files, the user's own linked worktree and another run's worktree are compared byte for byte, and
the agent's own git keeps working inside the run (its commit succeeds there).

Out of scope here (OS confinement, tests/reliability/test_escapes.py): ``GIT_DIR``/``GIT_COMMON_DIR``
or ``--git-dir`` pointing at the user's repository, rewriting the worktree's ``.git`` file, and
``git push`` to the user's repository by its path: git does what the user could do by hand there.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from .helpers import TIMEOUT, git, ok, sb, tree_digest, write

#: Attacks on the run's own config and hooks: refused inside the sandbox, which binds them read-only.
REFUSED_INSIDE = {"config", "write-common-config", "write-common-hooks"}
ATTACKS = {
    "stash": "echo agent >> README.md && git stash",
    "stash-with-hooks-off": "echo agent2 >> README.md && git -c core.hooksPath=/dev/null stash",
    "branch-f": "git branch -f main HEAD && git branch -f side HEAD",
    "checkout-b": "git checkout -q -b agent-branch",
    "tag": "git tag v-agent && git tag -f v1 HEAD",
    "update-ref-user-branch": "git update-ref refs/heads/main HEAD && git update-ref refs/stash HEAD",
    "config": "git config user.name Mallory && git config core.hooksPath /tmp/evil-hooks"
    " && git config --add remote.origin.url /tmp/evil",
    "write-common-hooks": 'd="$(git rev-parse --git-common-dir)/hooks" && mkdir -p "$d"'
    ' && printf "#!/bin/sh\\necho pwned\\n" > "$d/pre-commit" && chmod +x "$d/pre-commit"',
    "write-common-config": 'c="$(git rev-parse --git-common-dir)/config"'
    ' && printf "[core]\\n\\thooksPath = /tmp/evil\\n" >> "$c"',
    "worktree-remove-user-linked": 'git worktree remove -f -f "$USER_LINKED"; git worktree prune; true',
    "worktree-remove-other-run": 'git worktree remove -f -f "$OTHER_RUN"; true',
    "gc-prune": "git gc -q --prune=now",
    "reflog-expire": "git reflog expire --expire=now --all",
}


def _digest_dir(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def user_snapshot(repo: Path, linked: Path, other_wt: Path) -> dict[str, object]:
    """Everything of the user's an agent's git could reach, byte for byte."""
    common = repo / ".git"
    return {
        "refs": [
            line
            for line in git(repo, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
            if not line.startswith("refs/sandbox/")
        ],
        "refs-files": sorted(p for p in _digest_dir(common / "refs") if not p.startswith("sandbox/")),
        "packed-refs": (common / "packed-refs").read_bytes() if (common / "packed-refs").exists() else None,
        "HEAD": (common / "HEAD").read_bytes(),
        "stash": git(repo, "stash", "list"),
        "config": (common / "config").read_bytes(),
        "hooks": _digest_dir(common / "hooks"),
        "info": _digest_dir(common / "info"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "worktree-admin": _digest_dir(common / "worktrees"),
        "index": (common / "index").read_bytes(),
        "files": tree_digest(repo),
        "linked-files": tree_digest(linked),
        "linked-status": git(linked, "status", "--porcelain"),
        "other-run-files": tree_digest(other_wt),
        "objects-alive": git(repo, "fsck", "--connectivity-only", "--no-dangling"),
    }


@pytest.fixture
def setting(user_repo: Path, tmp_path: Path) -> dict[str, Path | str]:
    """A user repository with a linked worktree holding an uncommitted file, and two runs."""
    linked = tmp_path / "linked"
    git(user_repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    write(linked, "wip.txt", "the user's uncommitted work\n")
    run_id = json.loads(ok("start", "--json", cwd=user_repo))["run"]
    other = json.loads(ok("start", "--json", cwd=user_repo))
    wt = ok("path", run_id, cwd=user_repo).strip()
    return {"repo": user_repo, "linked": linked, "run": run_id, "wt": Path(wt), "other": Path(other["worktree"])}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_git_attack_from_the_run_stays_in_the_run(setting: dict[str, Path | str], attack: str) -> None:
    repo, linked, wt, other = (Path(str(setting[k])) for k in ("repo", "linked", "wt", "other"))
    run_id = str(setting["run"])
    before = user_snapshot(repo, linked, other)
    env = {"USER_LINKED": str(linked), "OTHER_RUN": str(other)}
    # Through the sandbox, as an agent's tool call runs.
    proc = sb("exec", run_id, "--", "sh", "-c", ATTACKS[attack], cwd=repo, env=env)
    if attack in REFUSED_INSIDE:  # the run's config and hooks are read-only inside (sandbox.store.gitguard)
        assert proc.returncode != 0 and b"git/" in proc.stderr, f"{attack}: {proc.stderr.decode()}"
    else:
        assert proc.returncode == 0, f"{attack}: {proc.stderr.decode()}"
    assert user_snapshot(repo, linked, other) == before, attack
    # By hand in the worktree: an agent started there without the sandbox's environment.
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_CONFIG")} | env
    subprocess.run(["sh", "-c", ATTACKS[attack]], cwd=wt, env=full_env, capture_output=True, timeout=TIMEOUT)
    assert user_snapshot(repo, linked, other) == before, attack
    # The agent's own git still works in the run: a commit succeeds, on the run's own refs.
    write(wt, "agent.txt", f"{attack}\n")
    git(wt, "add", "agent.txt")
    git(wt, "commit", "-q", "--no-verify", "-m", f"agent: {attack}")
    assert git(wt, "log", "-1", "--format=%s").strip() == f"agent: {attack}"
    assert git(wt, "fsck", "--connectivity-only", "--no-dangling").strip() == ""
    assert user_snapshot(repo, linked, other) == before, attack
    # And the sandbox still records the run's files.
    ok("exec", run_id, "--", "sh", "-c", "echo done > after.txt", cwd=repo)
    assert (wt / "after.txt").exists() and not (repo / "after.txt").exists()
