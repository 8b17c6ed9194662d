"""The macOS backend says what it cannot enforce (issue 31, item 7): ``sandbox doctor`` prints
:func:`sandbox.confine.seatbelt.cannot_enforce` on macOS, and the module's docstring names the same
rules. Runs anywhere: it calls the function."""

from __future__ import annotations

from sandbox.confine import seatbelt
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
