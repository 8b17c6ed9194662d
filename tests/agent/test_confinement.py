"""The confinement a command gets is decided in the library from what the CLI read of the machine
(issue 31, item 7: the CLI only reads the machine): the same settings and machine give the same
Isolation, whatever the process's own environment says."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.agent.confinement import Machine, decide
from sandbox.confine.proxy import AllowlistError
from sandbox.run.config import Config


def test_the_decision_reads_the_machine_it_is_given_not_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "ada"
    (home / "allowed").mkdir(parents=True)
    monkeypatch.setenv("HOME", "/nowhere")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://env.example:1")
    cfg = Config(allow_read=["~/allowed"], deny_read=["~/.extra-secret"])
    machine = Machine(
        str(home),
        "bwrap",
        "/usr/bin/bwrap",
        installed=("/opt/python",),
        data_root=str(tmp_path / "data"),
        identity=("Ada", "ada@example.com"),
        environ={"ANTHROPIC_BASE_URL": "http://proxy.example:4000"},
    )
    iso = decide(cfg, machine, None, "run", None, None, ("claude", None), ("claude",))
    assert iso.enabled and iso.network_mode == "allow" and iso.user_home == str(home)
    assert iso.allow is not None and "proxy.example:4000" in iso.allow and "env.example:1" not in iso.allow
    assert str(home / "allowed") in iso.readable and "/opt/python" in iso.readable
    assert str(home / ".extra-secret") in iso.masked and str(home / ".ssh") in iso.masked
    assert f"{home}/.claude/" in iso.writable and iso.identity == ("Ada", "ada@example.com")
    assert "ANTHROPIC_*" in iso.env_allow
    # exec: no agent state, the network off, the memory bound only where it is free.
    plain = decide(cfg, machine, None, "exec", None, None)
    assert plain.writable == () and plain.network_mode == "off" and plain.limits.memory_if_free
    # Inside a sandbox of ours: not confined again, unless asked.
    inside = Machine(str(home), "bwrap", "/usr/bin/bwrap", inherited=True)
    assert decide(cfg, inside, None, "exec", None, None).inherited
    assert not decide(cfg, inside, None, "exec", "on", None).inherited
    # Seatbelt cannot route through the proxy: allow becomes on.
    assert decide(cfg, Machine(str(home), "seatbelt", None), None, "run", None, None).network_mode == "on"
    with pytest.raises(AllowlistError):
        decide(Config(network_allow=["not a host"]), machine, None, "run", None, None)
