"""What a confined process may see, write and reach: :class:`Isolation` (what the caller asks for),
:class:`Policy` (what one run's sandbox gets, :func:`policy_for`) and the paths each decision names.

The backends turn a policy into a sandbox (:mod:`sandbox.confine.bwrap`, :mod:`sandbox.confine.seatbelt`);
:mod:`sandbox.confine.spawn` starts it. Standard library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Protocol

from sandbox.confine import gitview, homeview, sysview
from sandbox.confine.envfilter import DEFAULT_ENV_ALLOW
from sandbox.errors import SandboxError
from sandbox.store import gitguard, layout, lfsstore

INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; "
    "Arch: pacman -S bubblewrap)"
)
OPT_OUT = "or run without OS confinement with --isolate off ([isolation] isolate = false in .sandbox.toml)"
#: The run's allowlist proxy socket, in its own directory (see :mod:`sandbox.confine.proxy`).
PROXY_SOCKET = os.path.join("net", "net.sock")

#: Secrets masked inside by default (``~/`` is the user's home, expanded by the CLI): each existing
#: directory is replaced by an empty read-only one, each file by an empty one. ``deny_read`` adds to
#: it, ``allow_read`` takes from it ([isolation] in ``.sandbox.toml``). The agent's own state
#: (:data:`~sandbox.agent.agentstate.DEFAULT_AGENT_STATE`) is not a secret and is never in it. See docs/confinement.md.
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
#: Where other file systems are mounted (the FHS's removable media and temporary mounts): the user's
#: disks and shares, not the system's; hidden like a home (``allow_read`` shows a path of them).
MOUNT_DIRS = ("/media", "/mnt")
#: Files below a hidden directory that a confined process still needs (DNS: ``resolv.conf`` is often
#: a link into ``/run/systemd/resolve``); bound read-only wherever they lead.
KEEP_FILES = ("/etc/resolv.conf",)
GIB = 1024**3


@dataclass(frozen=True)
class Limits:
    """What a confined process may consume. None: not bounded."""

    #: Size of the private ``/tmp`` and ``/dev/shm`` (RAM-backed tmpfs).
    tmpfs_bytes: int = GIB
    #: Processes (and threads): a pids cgroup where one can be made, and ``RLIMIT_NPROC``.
    max_processes: int | None = 1024
    #: The largest file a process may write (``RLIMIT_FSIZE``).
    max_file_bytes: int | None = 16 * GIB
    #: Memory of all its processes together (a memory cgroup, where one can be made).
    max_memory: int | None = 8 * GIB
    #: Apply ``max_memory`` only where it costs no slow cgroup move (``exec``, unless set).
    memory_if_free: bool = False
    #: What one call may add to the worktree (bytes of new or grown files), checked when it is recorded
    #: (the default is ``sandbox.run.config.DEFAULT_MAX_CALL_SIZE``, kept in step by a test).
    max_call_bytes: int | None = 256 * 1024**2
    #: Open files per process (``RLIMIT_NOFILE``): with ``max_processes`` the product stays well under
    #: the machine's ``fs.file-max`` (1024 x 1024 = 1M; 2.4M here).
    max_open_files: int | None = 1024
    #: Inotify instances and watches of the sandbox's own user namespace (:mod:`sandbox.confine.nslimits`;
    #: 32 and 65,536 would be a quarter of a default user's 128 instances, a third of a common 192k
    #: watches). Not bounded by default yet: bubblewrap blocked for the handshake that sets them outlived
    #: a ``sandbox run`` killed at that moment (its --die-with-parent not armed yet), holding the
    #: caller's output open; the mechanism is tested with the bound given explicitly.
    max_inotify_instances: int | None = None
    max_inotify_watches: int | None = None


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
    #: Paths kept visible (read-only) even below the private ``/tmp`` or a hidden home: ``allow_read``,
    #: the sandbox's interpreter, the agent's executable.
    readable: tuple[str, ...] = ()
    #: Already inside a sandbox of ours (an agent's ``sandbox exec``): not confined again, since
    #: bubblewrap cannot nest without capabilities, and the enclosing sandbox still holds.
    inherited: bool = False
    #: Agent configuration below the writable state, kept read-only (``agentstate.AGENT_CONFIG``).
    config: tuple[str, ...] = ()
    #: Agent state files each run writes a copy of instead (``agentstate.AGENT_PRIVATE``).
    private: tuple[str, ...] = ()
    #: ``--network allow``: the hosts the agent may reach, through the run's proxy
    #: (:mod:`sandbox.confine.proxy`); None: the network is wholly on or off (``network``).
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
    #: The run's agent home this command may write (``claude``, ``gemini``: the agent ``sandbox run``
    #: starts, :mod:`sandbox.agent.agenthome`); None: none. Never the directory of all of them: one
    #: agent must not plant settings or sessions for another agent of the run.
    home: str | None = None
    #: The user's home, empty inside but for the allowlist (:mod:`sandbox.confine.homeview`); None: as on the host.
    user_home: str | None = None
    #: The homes whose toolchains (:data:`sandbox.confine.homeview.TOOLCHAINS`) stay visible, read-only.
    toolchain_homes: tuple[str, ...] = ()
    #: The user's git identity (name, email), given inside as a generated ``~/.gitconfig``.
    identity: tuple[str, str] | None = None
    #: The names the started agent's run home links to the user's configuration (its adapter's ``LINKED``).
    linked: tuple[str, ...] = ()
    #: The system view's cache (:mod:`sandbox.confine.sysview`, in the data directory); None: walked afresh.
    system_cache: str | None = None

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
    #: Agent configuration kept read-only below the writable agent state (``agentstate.AGENT_CONFIG``).
    config: tuple[str, ...] = field(default=())
    #: (the run's copy, the path it is mounted at): agent state written per run (``agentstate.AGENT_PRIVATE``).
    private: tuple[tuple[str, str], ...] = field(default=())
    #: ``--network allow``: the run's proxy socket (:mod:`sandbox.confine.proxy`), reached from the
    #: agent's own network namespace through the forwarder of :mod:`sandbox.confine.bridge`.
    proxy: str | None = None
    #: The running agent's home in the run, writable (below the run's directory, which is read-only).
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
    #: (the generated git configuration with the user's identity, the path it is shown at inside).
    identity: tuple[str, str] | None = None
    #: Why each path of the home's allowlist is visible (``sandbox doctor``).
    allowed: tuple[tuple[str, str], ...] = field(default=())
    #: The agent's own git settings (``GIT_CONFIG_GLOBAL`` inside; :mod:`sandbox.store.gitguard`).
    git_config: str | None = None
    #: (a generated file, the path it is shown at inside, read-only): :mod:`sandbox.confine.gitview`.
    views: tuple[tuple[str, str], ...] = field(default=())
    #: System files and directories others cannot read, hidden from root (:mod:`sandbox.confine.sysview`).
    system: tuple[str, ...] = field(default=())


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


class _Repository(Protocol):
    @property
    def common_dir(self) -> str:
        """The repository's common git directory."""
        ...


class RunPaths(Protocol):
    """What :func:`policy_for_run` reads of a run (:class:`sandbox.run.run.Run` has it); named so
    that this module, which the agent's early start imports, needs neither pygit2 nor pydantic."""

    @property
    def project(self) -> _Repository:
        """Its repository (the common directory)."""
        ...

    @property
    def run_id(self) -> str:
        """Its id."""
        ...

    @property
    def worktree(self) -> str:
        """Its worktree."""
        ...

    @property
    def user_workdir(self) -> str | None:
        """The user's working tree it was made from, in this clone."""
        ...


def policy_for_run(isolation: Isolation, run: RunPaths) -> Policy:
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
    its hooks check), the host's socket directory (not its lock), the run's home (the ``origin`` file),
    :data:`KEEP_FILES`, the sockets ``unix_sockets`` allows and what the caller keeps ``readable``
    (the home, the sandbox's interpreter, the agent's executable). Of the user's ``.git`` only what the
    run's git borrows is bound back, read-only (:mod:`sandbox.confine.gitview`).
    """
    real = os.path.realpath
    user_git = gitview.user_git_view(common_dir, run_id, history_view=_binds(isolation))
    hidden = {**user_git.hidden, **hidden_dirs(isolation, common_dir, user_workdir)}
    # Every agent home of the run holds that agent's login (seeded from yours): hidden from every
    # command, the started agent's own bound back (writable) for a `sandbox run` of it alone.
    agents = real(os.path.join(layout.run_dir(common_dir, run_id), layout.AGENT_STATE))
    if os.path.isdir(agents):
        hidden[agents] = "the run's agent homes, with the agents' logins (each visible only to a 'sandbox run' of it)"
    # The session's proxy socket, in a directory of its own: hidden from every other command of the run
    # (an `exec --network off` would otherwise reach the session's allowlisted hosts through it).
    net_dir = real(os.path.dirname(os.path.join(layout.run_dir(common_dir, run_id), PROXY_SOCKET)))
    with contextlib.suppress(OSError):
        os.makedirs(net_dir, exist_ok=True)
    if isolation.network_mode != "allow" and os.path.isdir(net_dir):
        hidden[net_dir] = "the network proxy of the run's 'sandbox run' session (reachable from that session only)"

    def is_hidden(path: str) -> bool:
        return any(path == h or path.startswith(h.rstrip("/") + "/") for h in hidden)

    keep = [real(p) for p in KEEP_FILES if os.path.exists(p) and is_hidden(real(p))]
    sockets = [real(p) for p in isolation.unix_sockets if os.path.exists(p)]
    homes = _agent_home(common_dir, run_id, isolation.home)
    allowed = _home_allowlist(isolation, homes)
    readable = (
        *isolation.readable,
        *(path for path, _why in allowed),
        *user_git.readable,
        real(layout.run_dir(common_dir, run_id)),
        _host_socket_dir(common_dir),
        *run_readable_paths(common_dir, run_id),
        *keep,
        *sockets,
    )
    protected = [p for p in protected_paths(common_dir, user_workdir) if p not in hidden]
    guarded, git_config = run_git_guard(common_dir, run_id)
    protected += guarded
    return Policy(
        writable=tuple(run_writable_paths(common_dir, run_id, worktree)),
        protected=tuple(protected),
        network=isolation.network,
        interactive=isolation.interactive,
        extra_writable=tuple(p.rstrip("/") for p in isolation.writable),
        readable=readable,
        hidden=tuple(p for p in hidden if p != "/tmp"),
        config=isolation.config,
        # The running agent's home (CLAUDE_CONFIG_DIR, GEMINI_CLI_HOME: sandbox.agent.agenthome), when made.
        homes=homes,
        private=tuple((_private_copy(common_dir, run_id, dest), dest) for dest in isolation.private),
        proxy=(
            os.path.join(os.path.realpath(layout.run_dir(common_dir, run_id)), PROXY_SOCKET)
            if isolation.network_mode == "allow"
            else None
        ),
        # The repository's config may hold credentials (a remote URL with a token, an http.extraHeader);
        # the run's git has its own config and borrows only the objects.
        masked=(*isolation.masked, *_repository_configs(common_dir)),
        env_allow=isolation.env_allow,
        limits=isolation.limits,
        reasons=tuple(hidden.items()),
        empty_file=_empty_file(common_dir),
        identity=_identity(isolation, common_dir),
        allowed=tuple(allowed),
        git_config=git_config,
        views=tuple(user_git.files),
        system=system_hidden(isolation, state_dir=layout.state_dir(common_dir)),
    )


def _binds(isolation: Isolation) -> bool:
    """True when bubblewrap makes this sandbox here: it shows your history as your objects (sandbox.store.history)."""
    return isolation.enabled and not isolation.inherited and isolation.backend == "bwrap"


def system_hidden(isolation: Isolation, *, fresh: bool = False, state_dir: str | None = None) -> tuple[str, ...]:
    """What of the system directories root must not see inside (:mod:`sandbox.confine.sysview`; kept in ``state_dir``
    without a data directory): none for an ordinary user, nor where bubblewrap does not confine."""
    if not isolation.enabled or isolation.inherited or isolation.backend != "bwrap":
        return ()
    cache = sysview.cache_in(isolation.system_cache, state_dir)
    skip = (*SOCKET_DIRS, *MOUNT_DIRS, *sysview.shared_scratch(), *([os.path.dirname(cache)] if cache else []))
    return tuple(sysview.hidden_here(cache, skip, fresh=fresh))


def _home_allowlist(isolation: Isolation, homes: tuple[str, ...]) -> list[tuple[str, str]]:
    """What of the user's home is bound back (read-only) besides what the caller keeps readable: the
    toolchains found there and the configuration the agent's run home links to, each with why."""
    if not isolation.user_home:
        return []
    out = [
        (os.path.realpath(path), why)
        for home in isolation.toolchain_homes or (isolation.user_home,)
        for path, why in homeview.toolchains(home)
    ]
    for home in homes:
        linked = homeview.linked_config(home, isolation.home or "", isolation.linked)
        out += [(path, "configuration the agent's run home links to") for path in linked]
    return out


def home_allowlist(isolation: Isolation) -> list[tuple[str, str]]:
    """What of the homes is visible inside, each with why (``sandbox doctor``): the toolchains found,
    the generated git identity, ``allow_read`` and what the sandbox keeps readable for itself. Empty
    when the home is not hidden (``user_home`` unset)."""
    if not isolation.user_home:
        return []
    home = os.path.realpath(isolation.user_home)
    out = _home_allowlist(isolation, ())
    if isolation.identity is not None:
        out.append((os.path.join(home, ".gitconfig"), "your git identity alone (user.name, user.email), generated"))
    roots = [os.path.realpath(h) for h in homeview.hidden_homes(isolation.user_home)]
    for path in isolation.readable:
        real = os.path.realpath(path)
        if any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            out.append((real, "allow_read, or what the sandbox itself needs (its interpreter, the agent)"))
    return list(dict.fromkeys(out))


def _identity(isolation: Isolation, common_dir: str) -> tuple[str, str] | None:
    """(the generated git identity file, ``~/.gitconfig`` inside) when the home is hidden."""
    if not isolation.user_home or isolation.identity is None:
        return None
    made = homeview.identity_file(layout.state_dir(common_dir), isolation.identity)
    home = os.path.realpath(isolation.user_home)
    return (made, os.path.join(home, ".gitconfig")) if made else None


def _repository_configs(common_dir: str) -> list[str]:
    """The user's repository's config files, masked: its ``config`` and ``config.worktree``, and each
    submodule's ``modules/<name>/config`` (one ``listdir``; a submodule nested deeper is not looked for)."""
    out = [os.path.join(common_dir, "config"), os.path.join(common_dir, "config.worktree")]
    modules = os.path.join(common_dir, "modules")
    with contextlib.suppress(OSError):
        out += [os.path.join(modules, name, "config") for name in sorted(os.listdir(modules))]
    return [os.path.realpath(p) for p in out if os.path.isfile(p)]


def run_git_guard(common_dir: str, run_id: str) -> tuple[list[str], str | None]:
    """What decides the configuration and hooks the user's own git reads in the run's worktree, to
    bind read-only (:mod:`sandbox.store.gitguard`), and the agent's own git settings file (None for
    a run made before homes, whose git dir is git's admin dir in the user's repository)."""
    place = layout.place_of(common_dir, run_id)
    real = os.path.realpath
    if place.legacy or os.path.islink(place.git_dir) or not os.path.isdir(place.git_dir):
        return [
            p for p in gitguard.guarded_paths(real(place.worktree), real(place.git_dir)) if os.path.lexists(p)
        ], None
    try:
        gitguard.guard(place.git_dir, lfsstore.settings(common_dir, run_id))
    except OSError as exc:
        raise ConfinementError(
            f"The run's git directory {place.git_dir} cannot be prepared ({exc.strerror}); nothing was run."
        ) from exc
    git_dir = real(place.git_dir)
    return gitguard.guarded_paths(real(place.worktree), git_dir), os.path.join(git_dir, gitguard.AGENT_CONFIG)


def _host_socket_dir(common_dir: str) -> str:
    """The directory of the repository's host socket, made now: the one part of the host's files
    visible inside (read-only), so the run's hooks reach the host, wherever it restarts, while its
    lock (which a confined process could hold, flock needing no write access, and no host would
    start again), liveness record and log stay out of sight."""
    with contextlib.suppress(OSError):
        layout.ensure_host_dir(common_dir)
    return os.path.realpath(layout.host_socket_dir(common_dir))


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


def _agent_home(common_dir: str, run_id: str, agent: str | None) -> tuple[str, ...]:
    """The run's home of ``agent`` as a real directory (the agent may have swapped it for a link,
    which would lead the writable mount anywhere), or nothing."""
    if agent is None or not agent.isidentifier():
        return ()
    path = os.path.join(layout.agent_homes_dir(layout.run_dir(common_dir, run_id)), agent)
    if os.path.islink(path) or not os.path.isdir(path):
        return ()
    return (os.path.realpath(path),)


def hidden_dirs(isolation: Isolation, common_dir: str, user_workdir: str | None) -> dict[str, str]:
    """The directories not visible inside a run's sandbox (the private ``/tmp`` too), each with why."""
    real = os.path.realpath
    state = real(layout.state_dir(common_dir))
    reasons = [(state, "the sandbox's own state (every run's token, the host's files)")]
    if user_workdir:
        reasons.append((real(user_workdir), "your working tree (the agent works in its run's worktree)"))
    reasons += [(real(p), "the sandbox's data directory or another repository's run state") for p in isolation.hidden]
    reasons += [(real(p), "a directory of daemons' Unix sockets") for p in SOCKET_DIRS]
    reasons += [(real(p), "where other file systems are mounted (your disks and shares)") for p in MOUNT_DIRS]
    reasons += [(p, "a scratch directory every user of the machine writes in") for p in sysview.shared_scratch()]
    if isolation.user_home:
        why = "a home, empty inside but for its allowlist (see 'sandbox doctor'; allow_read adds to it)"
        reasons += [(h, why) for h in homeview.hidden_homes(isolation.user_home)]
    reasons.append(("/tmp", "/tmp, which is private inside the sandbox"))
    hidden: dict[str, str] = {}
    for path, why in reasons:
        if path != "/" and os.path.isdir(path):
            hidden.setdefault(path, why)
    return hidden


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


def _private_copy(common_dir: str, run_id: str, dest: str) -> str:
    """Where the run keeps its own copy of the private state file ``dest``."""
    return os.path.join(os.path.realpath(layout.run_dir(common_dir, run_id)), layout.AGENT_STATE, _copy_name(dest))


def mount_depth(path: str) -> int:
    """How deep ``path`` lies (``/``: 0): mounts are made parents first."""
    return 0 if path == "/" else path.rstrip("/").count("/")
