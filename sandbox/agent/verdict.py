"""The one verdict on a path inside a run's sandbox: visible or not, writable or not, and why.

:func:`explain` reads the same :class:`~sandbox.agent.sandboxpolicy.Policy` that
:mod:`sandbox.agent.bwrap` turns into mounts, with bubblewrap's rule: mounts are made parents first,
and at equal depth in bwrap's order (hidden tmpfs, read-only binds, writable binds, protected paths,
masks), so the deepest (and then the latest) mount covering a path decides what it shows. Its callers:
the refusal of a command that lies in a hidden place (:func:`sandbox.agent.confine.spawn`) and
``sandbox doctor --explain PATH``. Standard library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from sandbox.agent.sandboxpolicy import Policy, mount_depth

#: The order of bwrap's mounts at one depth (see :func:`sandbox.agent.bwrap._mounts`).
_HIDDEN, _READ, _WRITE, _PROTECT, _MASK = range(5)


@dataclass(frozen=True)
class Verdict:
    """What a confined process finds at a path."""

    visible: bool
    writable: bool
    why: str
    #: The mount that decides (a directory or file), None when nothing covers the path but ``/``.
    root: str | None = None


def explain(policy: Policy, path: str) -> Verdict:
    """The verdict on ``path`` (absolute; resolved here) under ``policy``."""
    return _decide(_rules(policy), os.path.realpath(path))


def _decide(rules: list[tuple[str, int, Verdict]], real: str) -> Verdict:
    """The verdict of ``rules`` (:func:`_rules`) on the resolved path ``real``."""
    best: tuple[int, int] = (-1, -1)
    verdict = Verdict(True, False, "read-only, as on the host (outside the homes and every hidden place)")
    for root, rank, candidate in rules:
        bare = root.rstrip("/") or "/"
        if real == bare or real.startswith(bare.rstrip("/") + "/"):
            key = (mount_depth(bare), rank)
            if key >= best:
                best, verdict = key, Verdict(candidate.visible, candidate.writable, candidate.why, bare)
    return verdict


def _rules(policy: Policy) -> list[tuple[str, int, Verdict]]:
    """Every mount root of ``policy`` with its rank at equal depth and what it shows."""
    allowed = dict(policy.allowed)
    out: list[tuple[str, int, Verdict]] = [("/tmp", _HIDDEN, Verdict(False, False, "/tmp, private inside"))]
    out += [(root, _HIDDEN, Verdict(False, False, why)) for root, why in policy.reasons]
    for path in policy.readable:
        real = os.path.realpath(path)
        why = allowed.get(real, "bound back read-only: allow_read, or what the sandbox itself needs")
        out.append((real, _READ, Verdict(True, False, f"read-only: {why}")))
    out += [
        (os.path.realpath(p), _WRITE, Verdict(True, True, "writable: the run's worktree or git directory"))
        for p in policy.writable
    ]
    out += [
        (os.path.realpath(p), _WRITE, Verdict(True, True, "writable: [isolation] writable or agent state"))
        for p in policy.extra_writable
    ]
    out += [(p, _WRITE, Verdict(True, True, "writable: the started agent's own home in the run")) for p in policy.homes]
    out += [(p, _PROTECT, Verdict(True, False, "read-only: your repository, protected")) for p in policy.protected]
    out += [
        (os.path.realpath(p), _PROTECT, Verdict(True, False, "read-only: agent configuration")) for p in policy.config
    ]
    if policy.identity is not None:
        out.append(
            (policy.identity[1], _PROTECT, Verdict(True, False, "read-only: your git identity alone, generated"))
        )
    why = "read-only: this run's own lines of your packed-refs, generated (sandbox/agent/gitview.py)"
    out += [(dest, _PROTECT, Verdict(True, False, why)) for _made, dest in policy.views]
    out += [
        (os.path.realpath(m.rstrip("/")), _MASK, Verdict(False, False, "a secret masked by the deny-read set"))
        for m in policy.masked
    ]
    return out


def reachable_sockets(policy: Policy, paths: Iterable[str]) -> list[str]:
    """Which of the Unix sockets bound on this machine now (``paths``, as ``/proc/net/unix`` names
    them) a process under ``policy`` could connect to: those it can see (``connect`` needs no write
    access). A name relative to a descriptor (``/proc/self/fd/...``) says nothing of where the socket
    lies and is left out; so are abstract sockets (no path: Landlock or the network namespace decides)."""
    found = {p for p in paths if p.startswith("/") and not p.startswith("/proc/") and explain(policy, p).visible}
    return sorted(found.difference(stray_sockets(policy, found)))


def stray_sockets(policy: Policy, paths: Iterable[str]) -> list[str]:
    """Of the Unix sockets bound now (``paths``), those a process under ``policy`` would see only because
    they lie in the machine's read-only rest, where no mount of the policy shows them on purpose (the
    host's socket, ``unix_sockets``, ``allow_read`` and the run's own paths do): a daemon's control
    socket outside ``/run`` (LXD's under ``/var/snap``, say). :func:`sandbox.agent.confine.spawn` masks
    them, so that no socket is reachable unless something shows it (a socket bound after the start is not)."""
    out: list[str] = []
    rules: list[tuple[str, int, Verdict]] | None = None  # made for the first socket to judge
    for path in paths:
        # The private /tmp is never the rest of the machine: most sockets there cost nothing.
        if path.startswith("/") and not path.startswith(("/proc/", "/tmp/")) and os.path.exists(path):
            rules = _rules(policy) if rules is None else rules
            verdict = _decide(rules, os.path.realpath(path))
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
