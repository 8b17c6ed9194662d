"""Inotify limits of a sandbox's own user namespace: the agent's watchers cannot take the user's.

The kernel counts inotify instances and watches per user *per user namespace*, at every level up
the chain (``ucounts``): a sandbox in a user namespace of its own can be given its own
``user.max_inotify_instances`` / ``user.max_inotify_watches``, below the user's, and whatever it takes
it takes from that smaller budget, leaving the rest to the user's own tools (an agent that took all
128 instances made the user's editor and build watcher fail with ``EMFILE``).

Only a process with ``CAP_SYS_RESOURCE`` in that namespace may set them, and the sandboxed command
must not have it. So bubblewrap waits (``--userns-block-fd``) after making the namespace and tells its
child's pid (``--info-fd``); the caller writes the namespace's id maps (bubblewrap leaves them to
whoever holds the block: the caller's own uid and gid, as bubblewrap would map them), then
the caller (``nsenter``: the namespace's owner joining it has every capability there) writes both
limits; then the sandbox goes on. Standard library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import json
import os

LIMITS = ("/proc/sys/user/max_inotify_instances", "/proc/sys/user/max_inotify_watches")


def child_pid(info_fd: int, limit: int = 4096) -> int | None:
    """The sandbox's pid from bubblewrap's ``--info-fd`` JSON (read up to its first closing brace)."""
    data = b""
    while b"}" not in data and len(data) < limit:
        chunk = os.read(info_fd, 512)
        if not chunk:
            break
        data += chunk
    try:
        pid = json.loads(data[: data.index(b"}") + 1])["child-pid"]
    except (ValueError, KeyError, TypeError):
        return None
    return pid if isinstance(pid, int) and pid > 0 else None


def map_ids(pid: int) -> None:
    """Map this process's uid and gid to themselves in the user namespace of ``pid`` (what bubblewrap
    does itself without ``--userns-block-fd``); raises OSError."""
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:  # an unprivileged owner may map its gid only with setgroups denied
        _write(f"/proc/{pid}/setgroups", "deny")
    _write(f"/proc/{pid}/uid_map", f"{uid} {uid} 1\n")
    _write(f"/proc/{pid}/gid_map", f"{gid} {gid} 1\n")


def set_inotify(pid: int, instances: int, watches: int) -> bool:
    """Write both limits in the user namespace of ``pid``, from ``nsenter`` joining it; True when set.

    Never a fork of this process: ``sandbox run`` has threads (the proxy's, the host's spawner), and a
    fork of a threaded process that then calls into C can hang for good, holding copies of every
    descriptor (the proxy's listening socket answered after its run was killed)."""
    import shutil
    import subprocess

    nsenter = shutil.which("nsenter")
    if nsenter is None:
        return False
    script = f"echo {int(instances)} > {LIMITS[0]} && echo {int(watches)} > {LIMITS[1]}"
    try:
        done = subprocess.run(
            [nsenter, "--user", f"--target={pid}", "--preserve-credentials", "/bin/sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
