"""One verdict per path (issue 31, item 7): bubblewrap's mounts, the Seatbelt profile's writes and
``sandbox doctor --explain`` are all made from :func:`sandbox.confine.verdict.rules`, and agree path by
path on a real run's policy: what is visible, what is writable.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.cli.isolation import resolve
from sandbox.confine import bwrap, seatbelt, verdict
from sandbox.confine.policy import Policy, policy_for_run
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd

BINDS = ("--bind", "--bind-try", "--ro-bind", "--ro-bind-try")


def bwrap_view(argv: list[str], policy: Policy, path: str) -> tuple[bool, bool]:
    """(the host's file visible, writable) at ``path`` as bubblewrap's command line mounts it: its
    mounts replayed in order, the last one covering the path deciding."""
    seen = (True, False)
    end = argv.index("--", 1)
    i = 1
    while i < end:
        flag = argv[i]
        if flag == "--tmpfs":
            if verdict.covers(argv[i + 1], path):
                seen = (False, False)  # an empty directory: nothing of the host's
            i += 2
        elif flag in BINDS:
            source, dest = argv[i + 1], argv[i + 2]
            if verdict.covers(dest, path):
                empty = source in (policy.empty_file, "/dev/null") and dest != source
                seen = (False, False) if empty else (True, not flag.startswith("--ro-"))
            i += 3
        else:
            i += 1
    return seen


def seatbelt_writes(profile: str, path: str) -> bool:
    """Whether the Seatbelt profile lets ``path`` be written: the last file-write rule naming it wins."""
    writable = False
    for line in profile.splitlines():
        found = re.match(r"\((allow|deny) file-write\*(.*)\)$", line)
        if not found:
            continue
        subpaths = re.findall(r'\(subpath "([^"]*)"\)', found.group(2))
        if not found.group(2).strip() or any(verdict.covers(p, path) for p in subpaths):
            writable = found.group(1) == "allow"
    return writable


def test_bubblewrap_seatbelt_and_doctor_give_one_verdict(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    files = {
        ".ssh/id_ed25519": "key",
        ".cargo/bin/tool": "tool",
        ".m2/settings.xml": "<password>x</password>",
        "work/other/.env": "X=1",
        ".gitconfig": "[user]\n\tname = Ada\n\temail = ada@example.com\n",
        ".netrc": "machine x password y",
    }
    for rel, text in files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    proc = sandbox_cmd("start", "--json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    info = json.loads(proc.stdout)
    (tmp_path / "elsewhere.txt").write_text("below the private /tmp")
    project, _workdir, _in_run = Project.discover(str(repo))
    run = Run.open(project, info["run"])
    policy = policy_for_run(resolve(str(repo), "run", None, None), run)
    paths = {
        f"{info['worktree']}/src/app.py": (True, True),  # the run's worktree
        f"{info['git_dir']}/HEAD": (True, True),  # the run's own git directory
        str(repo / "README.md"): (False, False),  # your working tree: the agent works in its own
        str(repo / ".git" / "HEAD"): (True, False),  # your repository, protected
        str(repo / ".git" / "config"): (False, False),  # masked
        str(home / ".cargo" / "bin" / "tool"): (True, False),  # a toolchain, read-only
        str(home / ".ssh" / "id_ed25519"): (False, False),
        str(home / ".m2" / "settings.xml"): (False, False),  # a home is empty but its allowlist
        str(home / "work" / "other" / ".env"): (False, False),
        str(home / ".gitconfig"): (True, False),  # the generated identity
        str(tmp_path / "elsewhere.txt"): (False, False),  # the private /tmp
        "/etc/passwd": (True, False),  # outside the homes, as on the host
    }
    argv = bwrap.bwrap_argv("bwrap", policy, ["true"], info["worktree"])
    profile = seatbelt.seatbelt_profile(policy)
    runner = CliRunner()
    for path, expected in paths.items():
        real = os.path.realpath(path)
        said = verdict.explain(policy, path)
        assert (said.visible, said.writable) == expected, (path, said)
        assert bwrap_view(argv, policy, real) == expected, (path, said)
        # Seatbelt cannot hide (doctor says so on macOS); what it lets be written is the same.
        assert seatbelt_writes(profile, real) == expected[1], (path, said)
        shown = runner.invoke(
            cli, ["-C", str(repo), "--json", "doctor", info["run"], "--explain", path], env=env, catch_exceptions=False
        )
        assert shown.exit_code == 0, shown.output
        doctor = json.loads(shown.output)
        assert (doctor["visible"], doctor["writable"], doctor["why"]) == (said.visible, said.writable, said.why)


def test_the_corners_where_the_readers_used_to_differ(tmp_path: Path) -> None:
    """Agent state a run writes a copy of (doctor said hidden, bubblewrap bound the copy writable), a
    read-only path inside a writable one and a secret inside writable agent state (Seatbelt let both
    be written, bubblewrap did not)."""
    home, work = tmp_path / "home", tmp_path / "work"
    for d in (home / ".agent" / "keys", work / "bin", home / "run"):
        d.mkdir(parents=True)
    for f in (home / ".agent.json", home / "run" / "agent.json", home / ".agent" / "keys" / "k", work / "bin" / "tool"):
        f.write_text("x")
    (home / "empty").write_text("")
    policy = Policy(
        writable=(str(work),),
        protected=(),
        extra_writable=(str(home / ".agent"),),
        readable=(str(work / "bin"),),
        hidden=(str(home),),
        reasons=((str(home), "a home"),),
        private=((str(home / "run" / "agent.json"), str(home / ".agent.json")),),
        masked=(str(home / ".agent" / "keys") + "/",),
        empty_file=str(home / "empty"),
    )
    expected = {
        str(home / ".agent.json"): (True, True),  # the run's own copy, writable
        str(work / "bin" / "tool"): (True, False),
        str(work / "other"): (True, True),
        str(home / ".agent" / "keys" / "k"): (False, False),
        str(home / ".agent" / "state"): (True, True),
        str(home / "x"): (False, False),
    }
    argv = bwrap.bwrap_argv("bwrap", policy, ["true"], str(work))
    profile = seatbelt.seatbelt_profile(policy)
    for path, (visible, writable) in expected.items():
        said = verdict.explain(policy, path)
        assert (said.visible, said.writable) == (visible, writable), (path, said)
        assert bwrap_view(argv, policy, path) == (visible, writable), path
        assert seatbelt_writes(profile, path) == writable, path


def test_doctor_without_a_run_decides_as_a_run_does(repo: Path, tmp_path: Path) -> None:
    """``doctor --explain`` with no run named reads the policy any run of the repository gets
    (:func:`sandbox.confine.verdict.any_run`), not a list of its own: your repository is protected."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("key")
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    runner = CliRunner()
    said = {}
    for path in (repo / ".git" / "HEAD", home / ".ssh" / "id_ed25519", Path("/etc/passwd")):
        shown = runner.invoke(cli, ["-C", str(repo), "--json", "doctor", "--explain", str(path)], env=env)
        assert shown.exit_code == 0, shown.output
        said[path.name] = json.loads(shown.output)
    assert said["HEAD"]["visible"] and not said["HEAD"]["writable"]
    assert said["HEAD"]["why"] == "read-only: your repository, protected"
    assert not said["id_ed25519"]["visible"] and "allow_read" in said["id_ed25519"]["hint"]
    assert said["passwd"]["visible"] and said["passwd"]["root"] is None
