"""The fast read path of ``list``, ``status``, ``log`` and ``path``: standard library only.

Importing pygit2, pydantic and the models costs a command several times the interpreter's own
start-up (issue 14), while what these commands show is already on disk, verified: the run's fold
cache (``ledger-cache.json``), sealed with a MAC whose key lives only in the ledger. This module
reads it with the standard library (:mod:`sandbox.fast.gitread` for the few git objects and refs
it needs) and answers only when the answer is exactly what the full path would give:

* the ledger ref's tip equals the tip the run acknowledged (or none was acknowledged), the
  cache's MAC verifies with the key in that tip's tree, and the cache was folded up to that very
  tip, for this clone;
* the run's head ref mirrors the fold's head (the full path would repair it).

What the agent did with the run's own git (branches, tags, stash, commits) is read by the same
function on both paths (:func:`sandbox.fast.agentgit.read`), so it never sends a command to the full path.

Anything else (a ledger that moved on since the cache was written, a damaged or vanished run, an
odd repository, a name that does not resolve) raises :class:`Miss`, and the command takes the full
path, which reports, repairs and rebuilds as it always did, and leaves the cache current for the
next command. Derived state is never trusted over the ledger: the cache is used only where it is
provably the fold of the ledger's current tip.
"""

from __future__ import annotations

import os
import sys

from sandbox.fast import agentgit, fastjson, gitread, odb, renamepairs, views
from sandbox.store import layout, moved

TYPE_CHECKING = False  # no typing at run time: the quick path's start (sandbox.cli.quick)
if TYPE_CHECKING:
    from typing import Any

    from sandbox.fast.foldjson import AgentGitJson, FetchedJson, RunRowJson, StateJson

#: The persisted format this reader understands (``sandbox.models.FORMAT_VERSION``; a test keeps them equal).
FORMAT_VERSION = 1
KEY_NAME = "fold-key"
TIP_FILE = "ledger-tip"
CACHE_FILE = "ledger-cache.json"
ADOPTED_FILE = "adopted.json"  # sandbox.store.provenance.ADOPTED_FILE


class Miss(Exception):
    """The fast path cannot give the exact answer; the caller takes the full path."""


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return fastjson.loads(fh.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise Miss(path) from exc


def mac_of(key: bytes, text: bytes) -> str:
    """``hmac.new(key, text, hashlib.sha256).hexdigest()``, as the run seals its cache, from the
    interpreter's own SHA-256: :mod:`hmac` loads OpenSSL (:mod:`_hashlib`), about a fifth of the
    interpreter's start on every ``list`` (tests/fast/test_foldcache.py holds the two equal). The
    construction is RFC 2104's, as :mod:`hmac` itself computes it without OpenSSL."""
    try:
        sha256 = __import__("_sha2" if sys.version_info >= (3, 12) else "_sha256").sha256
    except ImportError:  # an interpreter built without its own hashes: hmac's answer
        import hashlib
        import hmac

        return hmac.new(key, text, hashlib.sha256).hexdigest()
    block = 64  # SHA-256's block size
    if len(key) > block:
        key = sha256(key).digest()
    key = key.ljust(block, b"\0")
    inner = sha256(bytes(b ^ 0x36 for b in key))
    inner.update(text)
    return str(sha256(bytes(b ^ 0x5C for b in key) + inner.digest()).hexdigest())


def _same(a: str, b: str) -> bool:
    """``hmac.compare_digest(a, b)``: in time that does not depend on where they differ."""
    from _operator import _compare_digest

    return bool(_compare_digest(a, b))


class Repository:
    """The user's repository as the fast path reads it."""

    def __init__(self, common_dir: str) -> None:
        self.common_dir = os.path.realpath(common_dir)
        try:
            self.git = gitread.Repo(self.common_dir)
        except odb.GitReadError as exc:
            raise Miss(str(exc)) from exc
        self._states: dict[str, StateJson] = {}
        self._ids: list[str] | None = None

    def ref(self, name: str) -> str | None:
        """A ref's target in the user's repository."""
        try:
            return self.git.ref(name)
        except odb.GitReadError as exc:
            raise Miss(str(exc)) from exc

    def run_ids(self) -> list[str]:
        """Ids of the runs, by id order (a run whose ledger ref vanished is a :class:`Miss`: the full
        path reports it)."""
        if self._ids is None:
            try:
                refs = self.git.refs(layout.REF_ROOT)
            except odb.GitReadError as exc:
                raise Miss(str(exc)) from exc
            live = {rid for rid, names in layout.run_refs(refs).items() if "ledger" in names}
            try:
                dirs = os.listdir(layout.runs_dir(self.common_dir))
            except OSError:
                dirs = []
            for name in dirs:
                if name not in live and os.path.exists(os.path.join(layout.run_dir(self.common_dir, name), TIP_FILE)):
                    raise Miss(f"run {name} acknowledged a tip but has no ledger ref")
            self._ids = sorted(live)
        return self._ids

    def state(self, run_id: str) -> StateJson:
        """The fold of the run's ledger as JSON data, from its sealed cache (:class:`Miss` unless exact)."""
        if run_id in self._states:
            return self._states[run_id]
        run_dir = layout.run_dir(self.common_dir, run_id)
        self.git.use_store(layout.run_store(self.common_dir, run_id))  # the run's objects (sandbox.store.runstore)
        if os.path.exists(layout.materializing_marker(self.common_dir, run_id)):
            raise Miss(f"a worktree of run {run_id} was being made")  # the full path finishes or discards it
        # The acknowledged tip is read before the ref (as the full path does), so a concurrent
        # append (ref first, then the file) shows as a ref ahead of it: a miss, never damage.
        ack = _read_json(os.path.join(run_dir, TIP_FILE))
        tip = self.ref(layout.ref_name(run_id, "ledger"))
        if tip is None:
            raise Miss(f"run {run_id} has no ledger ref")
        if ack is not None and not (isinstance(ack, dict) and ack.get("run_id") == run_id and ack.get("tip") == tip):
            raise Miss(f"the ledger of run {run_id} moved since it was acknowledged")
        sealed = _read_json(os.path.join(run_dir, CACHE_FILE))
        if not isinstance(sealed, dict) or sealed.get("version") != FORMAT_VERSION:
            raise Miss(f"run {run_id} has no fold cache")
        mac, text = sealed.get("mac"), sealed.get("state")
        if not isinstance(mac, str) or not isinstance(text, str):
            raise Miss(f"the fold cache of run {run_id} is malformed")
        if sealed.get("adopted", "") != _adopted_id(run_dir):
            raise Miss(f"the fold cache of run {run_id} was folded before `sandbox adopt`")
        key = self._key(tip)
        if not _same(mac, mac_of(key, text.encode("utf-8"))):
            raise Miss(f"the fold cache of run {run_id} does not verify")  # the full path reports it
        state: StateJson = fastjson.loads(text)  # the fold as LedgerState dumps it (tests/fast/test_foldjson.py)
        if not isinstance(state, dict) or state.get("version") != FORMAT_VERSION or state.get("tip") != tip:
            raise Miss(f"the fold cache of run {run_id} is not at the ledger's tip")
        if state.get("clone") not in (None, layout.clone_id(self.common_dir)) or not state.get("run"):
            raise Miss(f"the fold cache of run {run_id} is another clone's")
        if state.get("head") is None or self.ref(layout.ref_name(run_id, "head")) != state["head"]:
            raise Miss(f"the head ref of run {run_id} does not mirror its ledger")
        self._states[run_id] = state
        return state

    def _key(self, tip: str) -> bytes:
        try:
            entry = self.git.lookup(self.git.commit(tip).tree, KEY_NAME)
            if entry is None or entry.is_tree:
                raise Miss("the ledger has no fold key")
            kind, data = self.git.read(entry.oid)
        except odb.GitReadError as exc:
            raise Miss(str(exc)) from exc
        if kind != "blob":
            raise Miss("the ledger's fold key is not a blob")
        return data

    def changed_paths(self, state: StateJson) -> tuple[int, int]:
        """How many paths the run's head changes from its base, a rename counted once, and how many
        of them are renames (:func:`sandbox.fast.renamepairs.count`, as the full path counts)."""
        try:
            tip = state["head"]
            if tip is None:  # (state() refuses such a fold: a Miss, as the full path would repair it)
                raise Miss("the fold has no head")
            self.git.use_store(layout.run_store(self.common_dir, state["run"]["run_id"]))
            base = self.git.commit(state["run"]["base"]).tree
            head = self.git.commit(tip).tree
            return renamepairs.count(self.git.changes(base, head), lambda oid: self.git.read(oid)[1])
        except odb.GitReadError as exc:
            raise Miss(str(exc)) from exc

    def place(self, run_id: str) -> layout.Place:
        """Where the run's worktree and git dir are on this machine."""
        return layout.place_of(self.common_dir, run_id)

    def fetched(self, run_id: str) -> FetchedJson | None:
        """The stored record of where the run was fetched from (None: never fetched)."""
        if not os.path.exists(layout.fetched_file(self.common_dir, run_id)):
            return None
        found = views.fetched_from(self.common_dir, run_id)
        if found is None or found.get("version") != FORMAT_VERSION or not {"remote", "fetched_at"} <= set(found):
            raise Miss(f"the fetch record of run {run_id} does not read")
        return found

    def summary(self, run_id: str, disk: bool = False, disk_limit: int | None = None) -> RunRowJson:
        """The run as ``list`` and ``status`` show it (see :func:`sandbox.fast.views.summary`)."""
        state = self.state(run_id)
        changed, renamed = self.changed_paths(state)
        return views.summary(
            run_id,
            state,
            common_dir=self.common_dir,
            place=self.place(run_id),
            changed_paths=changed,
            renamed_paths=renamed,
            fetched=self.fetched(run_id),
            disk=disk,
            disk_limit=disk_limit,
        )

    def resolve(self, given: str | None, cwd_run: str | None) -> str:
        """The id of the run ``given`` names, when it names exactly one (else :class:`Miss`: the full
        path explains what is wrong, see :func:`sandbox.run.names.resolve_run`)."""
        ids = self.run_ids()
        if given is not None and not given.strip():
            raise Miss("an empty run name")  # refused by the full path, with its words
        if given is None:
            if cwd_run:
                return cwd_run
            if len(ids) == 1:
                return ids[0]
            raise Miss("no run named")
        if given in ids:
            return given
        labelled = [rid for rid in ids if self.state(rid)["run"]["label"] == given]
        matches = [rid for rid in ids if rid.startswith(given)]
        if len(labelled) == 1 and not set(matches) - set(labelled):  # else ambiguous: the full path says so
            return labelled[0]
        if not labelled and len(matches) == 1:
            return matches[0]
        raise Miss(f"{given!r} names no single run")

    def agent_git(self, run_id: str, base: str) -> AgentGitJson | None:
        """What the agent did with the run's own git, exactly as the full path shows it (both call
        :func:`sandbox.fast.agentgit.read`, standard library only); None when there is nothing to show
        (a legacy run, no worktree here) or the run's git does not read."""
        place = self.place(run_id)
        if place.legacy or not views.worktree_exists(place):
            return None
        return agentgit.read(place.git_dir, run_id, base)


def discover(path: str) -> tuple[Repository, str | None, str | None]:
    """The repository around ``path`` as :meth:`sandbox.store.project.Project.discover` finds it:
    (repository, the user's working tree or None, the run whose worktree ``path`` is in or None).
    Anything but a plain repository with a working tree is a :class:`Miss`."""
    start = os.path.abspath(path)
    if not os.path.isdir(start):
        raise Miss(f"{path} is not a directory")
    loc = layout.locate(start)
    if loc is not None:
        return Repository(loc.common_dir), None, loc.run_id
    common_dir, _git_dir, workdir = plain_repository(start)
    if moved.moved(common_dir):
        raise Miss("the repository moved: the full path names it where it is now in its runs' homes")
    return Repository(common_dir), workdir, None


def plain_repository(start: str) -> tuple[str, str, str]:
    """(common git dir, git dir, working tree) of the repository around the directory ``start``, when it is
    a plain one: a ``.git`` directory or a linked worktree's ``.git`` file, found without leaving ``start``'s
    file system, whose configs set neither ``core.bare``, ``core.worktree`` nor an include; else a
    :class:`Miss` (the full path decides). Not for a run's worktree (:func:`sandbox.store.layout.locate`)."""
    here = start
    device = os.stat(here).st_dev
    while not os.path.lexists(os.path.join(here, ".git")):
        up = os.path.dirname(here)
        if up == here or os.stat(up).st_dev != device:
            raise Miss("no repository found")  # the full path says so, in its words
        here = up
    dot_git = os.path.join(here, ".git")
    if os.path.isdir(dot_git) and not os.path.islink(dot_git):
        git_dir = dot_git
    else:
        try:
            with open(dot_git, encoding="utf-8") as fh:
                line = fh.read().strip()
        except OSError as exc:
            raise Miss(str(exc)) from exc
        if not line.startswith("gitdir: "):
            raise Miss(f"{dot_git} is not a gitdir file")
        git_dir = os.path.join(here, line[len("gitdir: ") :])
    git_dir = os.path.realpath(git_dir)
    if not os.path.isfile(os.path.join(git_dir, "HEAD")):
        raise Miss(f"{git_dir} is not a git dir")
    try:
        with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as fh:
            common = fh.read().strip()
    except FileNotFoundError:
        common = ""
    except OSError as exc:
        raise Miss(str(exc)) from exc
    common_dir = os.path.realpath(os.path.join(git_dir, common)) if common else git_dir
    for config in (os.path.join(common_dir, "config"), os.path.join(git_dir, "config.worktree")):
        if _odd_config(config):
            raise Miss(f"{config} sets what the full path reads (core.bare, core.worktree, includes)")
    return common_dir, git_dir, os.path.realpath(here)


def _odd_config(path: str) -> bool:
    """True when a git config file says something that changes where the working tree is: a true
    ``core.bare``, a ``core.worktree``, or an include (which could say either)."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return False
    except (OSError, UnicodeError):
        return True
    section = ""
    for raw in lines:
        line = raw.split("#", 1)[0].split(";", 1)[0].strip().lower()
        if line.startswith("["):
            section = line.strip("[]").split()[0] if line.strip("[] ") else ""
            if section.startswith("include"):
                return True
            continue
        if section != "core":
            continue
        if line == "bare":  # a key alone is true
            return True
        key, _, value = (part.strip() for part in line.partition("="))
        if key == "worktree" or (key == "bare" and value not in ("false", "no", "off", "0")):
            return True
    return False


def _adopted_id(run_dir: str) -> str:
    """The MAC of the run's adopted list as on disk ("": none), as ``provenance.adopted_id`` reads it."""
    data = _read_json(os.path.join(run_dir, ADOPTED_FILE))
    mac = data.get("mac") if isinstance(data, dict) else None
    return mac if isinstance(mac, str) else ""
