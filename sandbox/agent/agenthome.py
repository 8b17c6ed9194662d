"""Each run's own home for an agent's state: what ``sandbox run`` gives Claude Code and Gemini CLI.

An agent keeps state it rewrites all the time (Claude Code's ``.claude.json``: folder trust,
onboarding, the approved API key, ``/config``; Gemini CLI's ``settings.json``) and saves it the safe
way: a lock directory, a temporary file, a rename beside it. Inside the sandbox the user's home is
read-only, so a bind-mounted file cannot be saved that way. Instead each run has a directory per agent
(``<run dir>/agent-state/homes/<agent>``, writable inside the sandbox, nothing else of the run's
directory is) that the agent is pointed at with its own variable (``CLAUDE_CONFIG_DIR``,
``GEMINI_CLI_HOME``), so its saves, transcripts and sessions stay in the run.

Seeding, at every session start (:func:`seed_json`): the user's current file and the run's file are
merged three ways, with the user's file as it was at the previous seeding as the base. What the run
changed since (a folder trusted, a key approved, a setting saved inside) and what the user changed
since (a setting changed outside) both hold; where both changed the same value the user's wins, and
lists are joined. The base is kept beside the homes, outside the agent's reach, and the user's files
are only ever read. Configuration the agent only reads (instructions, commands, agents, skills) is
linked in read-only (:func:`relink_config`: what the run put in their place is removed first): the
user's home stays read-only in the sandbox.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from sandbox.store import layout

#: Below the run's directory: the agents' homes (writable in the sandbox) and the seeding bases.
STATE_DIR = layout.AGENT_STATE
HOMES_DIR = layout.AGENT_HOMES
BASES_DIR = "base"
#: The largest agent state file read (Claude Code's ``.claude.json`` grows with projects).
MAX_STATE = 64 * 1024 * 1024
#: The deepest nesting of a state document taken as state (the merge, its copy and the writers recurse:
#: a document the agent nested deeper stopped every later session with a RecursionError).
MAX_DEPTH = 64


def homes_root(run_dir: str) -> str:
    """The directory holding every agent home of the run (the one path made writable for them)."""
    return layout.agent_homes_dir(run_dir)


def home_of(run_dir: str, agent: str) -> str:
    """The run's home for ``agent`` (``claude``, ``gemini``); a path only (see :func:`make_home`)."""
    return os.path.join(homes_root(run_dir), agent)


def make_home(run_dir: str, agent: str) -> str:
    """The run's home for ``agent``, created when missing (see :func:`make_dir`)."""
    return make_dir(home_of(run_dir, agent))


def make_dir(path: str) -> str:
    """``path``, a real directory of the run's agent home, created when missing.

    The agent may have left a symlink there (its home is writable inside the sandbox): it is removed,
    so that seeding, done outside the sandbox, never reads or writes through it; so is a file or a
    FIFO (makedirs would fail on it at every later session).
    """
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
        os.unlink(path)
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


@contextlib.contextmanager
def pinned_dir(path: str) -> Iterator[str]:
    """``path``, a directory of the run's agent home made as :func:`make_dir` makes it, as a path that
    leads to that very directory until the block ends: ``/proc/self/fd/N`` of a descriptor opened
    without following a link (the path itself where there is no ``/proc``).

    Another session of the same agent in this run writes that home meanwhile: it could swap the
    directory for a link between the check and the writes, and seeding, done outside the sandbox,
    would write where the link leads (your own agent's settings). A directory that does not stay put
    stops the seeding with one line.
    """
    from sandbox.errors import SandboxError

    try:
        make_dir(path)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(
            f"The run's agent directory {path} changed while it was being prepared ({exc.strerror or exc}): "
            "another session of this run is writing it; try again once that session has ended."
        ) from exc
    try:
        pinned = f"/proc/self/fd/{fd}"
        yield pinned if os.path.isdir(pinned) else path
    except OSError as exc:
        if os.fstat(fd).st_nlink:  # not removed meanwhile: a failure of its own
            raise
        raise SandboxError(
            f"The run's agent directory {path} was removed while it was being prepared: another session "
            "of this run is writing it; try again once that session has ended."
        ) from exc
    finally:
        os.close(fd)


def base_of(run_dir: str, agent: str, name: str) -> str:
    """Where the user's ``name`` as last seeded is kept (outside the agent's writable home)."""
    return os.path.join(run_dir, STATE_DIR, BASES_DIR, agent, name)


def merge3(base: Any, user: Any, run: Any) -> Any:
    """The three-way merge of JSON values: ``user`` and ``run`` both changed from ``base``.

    Objects merge key by key; a value only one side changed takes that side's; a value both changed
    takes the user's, except lists, which are joined (the user's items, then the run's new ones).
    """
    if user == base:
        return run
    if run in (base, user):
        return user
    if isinstance(user, dict) and isinstance(run, dict):
        base_d = base if isinstance(base, dict) else {}
        out: dict[str, object] = {}
        missing = object()
        for key in [*user, *(k for k in run if k not in user)]:
            b, u, r = base_d.get(key, missing), user.get(key, missing), run.get(key, missing)
            merged = _merge_slot(b, u, r, missing)
            if merged is not missing:
                out[key] = merged
        return out
    if isinstance(user, list) and isinstance(run, list):
        return [*user, *(item for item in run if item not in user)]
    return user


def _merge_slot(base: Any, user: Any, run: Any, missing: object) -> Any:
    """One key of :func:`merge3`; ``missing`` stands for an absent key (a deletion is a change)."""
    if user is missing and run is missing:
        return missing
    if user is missing:
        return missing if run == base else run  # the user deleted it, the run did not touch it
    if run is missing:
        return missing if user == base else user
    if base is missing:
        base = None
    return merge3(base, user, run)


def read_json(path: str, *, follow: bool = True) -> dict[str, object] | None:
    """A JSON object file's content; None when missing, unreadable, not a regular file (a FIFO the
    agent made in its home must not hang ``sandbox run``) or not an object, or, unless ``follow``, a
    symlink (a file of the agent's home may lead to a secret masked inside)."""
    raw = _read_bytes(path, follow=follow)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and _shallow(data) else None


def _shallow(data: object) -> bool:
    """Whether ``data`` nests at most :data:`MAX_DEPTH` lists and objects deep (walked without recursion)."""
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(item, dict):
            stack.extend((value, depth + 1) for value in item.values())
        elif isinstance(item, list):
            stack.extend((value, depth + 1) for value in item)
    return True


def write_json(path: str, data: Any, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` atomically (a temp file and a rename in its directory).

    Not synced: this is the agent's state, re-seeded at every session, never the user's files, and
    each fsync is paid before the agent's first screen (tens of milliseconds on a busy disk).
    """
    from sandbox.store.fsutil import atomic_write

    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode(), mode, sync=False)


def seed_json(
    dest: str,
    user_path: str,
    base_path: str,
    overlay: Callable[[dict[str, object]], dict[str, object]] | None = None,
    *,
    create: bool = True,
    guarded: Iterable[str] = (),
) -> bool:
    """Seed the run's ``dest`` from the user's ``user_path``, keeping what the run changed (see the
    module docstring); ``overlay`` adds the sandbox's own entries last. The user's file is only read.

    ``guarded``: the keys (``a/b``, ``*`` for every key at a level) of settings that run commands
    (hooks, MCP servers, variables): those are the user's whatever the run wrote, so that what a
    confined agent planted in its home never runs in a later session (``--isolate off``).

    With ``create`` false nothing is written when neither the user nor the run has the file.
    Returns whether ``dest`` exists afterwards.
    """
    user = read_json(user_path)
    run = read_json(dest, follow=False)  # the agent's: written inside, read here outside the sandbox
    if user is None and run is None and overlay is None and not create:
        return False
    user_d = user or {}
    base = read_json(base_path)
    merged: Any = dict(user_d) if run is None else merge3(base or {}, user_d, run)
    guarded = list(guarded)
    if guarded:
        merged = copy.deepcopy(merged)  # merge3 may hand back the run's own object, compared below
        for key in guarded:
            _as_users(merged, user_d, key.split("/"))
    if overlay is not None:
        merged = overlay(merged)
    if base != user_d:
        write_json(base_path, user_d)
    if merged != run or not os.path.exists(dest):
        _clear_dir(dest)
        write_json(dest, merged)
    return True


def _clear_dir(dest: str) -> None:
    """Remove a directory the agent made where its state file goes (the rename over it would fail)."""
    if os.path.isdir(dest) and not os.path.islink(dest):
        remove_entry(dest)


def _as_users(run: Any, user: Any, path: list[str]) -> None:
    """Set ``path`` in ``run`` (a dict, changed in place) as it is in ``user``: absent where it is."""
    if not isinstance(run, dict):
        return
    head, rest = path[0], path[1:]
    for key in list(run) if head == "*" else [head]:
        theirs = user.get(key) if isinstance(user, dict) else None
        if rest:
            _as_users(run.get(key), theirs, rest)
        elif isinstance(user, dict) and key in user:
            run[key] = user[key]
        else:
            run.pop(key, None)


def copy_missing(dest: str, user_path: str) -> None:
    """Copy the user's file into the run when the run has none yet (an opaque file: credentials, ids)."""
    if os.path.lexists(dest) or not os.path.isfile(user_path):
        return
    try:
        with open(user_path, "rb") as fh:
            data = fh.read(MAX_STATE)
    except OSError:
        return
    from sandbox.store.fsutil import atomic_write

    atomic_write(dest, data, 0o600, sync=False)


def link_config(home: str, user_dir: str, names: Iterable[str]) -> None:
    """Link each of the user's ``names`` (in ``user_dir``) that exists into ``home``.

    Read-only in the sandbox, since the user's home is. A name the user does not have is neither
    created there nor linked (nothing is made in the user's home); a stale link is removed.
    """
    for name in names:
        src = os.path.join(user_dir, name)
        dst = os.path.join(home, name)
        present = os.path.lexists(src)
        if os.path.islink(dst):
            if present and os.readlink(dst) == src:
                continue
            with contextlib.suppress(OSError):
                os.unlink(dst)
        if present and not os.path.lexists(dst):
            with contextlib.suppress(OSError):
                os.symlink(src, dst)


def newest(directory: str, suffix: str, since: float) -> str | None:
    """The newest file below ``directory`` (one level of subdirectories) ending in ``suffix`` and
    modified at or after ``since`` (a ``time.time()``); None when there is none."""
    best: tuple[float, str] | None = None
    try:
        subdirs = [directory, *(e.path for e in os.scandir(directory) if e.is_dir(follow_symlinks=False))]
    except OSError:
        return None
    for sub in subdirs:
        try:
            entries = list(os.scandir(sub))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.endswith(suffix) or not entry.is_file(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                mtime = entry.stat(follow_symlinks=False).st_mtime
                if mtime >= since and (best is None or mtime > best[0]):
                    best = (mtime, entry.path)
    return best[1] if best else None


# -- TOML state (Codex's ``config.toml``) ----------------------------------------------------------


def _toml_loads() -> Callable[[str], dict[str, Any]] | None:
    """The TOML reader of this Python (``tomllib``, or ``tomli`` when installed), or None."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads
    try:
        import tomli  # type: ignore[import-not-found,unused-ignore]  # only if already installed
    except ImportError:
        return None
    loads: Callable[[str], dict[str, Any]] = tomli.loads
    return loads


def _read_bytes(path: str, *, follow: bool = True) -> bytes | None:
    """A regular file's bytes (at most :data:`MAX_STATE`); None when missing, unreadable or not a
    regular file, or, unless ``follow``, a symlink (as :func:`read_json`)."""
    if not follow:
        beneath = _in_homes(path)
        if beneath is not None:
            return _read_agents(*beneath)
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        with open(os.open(path, flags), "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            return fh.read(MAX_STATE)
    except OSError:
        return None


def _in_homes(path: str) -> tuple[str, str] | None:
    """(the run's agent-state directory, the path below it) for a file of an agent home, else None.

    The agent can write everything below ``homes/`` (a directory there may become a link to a secret
    masked inside); the agent-state directory above it it cannot (docs/design.md, "Reading what the
    agent wrote")."""
    marker = f"{os.sep}{STATE_DIR}{os.sep}{HOMES_DIR}{os.sep}"
    head, found, tail = path.partition(marker)
    if not found or not tail:
        return None
    return head + os.sep + STATE_DIR, HOMES_DIR + "/" + tail


def _read_agents(root_path: str, rel: str) -> bytes | None:
    """A file of an agent home, read beneath the agent-state directory through no link, bounded."""
    from sandbox.store import agentread

    try:
        root = agentread.open_root(root_path)
    except OSError:
        return None
    try:
        return agentread.read_file(root, rel, limit=MAX_STATE).data
    except (OSError, agentread.AgentReadError):
        return None
    finally:
        os.close(root)


def _parse_toml(data: bytes | None) -> dict[str, Any] | None:
    """``data`` as a TOML document; None when absent, not UTF-8 or not TOML (or no reader here)."""
    loads = _toml_loads()
    if data is None or loads is None:
        return None
    try:
        parsed = loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        return None
    return parsed if _shallow(parsed) else None


def seed_toml(
    dest: str, user_path: str, base_path: str, *, guarded: Iterable[str] = (), kept: Iterable[str] | None = None
) -> bool:
    """Seed the run's TOML ``dest`` from the user's ``user_path`` as :func:`seed_json` seeds JSON.

    The user's file is copied as it is (comments and all) unless the run changed its copy since the
    last seeding; then both are merged three ways and written out (:func:`dump_toml`). ``guarded``
    keys are the user's whatever the run wrote; with ``kept``, every top-level key but those is. A
    file the run made unreadable, or a Python without a TOML reader, gets the user's file as it is.
    Nothing is written when neither has the file.
    Returns whether ``dest`` exists afterwards.
    """
    user_bytes = _read_bytes(user_path)
    run_bytes = _read_bytes(dest, follow=False)  # the agent's: written inside, read here outside the sandbox
    if user_bytes is None and run_bytes is None:
        if os.path.lexists(dest):  # a link, a FIFO or a directory the agent put there: not the user's file
            remove_entry(dest)
        return False
    base_bytes = _read_bytes(base_path)
    user = _parse_toml(user_bytes) if user_bytes is not None else {}
    run = _parse_toml(run_bytes)
    out = user_bytes or b""
    if user is not None and run is not None and run_bytes != base_bytes:
        merged = merge3(_parse_toml(base_bytes) or {}, user, run)
        merged = copy.deepcopy(merged)
        for key in guarded:
            _as_users(merged, user, key.split("/"))
        if kept is not None:
            allowed = set(kept)
            for key in [k for k in {*merged, *user} if k not in allowed]:
                _as_users(merged, user, [key])
        if merged != user:
            out = dump_toml(merged).encode()
    if base_bytes != user_bytes:
        from sandbox.store.fsutil import atomic_write

        os.makedirs(os.path.dirname(base_path), mode=0o700, exist_ok=True)
        atomic_write(base_path, user_bytes or b"", 0o600, sync=False)
    if out != run_bytes or os.path.islink(dest):
        from sandbox.store.fsutil import atomic_write

        _clear_dir(dest)
        atomic_write(dest, out, 0o600, sync=False)
    return True


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dump_toml(data: dict[str, Any]) -> str:
    """``data`` (as a TOML reader gives it) as a TOML document: plain keys first, then each table
    under its own ``[header]``; tables inside arrays are written inline."""
    return "\n".join(_toml_table(data, [])).lstrip("\n") + "\n"


def _toml_table(data: dict[str, Any], prefix: list[str]) -> list[str]:
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for key, value in data.items():
        if isinstance(value, dict):
            header = [*prefix, key]
            lines += ["", "[" + ".".join(_toml_key(k) for k in header) + "]", *_toml_table(value, header)]
    return lines


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value: Any) -> str:
    import datetime
    import math

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a TOML value: {type(value).__name__}")


# -- configuration the agent only reads, put back at every seeding ---------------------------------


def remove_entry(path: str) -> None:
    """Remove ``path`` (a link, a file or a whole directory) without following any link in it.

    A directory ``shutil.rmtree`` cannot remove (nested deeper than it recurses, or one the agent
    made unwritable) is moved aside in its directory, under a name no agent loads.
    """
    import shutil
    import uuid

    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    elif os.path.isdir(path):
        try:
            shutil.rmtree(path)  # rmtree removes links inside as links (and refuses a link at the top)
        except (OSError, RecursionError):  # it stopped every later session with a traceback
            os.rename(path, os.path.join(os.path.dirname(path), f".sandbox-removed-{uuid.uuid4().hex}"))


def relink_config(home: str, user_dir: str, names: Iterable[str]) -> None:
    """As :func:`link_config`, but whatever the run put in place of one of ``names`` (a file, a
    directory, a link elsewhere) is removed first: that configuration is the user's alone, and a
    copy the agent planted in its home never lasts into a later session."""
    for name in names:
        src, dst = os.path.join(user_dir, name), os.path.join(home, name)
        if os.path.islink(dst) and os.path.lexists(src) and os.readlink(dst) == src:
            continue
        if os.path.lexists(dst):
            remove_entry(dst)
    link_config(home, user_dir, names)
