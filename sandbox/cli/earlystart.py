"""``sandbox start`` begun before click, pygit2 and pydantic are imported (issue 30).

Most of a start at 100k files is git's checkout of the user's HEAD into the run's worktree. Python's start
and the imports a start needs (click, pygit2, pydantic and the models) took 0.3-0.8 s before that checkout
was spawned. :func:`begin`, called by the console script before anything heavy is imported, finds the
repository with the standard library, reads its HEAD with :mod:`sandbox.fast.gitread` and begins the start
(:func:`sandbox.run.prestart.begin`: the run's lock, its home, the checkout and the snapshot's
``git add -A`` running in the background); the click command takes it over (:func:`take`) and finishes
it, so the imports overlap the two gits.

Only the plain forms are begun here: ``sandbox [-C DIR] [--json] start [--json] [--label L]
[--progress|--no-progress]``, in a repository whose git dir this module reads for certain; anything else
(and any error here: the click command then meets it again and says what is wrong) leaves the whole start
to the click command, as before. A start begun here that the command does not take over (a usage error,
another repository found) is undone by :func:`abandon_unused` before the process exits.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # no typing at run time: this runs before the heavy imports
if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox.run.prestart import Prestart

#: Environment variables that leave the start to the click command: git told where the repository is
#: or how far up to look (the early part does not take either into account), and shell completion.
_LEFT_TO_CLICK = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "_SANDBOX_COMPLETE",
)

_begun: Prestart | None = None
_relay: Relay | None = None


class Relay:
    """The checkout's progress lines, kept until the command's progress display is there to show them."""

    def __init__(self) -> None:
        self.target: Callable[[str], None] | None = None
        self.last: str | None = None

    def __call__(self, line: str) -> None:
        """Pass ``line`` on, or keep it (only the newest: a meter's lines replace one another)."""
        target = self.target
        if target is None:
            self.last = line
        else:
            target(line)

    def attach(self, target: Callable[[str], None] | None) -> None:
        """Show the kept line and every later one with ``target`` (None: show nothing)."""
        if target is not None and self.last is not None:
            target(self.last)
        self.target = target


def begin(argv: list[str]) -> None:
    """Begin ``sandbox start`` when ``argv`` is one of its plain forms (see the module); else do nothing."""
    global _begun, _relay
    parsed = _parse(argv)
    if parsed is None or any(os.environ.get(name) for name in _LEFT_TO_CLICK):
        return
    directory, as_json, label, progress = parsed
    from sandbox import faults

    faults.arm_once(os.environ.get("SANDBOX_FAULT"))  # the crash matrix kills the early part too
    try:
        found = _repository(os.path.abspath(directory or os.getcwd()))
    except OSError:
        return  # (a directory gone or unreadable: the click command says so)
    if found is None:
        return
    common_dir, git_dir, workdir = found
    from sandbox.errors import SandboxError
    from sandbox.fast.gitread import Repo
    from sandbox.fast.odb import GitReadError

    try:
        if label is not None:
            from sandbox.run.labels import check_label

            check_label(label, "run")
        repo = Repo(git_dir)
        head, head_ref = repo.ref("HEAD"), repo.symbolic_target("HEAD")
        from sandbox.store import layout

        homes = layout.homes_dir(_data_root(workdir), common_dir)
    except (SandboxError, GitReadError, OSError, ValueError):
        return  # the click command says what is wrong
    if head is None or (head_ref is not None and not head_ref.startswith("refs/")):
        head_ref = None
    shown = progress if progress is not None else (not as_json and sys.stderr is not None and sys.stderr.isatty())
    relay = Relay() if shown else None
    from sandbox.run import prestart

    try:
        _begun = prestart.begin(common_dir, git_dir, workdir, homes, head, head_ref, relay)
    except (SandboxError, OSError):
        return  # nothing is left begun (prestart stopped it); the click command tries again
    _relay = relay
    _after_the_add(_begun)


#: Above this size of your index (about 10k files) the imports wait for the snapshot's add (see below).
_BIG_INDEX = 1 << 20


def _after_the_add(begun: Prestart) -> None:
    """Wait for the snapshot's ``git add -A`` where the repository is big, before the imports; no longer than
    the checkout runs.

    What the command does next needs the add's result first (the snapshot), and the checkout, the longest
    of the three, runs on one core: imported beside both gits on two cores, the imports slow the checkout;
    after the add they take its core. A checkout that ends first (an add hashing big untracked files) ends
    the wait too: the imports then have a core of their own. In a small repository the add ends before the
    imports would, and is not waited for; without a checkout (no commit yet) there is nothing to slow."""
    adding, checkout = begun.adding, begun.checkout
    if adding is None or checkout is None:
        return
    import select

    fds: list[int] = []
    try:
        if os.path.getsize(adding.temp_index) <= _BIG_INDEX:
            return
        ended = select.poll()  # (not select(): no bound on the descriptors' numbers)
        for pid in (adding.proc.pid, checkout.pid):
            fds.append(os.pidfd_open(pid))
            ended.register(fds[-1], select.POLLIN)
        ended.poll()  # readable once that process has ended (reaped or not)
    except (OSError, AttributeError):  # no pidfd (not Linux, or before 5.3): the imports go on at once
        pass
    finally:
        for fd in fds:
            os.close(fd)


def _data_root(workdir: str) -> str:
    """:func:`sandbox.cli.machine.data_root`, without importing the settings' reader (its dataclasses cost
    the early part ~10-50 ms) where no file it reads ``data_dir`` from is there."""
    if any(os.path.lexists(os.path.join(workdir, name)) for name in (".sandbox.toml", "pyproject.toml")):
        from sandbox.cli.machine import data_root

        return data_root(workdir)
    from sandbox.store import layout

    return layout.user_data_root(os.environ, os.path.expanduser("~"))


def take() -> tuple[Prestart | None, Relay | None]:
    """The start :func:`begin` began (None: none) and its progress relay, handed over once."""
    global _begun, _relay
    begun, relay = _begun, _relay
    _begun = _relay = None
    return begun, relay


def abandon_unused() -> None:
    """Undo a start begun here that no command took over."""
    begun, _ = take()
    if begun is not None:
        begun.abandon()


def _parse(argv: list[str]) -> tuple[str | None, bool, str | None, bool | None] | None:
    """(``-C`` directory, ``--json``, ``--label``, ``--progress``/``--no-progress``) of a plain start; None
    for any other command line."""
    directory: str | None = None
    as_json = False
    i = 0
    while i < len(argv) and argv[i] != "start":
        if argv[i] == "-C" and i + 1 < len(argv) and directory is None:
            directory = argv[i + 1]
            i += 2
        elif argv[i] == "--json":
            as_json, i = True, i + 1
        else:
            return None
    if i >= len(argv):
        return None
    label: str | None = None
    progress: bool | None = None
    rest = argv[i + 1 :]
    j = 0
    while j < len(rest):
        arg = rest[j]
        if arg == "--json":
            as_json = True
        elif arg in ("--progress", "--no-progress"):
            progress = arg == "--progress"
        elif arg == "--label" and j + 1 < len(rest) and label is None:
            label = rest[j + 1]
            j += 1
        elif arg.startswith("--label=") and label is None:
            label = arg[len("--label=") :]
        else:
            return None
        j += 1
    return directory, as_json, label, progress


def _repository(start: str) -> tuple[str, str, str] | None:
    """(common git dir, git dir, working tree) of the repository around ``start``, as
    :meth:`Project.discover <sandbox.store.project.Project.discover>` finds it, when the fast paths read it
    for certain (:func:`sandbox.fast.foldcache.plain_repository`) and it is owned by this user; None
    otherwise (and inside a run's worktree)."""
    from sandbox.fast.foldcache import Miss, plain_repository
    from sandbox.store import layout

    if not os.path.isdir(start) or layout.locate(start) is not None:
        return None
    try:
        common_dir, git_dir, here = plain_repository(start)
    except Miss:
        return None
    uid = os.geteuid()
    for path in (here, git_dir, common_dir):
        if os.stat(path).st_uid != uid:
            return None  # git's and libgit2's ownership checks decide: the click command
    return common_dir, git_dir, here
