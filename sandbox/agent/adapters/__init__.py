"""Adapters from agents' hook payloads to the generic hook protocol (:mod:`sandbox.agent.hookproto`).

Each adapter module defines ``NAME``, ``SETTINGS_PATH`` (the agent's local settings file, relative
to the worktree), ``SUCCESS_STDOUT`` (what to print when all went well), ``to_event(payload)``
(a :class:`~sandbox.agent.hookproto.HookEvent`, or None for an event the sandbox does not record) and
``hook_settings(command)`` (the settings entries that call the hook). Modules import only the
standard library: they are on the hook's fast path.

This package is also the registry of the agents the sandbox knows: one module per agent, found by
its file name (``claude_code.py`` is the agent ``claude-code``), no list to keep by hand. What a
module must say is :class:`sandbox.agent.adapter.AgentAdapter` (``HookAdapter`` with hooks), which
mypy checks each module against; :func:`agent` and :func:`load` return them so typed. Every module
says, besides its hooks (an agent without hooks, like Codex, records through ``sandbox mcp`` and has
none):

* ``PROGRAM``: the family name of its command (``claude`` for ``claude``, ``claude-2.1``, ...);
* ``ENV``: the environment variables it needs inside the sandbox (fnmatch patterns);
* ``ENDPOINTS``, ``BASE_URL``: its model hosts, and the variables that move them (the network
  allowlist of ``sandbox run``);
* ``STATE``, ``LOGIN``, ``LOGIN_KEYS``: its state and its login files in the user's home, and the
  keys of its state file that hold a login;
* ``CONFIG``, ``PRIVATE``: its configuration under the user's home kept read-only inside, and its
  state files each run writes a copy of;
* ``SESSIONS``, ``session_homes(environ, home, run_dir)``: the class of :mod:`sandbox.agent.sessions`
  that finds, forks and continues its conversations (named, not imported: that module reads this
  registry), and the configuration homes its sessions may be in, the run's own first.
* ``CARRY_OVER``: the options of its recorded command line ``resume --continue`` keeps when the
  record came from another clone (a fetched run), with the values each may take; all else is dropped.

``docs/design.md`` ("Adding an agent") says the steps.
"""

from __future__ import annotations

import importlib
import os

from sandbox.errors import SandboxError, UsageError

# No typing, re, json or functools at run time: this package is on the hook's fast path (re and json
# import enum, functools and the collections: about the interpreter's own start again).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from sandbox.agent.adapter import AgentAdapter, HookAdapter

#: The largest agent settings file read from a worktree (bytes).
SETTINGS_LIMIT = 16 * 1024 * 1024
#: A session id as the agents make them (a UUID for Claude Code): safe as a file name and in a glob.
SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
_names: list[tuple[str, ...]] = []
_settings_dirs: list[tuple[str, ...]] = []


def valid_session(session: str) -> bool:
    """True when ``session`` has the shape of an agent's session id."""
    import re

    return bool(re.match(SESSION_PATTERN, session))


def names() -> tuple[str, ...]:
    """Every agent the sandbox knows, by its adapter name (``claude-code``, ``codex``, ``gemini``)."""
    if not _names:  # listed once per process
        # The package's files, listed without pkgutil (it imports importlib.util: ~1 ms of every hook's start).
        found = {name[:-3] for where in __path__ for name in os.listdir(where) if name.endswith(".py")}
        _names.append(tuple(sorted(name.replace("_", "-") for name in found if not name.startswith("_"))))
    return _names[0]


def agent(name: str) -> AgentAdapter:
    """The module of the agent ``name`` (hooks or not); :class:`UsageError` for an unknown agent.
    mypy checks each module against :class:`~sandbox.agent.adapter.AgentAdapter` (its last lines)."""
    if name not in names():
        raise UsageError(f"No agent {name!r}; known: {', '.join(names())}.")
    module: Any = importlib.import_module(f"{__name__}.{name.replace('-', '_')}")
    adapter: AgentAdapter = module
    return adapter


def hook_names() -> tuple[str, ...]:
    """The agents whose hooks the sandbox records (``sandbox hook NAME``, ``run --hooks NAME``)."""
    return tuple(n for n in names() if hasattr(agent(n), "to_event"))


def settings_dirs() -> tuple[str, ...]:
    """The worktree directories that hold the hook agents' local settings (``.claude``, ``.gemini``)."""
    if not _settings_dirs:  # found once per process (no functools.cache: see the imports)
        _settings_dirs.append(tuple(load(n).SETTINGS_PATH.split("/", 1)[0] for n in hook_names()))
    return _settings_dirs[0]


def load(name: str) -> HookAdapter:
    """The hook adapter module for an agent name; :class:`UsageError` for an agent without hooks."""
    module: Any = agent(name) if name in names() else None
    if module is None or not hasattr(module, "to_event"):
        raise UsageError(f"No hook adapter for {name!r}; known: {', '.join(hook_names())} (or 'generic').")
    adapter: HookAdapter = module
    return adapter


def family_of(command: str) -> str:
    """The family name of a command (``claude`` for ``/usr/bin/claude-2.1``): how agents are told apart."""
    return os.path.basename(command).split(".")[0].split("-")[0]


def by_program(command: str) -> AgentAdapter | None:
    """The known agent a command starts, by its family name, or None."""
    family = family_of(command)
    for name in names():
        module = agent(name)
        if str(module.PROGRAM) == family:
            return module
    return None


def kind_of(tool: str) -> str:
    """The kind of call ``tool`` makes for the first adapter that knows it (``unknown`` otherwise)."""
    for name in hook_names():
        kind = str(load(name).classify(tool))
        if kind != "unknown":
            return kind
    return "unknown"


def merge_settings(existing: Mapping[str, object], ours: dict[str, list[Any]], marker: str) -> dict[str, object]:
    """``existing`` settings with our hook groups added under ``hooks``, replacing older copies.

    A hook entry is ours when its command contains ``marker``; everything else is kept as it was.
    """
    merged = dict(existing)
    hooks = merged.get("hooks", {})
    if not isinstance(hooks, dict):
        raise SandboxError("The settings file's 'hooks' is not an object; fix it by hand, then install again.")
    merged["hooks"] = _merge_hooks(hooks, ours, marker)
    return merged


def _merge_hooks(existing: Mapping[str, object], ours: dict[str, list[Any]], marker: str) -> dict[str, object]:
    """The ``hooks`` object of :func:`merge_settings` (``existing``: the settings file's, foreign JSON)."""
    hooks = dict(existing)
    for event, groups in ours.items():
        found = hooks.get(event)
        kept: list[object] = []
        for group in found if isinstance(found, list) else []:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                inner = [h for h in group["hooks"] if not (isinstance(h, dict) and marker in str(h.get("command", "")))]
                if not inner:
                    continue
                group = {**group, "hooks": inner}
            kept.append(group)
        hooks[event] = kept + groups
    return hooks


def _open_settings_dir(worktree: str, rel: str, *, create: bool) -> tuple[int, str]:
    """(a descriptor of the directory of the agent's settings file ``rel`` in its worktree, the file's
    name): each directory opened ``O_NOFOLLOW`` relative to the one before (:mod:`sandbox.store.beneath`),
    made when missing if ``create``. The agent can swap ``.claude`` for a link at any moment: a link
    met on the way is refused (:class:`SandboxError`), and all later reads and writes go through the
    descriptor, never the name (docs/design.md, "Reading what the agent wrote: never by name")."""
    import errno

    from sandbox.store import beneath

    try:
        top = beneath.open_root(os.path.realpath(worktree))
        try:
            return beneath.open_parent(top, rel, create=create)
        finally:
            os.close(top)
    except OSError as exc:
        if isinstance(exc, beneath.EscapeError) or exc.errno in (errno.ELOOP, errno.ENOTDIR):
            # ENOTDIR too: O_DIRECTORY met a link that was a directory again by the time it was looked at
            raise SandboxError(
                f"A directory on the way to {rel} in the worktree is a symlink or not a directory, which the "
                "sandbox never writes through; make it a plain directory, then install again."
            ) from None
        raise SandboxError(
            f"{rel} in the worktree could not be reached ({exc.strerror or exc}); make its directory a plain "
            "directory, then install again."
        ) from None


def _load_settings(dirfd: int, name: str, rel: str) -> dict[str, object] | None:
    """The settings file ``name`` in the directory ``dirfd`` (None: there is none), read through a
    checked descriptor (:mod:`sandbox.store.agentread`: swapped for a link or a FIFO, it is refused)."""
    import json
    import stat

    from sandbox.store import agentread

    try:
        seen = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SandboxError(f"{rel} in the worktree could not be read ({exc.strerror or exc}).") from None
    if not stat.S_ISREG(seen.st_mode):
        raise SandboxError(f"{rel} in the worktree is not a regular file; remove it, then install again.")
    try:
        loaded = json.loads(agentread.read_file(dirfd, name, seen, limit=SETTINGS_LIMIT).data)
    except (OSError, ValueError, RecursionError, SandboxError) as exc:  # nested too deep: the agent's
        raise SandboxError(f"{rel} in the worktree is not valid JSON ({exc}); fix or remove it first.") from None
    if not isinstance(loaded, dict):
        raise SandboxError(f"{rel} in the worktree is not a JSON object; fix or remove it first.")
    return loaded


def _write_settings(dirfd: int, name: str, rel: str, settings: Mapping[str, object]) -> None:
    """Replace the settings file ``name`` in the directory ``dirfd``: a temporary file made there,
    fsynced and renamed over it (a link there is replaced, never followed), then the directory fsynced."""
    import json

    from sandbox.store import beneath

    try:
        beneath.write_at(dirfd, name, (json.dumps(settings, indent=2) + "\n").encode(), 0o644, sync=True)
    except OSError as exc:
        raise SandboxError(f"{rel} in the worktree could not be written ({exc.strerror or exc}).") from None


def install(adapter: HookAdapter, worktree: str, command: str) -> str:
    """Write the adapter's hooks into the worktree's local agent settings; returns the file's path.

    Read and written through a descriptor of its directory (:func:`_open_settings_dir`): the agent
    may be running in that worktree, and this process is not confined."""
    rel = str(adapter.SETTINGS_PATH)
    dirfd, name = _open_settings_dir(worktree, rel, create=True)
    try:
        existing = _load_settings(dirfd, name, rel) or {}
        merged = merge_settings(existing, adapter.hook_settings(command), str(adapter.MARKER))
        _write_settings(dirfd, name, rel, merged)
    finally:
        os.close(dirfd)
    return os.path.join(worktree, rel)


def remove_ours(settings: dict[str, object], marker: str) -> dict[str, object]:
    """``settings`` without the hook entries whose command contains ``marker`` (empty groups dropped)."""
    hooks = settings.get("hooks")
    if not isinstance(hooks, dict):
        return settings
    events: dict[str, list[Any]] = {event: [] for event in hooks}
    kept = _merge_hooks(hooks, events, marker)
    out = dict(settings)
    left = {event: groups for event, groups in kept.items() if groups or hooks.get(event) == []}
    if left:
        out["hooks"] = left
    else:
        del out["hooks"]
    return out


def uninstall(adapter: HookAdapter, worktree: str) -> bool:
    """Take the sandbox's hooks out of the worktree's local agent settings (where ``sandbox run``
    put them before runs had agent homes); the rest of the file is kept. True when it changed.
    Through a descriptor as :func:`install`; a link on the way, or a file that is not JSON, is left alone."""
    rel = str(adapter.SETTINGS_PATH)
    try:
        dirfd, name = _open_settings_dir(worktree, rel, create=False)
    except SandboxError:
        return False  # absent, or a directory the agent linked out of the worktree: not followed
    try:
        try:
            loaded = _load_settings(dirfd, name, rel)
        except SandboxError:
            return False  # not ours to repair: the agent reports it
        if loaded is None:
            return False
        cleaned = remove_ours(loaded, str(adapter.MARKER))
        if cleaned == loaded:
            return False
        _write_settings(dirfd, name, rel, cleaned)
        return True
    finally:
        os.close(dirfd)


def agent_of(command: str, adapter: str | None = None) -> str | None:
    """The known agent a command starts (``claude``, ``gemini``, ``codex``), by its name or its hooks."""
    module = by_program(command)
    if module is None and adapter in names():
        module = agent(adapter)
    return str(module.PROGRAM) if module is not None else None


def default_allowlist(agent: str | None, env: Mapping[str, str], extra: Sequence[str] = ()) -> list[str]:
    """The allowlist of a session: the agent's model endpoints, the host of its base-URL variable
    in ``env`` (with its port), then ``extra`` (the user's ``[network] allow``).

    Raises :class:`~sandbox.confine.proxy.AllowlistError` for an entry of ``extra`` that cannot be read.
    """
    from urllib.parse import urlsplit

    from sandbox.confine.proxy import Allowlist

    module = by_program(agent) if agent else None
    out = list(module.ENDPOINTS) if module is not None else []
    for var in module.BASE_URL if module is not None else ():
        url = env.get(var, "").strip()
        if not url:
            continue
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            continue  # the agent itself will say its base URL is wrong
        if parts.hostname:
            host = parts.hostname
            out.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    out += extra
    Allowlist(out)  # every entry readable
    return list(dict.fromkeys(out))
