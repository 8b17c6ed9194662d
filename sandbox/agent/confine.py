"""OS confinement of the agent's processes: bubblewrap on Linux, a ``sandbox-exec`` profile on macOS.

A run's worktree is only a convention until the processes working in it are kept out of
everything else. ``sandbox exec`` and ``sandbox run`` start their command or agent through
:func:`spawn`, which puts it in a bubblewrap sandbox with this policy (:func:`bwrap_argv`):

* the whole file system read-only (``--ro-bind / /``), a private ``/dev`` and ``/tmp``, a ``/proc``
  of its own PID namespace (``--unshare-pid``: the sandbox sees only its own processes, so
  ``/proc/<ppid>/cwd`` cannot lead back to the caller's writable mounts, and nothing outside can be
  signalled or traced);
* writable: the run's own paths (:func:`run_writable_paths`, the one place that says which) and the
  agent's own state (``~/.claude``, ``~/.gemini``, ... from the settings); the user's working tree
  and its ``.git`` are then re-mounted read-only explicitly, in case they lie under a writable path;
* the most specific path wins: mounts are made parents first, so a writable worktree inside the
  user's ``.git`` stays writable while ``.git`` itself is read-only;
* no capabilities (``--cap-drop ALL``: a root caller's sandbox would otherwise keep
  ``CAP_SYS_ADMIN`` and could simply remount ``/`` read-write) and ``/proc/sys``, ``/proc/irq``,
  ``/proc/bus`` read-only (bubblewrap leaves them writable for root);
* ``--unshare-net`` when the network is off, and under ``--network allow``, where the one way out
  is the run's proxy, reached through a forwarder inside (:mod:`sandbox.agent.bridge`). Unix
  sockets named by a path still work across it:
  the hooks reach the repository's host on its ``host.sock`` (``connect`` needs no write access to
  the mount), with their run's token, which only their own run's (visible) directory holds;
* ``--die-with-parent``: a sandbox never outlives the ``sandbox`` process that records it;
* ``--new-session`` when the command does not use the terminal; an interactive agent keeps the
  terminal (a new session has no controlling terminal: no ``/dev/tty``, no ``SIGWINCH`` on resize),
  and a seccomp filter refuses ``TIOCSTI``/``TIOCLINUX`` instead, the ioctls that would let it type
  into the user's shell.

Signals: bubblewrap does not pass signals on, and dies of them (killing the sandbox with SIGKILL).
So it starts with SIGINT, SIGTERM, SIGHUP and SIGQUIT blocked (bubblewrap clears the mask for the
command), and :meth:`Confined.send_signal` delivers a signal to the command itself. A Ctrl-C from
the terminal reaches the command directly. Bubblewrap 0.8 reports a command killed by a signal as
exit 0, so the command runs under ``sh -c '...; "$@"; exit $?'``, which turns that into 128+N
(its trap only stops the shell itself from dying first; the command gets default dispositions).

Availability (:func:`check`) is decided from what is on disk, without starting a process; a
sandbox that still cannot be set up is reported by :meth:`Confined.wait` from bubblewrap's
status pipe, never taken for the command's own failure, and never followed by an unconfined run.

This module imports only the standard library: ``sandbox exec``'s fast path uses it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import signal
import struct
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from sandbox.errors import SandboxError
from sandbox.store import layout

if TYPE_CHECKING:
    from sandbox.agent.hardening import Cgroups
    from sandbox.run.run import Run

#: The paths an agent needs to write to keep its own state (``~`` is expanded by the CLI).
#: Directories are created when missing; a missing ``.json`` file is created as ``{}`` (Claude
#: Code hangs at start when it cannot write ``~/.claude.json``, and creates a lock and temp files
#: beside it, which fail on the read-only home and fall back to a direct write).
DEFAULT_AGENT_STATE = (
    "~/.claude/",
    "~/.claude.json",
    "~/.gemini/",
    "~/.codex/",
    "~/.npm/",
    "~/.local/state/claude/",
)
#: Agent state that is configuration: what the user's own, unconfined agent loads at its next start
#: (hooks and MCP servers it runs, commands, agents, skills, plugins, instructions). Read-only in the
#: sandbox even though the state around it is writable, so that a confined process cannot plant a
#: command that runs outside the sandbox later. A missing one is created first (a directory empty,
#: a ``.json`` file as ``{}``, another file empty): the agent could otherwise create it.
AGENT_CONFIG = (
    "~/.claude/settings.json",
    "~/.claude/settings.local.json",
    "~/.claude/CLAUDE.md",
    "~/.claude/commands/",
    "~/.claude/agents/",
    "~/.claude/skills/",
    "~/.claude/hooks/",
    "~/.claude/plugins/",
    "~/.claude/output-styles/",
    "~/.gemini/settings.json",
    "~/.gemini/GEMINI.md",
    "~/.gemini/commands/",
    "~/.gemini/extensions/",
    "~/.gemini/policies/",
    "~/.codex/config.toml",
    "~/.codex/AGENTS.md",
    "~/.codex/prompts/",
)
#: Agent state files that hold configuration (``~/.claude.json``: the MCP servers Claude Code starts)
#: and that the agent rewrites at every start, so they cannot be read-only: each run's sandbox
#: writes a copy of its own (in the run's directory, seeded from yours the first time), and yours
#: is never written from inside.
AGENT_PRIVATE = ("~/.claude.json",)
INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
    "Arch: pacman -S bubblewrap)"
)
OPT_OUT = "or run without OS confinement with --isolate off ([isolation] isolate = false in .sandbox.toml)"
_BLOCKED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
#: Runs the command as a child, so a death by signal N becomes exit 128+N (see the module docstring).
_SHIM = 'trap : INT TERM HUP QUIT; "$@"; exit $?'
#: Set inside every sandbox: a ``sandbox exec`` run by the agent knows it is already confined.
CONFINED_ENV = "SANDBOX_CONFINED"
#: The bearer token of ``sandbox mcp --http`` (when the user fixes it): never handed to a confined
#: process, which could otherwise drive that server (loopback reaches it).
MCP_TOKEN_ENV = "SANDBOX_MCP_TOKEN"
#: Variables of ours a confined process never inherits.
WITHHELD_ENV = (MCP_TOKEN_ENV,)
#: The run's allowlist proxy socket, in its own directory (see :mod:`sandbox.agent.netproxy`).
PROXY_SOCKET = "net.sock"
_PROC_COVER = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")

#: Secrets masked inside by default (``~/`` is the user's home, expanded by the CLI): each existing
#: directory is replaced by an empty read-only one, each file by an empty one. ``deny_read`` adds to
#: it, ``allow_read`` takes from it ([isolation] in ``.sandbox.toml``). The agent's own state
#: (:data:`DEFAULT_AGENT_STATE`) is not a secret and is never in it. See docs/confinement.md.
DEFAULT_DENY_READ = (
    # keys and cloud credentials
    "~/.ssh/",
    "~/.gnupg/",
    "~/.aws/",
    "~/.azure/",
    "~/.config/gcloud/",
    "~/.kube/",
    "~/.docker/config.json",
    "~/.oci/",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.vault-token",
    # tokens of git hosts and package registries
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.config/gh/",
    "~/.config/hub",
    "~/.config/glab-cli/",
    "~/.npmrc",
    "~/.yarnrc.yml",
    "~/.pypirc",
    "~/.config/pip/pip.conf",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.gem/credentials",
    "~/.m2/settings-security.xml",
    "~/.pgpass",
    "~/.my.cnf",
    # password stores and keyrings
    "~/.password-store/",
    "~/.local/share/keyrings/",
    "~/.config/op/",
    "~/.config/Bitwarden/",
    "~/.config/keepassxc/",
    # browser profiles (cookies, saved passwords)
    "~/.mozilla/",
    "~/.config/google-chrome/",
    "~/.config/chromium/",
    "~/.config/BraveSoftware/",
    "~/.config/microsoft-edge/",
    "~/snap/firefox/",
    # shell and REPL histories
    "~/.bash_history",
    "~/.zsh_history",
    "~/.zhistory",
    "~/.histfile",
    "~/.local/share/fish/",
    "~/.python_history",
    "~/.node_repl_history",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.sqlite_history",
    "~/.lesshst",
    "~/.viminfo",
)
#: Directories where daemons put their Unix sockets (``docker.sock``, the user's D-Bus bus, ssh and
#: gpg agents under ``/run/user/<uid>``): not visible inside. With the private ``/tmp`` and the masked
#: ``~/.ssh`` / ``~/.gnupg`` this is the mount view that keeps path sockets out of reach (the module
#: docstring says what it does not cover); ``unix_sockets`` binds chosen ones back.
SOCKET_DIRS = ("/run", "/var/run")
#: Files below a hidden directory that a confined process still needs (DNS: ``resolv.conf`` is often
#: a link into ``/run/systemd/resolve``); bound read-only wherever they lead.
KEEP_FILES = ("/etc/resolv.conf",)
#: The variables a confined process inherits from the caller's environment (``fnmatch`` patterns).
#: Everything else (``SSH_AUTH_SOCK``, ``DBUS_*``, ``DISPLAY``, ``WAYLAND_*``, ``*_TOKEN``, ``AWS_*``,
#: ...) is dropped unless the agent's own names (:data:`AGENT_ENV`) or ``env_allow`` name it.
DEFAULT_ENV_ALLOW = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "HOSTNAME",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "TERM_PROGRAM",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
    "FORCE_COLOR",
    "TZ",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONIOENCODING",
    "VIRTUAL_ENV",
    "GIT_AUTHOR_*",
    "GIT_COMMITTER_*",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_KEY_*",
    "GIT_CONFIG_VALUE_*",
    "SANDBOX_*",  # our own (SANDBOX_RUN, SANDBOX_SESSION, ...); WITHHELD_ENV still applies
)
#: The variables each agent needs, by the family name of its command (``claude``, ``gemini``, ``codex``).
AGENT_ENV = {
    "claude": ("ANTHROPIC_*", "CLAUDE_*", "CLAUDECODE", "IS_SANDBOX", "DISABLE_*", "MCP_*", "BASH_*_TIMEOUT_MS"),
    "gemini": ("GEMINI_*", "GOOGLE_*"),
    "codex": ("OPENAI_*", "CODEX_*"),
}
GIB = 1024**3
_SMALL = str(1024 * 1024)  # the size of a hidden directory's tmpfs: it only holds mount points


@dataclass(frozen=True)
class Limits:
    """What a confined process may consume. None: not bounded."""

    #: Size of the private ``/tmp`` and ``/dev/shm`` (RAM-backed tmpfs).
    tmpfs_bytes: int = GIB
    #: Processes (and threads): a pids cgroup where one can be made, and ``RLIMIT_NPROC``.
    max_processes: int | None = 4096
    #: The largest file a process may write (``RLIMIT_FSIZE``).
    max_file_bytes: int | None = 16 * GIB
    #: Memory of all its processes together (a memory cgroup, where one can be made).
    max_memory: int | None = 8 * GIB
    #: What one call may add to the worktree (bytes of new or grown files), checked when it is recorded.
    max_call_bytes: int | None = None


class ConfinementError(SandboxError):
    """OS confinement was asked for and cannot be had (no bubblewrap, no user namespaces, ...)."""

    exit_code = 1


@dataclass(frozen=True)
class Isolation:
    """What the caller asks for; the CLI builds it from flags and settings (the library reads no env).

    ``program`` is the bubblewrap (or ``sandbox-exec``) executable found by the caller, None when
    it found none. ``writable`` are more paths the agent may write (absolute; state dirs, caches).
    ``interactive``: the command uses the terminal (keep the session, filter ``TIOCSTI`` instead).
    """

    enabled: bool = True
    network: bool = True
    program: str | None = None
    backend: str = "bwrap"
    writable: tuple[str, ...] = ()
    interactive: bool = False
    #: Paths kept visible (read-only) even below the private ``/tmp``: the user's home.
    readable: tuple[str, ...] = ()
    #: Already inside a sandbox of ours (an agent's ``sandbox exec``): not confined again, since
    #: bubblewrap cannot nest without capabilities, and the enclosing sandbox still holds.
    inherited: bool = False
    #: Agent configuration below the writable state, kept read-only (see :data:`AGENT_CONFIG`).
    config: tuple[str, ...] = ()
    #: Agent state files each run writes a copy of instead (see :data:`AGENT_PRIVATE`).
    private: tuple[str, ...] = ()
    #: ``--network allow``: the hosts the agent may reach, through the run's proxy
    #: (:mod:`sandbox.agent.netproxy`); None: the network is wholly on or off (``network``).
    allow: tuple[str, ...] | None = None

    @property
    def network_mode(self) -> str:
        """``on``, ``off`` or ``allow`` (through the run's allowlist proxy)."""
        return "allow" if self.allow is not None and not self.network else "on" if self.network else "off"

    #: Secrets masked inside (absolute; :data:`DEFAULT_DENY_READ` as the settings leave it).
    masked: tuple[str, ...] = ()
    #: Directories not visible at all (the sandbox data directory, other repositories' run state).
    hidden: tuple[str, ...] = ()
    #: The inherited environment variables that pass (``fnmatch`` patterns, :data:`DEFAULT_ENV_ALLOW`).
    env_allow: tuple[str, ...] = DEFAULT_ENV_ALLOW
    #: Unix sockets (paths) kept reachable although they lie in a hidden directory.
    unix_sockets: tuple[str, ...] = ()
    limits: Limits = Limits()

    def describe(self) -> str:
        """One phrase for the ledger and messages: ``bwrap, network off``, ``off`` or ``inherited``."""
        if self.inherited:
            return "inherited (inside the sandbox of the calling agent)"
        if not self.enabled:
            return "off"
        if self.network_mode == "allow":
            return f"{self.backend}, network allow ({', '.join(self.allow or ()) or 'no host'})"
        return f"{self.backend}, network {'on' if self.network else 'off'}"


@dataclass(frozen=True)
class Policy:
    """What a confined process may write, what is re-protected, and whether it has a network."""

    writable: tuple[str, ...]
    protected: tuple[str, ...]
    network: bool = True
    interactive: bool = False
    extra_writable: tuple[str, ...] = field(default=())
    readable: tuple[str, ...] = field(default=())
    #: Directories replaced by an empty one (other runs' scratch dirs, with their host tokens).
    hidden: tuple[str, ...] = field(default=())
    #: Agent configuration kept read-only below the writable agent state (:data:`AGENT_CONFIG`).
    config: tuple[str, ...] = field(default=())
    #: (the run's copy, the path it is mounted at): agent state written per run (:data:`AGENT_PRIVATE`).
    private: tuple[tuple[str, str], ...] = field(default=())
    #: ``--network allow``: the run's proxy socket (:mod:`sandbox.agent.netproxy`), reached from the
    #: agent's own network namespace through the forwarder of :mod:`sandbox.agent.bridge`.
    proxy: str | None = None
    #: The run's agent homes, writable (below the run's directory, which is read-only).
    homes: tuple[str, ...] = field(default=())
    #: Secrets replaced by an empty directory or file (:data:`DEFAULT_DENY_READ`).
    masked: tuple[str, ...] = field(default=())
    #: Inherited environment variables that pass (patterns); the sandbox's own are set after.
    env_allow: tuple[str, ...] = field(default=DEFAULT_ENV_ALLOW)
    limits: Limits = field(default=Limits())
    #: Why each hidden directory is hidden, for the line a hidden command gets.
    reasons: tuple[tuple[str, str], ...] = field(default=())
    #: An empty read-only regular file bound over masked files (None: ``/dev/null``).
    empty_file: str | None = None


# -- which paths ------------------------------------------------------------------------------


def run_writable_paths(common_dir: str, run_id: str, worktree: str) -> list[str]:
    """The paths a run's processes must be able to write: its worktree and its own git directory.

    The one place that says so. Both come from the user's repository (:func:`sandbox.store.layout.place_of`
    reads ``runs/<run>/place`` there), never from the worktree's ``.git`` file, which the agent could
    rewrite to name any directory. The run's home around them (with its ``origin`` file, which
    tells hooks where the user's repository is) stays read-only. A legacy run's git dir is its
    admin dir in the user's ``.git/worktrees``.
    """
    place = layout.place_of(common_dir, run_id)
    paths = [os.path.realpath(worktree)]
    if os.path.realpath(place.worktree) != paths[0]:
        raise ConfinementError(
            f"The worktree {worktree} is not where the repository places run {run_id} ({place.worktree}); "
            "nothing was run."
        )
    if os.path.isdir(place.git_dir):
        paths.append(os.path.realpath(place.git_dir))
    return paths


def run_readable_paths(common_dir: str, run_id: str) -> list[str]:
    """The run's home, read-only: its ``origin`` file is how a hook inside finds the run.

    Visible even when the data directory lies below the private ``/tmp`` or outside the home.
    """
    home = layout.place_of(common_dir, run_id).home
    return [os.path.realpath(home)] if home else []


def protected_paths(common_dir: str, user_workdir: str | None) -> list[str]:
    """The user's working tree and git directory: read-only even below a writable path."""
    out = [os.path.realpath(common_dir)]
    if user_workdir:
        out.insert(0, os.path.realpath(user_workdir))
    return out


def expand_home(entry: str, home: str) -> str:
    """A settings entry as a path: ``~`` and ``~/x`` under ``home``, without its trailing ``/``."""
    path = entry.rstrip("/") or "/"
    if path == "~" or path.startswith("~/"):
        path = os.path.join(home, path[2:]) if path != "~" else home
    return path


def state_paths(entries: Sequence[str], home: str) -> list[str]:
    """Absolute paths for settings entries: ``~/x`` under ``home``; relative entries are refused."""
    out = []
    for entry in entries:
        path = expand_home(entry, home)
        if not os.path.isabs(path):
            raise ConfinementError(
                f"The writable path {entry!r} in the isolation settings is not absolute; "
                "write it as /abs/path or ~/path."
            )
        if os.path.realpath(path) in ("/", os.path.realpath(home)):
            raise ConfinementError(
                f"The writable path {entry!r} would make {'your home' if path != '/' else 'everything'} writable; "
                "name the agent's own directories instead."
            )
        out.append(path + ("/" if entry.endswith("/") else ""))
    return out


def prepare_state(paths: Sequence[str]) -> None:
    """Create missing agent state directories (entries ending in ``/``) and ``.json`` files (``{}``)."""
    for entry in paths:
        path = entry.rstrip("/")
        if entry.endswith("/"):
            with contextlib.suppress(OSError):
                os.makedirs(path, exist_ok=True)
        elif path.endswith(".json") and not os.path.lexists(path) and os.path.isdir(os.path.dirname(path)):
            with contextlib.suppress(OSError), open(path, "x", encoding="utf-8") as fh:
                fh.write("{}\n")


def config_paths(
    entries: Sequence[str], private: Sequence[str], state: Sequence[str], home: str
) -> tuple[list[str], list[str]]:
    """The agent configuration to keep read-only and the state files to give each run a copy of:
    those of ``entries`` / ``private`` (``~/`` paths) that lie in the writable agent ``state``."""
    writable = [p.rstrip("/") for p in state]

    def under(path: str, exact: bool) -> bool:
        return any(path == w or (not exact and path.startswith(w + "/")) for w in writable)

    config = [p for p in state_paths(entries, home) if under(p.rstrip("/"), exact=False)]
    copies = [p for p in state_paths(private, home) if under(p.rstrip("/"), exact=True)]
    return config, copies


def prepare_config(policy: Policy) -> None:
    """Make sure every configuration path exists (else the agent could create it: see
    :data:`AGENT_CONFIG`) and every run's copy of private state is there, seeded from the user's."""
    for entry in policy.config:
        path = entry.rstrip("/")
        if os.path.lexists(path) or not os.path.isdir(os.path.dirname(path)):
            continue
        with contextlib.suppress(OSError):
            if entry.endswith("/"):
                os.mkdir(path, 0o700)
            else:
                with open(path, "x", encoding="utf-8") as fh:
                    fh.write("{}\n" if path.endswith(".json") else "")
    for copy, dest in policy.private:
        if os.path.exists(copy):
            continue
        os.makedirs(os.path.dirname(copy), mode=0o700, exist_ok=True)
        data = b"{}\n"
        with contextlib.suppress(OSError):
            if os.path.isfile(dest):
                with open(dest, "rb") as fh:
                    data = fh.read(64 * 1024 * 1024)
        fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)


def policy_for_run(isolation: Isolation, run: Run) -> Policy:
    """The policy for a command of ``run``: its paths in the repository this command runs in (never
    the tree its record names, which may be another clone's: a fetched run)."""
    return policy_for(
        isolation,
        common_dir=run.project.common_dir,
        run_id=run.run_id,
        worktree=run.worktree,
        user_workdir=run.user_workdir,
    )


def policy_for(
    isolation: Isolation, *, common_dir: str, run_id: str, worktree: str, user_workdir: str | None
) -> Policy:
    """The policy for a command of run ``run_id``.

    Hidden (an empty read-only directory in its place): the user's working tree (the agent has its
    worktree), the sandbox's state in the repository (``.git/sandbox``: every run's token, the host's
    files) and in other repositories, the data directory with every run's home, and the socket
    directories. Bound back read-only below them: this run's own directory (its token, the ``place``
    its hooks check), the host's directory (its socket), the run's home (the ``origin`` file),
    :data:`KEEP_FILES`, the sockets ``unix_sockets`` allows and what the caller keeps ``readable``
    (the home, the sandbox's interpreter, the agent's executable). The user's ``.git`` stays readable
    (the run's git borrows its objects) and read-only.
    """
    real = os.path.realpath
    hidden = hidden_dirs(isolation, common_dir, user_workdir)

    def is_hidden(path: str) -> bool:
        return any(path == h or path.startswith(h.rstrip("/") + "/") for h in hidden)

    keep = [real(p) for p in KEEP_FILES if os.path.exists(p) and is_hidden(real(p))]
    sockets = [real(p) for p in isolation.unix_sockets if os.path.exists(p)]
    readable = (
        *isolation.readable,
        real(layout.run_dir(common_dir, run_id)),
        real(layout.host_dir(common_dir)),
        *run_readable_paths(common_dir, run_id),
        *keep,
        *sockets,
    )
    protected = [p for p in protected_paths(common_dir, user_workdir) if p not in hidden]
    return Policy(
        writable=tuple(run_writable_paths(common_dir, run_id, worktree)),
        protected=tuple(protected),
        network=isolation.network,
        interactive=isolation.interactive,
        extra_writable=tuple(p.rstrip("/") for p in isolation.writable),
        readable=readable,
        hidden=tuple(p for p in hidden if p != "/tmp"),
        config=isolation.config,
        # The run's agent homes (CLAUDE_CONFIG_DIR, GEMINI_CLI_HOME: sandbox.agent.agenthome), when made.
        homes=tuple(p for p in [os.path.realpath(_homes_root(common_dir, run_id))] if os.path.isdir(p)),
        private=tuple(
            (os.path.join(os.path.realpath(layout.run_dir(common_dir, run_id)), "agent-state", _copy_name(dest)), dest)
            for dest in isolation.private
        ),
        proxy=(
            os.path.join(os.path.realpath(layout.run_dir(common_dir, run_id)), PROXY_SOCKET)
            if isolation.network_mode == "allow"
            else None
        ),
        # The repository's config may hold credentials (a remote URL with a token, an http.extraHeader);
        # the run's git has its own config and borrows only the objects.
        masked=(*isolation.masked, real(os.path.join(common_dir, "config"))),
        env_allow=isolation.env_allow,
        limits=isolation.limits,
        reasons=tuple(hidden.items()),
        empty_file=_empty_file(common_dir),
    )


def _empty_file(common_dir: str) -> str | None:
    """``<common>/sandbox/empty``, made once (mode 0444): what a masked file shows inside."""
    path = layout.empty_file(common_dir)
    try:
        if os.path.getsize(path) == 0 and not os.path.islink(path):
            return path
    except OSError:
        pass
    try:
        os.makedirs(layout.state_dir(common_dir), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        os.close(fd)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def _homes_root(common_dir: str, run_id: str) -> str:
    from sandbox.agent.agenthome import homes_root  # standard library only, like this module

    return homes_root(layout.run_dir(common_dir, run_id))


def without_state(isolation: Isolation, replaced: Sequence[str]) -> Isolation:
    """``isolation`` less the agent state (absolute paths) that a run's agent homes stand in for:
    the user's ``~/.claude``, ``~/.gemini``, ... are then read-only in the sandbox like the rest of
    the home, and nothing is created there (no configuration file needs making to be protected)."""
    drop = [p.rstrip("/") for p in replaced]

    def kept(path: str) -> bool:
        bare = path.rstrip("/")
        return not any(bare == d or bare.startswith(d + "/") for d in drop)

    return dataclasses.replace(
        isolation,
        writable=tuple(p for p in isolation.writable if kept(p)),
        config=tuple(p for p in isolation.config if kept(p)),
        private=tuple(p for p in isolation.private if kept(p)),
    )


def hidden_dirs(isolation: Isolation, common_dir: str, user_workdir: str | None) -> dict[str, str]:
    """The directories not visible inside a run's sandbox (the private ``/tmp`` too), each with why."""
    real = os.path.realpath
    state = real(layout.state_dir(common_dir))
    reasons = [(state, "the sandbox's own state (every run's token, the host's files)")]
    if user_workdir:
        reasons.append((real(user_workdir), "your working tree (the agent works in its run's worktree)"))
    reasons += [(real(p), "the sandbox's data directory or another repository's run state") for p in isolation.hidden]
    reasons += [(real(p), "a directory of daemons' Unix sockets") for p in SOCKET_DIRS]
    reasons.append(("/tmp", "/tmp, which is private inside the sandbox"))
    hidden: dict[str, str] = {}
    for path, why in reasons:
        if path != "/" and os.path.isdir(path):
            hidden.setdefault(path, why)
    return hidden


def hidden_reason(policy: Policy, path: str) -> str | None:
    """Why ``path`` (absolute, resolved) is not visible inside under ``policy``; None when it is.

    The deepest mount covering it decides: a path bound back below a hidden directory is visible.
    """
    shown = [*policy.readable, *policy.writable, *policy.extra_writable, *policy.protected]
    best: tuple[int, str | None] = (-1, None)
    secrets = [(m.rstrip("/"), "a secret masked by the deny-read set") for m in policy.masked]
    for root, why in [*policy.reasons, *secrets]:
        if path == root or path.startswith(root.rstrip("/") + "/"):
            best = max(best, (_depth(root), why), key=lambda b: b[0])
    if best[1] is None:
        return None
    for root in shown:
        root = os.path.realpath(root.rstrip("/"))
        if (path == root or path.startswith(root + "/")) and _depth(root) > best[0]:
            return None
    return best[1]


def filter_env(env: Mapping[str, str], allow: Sequence[str]) -> dict[str, str]:
    """The variables of ``env`` that a confined process inherits: those ``allow`` names, never :data:`WITHHELD_ENV`."""
    passes = env_matcher(allow)
    return {k: v for k, v in env.items() if k not in WITHHELD_ENV and passes(k)}


def env_matcher(allow: Sequence[str]) -> Callable[[str], bool]:
    """A test of a variable's name against ``allow``, with :func:`fnmatch.fnmatchcase`'s meaning.

    Names and ``PREFIX*`` patterns (nearly all of them) are matched without a regular expression:
    ``fnmatch`` compiles one per pattern, ~2 ms of every ``sandbox exec`` for the default list.
    """
    exact: set[str] = set()
    prefixes: list[str] = []
    others: list[str] = []
    for pattern in allow:
        if not any(c in pattern for c in "*?["):
            exact.add(pattern)
        elif pattern.endswith("*") and not any(c in pattern[:-1] for c in "*?["):
            prefixes.append(pattern[:-1])
        else:
            others.append(pattern)
    starts = tuple(prefixes)
    return lambda name: name in exact or name.startswith(starts) or any(fnmatch.fnmatchcase(name, p) for p in others)


def other_state_dirs(data_root: str, common_dir: str) -> list[str]:
    """The ``.git/sandbox`` of every other repository with a run home under ``data_root`` (their tokens
    and host sockets), found through the homes' ``origin`` files; plus ``data_root`` itself."""
    out = [data_root]
    repos = os.path.join(data_root, "repos")
    own = os.path.realpath(common_dir)
    seen = {own}
    with contextlib.suppress(OSError):
        for key in os.listdir(repos):
            with contextlib.suppress(OSError):
                for run in os.listdir(os.path.join(repos, key)):
                    try:
                        with open(os.path.join(repos, key, run, layout.ORIGIN_FILE), encoding="utf-8") as fh:
                            origin = fh.read(4096).strip()
                    except (OSError, UnicodeError):
                        continue
                    if os.path.isabs(origin) and os.path.realpath(origin) not in seen:
                        seen.add(os.path.realpath(origin))
                        out.append(layout.state_dir(origin))
                    break  # one home names the repository of all of them
    return out


def _copy_name(path: str) -> str:
    """The file name of a run's copy of ``path`` (``~/.claude.json`` -> ``.claude.json``)."""
    return os.path.basename(path.rstrip("/")) or "state"


# -- availability ------------------------------------------------------------------------------


def check(isolation: Isolation) -> None:
    """Raise :class:`ConfinementError` (naming the fix and the opt-out) when it cannot be had.

    Decided from files only (no process is started): the program, and on Linux whether user
    namespaces are allowed. A setup that fails anyway is reported by :meth:`Confined.wait`.
    """
    if not isolation.enabled:
        return
    if isolation.backend == "seatbelt":
        if not isolation.program or not os.access(isolation.program, os.X_OK):
            raise ConfinementError(f"OS confinement needs /usr/bin/sandbox-exec, which is missing; {OPT_OUT}.")
        return
    if not isolation.program or not os.access(isolation.program, os.X_OK):
        raise ConfinementError(
            f"OS confinement needs bubblewrap (bwrap), which is not installed: {INSTALL_HINT}, {OPT_OUT}."
        )
    reason = _userns_blocked()
    if reason is not None:
        raise ConfinementError(
            f"OS confinement needs user namespaces, which this system disables ({reason}); "
            f"enable them (sysctl -w {reason.split(' = ')[0]}=1 as root), {OPT_OUT}."
        )


def _userns_blocked() -> str | None:
    if os.geteuid() == 0:
        return None  # bubblewrap needs no user namespace when started by root
    for path, bad in (
        ("/proc/sys/user/max_user_namespaces", "0"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
    ):
        try:
            with open(path, encoding="ascii") as fh:
                value = fh.read().strip()
        except (OSError, UnicodeError):
            continue
        if value == bad:
            return f"{path[len('/proc/sys/') :].replace('/', '.')} = {value}"
    return None


def inside_sandbox(env_value: str | None) -> bool:
    """True in a process of one of our sandboxes: the variable we set, and bubblewrap as PID 1."""
    if env_value != "1":
        return False
    try:
        with open("/proc/1/comm", encoding="utf-8") as fh:
            return fh.read().strip() == "bwrap"
    except OSError:
        return False


# -- bubblewrap --------------------------------------------------------------------------------


def _depth(path: str) -> int:
    return 0 if path == "/" else path.rstrip("/").count("/")


def bwrap_argv(
    program: str,
    policy: Policy,
    argv: Sequence[str],
    cwd: str,
    *,
    started_fd: int | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The bubblewrap command line that runs ``argv`` in ``cwd`` under ``policy``."""
    out = [program, "--cap-drop", "ALL", "--die-with-parent", "--unshare-pid"]
    if not policy.network:
        out.append("--unshare-net")
    if not policy.interactive:
        out.append("--new-session")
    size = str(policy.limits.tmpfs_bytes)
    out += ["--ro-bind", "/", "/", "--dev", "/dev", "--size", size, "--tmpfs", "/dev/shm", "--proc", "/proc"]
    for cover in _PROC_COVER:
        out += ["--ro-bind-try", cover, cover]
    # (depth, order, args): parents first; at equal depth tmpfs, readable, writable, protected, masks.
    mounts: list[tuple[int, int, list[str]]] = [(_depth("/tmp"), 0, ["--size", size, "--tmpfs", "/tmp"])]
    hidden = [path for path in policy.hidden if os.path.isdir(path)]
    mounts += [(_depth(path), 0, ["--size", _SMALL, "--tmpfs", path]) for path in hidden]
    covered = ["/tmp", *hidden, *(p.rstrip("/") for p in (*policy.writable, *policy.extra_writable))]
    covered += [os.path.realpath(m.rstrip("/")) for m in policy.masked]
    # Visible as on the host even below /tmp or a hidden dir: where it leads, and (when a link leads
    # there) the path as named, so a link that lies below the private /tmp still works inside.
    readable = dict.fromkeys(p for path in policy.readable for p in (os.path.realpath(path), os.path.abspath(path)))
    for real in readable:
        # A mount costs bubblewrap time: one that would show what `/` shows read-only anyway is left out.
        if any(real == c or real.startswith(c.rstrip("/") + "/") for c in covered):
            mounts.append((_depth(real), 1, ["--ro-bind-try", real, real]))
    for path in policy.writable:
        mounts.append((_depth(path), 2, ["--bind", path, path]))
    for path in policy.extra_writable:
        real = os.path.realpath(path)
        mounts.append((_depth(real), 2, ["--bind-try", real, real]))
    for path in policy.protected:
        mounts.append((_depth(path), 3, ["--ro-bind-try", path, path]))
    for path in policy.homes:
        mounts.append((_depth(path), 2, ["--bind", path, path]))
    for entry in policy.config:  # the agent's configuration, read-only below its writable state
        real = os.path.realpath(entry.rstrip("/"))
        if os.path.lexists(real):
            mounts.append((_depth(real), 3, ["--ro-bind", real, real]))
    for copy, dest in policy.private:  # the run's own copy where the agent writes this state
        if os.path.isfile(dest) and os.path.isfile(copy):
            real = os.path.realpath(dest)
            mounts.append((_depth(real), 3, ["--bind", copy, real]))
    masked_dirs = []
    for entry in policy.masked:  # secrets: an empty directory or file in their place, last of all
        real = os.path.realpath(entry.rstrip("/"))
        if os.path.isdir(real):
            masked_dirs.append(real)
            mounts.append((_depth(real), 4, ["--size", _SMALL, "--tmpfs", real]))
        elif os.path.exists(real):
            # An empty regular file, not /dev/null: libgit2 refuses a repository whose config is a
            # device ("config is locked"), and tools read an empty file as an empty setting.
            mounts.append((_depth(real), 4, ["--ro-bind", policy.empty_file or "/dev/null", real]))
    for _depth_key, _order, args in sorted(mounts, key=lambda m: (m[0], m[1])):
        out += args
    for path in [*hidden, *masked_dirs]:  # read-only once what is bound back is mounted inside
        out += ["--remount-ro", path]
    out += ["--setenv", "TMPDIR", "/tmp", "--setenv", CONFINED_ENV, "1", "--chdir", cwd]
    if seccomp_fd is not None:
        out += ["--seccomp", str(seccomp_fd)]
    # The shim tells the caller through ``started_fd`` (by path: dash cannot name fds above 9)
    # that the sandbox is set up, so a failed setup is never taken for the command's own exit.
    shim = _limits_shell(policy.limits) + _SHIM
    if started_fd is not None:
        shim = f"printf s >/proc/self/fd/{started_fd}; {shim}"
    if policy.proxy is not None:  # the forwarder to the run's proxy listens before the agent starts
        from sandbox.agent import bridge

        argv = bridge.wrap(argv, policy.proxy)
    out += ["--", "/bin/sh", "-c", shim, "sandbox-confined", *argv]
    return out


def _limits_shell(limits: Limits) -> str:
    """``ulimit`` for the shim: inside the sandbox's user namespace the kernel counts RLIMIT_NPROC
    per namespace, so the bound is the sandbox's own (set outside, it would count every process of
    the user). dash spells the process limit ``-p``, bash ``-u``; ``-f`` counts 512-byte blocks."""
    out = ""
    if limits.max_processes is not None:
        n = limits.max_processes
        out += f"ulimit -u {n} 2>/dev/null || ulimit -p {n} 2>/dev/null; "
    if limits.max_file_bytes is not None:
        out += f"ulimit -f {max(limits.max_file_bytes // 512, 1)} 2>/dev/null; "
    return out


# A classic BPF program for seccomp: ioctl(fd, TIOCSTI | TIOCLINUX, ...) fails with EPERM; every
# other call is allowed. Unknown architectures get no filter (see :func:`seccomp_program`).
_AUDIT_ARCH = {"x86_64": (0xC000003E, (16, 0x40000000 | 514)), "aarch64": (0xC00000B7, (29,))}
_DENIED_IOCTLS = (0x5412, 0x541C)  # TIOCSTI, TIOCLINUX
_LD_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_ALLOW, _DENY = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM


def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter as bytes for ``bwrap --seccomp FD``; None on an architecture it does not know."""
    arch = _AUDIT_ARCH.get(machine or os.uname().machine)
    if arch is None:
        return None
    audit, numbers = arch
    # Instructions as (code, jump-if-true label, jump-if-false label, k); labels resolved below.
    prog: list[tuple[int, str | None, str | None, int]] = [(_LD_ABS, None, None, 4)]  # seccomp_data.arch
    prog.append((_JEQ_K, None, "allow", audit))
    prog.append((_LD_ABS, None, None, 0))  # seccomp_data.nr
    for i, nr in enumerate(numbers):
        last = i == len(numbers) - 1
        prog.append((_JEQ_K, "args", "allow" if last else None, nr))
    prog.append((_LD_ABS, None, None, 24))  # low 32 bits of args[1]: the kernel reads cmd as unsigned int
    for i, cmd in enumerate(_DENIED_IOCTLS):
        last = i == len(_DENIED_IOCTLS) - 1
        prog.append((_JEQ_K, "deny", "allow" if last else None, cmd))
    labels = {"args": len(numbers) + 3, "allow": len(prog), "deny": len(prog) + 1}
    out = b""
    for index, (code, jt, jf, k) in enumerate(prog):
        t = labels[jt] - index - 1 if jt else 0
        f = labels[jf] - index - 1 if jf else 0
        out += struct.pack("=HBBI", code, t, f, k)
    out += struct.pack("=HBBI", _RET_K, 0, 0, _ALLOW) + struct.pack("=HBBI", _RET_K, 0, 0, _DENY)
    return out


# -- macOS -------------------------------------------------------------------------------------


def _sb_quote(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def seatbelt_profile(policy: Policy) -> str:
    """A ``sandbox-exec`` (Seatbelt) profile with the same policy. In SBPL the last match wins."""
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


# -- running -----------------------------------------------------------------------------------


class Confined:
    """A command running in a sandbox: ``wait`` and ``send_signal`` like :class:`subprocess.Popen`."""

    def __init__(
        self, proc: subprocess.Popen[bytes], started_fd: int | None, session: bool, cgroups: Cgroups | None = None
    ) -> None:
        self.proc = proc
        self._cgroups = cgroups
        self.pid = proc.pid
        self._started_fd = started_fd
        self._session = session
        self.returncode: int | None = None

    def command_pids(self) -> list[int]:
        """Outer pids of the command: below bubblewrap's processes and the shim, best effort."""
        pids = [self.pid]
        while pids and all(_comm(p) == "bwrap" for p in pids):
            pids = [c for p in pids for c in _children(p)]
        return [c for shim in pids for c in _children(shim)]

    def send_signal(self, signum: int) -> None:
        """Deliver ``signum`` to the command inside (bubblewrap itself has it blocked)."""
        if self.proc.poll() is not None:
            return
        for pid in self.command_pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)

    def poll(self) -> int | None:
        """The exit code when it ended, else None."""
        if self.proc.poll() is None:
            return None
        return self.wait()

    def wait(self) -> int:
        """Wait for the end; the command's exit code (128+N for signal N).

        Raises :class:`ConfinementError` when bubblewrap could not set the sandbox up (the shim,
        which runs only inside a finished sandbox, never said it started). Ctrl-C while waiting
        is passed on when the command has a session of its own.
        """
        if self.returncode is not None:
            return self.returncode
        while True:
            try:
                code = self.proc.wait()
                break
            except KeyboardInterrupt:
                if self._session:
                    self.send_signal(signal.SIGINT)
                continue  # otherwise the command got the same SIGINT from the terminal
        if self._cgroups is not None:
            self._cgroups.remove()
        fd, self._started_fd = self._started_fd, None
        if fd is not None:
            try:
                # Every holder of the pipe's write end lived in the sandbox's PID namespace,
                # which died with bubblewrap: this read cannot block.
                started = os.read(fd, 1) == b"s"
            finally:
                os.close(fd)
            if not started:
                raise ConfinementError(
                    f"bubblewrap could not set up the sandbox (exit {code}; its message is above); "
                    f"check that 'bwrap --ro-bind / / true' works here, {OPT_OUT}."
                )
        self.returncode = code if code >= 0 else 128 - code
        return self.returncode


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as fh:
            return [int(p) for p in fh.read().split()]
    except (OSError, ValueError):
        pass
    out = []  # kernels without CONFIG_PROC_CHILDREN: scan for the parent pid
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(pid):
            out.append(int(name))
    return out


def spawn(
    isolation: Isolation,
    policy: Policy,
    argv: Sequence[str],
    cwd: str,
    *,
    env: Mapping[str, str] | None = None,
    own_env: Mapping[str, str] | None = None,
    stdin: int | IO[bytes] | None = None,
    stdout: int | IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
) -> Confined:
    """Start ``argv`` in ``cwd`` confined by ``policy``; raises FileNotFoundError like Popen would.

    ``env`` (default: this process's) is filtered by the policy's allowlist; ``own_env``, what the
    sandbox itself sets for the command, is added after the filter. A command that lies in a
    directory hidden inside is refused with :class:`ConfinementError` naming the path and why.
    ``stdin``/``stdout``/``stderr`` are passed to :class:`subprocess.Popen` (``sandbox mcp`` captures
    a command's output: its own stdout is the protocol's channel).
    """
    check(isolation)
    assert isolation.program is not None
    prepare_config(policy)
    base = os.environ if env is None else env
    env = filter_env(base, policy.env_allow)
    env.update({k: v for k, v in (own_env or {}).items() if k not in WITHHELD_ENV})
    _refuse_hidden_command(policy, argv, cwd, env.get("PATH", ""))
    if isolation.backend == "seatbelt":
        full = [isolation.program, "-p", seatbelt_profile(policy), *argv]
        seatbelt = subprocess.Popen(full, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr)
        return Confined(seatbelt, None, session=False)
    from sandbox.agent import hardening

    started_r, started_w = os.pipe()
    fds = [started_w]
    seccomp_fd = None
    # Only with the terminal shared: in a session of its own the command has no controlling
    # terminal, and TIOCSTI works only on one's controlling terminal.
    program = seccomp_program() if policy.interactive else None
    if program is not None:
        seccomp_fd, seccomp_w = os.pipe()
        os.write(seccomp_w, program)  # a few hundred bytes: fits the pipe buffer
        os.close(seccomp_w)
        fds.append(seccomp_fd)
    full = bwrap_argv(isolation.program, policy, argv, cwd, started_fd=started_w, seccomp_fd=seccomp_fd)
    groups = hardening.make_cgroups(policy.limits.max_processes, policy.limits.max_memory)
    full = groups.join_argv() + full

    def start() -> subprocess.Popen[bytes]:
        # The child inherits the signal mask. Blocking here rather than in a preexec_fn keeps
        # subprocess on its vfork path (a preexec_fn costs a full fork of this process, ~6 ms).
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(_BLOCKED))
        try:
            return subprocess.Popen(full, cwd=cwd, env=env, pass_fds=fds, stdin=stdin, stdout=stdout, stderr=stderr)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

    try:
        # Abstract Unix sockets are per network namespace: with one of its own (--network off) the
        # sandbox reaches none outside; sharing the host's, Landlock scopes them where the kernel can
        # (only then: it costs importing ctypes, a few ms of every `sandbox exec`).
        if policy.network and hardening.landlock_abi() >= hardening.SCOPE_ABI:
            proc = hardening.scoped(start)
        else:
            proc = start()
    except BaseException:
        os.close(started_r)
        groups.remove()
        raise
    finally:
        for fd in fds:
            os.close(fd)
    return Confined(proc, started_r, session=not policy.interactive, cgroups=groups)


def _refuse_hidden_command(policy: Policy, argv: Sequence[str], cwd: str, path_var: str) -> None:
    """One line naming the command's path and why it is not visible inside, before anything starts."""
    if not argv:
        return
    name = argv[0]
    if "/" in name:
        found = os.path.join(cwd, name)
    else:
        found = ""
        for folder in path_var.split(os.pathsep):
            candidate = os.path.join(folder or ".", name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                found = candidate if os.path.isabs(candidate) else os.path.join(cwd, candidate)
                break
    if not found or not os.path.exists(found):
        return  # the shell inside says "not found", as it would outside
    real = os.path.realpath(found)
    why = hidden_reason(policy, real)
    if why is not None:
        raise ConfinementError(
            f"The command {name}{'' if name == real else f' ({real})'} is not visible inside the sandbox: "
            f"it lies in {why}; "
            "copy it into the run's worktree, keep its directory readable (allow_read in [isolation]), "
            f"{OPT_OUT}."
        )
