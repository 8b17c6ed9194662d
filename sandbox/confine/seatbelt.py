"""The macOS backend: a ``sandbox-exec`` (Seatbelt) profile with the *write* policy of bubblewrap's.

It enforces: writes only where the policy's rules (:func:`sandbox.confine.verdict.rules`) allow them
(the run's paths, the agent's home, the temporary directories), your repository and the agents'
configuration read-only, ``/dev`` written only at ``/dev/null``, ``/dev/zero`` and the terminals, and
the network off when asked. It cannot enforce (:func:`cannot_enforce`, one line each in ``sandbox
doctor`` on macOS):

- the reads: the home allowlist, the hidden places and the masked secrets (every read is allowed);
- a private ``/tmp`` (the agent shares yours);
- a run's own copy of agent state files (the agent writes your ``~/.claude.json`` itself);
- a PID namespace (the agent sees your processes and may signal those of your user);
- an IPC namespace (your shared memory, semaphores and message queues are reachable);
- the keyring refusal (the login keychain answers through its Mach service);
- the Unix socket rule (every socket you may connect to is reachable, not only the host's);
- the process, file-size, memory and open-file limits, and inotify bounds (macOS has FSEvents);
- ``--network allow`` (no network namespace to route through the proxy: ``run`` gets the network on);
- Git LFS links: git-lfs hard-links what it finds in your LFS store into the agent's git dir, where
  bubblewrap's read-only mount refuses the link (``EXDEV``) and Seatbelt does not.

The per-call size bound is checked when a call is recorded, outside the sandbox: it holds here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox.confine.verdict import rules

if TYPE_CHECKING:
    from sandbox.confine.policy import Isolation, Policy


#: What the Seatbelt profile cannot enforce of the policy, each with what follows from it.
CANNOT_ENFORCE = (
    "reads: the home allowlist, hidden places, masked secrets and your objects beyond your committed history"
    " (Seatbelt allows every read here)",
    "a private /tmp: the agent shares yours",
    "a PID namespace: the agent sees your processes and may signal those of your user",
    "an IPC namespace: your shared memory, semaphores and message queues are reachable",
    "the keyring refusal: the login keychain answers the agent",
    "Unix sockets: every socket you may connect to is reachable, not only the repository's host",
    "the process, file-size, memory and open-file limits, and inotify bounds (macOS has FSEvents)",
    "--network allow: run gets the network on",
    "Git LFS links: the agent's git-lfs may hard-link your LFS store's files into its git dir (no mount"
    " boundary refuses it), and write your stored content through that name",
)
#: When the policy keeps agent state files per run (bubblewrap binds the run's copy over yours).
PRIVATE_STATE = "a run's own copy of agent state: the agent writes {paths} itself"


def cannot_enforce(isolation: Isolation) -> list[str]:
    """The rules of ``isolation`` the Seatbelt profile cannot hold, one line each (``sandbox doctor``
    prints them on macOS; the module docstring says why)."""
    out = list(CANNOT_ENFORCE)
    if isolation.private:
        out.insert(2, PRIVATE_STATE.format(paths=", ".join(isolation.private)))
    return out


def _sb_quote(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def seatbelt_profile(policy: Policy) -> str:
    """A ``sandbox-exec`` (Seatbelt) profile with the policy's writes and network (not its reads:
    :data:`CANNOT_ENFORCE`). Its writes are the policy's :func:`~sandbox.confine.verdict.rules` in
    their order: in SBPL the last match wins, as the last mount covering a path does in bubblewrap."""
    lines = ["(version 1)", "(allow default)", "(deny file-write*)"]
    lines.append('(allow file-write* (subpath "/private/tmp") (subpath "/private/var/folders"))')
    lines.append(
        '(allow file-write* (literal "/dev/null") (literal "/dev/zero") (regex #"^/dev/tty") (regex #"^/dev/fd/"))'
    )
    # Consecutive rules with one effect share a line. Hidden places are not hidden here (every read is
    # allowed), and nothing is written there unless a deeper rule says so: the default denies it.
    groups: list[tuple[bool, list[str]]] = []
    for rule in rules(policy):
        if rule.kind in ("tmp", "hidden"):
            continue
        if not groups or groups[-1][0] != rule.verdict.writable:
            groups.append((rule.verdict.writable, []))
        groups[-1][1].append(f"(subpath {_sb_quote(rule.path)})")
    lines += [f"({'allow' if writes else 'deny'} file-write* {' '.join(paths)})" for writes, paths in groups]
    if not policy.network:
        lines.append("(deny network*)")
        lines.append("(allow network* (remote unix-socket))")  # the repository's host socket
    return "\n".join(lines) + "\n"
