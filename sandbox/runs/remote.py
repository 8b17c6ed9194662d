"""Runs that travel: ``sandbox push`` and ``sandbox fetch`` through any git remote.

What travels is a run's record, the refs under ``refs/sandbox/<run>/`` of the user's repository
(see docs/refs-layout.md): ``ledger`` (every event, and through its parents every commit the run
recorded), ``head``, ``base`` (the snapshot) and ``checkpoints``. Nothing in a run's home travels:
its worktree is made from the run's head where it is needed (:mod:`sandbox.runs.materialize`).

The transfer is git's own: ``git push`` / ``git fetch`` with explicit refspecs. libgit2 has a
transport, but it knows neither the user's credential helpers nor their ssh configuration
(``core.sshCommand``, ``~/.ssh/config`` host aliases, ``insteadOf`` rewrites), so a remote that
works with ``git push`` would fail with it.

The ledger is append-only, so one rule keeps two machines from losing each other's events: a
ledger ref only ever moves fast-forward, in both directions.

* ``push`` reads the remote's refs first (``git ls-remote``) and pushes a run only when the
  remote's ledger is absent, or an ancestor of ours. The ledger is pushed without ``+`` (git
  itself refuses a non-fast-forward, and ``receive-pack`` refuses if the ref moved since it was
  read); ``head`` and ``checkpoints``, which legitimately move sideways (an undo, a retention
  prune), are pushed with ``--force-with-lease`` at the value just read. ``--atomic``: every ref
  or none.
* ``fetch`` downloads the objects without writing any ref (``--no-write-fetch-head``,
  ``--refmap=`` so no configured fetch refspec updates ``refs/sandbox`` on git's own), reads the
  incoming ledger back event by event (each must parse and belong to the run, and agree with its
  commits: :mod:`sandbox.run.verify`), and then, under the run's lock, moves the local ledger only
  if the incoming one contains it.

A ledger that diverged (both sides appended since they last met) is refused either way, with what
to do; nothing is merged. Fencing needs nothing more: a ``resume`` on machine B appends a
``resumed`` event with a higher epoch, and once A's ledger has fetched it, a writer on A that
started a call before is refused at its finish like any stale writer (its epoch moved).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import pygit2

from sandbox.errors import CorruptionError, SandboxError, UsageError
from sandbox.fast import agentgit
from sandbox.models import FetchedFrom, from_json, to_json
from sandbox.run import verify
from sandbox.run.core import set_head_ref
from sandbox.run.fold import FOLD
from sandbox.run.labels import id_shaped
from sandbox.run.run import Run
from sandbox.store import integrity, layout, objects
from sandbox.store.fsutil import write_json_file
from sandbox.store.gitcli import git
from sandbox.store.ledger import Ledger
from sandbox.store.project import Project

#: The refs of a run that travel, in the order they are listed.
RUN_REFS = ("ledger", "head", "base", "checkpoints")
#: The agent's own git (the run's git dir: its branches, tags and HEAD) travels under
#: ``refs/sandbox/<run>/git/<ref>`` (``git/refs/heads/x``, ``git/refs/tags/v1``, ``git/HEAD``).
AGENT_PREFIX = "git/"
#: Refs that move sideways (undo, rollback, checkpoint retention): pushed with a lease, not fast-forward.
LEASED = ("head", "checkpoints")


class RemoteError(SandboxError):
    """The remote could not be reached or refused the transfer (the message carries git's reason)."""


class TransferJSON(TypedDict):
    """One run of a push or fetch in ``--json``."""

    run: str
    outcome: str
    events: int
    label: str | None
    host: str | None
    message: str | None
    left_out: list[str]


@dataclass
class Transfer:
    """What happened to one run in a push or a fetch."""

    run_id: str
    #: pushed, fetched, new, up_to_date, ahead (nothing to fetch: this clone has more), behind
    #: (nothing pushed: the remote has more), diverged (refused), refused (the remote said no).
    outcome: str
    #: Events the other side gained.
    events: int = 0
    message: str = ""
    label: str | None = None
    host: str | None = None
    #: push: the refs of the agent's own git that stayed behind (``git/refs/tags/v1``): not asked for.
    left_out: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """False when the run was refused (the command then exits 1)."""
        return self.outcome not in ("diverged", "behind", "refused")

    def to_json(self) -> TransferJSON:
        """Plain data for ``--json``."""
        return {
            "run": self.run_id,
            "outcome": self.outcome,
            "events": self.events,
            "label": self.label,
            "host": self.host,
            "message": self.message or None,
            "left_out": self.left_out,
        }


@dataclass
class TransferReport:
    """A push or a fetch: the remote used and one :class:`Transfer` per run."""

    remote: str
    runs: list[Transfer] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no run was refused."""
        return all(t.ok for t in self.runs)


# -- the remote ------------------------------------------------------------------------------------


def default_remote(project: Project) -> str:
    """The remote git would choose: the current branch's upstream remote, else ``origin``."""
    repo = project.repo
    with contextlib.suppress(pygit2.GitError, KeyError, ValueError):
        if not repo.head_is_detached and not repo.head_is_unborn:
            branch = repo.head.shorthand
            configured = repo.config[f"branch.{branch}.remote"]
            if configured and configured != ".":
                return str(configured)
    return "origin"


def _check_remote(project: Project, remote: str, cwd: str | None) -> None:
    names = {n for n in project.repo.remotes.names() if n}
    looks_like_url = "://" in remote or ":" in remote or os.sep in remote or remote.endswith(".git")
    if remote not in names and not looks_like_url and not os.path.isdir(os.path.join(cwd or "", remote)):
        known = ", ".join(sorted(names)) or "none"
        raise UsageError(
            f"No remote named {remote!r} in this repository (remotes: {known}); "
            "add one with 'git remote add NAME URL', or give a URL or a path."
        )


@dataclass(frozen=True)
class Transport:
    """How git reaches the remote: from which directory (a relative remote URL or path is resolved
    from there, as git does for the user), and whether it may ask for a password on the terminal."""

    cwd: str | None = None
    interactive: bool = False


def _git_remote(
    project: Project, args: Sequence[str], how: Transport, check: bool = True, objects_dirs: Sequence[str] = ()
) -> tuple[int, str, str]:
    env = {} if not how.interactive else {"GIT_TERMINAL_PROMPT": "1"}
    if objects_dirs:
        # The agent's own commits live in the run's git dir: git reads them from there for the push.
        env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = os.pathsep.join(objects_dirs)
    main = os.path.dirname(project.common_dir) if os.path.basename(project.common_dir) == ".git" else None
    cwd = how.cwd or main or project.common_dir
    proc = git(["--git-dir", project.common_dir, *args], cwd=cwd, env=env, check=False, network=True)
    out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    if check and proc.returncode != 0:
        lines = [line.strip() for line in err.splitlines() if line.strip() and not line.startswith("hint:")]
        fatal = [line for line in lines if line.startswith(("fatal:", "error:"))]
        detail = (fatal or lines or [f"exit code {proc.returncode}"])[0]
        raise RemoteError(f"git {args[0]} failed ({detail}); nothing was changed here.")
    return proc.returncode, out, err


def remote_runs(project: Project, remote: str, how: Transport = Transport()) -> dict[str, dict[str, str]]:
    """The runs the remote has: ``{run id: {ref name (ledger, head, ...): commit}}``."""
    _check_remote(project, remote, how.cwd)
    _code, out, _err = _git_remote(project, ["ls-remote", "--refs", remote, layout.REF_ROOT + "*"], how)
    runs: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        oid, _, name = line.partition("\t")
        parts = name.split("/")
        if len(parts) >= 4 and name.startswith(layout.REF_ROOT) and layout.valid_run_id(parts[2]):
            rest = "/".join(parts[3:])
            if rest in RUN_REFS or rest.startswith(AGENT_PREFIX):
                runs.setdefault(parts[2], {})[rest] = oid
    return runs


def _local_refs(project: Project, run_id: str) -> dict[str, str]:
    """The run's refs in the user's repository: ``{ledger: oid, ..., git/refs/heads/x: oid}``."""
    out = {}
    prefix = layout.ref_prefix(run_id)
    for name in project.repo.references:
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            if rest in RUN_REFS or rest.startswith(AGENT_PREFIX):
                out[rest] = str(project.repo.references[name].target)
    return out


def agent_refs(project: Project, run_id: str) -> tuple[dict[str, str], str | None]:
    """The agent's own git refs of a run, named as they travel (``git/refs/heads/x``, ``git/HEAD``),
    and the objects directory they need (None: the user's own store has them).

    From the run's git dir when the run has a home here; else the copies a fetch left in the user's
    repository (a fetched run whose worktree was never made here).
    """
    place = project.place(run_id)
    if place.legacy or not os.path.isdir(os.path.join(place.git_dir, "objects")):
        local = _local_refs(project, run_id)
        return {n: oid for n, oid in local.items() if n.startswith(AGENT_PREFIX)}, None
    # The agent writes that directory: read without libgit2, which opened a FIFO made its packed-refs
    # and waited for ever (sandbox.fast.agentgit). Peeled to commits (an annotated tag's message stays
    # behind): every ref under refs/sandbox names a commit (docs/refs-layout.md).
    found = agentgit.tips(place.git_dir)
    if found is None:
        raise SandboxError(
            f"The git directory of run {run_id} ({place.git_dir}) cannot be read: a file where git keeps refs "
            "or objects is not a regular file, or is damaged; nothing was sent. Remove it there, or drop the run."
        )
    return {AGENT_PREFIX + name: oid for name, oid in found.items()}, os.path.join(place.git_dir, "objects")


def _has(repo: pygit2.Repository, oid: str) -> bool:
    try:
        return oid in repo.odb
    except (ValueError, pygit2.GitError):
        return False


def _relation(repo: pygit2.Repository, local: str, remote: str) -> str:
    """``same``, ``ahead`` (local contains remote), ``behind`` or ``diverged``."""
    if local == remote:
        return "same"
    if not _has(repo, remote):
        return "behind"  # the remote has events this clone has never seen
    if repo.descendant_of(local, remote):
        return "ahead"
    if repo.descendant_of(remote, local):
        return "behind"
    return "diverged"


def _count_between(project: Project, run_id: str, tip: str, stop: str | None) -> int:
    try:
        return len(
            Ledger(project.run_repository(run_id), run_id, project.run_dir(run_id), FOLD).events_since(stop, tip)
        )
    except (LookupError, SandboxError):
        return 0


def _diverged(run_id: str, remote: str) -> str:
    return (
        f"Run {run_id} has diverged: this clone and {remote} both recorded events since they last met, "
        f"and nothing was merged. Keep one side: continue this one as a new run ('sandbox fork {run_id}', "
        f"then push the fork), or drop it here ('sandbox drop {run_id} --force') and fetch {remote}'s."
    )


# -- push --------------------------------------------------------------------------------------------


def _agent_made(run: Run, agent: dict[str, str]) -> list[str]:
    """The agent's own refs among ``agent``: every one but the run's branch and HEAD where the run put them.

    A run's git starts on its branch at the base snapshot (your working tree at start); anything else (a
    tag, another branch, a commit) is the agent's making, and may carry what ``diff`` never shows (a
    secret committed on a tag, then removed from the files).
    """
    own = {AGENT_PREFIX + "HEAD", AGENT_PREFIX + "refs/heads/" + layout.run_branch(run.run_id)}
    return sorted(n for n, oid in agent.items() if n not in own or oid != run.info.base)


def push(
    project: Project,
    run_ids: Iterable[str],
    remote: str,
    how: Transport = Transport(),
    *,
    with_agent_refs: bool = False,
) -> TransferReport:
    """Push the runs' refs to ``remote``; a run whose remote ledger has events this clone lacks is refused.

    Every run that may go is pushed in one atomic ``git push``. The refs the agent made in its own git
    (tags, branches, commits: :func:`_agent_made`) go only ``with_agent_refs``; otherwise they are named
    in the run's :attr:`Transfer.left_out` and the remote's copies of them are left as they are.
    """
    report = TransferReport(remote)
    theirs = remote_runs(project, remote, how)
    refspecs: list[str] = []
    leases: list[str] = []
    objects_dirs: list[str] = []
    going: list[Transfer] = []
    for run_id in run_ids:
        run = Run.open(project, run_id)
        info = run.info
        mine = {n: oid for n, oid in _local_refs(project, run_id).items() if n in RUN_REFS}
        agent, agent_objects = agent_refs(project, run_id)
        item = Transfer(run_id, "pushed", label=info.label, host=info.host)
        if not with_agent_refs:
            item.left_out = _agent_made(run, agent)
            agent_objects = None  # what stays is the user's history: the user's store has it
        mine.update({n: oid for n, oid in agent.items() if n not in item.left_out})
        remote_refs = theirs.get(run_id, {})
        report.runs.append(item)
        their_ledger = remote_refs.get("ledger")
        relation = "ahead" if their_ledger is None else _relation(project.repo, mine["ledger"], their_ledger)
        gone = [n for n in remote_refs if n.startswith(AGENT_PREFIX) and n not in agent]
        if relation == "same" and all(remote_refs.get(n) == mine.get(n) for n in mine) and not gone:
            item.outcome = "up_to_date"
            continue
        if relation == "behind":
            item.outcome = "behind"
            item.message = (
                f"{remote} has events of run {run_id} that this clone does not have (recorded elsewhere); "
                f"nothing was pushed. Fetch them first ('sandbox fetch {remote} {run_id}'), then push."
            )
            continue
        if relation == "diverged":
            item.outcome = "diverged"
            item.message = _diverged(run_id, remote)
            continue
        item.events = _count_between(project, run_id, mine["ledger"], their_ledger)
        specs, leased = _refspecs(run_id, mine, remote_refs, gone)
        refspecs += specs
        leases += leased
        if agent_objects:
            objects_dirs.append(agent_objects)
        going.append(item)
    if refspecs:
        code, out, err = _git_remote(
            project,
            ["push", "--atomic", "--porcelain", "--no-verify", *leases, remote, *refspecs],
            how,
            False,
            objects_dirs,
        )
        if code != 0:
            reason = _push_refusal(out)
            if reason is None:  # not a refusal of our refs: the remote was not reached, or said no
                lines = [x.strip() for x in err.splitlines() if x.strip() and not x.startswith("hint:")]
                fatal = [x for x in lines if x.startswith(("fatal:", "error:"))]
                detail = (fatal or lines or [f"exit code {code}"])[0]
                raise RemoteError(f"git push to {remote} failed ({detail}); nothing was pushed.")
            for item in going:
                item.outcome, item.events = "refused", 0
                item.message = (
                    f"{remote} refused the push of run {item.run_id} ({reason}); nothing was pushed. "
                    f"Someone pushed it meanwhile: fetch ('sandbox fetch {remote} {item.run_id}') and push again."
                )
    return report


def _refspecs(
    run_id: str, mine: dict[str, str], remote_refs: dict[str, str], gone: list[str]
) -> tuple[list[str], list[str]]:
    """The refspecs and ``--force-with-lease`` options that push ``mine`` and delete ``gone`` on the remote."""
    refspecs: list[str] = []
    leases: list[str] = []
    for name, oid in mine.items():
        ref = layout.ref_name(run_id, name)
        # The agent's refs are pushed by commit id: their objects may be in the run's own store.
        refspecs.append(f"{oid}:{ref}" if name.startswith(AGENT_PREFIX) else f"{ref}:{ref}")
        if name in LEASED or name.startswith(AGENT_PREFIX):
            leases.append(f"--force-with-lease={ref}:{remote_refs.get(name, '')}")
    for name in gone:  # a branch or tag the agent deleted
        ref = layout.ref_name(run_id, name)
        refspecs.append(f":{ref}")
        leases.append(f"--force-with-lease={ref}:{remote_refs[name]}")
    return refspecs, leases


def _push_refusal(out: str) -> str | None:
    """Why the remote refused one of the refs (``--porcelain`` lines starting with ``!``), or None."""
    reasons = [line.split("\t")[-1].strip() for line in out.splitlines() if line.startswith("!")]
    specific = [r for r in reasons if "atomic" not in r]
    found = specific or reasons
    return found[0] if found else None


# -- fetch -------------------------------------------------------------------------------------------


def resolve_remote_runs(available: Iterable[str], given: Sequence[str], remote: str) -> list[str]:
    """The remote's run ids meant by ``given`` (ids or unique prefixes); all of them when none is given."""
    ids = sorted(available)
    if not given:
        return ids
    out = []
    for want in given:
        matches = [i for i in ids if i == want] or [i for i in ids if i.startswith(want)]
        if not matches:
            raise UsageError(f"{remote} has no run {want!r}; 'git ls-remote {remote} refs/sandbox/*' lists its runs.")
        if len(matches) > 1:
            raise UsageError(f"Run id {want!r} is ambiguous on {remote}: {', '.join(matches)}.")
        if matches[0] not in out:
            out.append(matches[0])
    return out


def fetch(project: Project, remote: str, run_ids: Sequence[str] = (), how: Transport = Transport()) -> TransferReport:
    """Bring the remote's runs (all, or those named) into this repository; refuses a diverged run."""
    report = TransferReport(remote)
    theirs = remote_runs(project, remote, how)
    wanted = resolve_remote_runs(theirs, run_ids, remote)
    needed: list[str] = []
    for run_id in wanted:
        remote_refs = theirs[run_id]
        if "ledger" not in remote_refs:
            continue  # a start interrupted on the other side, or a half-deleted run: not a run
        mine = _local_refs(project, run_id)
        if any(mine.get(n) != remote_refs.get(n) for n in remote_refs) and not all(
            _has(project.repo, oid) for oid in remote_refs.values()
        ):
            needed.extend(layout.ref_name(run_id, n) for n in remote_refs)
    if needed:
        # Objects only: no ref is written by git (the checks below decide), no FETCH_HEAD either.
        _git_remote(
            project,
            ["fetch", "--no-tags", "--no-write-fetch-head", "--refmap=", "--quiet", remote, *needed],
            how,
        )
    url = _remote_url(project, remote)
    for run_id in wanted:
        if "ledger" in theirs[run_id]:
            report.runs.append(_install(project, run_id, theirs[run_id], remote, url))
    return report


def _remote_url(project: Project, remote: str) -> str | None:
    try:
        return str(project.repo.remotes[remote].url)
    except (KeyError, ValueError, pygit2.GitError):
        return None if remote in project.repo.remotes.names() else remote


def _install(project: Project, run_id: str, remote_refs: dict[str, str], remote: str, url: str | None) -> Transfer:
    """Move the run's local refs to what was fetched, if the local ledger is part of it."""
    repo = project.repo
    incoming = remote_refs["ledger"]
    for oid in remote_refs.values():
        if not _has(repo, oid):
            raise RemoteError(
                f"The fetch from {remote} did not bring commit {oid[:12]} of run {run_id} "
                "(the remote changed meanwhile?); run the fetch again."
            )
    run_dir = project.run_dir(run_id)
    os.makedirs(run_dir, exist_ok=True)
    ledger = Ledger(repo, run_id, run_dir, FOLD)
    with ledger.lock.hold():
        local = ledger.tip()
        what = integrity.run_damage(repo, run_id, run_dir)
        if what is not None:
            # A fetch must not paper over tampering here: the user sees it and repairs first.
            return Transfer(
                run_id,
                "refused",
                message=f"The ledger of run {run_id} here {what}; nothing was fetched for it. "
                f"Run 'sandbox repair {run_id}', then fetch again.",
            )
        relation = "new" if local is None else _relation(repo, local, incoming)
        item = Transfer(run_id, "fetched")
        if relation == "diverged":
            item.outcome, item.message = "diverged", _diverged(run_id, remote)
            return _labelled(item, repo, run_id, run_dir)
        if relation in ("same", "ahead"):
            item.outcome = "up_to_date" if relation == "same" else "ahead"
            if relation == "ahead":
                item.message = f"this clone has events of run {run_id} that {remote} lacks ('sandbox push' sends them)."
            return _labelled(item, repo, run_id, run_dir)
        # Whole before it is trusted: every event from the incoming tip back to the local one (or
        # the root) must read as this run's.
        try:
            arrived = ledger.events_since(local, incoming)
        except (LookupError, CorruptionError) as exc:
            raise CorruptionError(
                f"The ledger of run {run_id} on {remote} does not read back ({exc}); nothing of it was installed."
            ) from exc
        if any(event.run_id != run_id for _oid, event in arrived):
            raise CorruptionError(f"The ledger of run {run_id} on {remote} holds another run's events; not installed.")
        shaped = next(
            (e.run.label for _o, e in arrived if e.run is not None and e.run.label and id_shaped(e.run.label)), None
        )
        if shaped is not None:  # it would read as another run's id on every command line here
            kept = "nothing of it was installed" if local is None else "the run here is kept as it was"
            return Transfer(
                run_id,
                "refused",
                message=f"Run {run_id} on {remote} is labelled {shaped!r}, which reads as a run id; {kept}.",
            )
        try:
            # Checked against its commits before any ref moves (sandbox.run.verify): what diff shows
            # is then what apply writes.
            verify.verified(ledger, incoming)
        except verify.LedgerRefusedError as exc:
            kept = "nothing of it was installed" if local is None else "the run here is kept as it was"
            return Transfer(
                run_id, "refused", message=f"The ledger of run {run_id} on {remote} was refused: {exc.message}; {kept}."
            )
        # Named before any ref moves (and again after): where the run came from, for the words that
        # say so (sandbox.agent.transcripts.origin). What is this clone's is decided by the events'
        # MACs alone (sandbox.store.provenance), never by this record.
        early = FetchedFrom(remote=remote, url=url, tip=incoming, events=len(arrived))
        write_json_file(layout.fetched_file(project.common_dir, run_id), to_json(early))
        objects.enable_fsync()
        stale = [n for n in _local_refs(project, run_id) if n.startswith(AGENT_PREFIX) and n not in remote_refs]
        with objects.git_writes():
            for name in stale:
                repo.references.delete(layout.ref_name(run_id, name))
            for name, oid in remote_refs.items():
                ref = layout.ref_name(run_id, name)
                if name == "ledger":
                    continue
                if name == "head":
                    set_head_ref(repo, run_id, oid)
                    continue
                repo.references.create(ref, oid, force=True)
            # Last, and only forward: the ledger makes the run exist (and is what a reader trusts).
            repo.references.create(layout.ref_name(run_id, "ledger"), incoming, force=True)
        state = ledger.state()
        integrity.write_ack(run_dir, run_id, incoming, state.count)
        if state.head is not None:
            Run(project, run_id).head()  # repairs the head ref: the ledger's head wins over the fetched ref
        item.outcome = "new" if local is None else "fetched"
        item.events = len(arrived)
        record = FetchedFrom(remote=remote, url=url, tip=incoming, events=len(arrived))
        write_json_file(layout.fetched_file(project.common_dir, run_id), to_json(record))
        return _labelled(item, repo, run_id, run_dir)


def _labelled(item: Transfer, repo: pygit2.Repository, run_id: str, run_dir: str) -> Transfer:
    with contextlib.suppress(SandboxError):
        info = Ledger(repo, run_id, run_dir, FOLD).state().run
        if info is not None:
            item.label, item.host = info.label, info.host
    return item


def fetched_from(project: Project, run_id: str) -> FetchedFrom | None:
    """Where the run was last fetched from (None: made here, or never fetched)."""
    try:
        with open(layout.fetched_file(project.common_dir, run_id), encoding="utf-8") as fh:
            return from_json(FetchedFrom, fh.read())
    except (OSError, ValueError):
        return None
