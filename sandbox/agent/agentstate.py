"""The agent's own state in the user's home (``~/.claude``, ``~/.gemini``, ...): writable in the sandbox,
except its configuration, which stays read-only, and the state files each run writes a copy of.

Standard library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Sequence

from sandbox.agent import adapters
from sandbox.confine.policy import ConfinementError, Isolation

#: The paths an agent needs to write to keep its own state (``~`` is expanded by the CLI): each agent's
#: ``STATE`` (its adapter's), and npm's cache. Directories are created when missing; a missing ``.json``
#: file is created as ``{}`` (Claude Code hangs at start when it cannot write ``~/.claude.json``, and
#: creates a lock and temp files beside it, which fail on the read-only home and fall back to a direct
#: write). Under ``sandbox run`` Claude Code, Gemini CLI and Codex write a home of their own in the run
#: instead: their entries here are dropped (each adapter's ``REPLACES``), and ``~/.codex`` is read-only
#: for Codex too.
DEFAULT_AGENT_STATE = (*(p for name in adapters.names() for p in adapters.agent(name).STATE), "~/.npm/")
#: Agent state that is configuration: what the user's own, unconfined agent loads at its next start
#: (hooks and MCP servers it runs, commands, agents, skills, plugins, instructions). Read-only in the
#: sandbox even though the state around it is writable, so that a confined process cannot plant a
#: command that runs outside the sandbox later. A missing one is created first (a directory empty,
#: a ``.json`` file as ``{}``, another file empty): the agent could otherwise create it.
AGENT_CONFIG = tuple(p for name in adapters.names() for p in adapters.agent(name).CONFIG)
#: Agent state files that hold configuration (``~/.claude.json``: the MCP servers Claude Code starts)
#: and that the agent rewrites at every start, so they cannot be read-only: each run's sandbox
#: writes a copy of its own (in the run's directory, seeded from yours the first time), and yours
#: is never written from inside. Both lists come from the registry (:mod:`sandbox.agent.adapters`).
AGENT_PRIVATE = tuple(p for name in adapters.names() for p in adapters.agent(name).PRIVATE)


def state_of(programs: Sequence[str | None]) -> tuple[str, ...]:
    """The default agent state (:data:`DEFAULT_AGENT_STATE`) that the agents started as ``programs``
    (a command, or a ``--hooks`` agent's program) write: each its own, named for its family
    (``~/.claude.json`` for ``claude``, ``~/.codex/`` for ``codex``). Another agent's state stays
    read-only, as does what no agent named here owns (``~/.npm/``: an ``npx`` package planted in its
    cache runs unconfined at your next ``npx``)."""
    known = (adapters.by_program(p) for p in programs if p)
    owned = {entry for module in known if module is not None for entry in module.STATE}
    return tuple(e for e in DEFAULT_AGENT_STATE if e in owned)


def with_home(isolation: Isolation, agent: str | None) -> Isolation:
    """``isolation`` letting the command write the run's home of ``agent`` (``claude``, ``gemini``;
    :mod:`sandbox.agent.agenthome`) and no other agent's."""
    linked: list[str] = []
    for name in adapters.names():
        module = adapters.agent(name)
        if agent == module.HOME_NAME:
            linked += [*module.LINKED, *getattr(module, "ROOT_LINKED", ())]
    return dataclasses.replace(isolation, home=agent, linked=tuple(linked))


def expand_home(entry: str, home: str) -> str:
    """A settings entry as a path: ``~`` and ``~/x`` under ``home``, without its trailing ``/``."""
    path = entry.rstrip("/") or "/"
    if path == "~" or path.startswith("~/"):
        path = os.path.join(home, path[2:]) if path != "~" else home
    return path


def state_paths(entries: Sequence[str], home: str) -> list[str]:
    """Absolute paths for settings entries: ``~/x`` under ``home``; relative entries are refused."""
    out = []
    for entry in entries:
        path = expand_home(entry, home)
        if not os.path.isabs(path):
            raise ConfinementError(
                f"The writable path {entry!r} in the isolation settings is not absolute; "
                "write it as /abs/path or ~/path."
            )
        if os.path.realpath(path) in ("/", os.path.realpath(home)):
            raise ConfinementError(
                f"The writable path {entry!r} would make {'your home' if path != '/' else 'everything'} writable; "
                "name the agent's own directories instead."
            )
        out.append(path + ("/" if entry.endswith("/") else ""))
    return out


def prepare_state(paths: Sequence[str], writable: Sequence[str] | None = None) -> None:
    """Create missing agent state directories (entries ending in ``/``) and ``.json`` files (``{}``).

    ``writable``: every path a confined agent may write (default ``paths``). Another run's agent may
    be writing them meanwhile, so below the outermost writable directory that holds an entry nothing
    is made by name: each directory is opened ``O_NOFOLLOW`` relative to the one before, made one at
    a time, the file made ``O_EXCL | O_NOFOLLOW`` relative to its directory
    (:mod:`sandbox.store.beneath`). A link met on the way (the agent swapped a directory of its state
    for a link outside) makes nothing, as any other failure here does. That outermost directory, and
    what lies above it, no agent writes (no writable path holds them): they are named as you named them.
    """
    tops = [p.rstrip("/") for p in (writable if writable is not None else paths)]
    for entry in paths:
        path = entry.rstrip("/")
        if entry.endswith("/") or path.endswith(".json"):
            top = min((t for t in tops if path == t or path.startswith(t + "/")), key=len, default=path)
            with contextlib.suppress(OSError):
                _make(top, path, entry.endswith("/"))


def _make(top: str, path: str, directory: bool) -> None:
    """Make the directory (or the ``{}`` file) ``path``, below the outermost writable ``top`` by descriptor."""
    from sandbox.store import beneath  # standard library only, as this module is

    if directory:
        os.makedirs(top, exist_ok=True)  # the user's own names: no agent writes them
        if path == top:
            return
        base, rel = top, path[len(top) + 1 :]
    else:  # a file only where its directory is already
        base, rel = (os.path.dirname(path), os.path.basename(path)) if path == top else (top, path[len(top) + 1 :])
    root = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if directory:
            os.close(beneath.open_dir(root, rel, create=True))
            return
        dirfd, name = beneath.open_parent(root, rel, create=False)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dirfd)
            with os.fdopen(fd, "wb") as fh:
                fh.write(b"{}\n")
        finally:
            os.close(dirfd)
    finally:
        os.close(root)


def config_paths(
    entries: Sequence[str], private: Sequence[str], state: Sequence[str], home: str
) -> tuple[list[str], list[str]]:
    """The agent configuration to keep read-only and the state files to give each run a copy of:
    those of ``entries`` / ``private`` (``~/`` paths) that lie in the writable agent ``state``."""
    writable = [p.rstrip("/") for p in state]

    def under(path: str, exact: bool) -> bool:
        return any(path == w or (not exact and path.startswith(w + "/")) for w in writable)

    config = [p for p in state_paths(entries, home) if under(p.rstrip("/"), exact=False)]
    copies = [p for p in state_paths(private, home) if under(p.rstrip("/"), exact=True)]
    return config, copies


def without_state(isolation: Isolation, replaced: Sequence[str]) -> Isolation:
    """``isolation`` less the agent state (absolute paths) that a run's agent homes stand in for:
    the user's ``~/.claude``, ``~/.gemini``, ... are then read-only in the sandbox like the rest of
    the home, and nothing is created there (no configuration file needs making to be protected)."""
    drop = [p.rstrip("/") for p in replaced]

    def kept(path: str) -> bool:
        bare = path.rstrip("/")
        return not any(bare == d or bare.startswith(d + "/") for d in drop)

    return dataclasses.replace(
        isolation,
        writable=tuple(p for p in isolation.writable if kept(p)),
        config=tuple(p for p in isolation.config if kept(p)),
        private=tuple(p for p in isolation.private if kept(p)),
    )
