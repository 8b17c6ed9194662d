"""The commands people type most, in their plainest forms, answered without importing click.

``import click`` alone costs more than three times the interpreter's start (issue 30), and
``sandbox --help`` and ``cd $(sandbox path)`` need nothing of it. :func:`quick_main` serves exactly

* ``sandbox --help`` / ``sandbox -h`` on a terminal of at least 80 columns, or no terminal (click's
  help is then 78 columns wide): the usage and options below, the commands from
  :data:`sandbox.cli.commands.SUMMARIES` laid out as click's ``HelpFormatter.write_dl`` lays them out;
* ``sandbox path [RUN]`` when the fast read path (:mod:`sandbox.fast.foldcache`) finds the run and
  its worktree is there: the worktree's path, one line;
* ``sandbox list``, ``sandbox status [RUN]`` and ``sandbox log [RUN]`` written to a pipe or a file,
  when the fast read path reads every run they show whole from its sealed cache: the lines
  :mod:`sandbox.cli.fastshow` builds for the click commands too, coloured as your git config says;
* ``sandbox [-C DIR] exec [RUN] -- COMMAND...`` (and a few options) when the run's host records the
  call: :mod:`sandbox.cli.quickexec`;

and returns None for anything else (another form, a fault armed for tests, an output the click
command would write otherwise), so the click group runs as before. tests/cli/test_quick.py holds
each answer byte-identical to what the click group prints (tests/cli/test_quick_reads.py the reads).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # no typing at run time: the quick path's start
if TYPE_CHECKING:
    from sandbox.cli.plain import Plain
    from sandbox.store.gitcli import Started

#: ``sandbox --help`` above its command list, at click's default width (78). Kept equal to what
#: the group in :mod:`sandbox.cli.app` prints by tests/cli/test_quick.py: change both together.
HELP_HEAD = """\
Usage: sandbox [OPTIONS] COMMAND [ARGS]...

  Run coding agents in isolated git worktrees, with a durable ledger of every
  tool call.

  Typical session:
    sandbox start                  # snapshot your tree into a new run
    sandbox exec -- make fmt       # a recorded call in the run's worktree
    sandbox log; sandbox diff      # what the agent did
    sandbox apply                  # bring the changes into your tree
    sandbox undo                   # take the last change back out

Options:
  -C DIRECTORY                 Run as if started in DIR (like git -C).
  --json                       Print results as JSON (any command; also after
                               it).
  -P, --no-pager               Do not pipe output into a pager (like git).
  -p, --paginate               Pipe output into a pager even where a command
                               does not.
  --color [auto|always|never]  Colour: auto, always, never (a bare --color
                               means always; like git, also after the
                               command).
  --no-color                   Never colour (same as --color=never).
  --version                    Show the version and exit.
  -h, --help                   Show this message and exit.

"""
#: click's help width: the terminal's columns, at most 80, minus 2.
WIDTH = 78


def quick_main(argv: list[str]) -> int | None:
    """Answer ``argv`` without click (the exit code), or None: let the click group do it."""
    if os.environ.get("SANDBOX_FAULT") or os.environ.get("_SANDBOX_COMPLETE"):
        return None  # faults are armed by the click edge (sandbox.cli.edge); completion is click's own
    if argv in (["--help"], ["-h"]):
        text = help_text() if _columns() >= WIDTH + 2 else None
    elif argv[:1] == ["path"] and len(argv) <= 2 and not any(a.startswith("-") for a in argv[1:]):
        text = _path(argv[1] if len(argv) == 2 else None)
    elif argv in (["list"], ["status"], ["log"]) or (
        argv[:1] in (["status"], ["log"]) and len(argv) == 2 and not argv[1].startswith("-")
    ):
        return _shown(argv[0], argv[1] if len(argv) == 2 else None)
    elif "exec" in argv[:3]:
        from sandbox.cli.quickexec import exec_main

        return exec_main(argv)
    else:
        return None
    if text is None or sys.stdout is None:
        return None  # (no standard output at all: the click group decides what that means)
    try:
        data = text.encode(sys.stdout.encoding or "utf-8", "surrogateescape")
    except (UnicodeError, LookupError):
        return None  # a name the terminal's encoding cannot write as it is: the click edge decides
    return 0 if _write(data) else None


def _shown(command: str, run_id: str | None) -> int | None:
    """``list``, ``status [RUN]``, ``log [RUN]`` from the fast read path, as the click command writes
    them (the exit code), or None: the click command does it. Where a pager would start (``list``
    and ``log`` on a terminal, unless your settings name none), or on a stream click would write
    otherwise (not UTF-8, no descriptor), the click command does it too.
    """
    stdout = sys.stdout
    if stdout is None or (stdout.encoding or "").lower().replace("_", "-") not in ("utf-8", "utf8"):
        return None
    try:
        tty = os.isatty(stdout.fileno())
    except (OSError, ValueError):
        return None
    from sandbox.cli import plain

    config: Started | OSError | None = None
    try:
        cwd = os.path.abspath(os.getcwd())
        config = plain.config_started(cwd)  # your colour settings, read beside the run's files
        found = _read(command, cwd, run_id, tty, config)
    except Exception:  # anything unexpected: the click command reads it again, and its edge reports it
        return None
    finally:
        if config is not None:
            plain.config_of(config)  # its git reaped on every path (the answer is kept)
    if found is None:
        return None
    lines, colored = found
    text = "".join(line + "\n" for line in lines)
    if not colored and "\x1b" in text:
        return None  # click strips what looks like a colour code from an uncoloured output: let it
    try:
        data = text.encode("utf-8", stdout.errors or "strict")
    except UnicodeError:
        return None  # (a name standard output cannot write: the click edge says so)
    return 0 if _write(data) else None


def _read(
    command: str, cwd: str, run_id: str | None, tty: bool, config: Started | OSError
) -> tuple[list[str], bool] | None:
    """The lines the click command writes from the fast read path, and whether they are in colour;
    None where the click command would take the full path, or start a pager."""
    from sandbox.cli import fastshow
    from sandbox.fast.views import STATUS_DISK_ENTRIES

    lines: list[str] = []
    if command == "list":
        rows = fastshow.list_rows(cwd, STATUS_DISK_ENTRIES)
        if not rows:  # (none at all: the click command's words; or a miss)
            return ([fastshow.NO_RUNS], False) if rows == [] else None
        out = _plain("ui", tty, True, config)
        if out is None:
            return None
        fastshow.list_table(rows, out, STATUS_DISK_ENTRIES, lines.append)
    elif command == "status":
        found = fastshow.status_row(cwd, run_id, STATUS_DISK_ENTRIES)
        out = _plain("status", tty, False, config) if found is not None else None
        if found is None or out is None:
            return None
        fastshow.status_text(found[0], out, STATUS_DISK_ENTRIES, found[1], lines.append)
    else:
        fast = fastshow.fast_open(cwd, run_id)
        if fast is None:
            return None
        repo, run = fast
        state = repo.state(run)
        agent = repo.agent_git(run, state["run"]["base"]) if state["order"] else None
        out = _plain("diff", tty, True, config)
        if out is None:
            return None
        fastshow.log_text(run, state, agent, out, lines.append)
    return lines, out.color


def _plain(slot: str, tty: bool, page: bool, config: Started | OSError) -> Plain | None:
    """Colour and width as :func:`sandbox.cli.output.setup` decides them for a command with no option
    given (from your git config, ``config``, then ``NO_COLOR``); None where it would start a pager."""
    from sandbox.cli.plain import Plain, config_of, pager_command, want_color

    settings = config_of(config)
    if page and pager_command(os.environ, settings, tty) is not None:
        return None
    return Plain(want_color(None, settings, slot, os.environ, tty, False), _columns() if tty else None)


def _write(data: bytes) -> bool:
    """Write ``data`` to standard output unbuffered; False when that failed (a full disk, a closed
    pipe): the click group then writes it again and its edge says what went wrong, as for any command."""
    try:
        fd = sys.stdout.fileno()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except (OSError, ValueError):  # ValueError: no descriptor (stdout replaced, or closed)
        return False
    return True


def help_text() -> str | None:
    """``sandbox --help`` as the click group prints it at width 78 (None: a command without a summary)."""
    import textwrap

    from sandbox.cli.commands import COMMANDS, SUMMARIES

    names = sorted(COMMANDS)
    if any(name not in SUMMARIES for name in names):
        return None  # the group then asks every command for its help (sandbox.cli.app.RootGroup)
    first_col = min(max(len(n) for n in names), 30) + 2
    wrapper = textwrap.TextWrapper(max(WIDTH - first_col - 2, 10), replace_whitespace=False)
    lines = ["Commands:\n"]
    for name in names:
        wrapped = wrapper.fill(SUMMARIES[name].expandtabs()).splitlines() or [""]
        pad = " " * (first_col - len(name)) if len(name) <= first_col - 2 else "\n" + " " * (first_col + 2)
        lines.append(f"  {name}{pad}{wrapped[0]}\n")
        lines.extend(f"{'':>{first_col + 2}}{line}\n" for line in wrapped[1:])
    return HELP_HEAD + "".join(lines)


def _columns() -> int:
    """The terminal's columns as click's formatter asks ``shutil.get_terminal_size`` (80 without one)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


def _path(run_id: str | None) -> str | None:
    """``sandbox path [RUN]``'s line from the fast read path, or None (the click command's full path)."""
    if os.environ.get("GIT_DIR"):
        return None  # as sandbox.cli.finding.fast_open: GIT_DIR is the full path's
    from sandbox.fast import foldcache, views

    try:
        repo, _workdir, cwd_run = foldcache.discover(os.path.abspath(os.getcwd()))
        found = repo.resolve(run_id, cwd_run)
        repo.state(found)
    except (foldcache.Miss, OSError):
        return None
    place = repo.place(found)
    return place.worktree + "\n" if views.worktree_exists(place) else None
