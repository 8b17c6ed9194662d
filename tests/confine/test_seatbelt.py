"""The macOS backend says what it cannot enforce (issue 31, item 7): ``sandbox doctor`` prints
:func:`sandbox.confine.seatbelt.cannot_enforce` on macOS, and the module's docstring names the same
rules. Runs anywhere: it calls the function (and the gate's test runs a stand-in for ``sandbox-exec``)."""

from __future__ import annotations

from pathlib import Path

from sandbox.confine import seatbelt, spawn
from sandbox.confine.policy import Isolation


def test_seatbelt_names_every_rule_it_cannot_enforce() -> None:
    lines = seatbelt.cannot_enforce(Isolation(backend="seatbelt", private=("/Users/ada/.claude.json",)))
    text = "\n".join(lines)
    for rule in (
        "home allowlist",
        "masked secrets",
        "private /tmp",
        "PID namespace",
        "IPC namespace",
        "keyring",
        "Unix sockets",
        "open-file limits",
        "inotify",
        "--network allow",
        "Git LFS links",
    ):
        assert rule in text, rule
    assert "the agent writes /Users/ada/.claude.json itself" in text
    assert not any("/Users" in line for line in seatbelt.cannot_enforce(Isolation(backend="seatbelt")))
    doc = seatbelt.__doc__ or ""
    for rule in (
        "home allowlist",
        "private ``/tmp``",
        "PID namespace",
        "IPC namespace",
        "keyring",
        "inotify",
        "Git LFS",
    ):
        assert rule in doc, rule


def test_the_command_starts_only_once_the_gate_has_passed(tmp_path: Path) -> None:
    """``sandbox exec`` hands ``spawn`` a gate: the host has made the call's start durable. The Seatbelt
    path started the command without calling it (the command could run before its start was recorded, and
    a fetched run's deeper agent settings were never looked for). ``sandbox-exec`` itself exists only on
    macOS; a real script in its place takes its arguments (``-p PROFILE CMD...``) and runs the command."""
    stand_in = tmp_path / "sandbox-exec"
    stand_in.write_text('#!/bin/sh\nshift 2\nexec "$@"\n')
    stand_in.chmod(0o755)
    passed = tmp_path / "passed"
    seen = tmp_path / "seen"
    iso = Isolation(enabled=True, network=False, program=str(stand_in), backend="seatbelt")
    policy = spawn.Policy(writable=(str(tmp_path),), protected=())
    argv = ["sh", "-c", f'if [ -e "{passed}" ]; then echo after; else echo before; fi > "{seen}"']
    assert spawn.spawn(iso, policy, argv, str(tmp_path), gate=passed.touch).wait() == 0
    assert seen.read_text() == "after\n"
