"""What ``--isolate`` and ``--network`` decide from, read without click: the machine and the user's settings.

The library reads no environment: this module only reads the machine (:func:`read_machine`: the
bubblewrap program on ``PATH``, ``HOME``, the terminal, where the interpreter and the agent are
installed, the git identity) and the user's settings; :func:`sandbox.agent.confinement.decide` turns
them into one :class:`~sandbox.confine.spawn.Isolation`. Click-free, so that ``sandbox exec``'s quick
path (:mod:`sandbox.cli.quickexec`) resolves its confinement as the click command does without
importing click; :mod:`sandbox.cli.isolation` holds the options.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox.agent.confinement import Machine
    from sandbox.confine.spawn import Isolation

SEATBELT = "/usr/bin/sandbox-exec"


def data_root(workdir: str | None) -> str:
    """Where runs get their home: ``data_dir`` of the user's ``.sandbox.toml``, else the XDG default.

    The one place the environment and ``~`` are read for it; the library is given the result.
    """
    from sandbox.run import config
    from sandbox.store import layout

    configured = config.load(workdir).data_dir if workdir else None
    if configured:
        expanded = os.path.expanduser(os.path.expandvars(configured))
        return os.path.abspath(os.path.join(workdir or os.getcwd(), expanded))
    return layout.user_data_root(os.environ, os.path.expanduser("~"))


def resolve(
    user_workdir: str | None,
    command: str,
    isolate: str | None,
    network: str | None,
    agent: tuple[str, str | None] | None = None,
    argv: Sequence[str] = (),
) -> Isolation:
    """The confinement asked for by the flags, else by the user's settings, else the defaults
    (:func:`sandbox.agent.confinement.decide`, given what this reads of the machine).

    ``agent``: the command and ``--hooks`` adapter of ``sandbox run``, whose model endpoints (and
    base-URL variable's host) start the allowlist of ``--network allow``. ``argv``: the agent
    ``sandbox run`` starts (its variables pass, and its executable stays visible).
    """
    from sandbox.agent.confinement import decide
    from sandbox.run import config

    cfg = config.load(user_workdir) if user_workdir else config.Config()
    machine = read_machine(user_workdir, argv, isolate)
    try:
        isolation = decide(cfg, machine, user_workdir, command, isolate, network, agent, argv)
    except ValueError as exc:
        from sandbox.confine.proxy import AllowlistError  # here: its module costs `exec` 5 ms of imports

        if not isinstance(exc, AllowlistError):
            raise
        raise config.ConfigError(
            f"[network] allow in your settings: {exc}; write host, host:port or *.domain."
        ) from None
    if isolation.enabled and not isolation.inherited and command == "run" and isolation.backend == "bwrap":
        say_gaps_once(os.path.realpath(machine.data_root))
    return isolation


def read_machine(user_workdir: str | None, argv: Sequence[str] = (), isolate: str | None = None) -> Machine:
    """What confinement needs to know of this machine: the home, the backend, the terminal, where
    the interpreter and the agent are installed, the data directory, the git identity. Inside a
    sandbox of ours, without ``--isolate``, only that (the command is not confined again)."""
    import pwd

    from sandbox.agent.confinement import Machine
    from sandbox.confine import envfilter, spawn

    home = os.path.expanduser("~")
    backend, program = backend_program()
    inherited = spawn.inside_sandbox(os.environ.get(envfilter.CONFINED_ENV))
    if inherited and isolate is None:
        return Machine(home, backend, program, inherited=True, environ=os.environ)
    try:
        interactive = sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):
        interactive = False
    try:
        account = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        account = ""
    return Machine(
        home,
        backend,
        program,
        inherited=inherited,
        interactive=interactive,
        installed=tuple(installed_paths(argv)),
        data_root=data_root(user_workdir),
        account_home=account,
        identity=git_identity(home),
        environ=os.environ,
    )


def git_identity(home: str) -> tuple[str, str] | None:
    """The user's ``user.name`` and ``user.email`` from the global git configuration files (the
    variables that name other files, ``GIT_CONFIG_GLOBAL`` and ``XDG_CONFIG_HOME``, are read here)."""
    from sandbox.confine.homeview import git_identity as parse

    given = os.environ.get("GIT_CONFIG_GLOBAL")
    if given:
        return parse([given])
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    return parse([os.path.join(xdg, "git", "config"), os.path.join(home, ".gitconfig")])


def backend_program() -> tuple[str, str | None]:
    """This machine's confinement backend and its program (None: not installed)."""
    if sys.platform == "darwin":
        return "seatbelt", SEATBELT if os.access(SEATBELT, os.X_OK) else None
    return "bwrap", shutil.which("bwrap")


GAPS_FILE = "confinement-gaps"


def say_gaps_once(data_root: str) -> None:
    """What this machine cannot enforce, on stderr once (again only when it changes); ``sandbox doctor``
    says it every time. The last words said are kept in the data directory."""
    from sandbox.confine import hardening

    gaps = "; ".join(hardening.probe().missing)
    path = os.path.join(data_root, GAPS_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            said = fh.read()
    except OSError:
        said = ""
    if gaps == said:
        return
    if gaps:
        sys.stderr.write(f"sandbox: note: confinement here cannot enforce: {gaps} (see 'sandbox doctor').\n")
        sys.stderr.flush()
    try:
        os.makedirs(data_root, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(gaps)
    except OSError:
        pass  # said again next time


def installed_paths(argv: Sequence[str]) -> list[str]:
    """What must stay visible inside wherever it is installed (even under ``/tmp``): this sandbox's
    interpreter and package (its hooks run inside), and the agent's executable with its package."""
    import sandbox

    # The console script lies in the venv's bin, below sys.prefix.
    out = [sys.prefix, os.path.dirname(os.path.realpath(sys.executable)), os.path.dirname(sandbox.__file__)]
    out.append(sys.base_prefix)  # a venv's interpreter and standard library (pyenv's, under a hidden home)
    if argv:
        found = shutil.which(argv[0]) if "/" not in argv[0] else os.path.abspath(argv[0])
        for path in (found, os.path.realpath(found)) if found else ():
            folder = os.path.dirname(path)
            # A node agent needs its whole node_modules (its dependencies lie beside it).
            parts = folder.split(os.sep)
            if "node_modules" in parts:
                folder = os.sep.join(parts[: parts.index("node_modules") + 1])
            elif os.path.basename(folder) == "bin":
                folder = os.path.dirname(folder)
            out.append(folder)
        # A script the agent's interpreter runs (``python agent.py``, ``node cli.js``): the file alone,
        # never its directory, which may be your working tree.
        out += [a for a in argv[1:] if os.path.isabs(a) and os.path.isfile(a)]
    # As named (a link below /tmp must exist inside too); the sandbox binds where each leads as well.
    return [os.path.abspath(p) for p in out if p and os.path.isabs(p) and os.path.realpath(p) != "/"]


def resolver(command: str, isolate: str | None, network: str | None) -> Callable[[str | None], Isolation]:
    """:func:`resolve` for a user working tree found later (``sandbox exec``'s fast path)."""
    return lambda user_workdir: resolve(user_workdir, command, isolate, network)
