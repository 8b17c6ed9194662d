"""The one verdict on a path inside a run's sandbox: visible or not, writable or not, and why.

:func:`rules` turns a :class:`~sandbox.confine.policy.Policy` into its decisions, one per path it
names, parents first and at equal depth in one order (hidden places, read-only binds, writable
paths, protected paths, masks), so the deepest (and then the latest) rule covering a path decides
what it shows. Every reader takes that one list: bubblewrap's mounts (:mod:`sandbox.confine.bwrap`,
which adds only how each is mounted), the Seatbelt profile's writes (:mod:`sandbox.confine.seatbelt`),
the refusal of a command that lies in a hidden place (:func:`sandbox.confine.spawn.spawn`) and
``sandbox doctor --explain PATH`` (:func:`explain`). Standard library only (``sandbox exec``'s fast
path imports it).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sandbox.confine.policy import (
    Isolation,
    Policy,
    hidden_dirs,
    home_allowlist,
    mount_depth,
    protected_paths,
    system_hidden,
)

#: The order of the mounts at one depth: a later one at the same depth covers an earlier one.
_HIDDEN, _READ, _WRITE, _PROTECT, _MASK = range(5)


@dataclass(frozen=True)
class Verdict:
    """What a confined process finds at a path."""

    visible: bool
    writable: bool
    why: str
    #: The mount that decides (a directory or file), None when nothing covers the path but ``/``.
    root: str | None = None


@dataclass(frozen=True)
class Rule:
    """One decision of a policy: what a confined process finds at ``path`` and below it (until a
    deeper rule decides otherwise). ``kind`` says how a backend carries it out: ``tmp`` (the private
    ``/tmp``), ``hidden`` (an empty directory), ``read`` (bound back read-only), ``write`` (the run's
    own paths), ``write-try`` (writable when it exists), ``home`` (the started agent's run home),
    ``protect`` (read-only although below a writable path), ``config`` (agent configuration, read-only),
    ``copy`` (the run's copy of ``source`` shown at ``path``, writable), ``identity`` (the generated git
    identity ``source`` shown at ``path``), ``view`` (the run's own view ``source`` of a file of the user's
    ``.git``, read-only), ``mask`` (a secret: an empty directory or file)."""

    path: str
    rank: int
    kind: str
    verdict: Verdict
    source: str | None = None


#: The verdict on a path no rule covers: ``--ro-bind / /``.
OUTSIDE = Verdict(True, False, "read-only, as on the host (outside the homes and every hidden place)")


#: Why each view of a file or directory of your ``.git`` is shown (:mod:`sandbox.confine.gitview`).
_VIEWS_WHY = {
    "packed-refs": "read-only: this run's own lines of your packed-refs, generated (sandbox/confine/gitview.py)",
    "alternates": "read-only: your alternates without other runs' stores, generated (sandbox/confine/gitview.py)",
    "objects": (
        "read-only: your committed history alone (what your branches, tags and remote-tracking branches reach;"
        " not your stash, reflogs or unreachable objects: sandbox/store/history.py)"
    ),
}


def rules(policy: Policy) -> list[Rule]:
    """Every decision of ``policy``, parents first and, at one depth, in the order above: a path's
    verdict is that of the last rule covering it. The one list bubblewrap's mounts
    (:mod:`sandbox.confine.bwrap`), the Seatbelt profile (:mod:`sandbox.confine.seatbelt`) and
    ``sandbox doctor --explain`` (:func:`explain`) are made from."""
    resolved: dict[str, str] = {}

    def real(path: str) -> str:  # each path resolved once (a readable path is looked up twice below)
        found = resolved.get(path)
        if found is None:
            found = resolved[path] = os.path.realpath(path)
        return found

    reasons = dict.fromkeys(policy.hidden, "hidden inside") | dict(policy.reasons)
    tmp_why = reasons.pop("/tmp", "/tmp, private inside")
    out = [Rule("/tmp", _HIDDEN, "tmp", Verdict(False, False, tmp_why))]
    out += [Rule(root, _HIDDEN, "hidden", Verdict(False, False, why)) for root, why in reasons.items()]
    allowed = dict(policy.allowed)
    # Where a link leads, and the path as named (so a link below the private /tmp still works inside).
    for shown in dict.fromkeys(p for named in policy.readable for p in (real(named), os.path.abspath(named))):
        why = allowed.get(real(shown), "bound back read-only: allow_read, or what the sandbox itself needs")
        out.append(Rule(shown, _READ, "read", Verdict(True, False, f"read-only: {why}")))
    out += [
        Rule(real(p), _WRITE, "write", Verdict(True, True, "writable: the run's worktree or git directory"))
        for p in policy.writable
    ]
    out += [
        Rule(real(p), _WRITE, "write-try", Verdict(True, True, "writable: [isolation] writable or agent state"))
        for p in policy.extra_writable
    ]
    out += [
        Rule(p, _WRITE, "home", Verdict(True, True, "writable: the started agent's own home in the run"))
        for p in policy.homes
    ]
    out += [
        Rule(p, _PROTECT, "protect", Verdict(True, False, "read-only: your repository, protected"))
        for p in policy.protected
    ]
    out += [
        Rule(real(p.rstrip("/")), _PROTECT, "config", Verdict(True, False, "read-only: agent configuration"))
        for p in policy.config
    ]
    copied = Verdict(True, True, "writable: the run's own copy of this agent state (yours is unchanged)")
    out += [Rule(real(dest), _PROTECT, "copy", copied, copy) for copy, dest in policy.private]
    if policy.identity is not None:
        why = "read-only: your git identity alone, generated"
        out.append(Rule(policy.identity[1], _PROTECT, "identity", Verdict(True, False, why), policy.identity[0]))
    out += [
        Rule(dest, _PROTECT, "view", Verdict(True, False, _VIEWS_WHY[os.path.basename(dest)]), made)
        for made, dest in policy.views
    ]
    out += [
        Rule(real(m.rstrip("/")), _MASK, "mask", Verdict(False, False, "a secret masked by the deny-read set"))
        for m in policy.masked
    ]
    out += _system_rules(policy.system, out)
    return sorted(out, key=lambda r: (mount_depth(r.path), r.rank))


#: Why a system entry is not visible (:mod:`sandbox.confine.sysview`).
SYSTEM_WHY = (
    "a system file or directory other users cannot read, hidden from root inside too (sandbox/confine/sysview.py)"
)


def _system_rules(paths: Sequence[str], decided: Sequence[Rule]) -> list[Rule]:
    """Masks for the system entries ``paths`` that would show in the read-only rest: not those already
    hidden or masked, nor what the policy shows on purpose (the run's paths, ``allow_read`` naming the
    entry itself). A read-only bind of a directory above one (the sandbox's interpreter under
    ``/usr/local``) does not show it: that bind only makes visible what ``/`` shows."""
    if not paths:
        return []
    at = {rule.path.rstrip("/") or "/": rule for rule in sorted(decided, key=lambda r: (mount_depth(r.path), r.rank))}
    out = []
    for path in paths:
        probe = path
        while probe not in at and probe != "/":
            probe = os.path.dirname(probe)
        deciding = at.get(probe)
        if deciding is None or (deciding.kind == "read" and probe != path):
            out.append(Rule(path, _MASK, "mask", Verdict(False, False, SYSTEM_WHY)))
    return out


def covers(root: str, path: str) -> bool:
    """True when ``path`` is ``root`` or lies below it."""
    bare = root.rstrip("/") or "/"
    return path == bare or path.startswith(bare.rstrip("/") + "/")


def explain(policy: Policy, path: str, decided: Sequence[Rule] | None = None) -> Verdict:
    """The verdict on ``path`` (absolute; resolved here) under ``policy``: the last of its
    :func:`rules` (or ``decided``, computed once for many paths) that covers it."""
    real = os.path.realpath(path)
    verdict = OUTSIDE
    for rule in rules(policy) if decided is None else decided:
        if covers(rule.path, real):
            verdict = dataclasses.replace(rule.verdict, root=rule.path.rstrip("/") or "/")
    return verdict


def any_run(isolation: Isolation, common_dir: str, user_workdir: str | None) -> Policy:
    """What any run's agent of this repository gets under ``isolation`` (``sandbox doctor`` without a
    run): the hidden places, the home's allowlist, the masks and your repository protected, the way
    :func:`sandbox.confine.policy.policy_for` decides them; a run's own paths are then not known."""
    hidden = hidden_dirs(isolation, common_dir, user_workdir)
    allowed = home_allowlist(isolation)
    return Policy(
        writable=(),
        protected=tuple(p for p in protected_paths(common_dir, user_workdir) if p not in hidden),
        readable=(*isolation.readable, *(p for p, _why in allowed)),
        reasons=tuple(hidden.items()),
        masked=isolation.masked,
        allowed=tuple(allowed),
        system=system_hidden(isolation),
    )


def reachable_sockets(policy: Policy, paths: Iterable[str]) -> list[str]:
    """Which of the Unix sockets bound on this machine now (``paths``, as ``/proc/net/unix`` names
    them) a process under ``policy`` could connect to: those it can see (``connect`` needs no write
    access). A name relative to a descriptor (``/proc/self/fd/...``) says nothing of where the socket
    lies and is left out; so are abstract sockets (no path: Landlock or the network namespace decides)."""
    decided = rules(policy)
    found = {
        p for p in paths if p.startswith("/") and not p.startswith("/proc/") and explain(policy, p, decided).visible
    }
    return sorted(found.difference(stray_sockets(policy, found)))


def stray_sockets(policy: Policy, paths: Iterable[str], decided: Sequence[Rule] | None = None) -> list[str]:
    """Of the Unix sockets bound now (``paths``), those a process under ``policy`` would see only because
    they lie in the machine's read-only rest, where no rule of the policy shows them on purpose (the
    host's socket, ``unix_sockets``, ``allow_read`` and the run's own paths do): a daemon's control
    socket outside ``/run`` (LXD's under ``/var/snap``, say). :func:`sandbox.confine.spawn.spawn` masks
    them, so that no socket is reachable unless something shows it (a socket bound after the start is not).
    ``decided``: the policy's :func:`rules`, when the caller has them (else made for the first socket)."""
    out: list[str] = []
    for path in paths:
        # The private /tmp is never the rest of the machine: most sockets there cost nothing.
        if path.startswith("/") and not path.startswith(("/proc/", "/tmp/")) and os.path.exists(path):
            decided = rules(policy) if decided is None else decided
            verdict = explain(policy, path, decided)
            if verdict.visible and verdict.root is None:
                out.append(path)
    return sorted(set(out))


def bound_sockets() -> list[str]:
    """The paths of the Unix sockets bound on this machine now (``/proc/net/unix``; none elsewhere)."""
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as fh:
            rows = [line.split(None, 7) for line in fh.readlines()[1:]]
    except OSError:
        return []
    return [row[7].strip() for row in rows if len(row) == 8]
