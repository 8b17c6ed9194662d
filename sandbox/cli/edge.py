"""The one error edge: every error becomes one line on stderr and an exit code here.

1: refused or conflict; 2: usage; 3: unexpected (the traceback written to a log file, its path printed);
129: the terminal hung up; 130: Ctrl-C. Output streams write any file name (a name that is not UTF-8 never
ends a command)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from sandbox.cli.plain import lenient_output

if TYPE_CHECKING:
    from sandbox.errors import SandboxError


def _crash_log(exc: BaseException) -> str:
    import datetime  # here, not at the top: `sandbox hook` must start fast
    import tempfile
    import traceback

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    fd, path = tempfile.mkstemp(prefix=f"sandbox-crash-{stamp}-", suffix=".log")
    # backslashreplace: an argument that is not valid UTF-8 (a surrogate escape) must not crash the crash log.
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
        fh.write(f"sandbox {' '.join(sys.argv[1:])}\n\n")
        fh.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    return path


def refused(exc: SandboxError) -> int:
    """Say a :class:`~sandbox.errors.SandboxError` in one line on stderr; its exit code. The only place one
    is turned into words and a code (the click group's ``invoke`` and :func:`run_main` both call it)."""
    click.echo(f"sandbox: {_safe(exc.message)}", err=True)
    return exc.exit_code


def _safe(message: str) -> str:
    """An error's one line, with what the agent or the user typed in it made safe for a terminal."""
    from sandbox.cli import escape

    return escape.text(message)


def _terminal_gone(exc: Exception) -> bool:
    """True when ``exc`` is the input/output error of writing to a terminal that hung up (its window
    closed, its tmux pane killed), which is where this command's output and errors go."""
    import errno

    if not (isinstance(exc, OSError) and exc.errno == errno.EIO):
        return False
    for fd in (1, 2):
        try:
            os.write(fd, b"")  # a terminal that hung up refuses even nothing, with EIO
        except OSError as gone:
            if gone.errno == errno.EIO:
                return True
    return False


def run_main(cli: click.Group) -> None:
    """Run the CLI, mapping errors to one line and an exit code.

    1: refused or conflict; 2: usage; 3: unexpected (traceback written to a log file); 130: Ctrl-C.
    """
    from sandbox import faults

    lenient_output()
    faults.arm_once(os.environ.get("SANDBOX_FAULT"))
    try:
        rv = cli.main(standalone_mode=False, prog_name="sandbox")
    except click.exceptions.Abort:
        click.echo("sandbox: interrupted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        # One line, like every other error: what is wrong, and where the help is.
        message = exc.format_message().strip().replace("\n", " ")
        if isinstance(exc, click.UsageError):
            where = exc.ctx.command_path if exc.ctx is not None else "sandbox"
            message += f" (see '{where} --help')"
        click.echo(f"sandbox: {_safe(message)}", err=True)
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except KeyboardInterrupt as exc:
        sys.exit(said(exc))
    except BrokenPipeError:
        from sandbox.cli.output import paging

        sys.exit(0 if paging() else 1)  # quitting the pager early is not a failure
    except Exception as exc:
        sys.exit(said(exc))
    sys.exit(rv if isinstance(rv, int) else 0)


def said(exc: Exception | KeyboardInterrupt) -> int:
    """Say an error raised by a command (the click group's or a quick path's) in one line; its exit code.
    The one place unexpected errors are turned into a line and a log."""
    if isinstance(exc, KeyboardInterrupt):
        click.echo("sandbox: interrupted.", err=True)
        return 130
    from sandbox.errors import SandboxError, damaged_object

    if isinstance(exc, SandboxError):
        return refused(exc)
    store = sys.modules.get("sandbox.store.objects")  # loaded already wherever one was raised
    if store is not None and isinstance(exc, store.DamagedObjectError):
        # Corruption is reported in a sentence, not as a crash of ours (most commands turn it into
        # their own refusal; this is the net under the others).
        click.echo(f"sandbox: {_safe(damaged_object(exc))}", err=True)
        return 1
    if _terminal_gone(exc):
        return 129  # as a hang-up ends a command: no one is left to read a line or a crash log
    path = _crash_log(exc)
    click.echo(f"sandbox: unexpected error: {type(exc).__name__}: {_safe(str(exc))} (details in {path})", err=True)
    return 3
