"""Your own git in a run's worktree runs nothing the agent planted (issue 32, item 3).

A confined agent (real bubblewrap, through ``sandbox exec``) tries every way it has to make git run a
program: the repository's config (fsmonitor, an external diff, a pager, a hooks path, filters,
textconv, an include), a hook, the worktree's ``.git`` file and the git dir's ``commondir`` pointing
at a git directory of its own, and a staged submodule whose ``.git`` names one. Then the user's real
``git status``, ``git diff`` and ``git commit`` in the worktree: no marker file may appear.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import git, sandbox_cmd

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _start(repo: Path) -> tuple[str, Path]:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    return info["run"], Path(info["worktree"])


def _plant(marks: Path) -> str:
    """The agent's script: every way to make the user's git run ``touch <marks>/<name>``."""
    m = str(marks)
    return f"""
set +e
hook='#!/bin/sh
touch {m}/$(basename "$0")'
git config core.fsmonitor "touch {m}/fsmonitor; false"
git config diff.external "touch {m}/diff-external; false"
git config core.pager "touch {m}/pager; cat"
mkdir -p .myhooks && printf '%s\\n' "$hook" > .myhooks/pre-commit && chmod +x .myhooks/pre-commit
git config core.hooksPath "$PWD/.myhooks"
printf '%s\\n' "$hook" > ../git/hooks/pre-commit; chmod +x ../git/hooks/pre-commit
printf '[core]\\n\\tfsmonitor = "touch {m}/include; false"\\n' > .inc
cat >> ../git/config <<EOF
[filter "x"]
	clean = sh -c 'touch {m}/filter; cat'
[diff "t"]
	textconv = sh -c 'touch {m}/textconv; cat "\\$1"' -
[include]
	path = $PWD/.inc
EOF
printf '* filter=x diff=t\\n' > .gitattributes
echo changed >> README.md
# a git dir of its own, with the worktree's .git file or commondir naming it
cp -R ../git .evil
printf '[core]\\n\\tfsmonitor = "touch {m}/pointer; false"\\n' >> .evil/config
printf '%s\\n' "$hook" > .evil/hooks/pre-commit 2>/dev/null; chmod +x .evil/hooks/pre-commit
printf 'gitdir: .evil\\n' > .git
printf '%s\\n' "$PWD/.evil" > ../git/commondir
# a submodule whose .git names a repository it wrote
git init -q --bare .sub && git --git-dir=.sub config core.bare false
git --git-dir=.sub config core.fsmonitor "touch {m}/submodule; false"
mkdir -p sub && printf 'gitdir: ../.sub\\n' > sub/.git
c=$(git --git-dir=.sub -c user.name=a -c user.email=a@b.c commit-tree -m s $(git --git-dir=.sub mktree </dev/null))
git --git-dir=.sub update-ref HEAD "$c"
git update-index --add --cacheinfo "160000,$c,sub"
# the agent's own settings still work: --global, and a commit
git config --global user.name "Agent" && git config --global --get user.name > .agent-global
git -c user.email=a@b.c commit -qm "agent commit" --allow-empty && echo ok > .agent-commit
exit 0
"""


@needs_bwrap
def test_the_users_git_in_the_worktree_runs_nothing_a_confined_agent_planted(repo: Path, tmp_path: Path) -> None:
    run_id, worktree = _start(repo)
    marks = tmp_path / "marks"
    marks.mkdir()
    planted = sandbox_cmd("exec", run_id, "--", "sh", "-c", _plant(marks), cwd=repo)
    assert planted.returncode == 0, planted.stderr.decode()[-3000:]
    # The agent's git still works inside: its own settings file, its commits.
    assert (worktree / ".agent-global").read_text() == "Agent\n"
    assert (worktree / ".agent-commit").read_text() == "ok\n"
    assert (worktree / ".git").read_text() == "gitdir: ../git\n"
    # The user's own git, unconfined, in the worktree.
    for args in (
        ["status"],
        ["status", "--short"],
        ["diff"],
        ["diff", "HEAD"],
        ["add", "README.md"],
        ["diff", "--cached"],
    ):
        subprocess.run(["git", *args], cwd=worktree, capture_output=True, check=False, timeout=60)
        assert sorted(p.name for p in marks.iterdir()) == [], args
    subprocess.run(["git", "commit", "-qm", "mine"], cwd=worktree, capture_output=True, check=False, timeout=60)
    subprocess.run(
        ["git", "-c", "core.pager=", "log", "-p", "-1"], cwd=worktree, capture_output=True, check=False, timeout=60
    )
    assert sorted(p.name for p in marks.iterdir()) == []
    assert git(worktree, "rev-parse", "--absolute-git-dir").strip() == str(worktree.parent / "git")
    # Nothing of the agent's reached the run's config: sandbox status has nothing to warn about.
    # Nothing of the agent's reached the run's config or hooks; what status names is the submodule,
    # whose repository 'git add -A' would still run git in.
    status = sandbox_cmd("status", run_id, cwd=repo)
    assert status.returncode == 0, status.stderr
    warned = status.stdout.decode().split("warning:", 1)[1].splitlines()[1:]
    assert [line.strip() for line in warned] == [
        "submodule sub has a repository of its own (git add -A there runs git in it)"
    ]


def test_status_warns_about_what_an_unconfined_agent_planted_in_the_runs_git(repo: Path) -> None:
    run_id, worktree = _start(repo)
    assert b"warning" not in sandbox_cmd("status", run_id, cwd=repo).stdout
    git_dir = worktree.parent / "git"
    # As an agent running unconfined (isolation off) could: straight into the run's git.
    with open(git_dir / "config", "a", encoding="utf-8") as fh:
        fh.write('[core]\n\tfsmonitor = "touch /tmp/x\u202e"\n[diff "t"]\n\ttextconv = cat\n')
    hook = git_dir / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\ntouch /tmp/y\n")
    hook.chmod(0o755)
    (git_dir / "commondir").write_text(str(worktree / "elsewhere") + "\n")
    out = sandbox_cmd("status", run_id, cwd=repo).stdout.decode()
    assert "warning" in out
    assert "config sets core.fsmonitor = touch /tmp/x\\u202e" in out
    assert "config sets diff.t.textconv = cat" in out
    assert "hook pre-commit (not a copy of yours)" in out
    assert "commondir names another directory" in out
    assert "\u202e" not in out


def test_start_suggests_cd_into_the_worktree_only_when_the_agent_runs_confined(repo: Path) -> None:
    confined = sandbox_cmd("start", cwd=repo)
    assert confined.returncode == 0, confined.stderr
    assert b"Next: cd " in confined.stdout
    (repo / ".sandbox.toml").write_text("[isolation]\nisolate = false\n")
    unconfined = sandbox_cmd("start", cwd=repo)
    assert unconfined.returncode == 0, unconfined.stderr
    # (not a bare "cd ": a short commit id ending in "cd" before a space said so by chance)
    assert b"Next: cd " not in unconfined.stdout and b"confinement is off" in unconfined.stdout


@needs_bwrap
def test_a_run_made_before_the_guard_gets_it_at_its_next_confined_command(repo: Path) -> None:
    run_id, worktree = _start(repo)
    git_dir = worktree.parent / "git"
    # As a run made before: no commondir, no agent settings file, no hooks dir, no submodule setting.
    for name in ("commondir", "agent.gitconfig"):
        (git_dir / name).unlink()
    shutil.rmtree(git_dir / "hooks", ignore_errors=True)
    config = (git_dir / "config").read_text()
    (git_dir / "config").write_text(config.replace('[diff]\n\tignoreSubmodules = "all"\n', ""))
    assert "ignoreSubmodules" not in (git_dir / "config").read_text()
    probe = "git config core.fsmonitor x; mkdir -p ../git/hooks 2>&1; echo x > ../git/commondir"
    done = sandbox_cmd("exec", run_id, "--", "sh", "-c", probe, cwd=repo)
    assert done.returncode != 0
    assert (git_dir / "commondir").read_text() == "../git\n" and (git_dir / "hooks").is_dir()
    assert git(worktree, "config", "diff.ignoreSubmodules").strip() == "all"
    assert git(worktree, "config", "--get-all", "core.fsmonitor", check=False).strip() == ""
