"""The macOS backend: a ``sandbox-exec`` (Seatbelt) profile with the *write* policy of bubblewrap's.

It enforces: writes only to the run's paths, the agent's home and the temporary directories; your
repository and the agents' configuration read-only; the network off when asked. It does not enforce
(:data:`CANNOT_ENFORCE`, which ``sandbox doctor`` shows): the home allowlist and the other hidden
places (reads are allowed everywhere), the masked secrets, a private ``/tmp``, the limits, the
keyring and IPC rules, and ``--network allow`` (no namespace to route through the proxy: it is ``on``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox.confine.verdict import rules

if TYPE_CHECKING:
    from sandbox.confine.policy import Policy


#: What the Seatbelt profile does not enforce of the policy (``sandbox doctor`` lists it on macOS).
CANNOT_ENFORCE = (
    "reads: the home allowlist, hidden places and masked secrets (Seatbelt allows every read here)",
    "a private /tmp, the process, file, memory, open-file, inotify and per-call limits",
    "the IPC namespace and the keyring refusal",
    "--network allow (run gets the network on)",
)


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
