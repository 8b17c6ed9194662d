"""The macOS backend: a ``sandbox-exec`` (Seatbelt) profile with the *write* policy of bubblewrap's.

It enforces: writes only to the run's paths, the agent's home and the temporary directories; your
repository and the agents' configuration read-only; the network off when asked. It does not enforce
(:data:`CANNOT_ENFORCE`, which ``sandbox doctor`` shows): the home allowlist and the other hidden
places (reads are allowed everywhere), the masked secrets, a private ``/tmp``, the limits, the
keyring and IPC rules, and ``--network allow`` (no namespace to route through the proxy: it is ``on``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    :data:`CANNOT_ENFORCE`). In SBPL the last match wins."""
    lines = ["(version 1)", "(allow default)", "(deny file-write*)"]
    allowed = [*policy.writable, *policy.extra_writable, *policy.homes, "/private/tmp", "/private/var/folders"]
    lines.append("(allow file-write* " + " ".join(f"(subpath {_sb_quote(p)})" for p in allowed) + ")")
    lines.append(
        '(allow file-write* (literal "/dev/null") (literal "/dev/zero") (regex #"^/dev/tty") (regex #"^/dev/fd/"))'
    )
    if policy.protected:
        lines.append("(deny file-write* " + " ".join(f"(subpath {_sb_quote(p)})" for p in policy.protected) + ")")
        # ...but not the run's own paths below them (a worktree inside the user's .git).
        inner = [p for p in policy.writable if any(p.startswith(q.rstrip("/") + "/") for q in policy.protected)]
        if inner:
            lines.append("(allow file-write* " + " ".join(f"(subpath {_sb_quote(p)})" for p in inner) + ")")
    if policy.config:  # no copy-on-write here: the private state stays writable (a known gap)
        rules = [
            f"(subpath {_sb_quote(p.rstrip('/'))})" if p.endswith("/") else f"(literal {_sb_quote(p)})"
            for p in policy.config
        ]
        lines.append("(deny file-write* " + " ".join(rules) + ")")
    if not policy.network:
        lines.append("(deny network*)")
        lines.append("(allow network* (remote unix-socket))")  # the repository's host socket
    return "\n".join(lines) + "\n"
