"""Where everything of the sandbox lives: run ids, ref names, directories, and finding a run.

One place for every name and path, so the CLI, the library, the hook fast path and ``sandbox exec``
find a run the same way. Only the standard library is imported: the hook fast path uses this module.

In the user's repository (its common git dir; local to this machine, never pushed)::

    refs/sandbox/<run>/{base,head,ledger,checkpoints}   the run's refs (they travel with git push/fetch)
    <common>/sandbox/runs/<run>/        lock, ledger fold cache, host files, and ``place``: the absolute
                                        path of the run's home (below), written before the home exists
    <common>/sandbox/host/              the repository's host: socket, lock, liveness record, log (0700)
    <common>/sandbox/locks/, journal/, packs/           see docs/refs-layout.md

Each run's home, in a per-user data directory keyed by repository (outside any ``.git`` and outside
the user's working tree)::

    <data root>/repos/<repo key>/<run>/
        origin       the user's common git dir: how a directory inside the worktree finds the run
                     (next to the worktree, not inside the run's git dir, which the agent owns)
        worktree/    the run's files; ``.git`` is a file naming ``../git``
        git/         the run's own git directory: its own HEAD, refs, config, hooks, index and worktree
                     list; the user's objects reached read-only through ``objects/info/alternates``

The data root is chosen by the caller (the CLI reads ``$XDG_DATA_HOME`` and ``.sandbox.toml``: see
:func:`user_data_root`); a library caller that passes none gets the homes under
``<common>/sandbox/homes/`` instead. Runs made before homes existed keep their linked worktree under
``<common>/sandbox/worktrees/<run>`` (git's admin dir ``<common>/worktrees/<run>``) until
``sandbox gc`` moves them (:mod:`sandbox.runs.relocate`).
"""

from __future__ import annotations

import os

# No ``typing``, ``dataclasses`` (it imports ``inspect``) or ``hashlib`` at run time: this module is on the
# hook's fast path, where they cost ~10 ms of its start. (mypy reads this name as typing's.)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any, Final

#: A run id: what ``sandbox start`` makes (8 hex digits), and anything else safe as a ref and file name:
#: ``^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`` as :func:`re.match` reads it (checked without :mod:`re`, which the
#: hook's fast path does not import; tests/store/test_layout.py holds the two equal).
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
_ID_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ID_REST = _ID_FIRST | frozenset("_.-")

REF_ROOT = "refs/sandbox/"
#: The branch of the run's own repository its worktree starts on (at the snapshot commit).
RUN_BRANCH = "sandbox/{run_id}"

STATE_DIR = "sandbox"
RUNS = "runs"
HOST = "host"
#: In the host directory: flocked by the repository's host for its whole life.
HOST_LOCK = "host.lock"
LEGACY_WORKTREES = "worktrees"
#: git's own admin directories of linked worktrees (``<common>/worktrees/<name>``).
GIT_WORKTREES = "worktrees"
HOMES = "homes"
LOCKS = "locks"
JOURNAL = "journal"
STAGING = "staging"
PACKS = "packs"
PLACE_FILE = "place"
#: The run's lock file, in its scratch directory: every writer of the run's ledger holds it.
LOCK_FILE = "lock"
ORIGIN_FILE = "origin"
WORKTREE = "worktree"
GIT_DIR = "git"


def valid_run_id(run_id: str) -> bool:
    """True when ``run_id`` has the shape of a run id."""
    body = run_id[:-1] if run_id.endswith("\n") else run_id  # re's ``$`` also matches before a final newline
    return 0 < len(body) <= 64 and body[0] in _ID_FIRST and all(c in _ID_REST for c in body[1:])


def ref_prefix(run_id: str) -> str:
    """``refs/sandbox/<run>/``: every ref of the run starts with it."""
    return f"{REF_ROOT}{run_id}/"


def ref_name(run_id: str, name: str) -> str:
    """The full name of one of a run's refs (``base``, ``head``, ``ledger``, ``checkpoints``)."""
    return f"{REF_ROOT}{run_id}/{name}"


def run_branch(run_id: str) -> str:
    """The branch (in the run's own repository) its worktree starts on."""
    return RUN_BRANCH.format(run_id=run_id)


def run_refs(ref_names: Iterable[str]) -> dict[str, set[str]]:
    """The run ids among ``ref_names``, each with the names of its refs (``base``, ``ledger``, ...)."""
    out: dict[str, set[str]] = {}
    for name in ref_names:
        if name.startswith(REF_ROOT):
            parts = name.split("/")
            if len(parts) >= 4:
                out.setdefault(parts[2], set()).add("/".join(parts[3:]))
    return out


def canonical_json(value: Any, *, ascii_only: bool = False) -> bytes:
    """The canonical JSON bytes of a value: sorted keys, no spaces, ``str()`` of what JSON lacks.

    What content hashes are taken of: a call's ``input_hash`` (``ascii_only=False``, non-ASCII
    text as UTF-8) and a checkpoint's id and blobs (``ascii_only=True``, ``\\u`` escapes). The two
    differ only in how non-ASCII text is spelled; each is kept because ids already stored were
    computed with it.
    """
    import json  # here: the hook's fast path never hashes

    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=ascii_only, default=str)
    # A lone surrogate (an undecodable byte of a path, or a hook's "\udcff") has no UTF-8: written as
    # JSON's own escape for it, which reads back to the same string.
    return text.encode("utf-8", "backslashreplace")


# -- in the user's repository --------------------------------------------------------------------


def state_dir(common_dir: str) -> str:
    """``<common>/sandbox``: the sandbox's files inside the user's repository."""
    return os.path.join(common_dir, STATE_DIR)


def empty_file(common_dir: str) -> str:
    """An empty read-only file that confinement binds over masked files (``<common>/sandbox/empty``)."""
    return os.path.join(state_dir(common_dir), "empty")


def runs_dir(common_dir: str) -> str:
    """Where the runs' scratch directories are."""
    return os.path.join(common_dir, STATE_DIR, RUNS)


def run_dir(common_dir: str, run_id: str) -> str:
    """The run's scratch directory (lock, caches, host files, the pointer to its home)."""
    return os.path.join(common_dir, STATE_DIR, RUNS, run_id)


def host_dir(common_dir: str) -> str:
    """``<common>/sandbox/host``: the repository's host (socket, lock, liveness record, log); mode 0700."""
    return os.path.join(common_dir, STATE_DIR, HOST)


#: The host's socket's own directory, beside the host's (``<common>/sandbox/sock``): the one part of the
#: host's files a confined process sees (:mod:`sandbox.agent.wire`, :mod:`sandbox.confine.policy`).
HOST_SOCKET_DIR = "sock"


def host_socket_dir(common_dir: str) -> str:
    """``<common>/sandbox/sock``: the directory of the host's socket."""
    return os.path.join(common_dir, STATE_DIR, HOST_SOCKET_DIR)


def ensure_host_dir(common_dir: str) -> str:
    """Create the host directory and its socket directory, mode 0700 (only the user may open them);
    the host directory's path."""
    path = host_dir(common_dir)
    for made in (path, host_socket_dir(common_dir)):
        os.makedirs(made, mode=0o700, exist_ok=True)
        if os.stat(made).st_mode & 0o077:
            os.chmod(made, 0o700)
    return path


#: Below a run's directory: the agents' homes (writable in the sandbox) and the seeding bases
#: (:mod:`sandbox.agent.agenthome`; :mod:`sandbox.confine.policy` mounts them).
AGENT_STATE = "agent-state"
AGENT_HOMES = "homes"


def agent_homes_dir(run_dir: str) -> str:
    """The directory holding every agent home of the run (the one path made writable for them)."""
    return os.path.join(run_dir, AGENT_STATE, AGENT_HOMES)


#: In ``<common>/sandbox``: a random id of this clone (this repository on this machine), never pushed.
CLONE_FILE = "clone-id"


def clone_file(common_dir: str) -> str:
    """``<common>/sandbox/clone-id``: this clone's id (see :func:`clone_id`)."""
    return os.path.join(common_dir, STATE_DIR, CLONE_FILE)


#: In a run's directory: where a fetched run came from (``sandbox fetch``).
FETCHED_FILE = "fetched.json"
#: In a run's directory while its worktree is being made here; what a killed command left is redone.
MATERIALIZING_FILE = "materializing"


def fetched_file(common_dir: str, run_id: str) -> str:
    """Where the record of the remote a run was fetched from is kept."""
    return os.path.join(run_dir(common_dir, run_id), FETCHED_FILE)


def materializing_marker(common_dir: str, run_id: str) -> str:
    """The marker present while a run's worktree is being made in this repository."""
    return os.path.join(run_dir(common_dir, run_id), MATERIALIZING_FILE)


def clone_id(common_dir: str) -> str | None:
    """This clone's id (None until something of the sandbox recorded an event here)."""
    text = _read_text(clone_file(common_dir))
    return text if text and is_clone_id(text) else None


_LOWER_HEX = frozenset("0123456789abcdef")


def is_clone_id(text: str) -> bool:
    """``re.match(r"^[0-9a-f]{32}$", text)`` (a final newline allowed, as ``$`` allows it), without
    :mod:`re`: ``list`` reads it on the quick path (tests/store/test_layout.py holds the two equal)."""
    core = text[:-1] if text.endswith("\n") else text
    return len(core) == 32 and _LOWER_HEX.issuperset(core)


def run_lock_path(common_dir: str, run_id: str) -> str:
    """The run's lock file (held by every writer of its ledger, and by gc before it deletes the run)."""
    return os.path.join(run_dir(common_dir, run_id), LOCK_FILE)


def locks_dir(common_dir: str) -> str:
    """Where the locks of the user's working trees are (one per tree; see :mod:`sandbox.store.journal`)."""
    return os.path.join(common_dir, STATE_DIR, LOCKS)


def journal_dir(common_dir: str) -> str:
    """Where the pending write journals of the user's working trees are."""
    return os.path.join(common_dir, STATE_DIR, JOURNAL)


def staging_dir(common_dir: str) -> str:
    """Where the temporaries of writes into the user's working trees go (one directory per tree)."""
    return os.path.join(common_dir, STATE_DIR, STAGING)


def packs_registry(common_dir: str) -> str:
    """The registry of the sandbox's own packs (see :mod:`sandbox.store.packs`); ``.lock`` beside it."""
    return os.path.join(common_dir, STATE_DIR, PACKS)


def packs_registry_of(objects_dir: str) -> str:
    """The pack registry of an objects directory: your store's (:func:`packs_registry`) or, for a run's
    store (:func:`run_store`), one in the run's directory (a merge never combines two stores' packs)."""
    parent = os.path.dirname(objects_dir)
    if os.path.basename(objects_dir) == RUN_OBJECTS and os.path.basename(os.path.dirname(parent)) == RUNS:
        return os.path.join(parent, PACKS)
    return packs_registry(parent)


#: In a run's directory: the objects the host records for the run (see :mod:`sandbox.store.runstore`).
RUN_OBJECTS = "objects"
#: In the sandbox's directory: an objects directory holding no object, whose ``info/alternates`` names
#: each live run's store; your ``objects/info/alternates`` names it once (:data:`HUB_LINE`).
HUB = "run-objects"
#: Your ``objects/info/alternates`` line naming the hub (relative to your objects directory).
HUB_LINE = "../" + STATE_DIR + "/" + HUB
#: In the sandbox's directory: your objects without the hub (for the gits that write a run's objects).
USER_VIEW = "user-objects"


def user_alternates(common_dir: str) -> list[str]:
    """Your own lines of ``objects/info/alternates`` (the hub's left out), each an absolute path."""
    objects_dir = os.path.join(common_dir, "objects")
    try:
        with open(os.path.join(objects_dir, "info", "alternates"), encoding="utf-8", errors="surrogateescape") as fh:
            lines = [line.strip() for line in fh]
    except OSError:  # none (the usual case), or not readable here
        return []
    return [
        os.path.normpath(os.path.join(objects_dir, line))
        for line in lines
        if line and not line.startswith("#") and line != HUB_LINE
    ]


def listed_stores(common_dir: str) -> set[str]:
    """The runs' stores the hub lists now (absolute; the hub's lines are relative to it)."""
    hub = os.path.realpath(stores_hub(common_dir))
    try:
        with open(os.path.join(hub, "info", "alternates"), encoding="utf-8") as fh:
            return {os.path.normpath(os.path.join(hub, line.strip())) for line in fh if line.strip()}
    except (OSError, UnicodeDecodeError):  # no run has a store yet, or the hub is hidden (inside a run)
        return set()


def run_store(common_dir: str, run_id: str) -> str:
    """The run's own object store: what the host records for it (its snapshot, calls, ledger)."""
    return os.path.join(common_dir, STATE_DIR, RUNS, run_id, RUN_OBJECTS)


def stores_hub(common_dir: str) -> str:
    """The objects directory whose alternates list every live run's store (see :data:`HUB`)."""
    return os.path.join(common_dir, STATE_DIR, HUB)


def user_objects_view(common_dir: str) -> str:
    """Your objects seen without any run's store (see :data:`USER_VIEW`)."""
    return os.path.join(common_dir, STATE_DIR, USER_VIEW)


def git_worktrees_dir(common_dir: str) -> str:
    """git's admin directories of linked worktrees (a legacy run's git dir is one of them)."""
    return os.path.join(common_dir, GIT_WORKTREES)


def legacy_worktrees_dir(common_dir: str) -> str:
    """Where runs made before homes existed keep their linked worktrees."""
    return os.path.join(common_dir, STATE_DIR, LEGACY_WORKTREES)


def fallback_homes_dir(common_dir: str) -> str:
    """Where runs live when the caller gave no data root (library use without configuration)."""
    return os.path.join(common_dir, STATE_DIR, HOMES)


# -- the per-user data directory -----------------------------------------------------------------


def user_data_root(environ: Mapping[str, str], home: str) -> str:
    """The default data root: ``$XDG_DATA_HOME/sandbox``, else ``<home>/.local/share/sandbox``.

    Takes the environment and the home directory as arguments: only the CLI reads them.
    """
    xdg = environ.get("XDG_DATA_HOME", "")
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative value is invalid and ignored
        return os.path.join(xdg, "sandbox")
    return os.path.join(home, ".local", "share", "sandbox")


def repo_key(common_dir: str) -> str:
    """A stable, readable directory name for one repository: its name and a hash of its path."""
    real = os.path.realpath(common_dir)
    name = os.path.basename(os.path.dirname(real) if os.path.basename(real) == ".git" else real)
    import re

    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".")[:40] or "repo"
    import hashlib

    return f"{name}-{hashlib.sha256(os.fsencode(real)).hexdigest()[:12]}"


def homes_dir(data_root: str, common_dir: str) -> str:
    """Where the homes of one repository's runs are created under ``data_root``."""
    return os.path.join(data_root, "repos", repo_key(common_dir))


# -- a run's place -------------------------------------------------------------------------------


class Place:
    """Where a run's files are: its home (None for a legacy run), worktree and git directory (a value)."""

    __slots__ = ("worktree", "git_dir", "home")

    def __init__(self, worktree: str, git_dir: str, home: str | None = None) -> None:
        self.worktree: Final = worktree
        self.git_dir: Final = git_dir
        self.home: Final = home

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Place) and (self.worktree, self.git_dir, self.home) == (
            other.worktree,
            other.git_dir,
            other.home,
        )

    def __hash__(self) -> int:
        return hash((self.worktree, self.git_dir, self.home))

    def __repr__(self) -> str:
        return f"Place(worktree={self.worktree!r}, git_dir={self.git_dir!r}, home={self.home!r})"

    @property
    def legacy(self) -> bool:
        """True for a run made before homes existed (a linked worktree of the user's repository)."""
        return self.home is None

    @property
    def origin_file(self) -> str | None:
        """The file naming the user's common git dir (None for a legacy run)."""
        return os.path.join(self.home, ORIGIN_FILE) if self.home else None


def home_place(home: str) -> Place:
    """The place of a run whose home is ``home``."""
    return Place(os.path.join(home, WORKTREE), os.path.join(home, GIT_DIR), home)


def legacy_place(common_dir: str, run_id: str) -> Place:
    """Where a run made before homes existed has its worktree and git's admin dir."""
    return Place(
        os.path.join(legacy_worktrees_dir(common_dir), run_id),
        os.path.join(git_worktrees_dir(common_dir), run_id),
    )


def recorded_home(common_dir: str, run_id: str) -> str | None:
    """The home the user's repository records for the run (None: none recorded)."""
    text = _read_text(os.path.join(run_dir(common_dir, run_id), PLACE_FILE))
    return text if text and os.path.isabs(text) else None


def place_of(common_dir: str, run_id: str) -> Place:
    """Where run ``run_id`` of the repository lives on this machine.

    Taken from the repository the command runs in (its ``runs/<run>/place``), never from the
    run's record: a run fetched from elsewhere has no place here until one is made.
    """
    home = recorded_home(common_dir, run_id)
    if home is not None:
        return home_place(home)
    return legacy_place(common_dir, run_id)


def has_place(common_dir: str, run_id: str) -> bool:
    """True when the run has (or had) a home or a legacy worktree in this repository."""
    if recorded_home(common_dir, run_id) is not None:
        return True
    legacy = legacy_place(common_dir, run_id)
    return os.path.lexists(legacy.worktree) or os.path.lexists(legacy.git_dir)


# -- finding the run from a directory (hooks, exec, discovery) ------------------------------------


class Location:
    """A run found from a directory inside its worktree (or named, in a known repository)."""

    def __init__(self, common_dir: str, run_id: str, worktree: str, git_dir: str = "") -> None:
        self.common_dir = common_dir
        self.run_id = run_id
        self.worktree = worktree
        self.git_dir = git_dir

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Location) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Location({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"

    @property
    def run_dir(self) -> str:
        """The run's scratch directory (lock, caches, the hook socket)."""
        return run_dir(self.common_dir, self.run_id)


def locate(cwd: str, *, past_nested: bool = False) -> Location | None:
    """The run whose worktree contains ``cwd``, or None; no git, no environment.

    A home's worktree names its repository in the ``origin`` file beside it, and the repository
    must name that same home back (``runs/<run>/place``): a directory that merely looks like a
    home, or an origin file pointing elsewhere, is not taken for the run. A legacy worktree is
    recognised by its path, ``<common>/sandbox/worktrees/<run>``.

    The nearest repository decides: a run's worktree, or something else (the user's own tree, a
    repository nested in a worktree), which is no run. ``past_nested`` (for a hook) passes over a
    repository that is no run's worktree and goes on up: the agent's working directory may lie in
    a repository it made inside its worktree (``git init sub``), and a hook that finds no run
    records nothing.
    """
    here = os.path.realpath(cwd)
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            found = _home_location(here) or _legacy_location(here)
            if found is not None or not past_nested:
                return found
        up = os.path.dirname(here)
        if up == here:
            return None
        here = up


def _home_location(top: str) -> Location | None:
    if os.path.basename(top) != WORKTREE:
        return None
    home = os.path.dirname(top)
    run_id = os.path.basename(home)
    common = _read_text(os.path.join(home, ORIGIN_FILE))
    if not common or not os.path.isabs(common) or not valid_run_id(run_id):
        return None
    recorded = recorded_home(common, run_id)
    if recorded is None or os.path.realpath(recorded) != home:
        return None
    return Location(common, run_id, top, os.path.join(home, GIT_DIR))


def _legacy_location(top: str) -> Location | None:
    parent = os.path.dirname(top)
    if os.path.basename(parent) != LEGACY_WORKTREES or os.path.basename(os.path.dirname(parent)) != STATE_DIR:
        return None
    common = os.path.dirname(os.path.dirname(parent))
    run_id = os.path.basename(top)
    if not valid_run_id(run_id) or not os.path.isdir(run_dir(common, run_id)):
        return None
    return Location(common, run_id, top, legacy_place(common, run_id).git_dir)


def common_dir_of(start: str) -> str | None:
    """The user's common git dir for a directory in a run's worktree or in the user's own tree.

    Read from ``.git`` files without git (for ``sandbox exec`` and hooks); None when unsure.
    """
    loc = locate(start)
    if loc is not None:
        return loc.common_dir
    here = os.path.realpath(start)
    while True:
        dot_git = os.path.join(here, ".git")
        if os.path.isdir(dot_git):
            return dot_git
        if os.path.isfile(dot_git):
            gitdir = gitdir_of(here)
            if gitdir is None:
                return None
            return common_of(gitdir)
        up = os.path.dirname(here)
        if up == here:
            return None
        here = up


def gitdir_of(worktree: str) -> str | None:
    """The git dir a worktree's ``.git`` file names (absolute), or None."""
    line = _read_text(os.path.join(worktree, ".git"))
    if not line or not line.startswith("gitdir:"):
        return None
    return os.path.realpath(os.path.join(worktree, line.split(":", 1)[1].strip()))


def common_of(gitdir: str) -> str:
    """The common git dir of a git dir (a linked worktree's admin dir names it in ``commondir``)."""
    common = _read_text(os.path.join(gitdir, "commondir"))
    return os.path.realpath(os.path.join(gitdir, common)) if common else gitdir


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except (OSError, UnicodeError):
        return None
