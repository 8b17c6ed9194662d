"""A repository moved on disk: the homes of its runs follow it.

A run's home (under the data directory) names your repository by path twice: its ``origin`` file
(how a command or a hook started inside the worktree finds your repository, how ``sandbox gc`` tells
a home whose repository is gone, how the sandbox masks other repositories' state) and its git dir's
``objects/info/alternates`` (the run's store and your objects, which the agent's git reads). Move the
repository (``mv project project2``) and both name a directory that is gone: ``exec`` could not read
the worktree's status, the agent's git found no HEAD, hooks found no repository and ``gc`` called the
live runs' homes orphans.

:func:`follow` puts both right, for every run that has a home, the first time a command opens the
repository where it now is (and the run's recorded place, for a home inside the git dir that moved along:
the library's without a data directory). A file in the state dir remembers where that was (one small read per
command when nothing moved). A home whose ``origin`` still names a repository that records this home for the
run is left alone: that is a copy of the repository (``cp -r``), and the home stays the original's.
"""

from __future__ import annotations

# No contextlib: the quick list, status and log import this module (contextlib pulls collections and
# functools, ~1.5 ms of their start).
import os

from sandbox.store import layout
from sandbox.store.fsutil import atomic_write

#: ``<common>/sandbox/at``: the real path of the common git dir when its runs' homes last named it.
AT_FILE = "at"


def alternates_lines(common_dir: str, run_id: str) -> list[str]:
    """The lines of a run's git dir's ``objects/info/alternates``: its own store first (what the host
    records for it, :mod:`sandbox.store.runstore`), then your objects."""
    real = os.path.realpath(common_dir)
    store = os.path.realpath(layout.run_store(common_dir, run_id))
    lines = [store] if os.path.isdir(store) else []
    lines.append(os.path.join(real, "objects"))
    return lines


def write_alternates(git_dir: str, common_dir: str, run_id: str) -> None:
    """(Re)write the run's git dir's alternates from :func:`alternates_lines`. The git dir is the agent's
    to write: by descriptor, beneath it, so a directory it made a symlink is refused
    (:class:`sandbox.store.beneath.EscapeError`), never written through."""
    from sandbox.store import beneath  # not at the top: the quick read path imports this module (ctypes)

    lines = alternates_lines(common_dir, run_id)
    beneath.write_beneath(git_dir, "objects/info/alternates", "".join(f"{p}\n" for p in lines).encode())


def moved(common_dir: str) -> bool:
    """True when the repository's runs' homes may name another place: its state dir exists and does not
    remember this one (the fast read path leaves such a repository to the full path, which follows)."""
    try:
        with open(os.path.join(layout.state_dir(common_dir), AT_FILE), encoding="utf-8") as fh:
            return fh.read().strip() != os.path.realpath(common_dir)
    except FileNotFoundError:
        return os.path.isdir(layout.state_dir(common_dir))
    except (OSError, UnicodeError):
        return True


def remember(common_dir: str) -> None:
    """Note that the runs' homes name the repository where it is now (a new home was just made here)."""
    if moved(common_dir):
        marker = os.path.join(layout.state_dir(common_dir), AT_FILE)
        try:
            atomic_write(marker, f"{os.path.realpath(common_dir)}\n".encode())
        except OSError:  # a note for the fast path only: a later command writes it
            pass


def follow(common_dir: str) -> list[str]:
    """When the repository was moved since its runs' homes last named it, name it where it is now in
    each home (``origin``, the git dir's alternates); the ids of the runs put right.

    Nothing is written when nothing moved, nor where the state dir cannot be written (inside a run,
    where your ``.git`` is read-only, or a repository never used with the sandbox).
    """
    real = os.path.realpath(common_dir)
    state = layout.state_dir(common_dir)
    marker = os.path.join(state, AT_FILE)
    was = None
    try:
        with open(marker, encoding="utf-8") as fh:
            was = fh.read().strip()
        if was == real:
            return []
    except FileNotFoundError:
        if not os.path.isdir(state):
            return []
    except (OSError, UnicodeError):
        pass
    followed = []
    try:
        run_ids = sorted(os.listdir(layout.runs_dir(common_dir)))
    except OSError:
        run_ids = []
    for run_id in run_ids:
        try:
            if layout.valid_run_id(run_id) and _follow_run(common_dir, real, run_id, was):
                followed.append(run_id)
        except OSError:  # read-only here (inside a run): the next command outside puts it right
            return followed
    try:
        atomic_write(marker, f"{real}\n".encode())
    except OSError:
        pass
    return followed


def _follow_run(common_dir: str, real: str, run_id: str, was: str | None) -> bool:
    home = layout.recorded_home(common_dir, run_id)
    if home is not None and was and home.startswith(was + os.sep) and not os.path.isdir(home):
        # A home inside the git dir (library use without a data directory) moved along with it.
        inside = real + home[len(was) :]
        if os.path.isdir(inside):
            atomic_write(os.path.join(layout.run_dir(common_dir, run_id), layout.PLACE_FILE), f"{inside}\n".encode())
            home = inside
    if home is None or not os.path.isdir(home):
        return False  # a legacy run (its worktree inside .git moved along), or no home (yet) on this machine
    place = layout.home_place(home)
    origin_file = place.origin_file
    assert origin_file is not None
    origin = ""
    try:
        with open(origin_file, encoding="utf-8") as fh:
            origin = fh.read(4096).strip()
    except (OSError, UnicodeError):
        pass
    if origin == real:
        return False
    if origin and os.path.realpath(origin) != real and _claims(origin, run_id, home):
        return False  # the repository there records this home too: this one is a copy, it stays the original's
    if not os.path.isdir(os.path.join(place.git_dir, "objects")):
        return False  # an interrupted start: gc's to remove
    from sandbox.store import beneath

    try:
        write_alternates(place.git_dir, common_dir, run_id)
    except beneath.EscapeError:
        pass  # its agent made a directory of its git dir a symlink: its own git stays broken, nothing else
    from sandbox.store import gitguard, lfsstore

    # Its Git LFS storage where the run's directory now is (the config is the sandbox's: read-only inside).
    gitguard.set_last(os.path.join(place.git_dir, "config"), lfsstore.settings(common_dir, run_id))
    atomic_write(origin_file, f"{real}\n".encode())
    return True


def _claims(common_dir: str, run_id: str, home: str) -> bool:
    """True when the repository at ``common_dir`` records ``home`` as the run's."""
    recorded = layout.recorded_home(common_dir, run_id)
    return recorded is not None and os.path.realpath(recorded) == os.path.realpath(home)
