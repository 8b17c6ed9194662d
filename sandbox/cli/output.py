"""git's conventions for output: which pager, and whether to colour, decided exactly as git decides.

Pager (git's ``pager.c``): only when standard output is a terminal; the command is ``GIT_PAGER``,
else ``core.pager`` from your git config, else ``PAGER``, else ``less``; an empty value or ``cat``
means no pager. ``LESS=FRX`` and ``LV=-c`` are set when unset, so a short output is printed and
left on the screen. ``sandbox --no-pager`` (``-P``) or a command's ``--no-pager`` turns it off;
``sandbox --paginate`` (``-p``) pages commands that do not page by default (``status``).

Colour (git's ``color.c``): ``--color[=WHEN]``/``--no-color`` first, then your git config
(``color.diff``, ``color.status``, falling back to ``color.ui``: ``always``/``never`` decide, a
true value or ``auto`` means auto); then ``NO_COLOR`` (set and non-empty: no colour, as
https://no-color.org asks: config and flags override it); auto means standard output is a
terminal whose ``TERM`` is not ``dumb``. It is decided before the pager starts, as git does, so
the pipe to the pager is not mistaken for a file (``color.pager=false`` turns colour off when paging).

This is the only module that starts a pager or reads these settings; commands call :func:`setup`.
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

# Decided without click (sandbox.cli.quick decides the same), and known by these names here too.
from sandbox.cli.plain import STATUS_COLORS as STATUS_COLORS
from sandbox.cli.plain import WHEN as WHEN
from sandbox.cli.plain import colorbool as colorbool
from sandbox.cli.plain import git_config as git_config
from sandbox.cli.plain import pager_command as pager_command
from sandbox.cli.plain import want_color as want_color

if TYPE_CHECKING:
    import subprocess

F = TypeVar("F", bound=Callable[..., Any])

_pager: subprocess.Popen[bytes] | None = None
_pager_has_stderr = False


#: ``ctx.meta`` key: the arguments given after ``--`` (see :meth:`OutputCommand.parse_args`).
AFTER_DASHDASH = "sandbox.after_dashdash"


class OutputCommand(click.Command):
    """A command with ``--color``: as in git, a bare ``--color`` means ``always`` and never takes the
    next argument as its value (``sandbox log --color RUN``); a value is given as ``--color=WHEN``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Rewrite a bare ``--color`` (before any ``--``) to ``--color=always``, then parse.

        Also notes (``ctx.meta[AFTER_DASHDASH]``) the arguments that came after ``--``: there, as in
        git, they are paths, never the RUN argument (``sandbox diff -- 'src/*.py'``).
        """
        end = args.index("--") if "--" in args else len(args)
        args = [("--color=always" if a == "--color" and i < end else a) for i, a in enumerate(args)]
        ctx.meta[AFTER_DASHDASH] = tuple(args[end + 1 :])
        return super().parse_args(ctx, args)


def color_option(func: F) -> F:
    """``--color[=WHEN]`` and ``--no-color``, as git spells them."""
    func = click.option("--no-color", "no_color", is_flag=True, help="Never colour (same as --color=never).")(func)
    return click.option(
        "--color",
        "color",
        type=click.Choice(WHEN),
        is_flag=False,
        flag_value="always",
        default=None,
        help="Colour the output: auto (on a terminal), always, never (default: your git config, else auto).",
    )(func)


def pager_option(func: F) -> F:
    """A command's own ``--no-pager`` (``sandbox --no-pager CMD`` works for every command)."""
    return click.option("--no-pager", "no_pager", is_flag=True, help="Do not pipe the output into a pager.")(func)


@dataclass
class Output:
    """How one command writes: with colour or not, through a pager or not, at what width."""

    color: bool = False
    pager: str | None = None
    #: The terminal's width when standard output is one (lines may be fitted to it), else None.
    width: int | None = None

    def style(self, text: str, **styles: Any) -> str:
        """``text`` in ``click.style`` styles when colouring, else as it is."""
        return click.style(text, **styles) if self.color and text else text

    def content(self, text: str) -> str:
        """Content of the agent's (a patch, a file's lines) as it may be written now: escaped when it
        goes straight to a terminal (:func:`sandbox.escape.terminal`: colour kept); through a pager
        (which escapes what it shows, as for git) or to a file or a pipe, as it is."""
        if paging() or not sys.stdout.isatty():
            return text
        from sandbox import escape

        return escape.terminal(text)

    def page(self) -> None:
        """Start the pager (if one was chosen): from here on standard output goes to it."""
        if self.pager is not None:
            start_pager(self.pager)
            self.pager = None
            # The pager shows whole lines (wrapped, or scrolled sideways with less -S): nothing is cut here.
            self.width = None


def setup(
    ctx: click.Context,
    color: str | None = None,
    no_color: bool = False,
    slot: str = "ui",
    page: bool = True,
    no_pager: bool = False,
) -> Output:
    """Decide colour and pager for a command. ``page``: whether the command pages by default (as
    ``git log`` and ``git diff`` do, and ``git status`` does not); ``sandbox --paginate`` pages it anyway."""
    root = ctx.find_root().obj or {}
    if root.get("no_pager"):
        no_pager = True
    if root.get("paginate"):
        page = True
    tty = sys.stdout.isatty()
    env = os.environ
    # The command's own flag wins over one given before its name (``sandbox --color=never log``).
    flag = "never" if no_color else color
    if flag is None:
        flag = "never" if root.get("no_color") else root.get("color")
    needs_config = flag is None or (tty and page and not no_pager)
    config = git_config(root.get("directory") or os.getcwd()) if needs_config else {}
    pager = pager_command(env, config, tty) if page and not no_pager else None
    width = _columns() if tty else None
    out = Output(want_color(flag, config, slot, env, tty, pager is not None), pager, width)
    # click.echo drops colour codes when its stream is not a terminal (the pager's pipe, a file);
    # the decision made here is the one that counts.
    ctx.color = out.color
    return out


def start_pager(command: str) -> None:
    """Run ``command`` through the shell with our standard output (and standard error, when that is
    the terminal too, as git does) piped into it; it is waited for when the process exits."""
    global _pager, _pager_has_stderr
    if _pager is not None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    env.setdefault("LV", "-c")
    env["GIT_PAGER_IN_USE"] = "true"
    try:
        import subprocess

        proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env)
    except OSError:
        return  # git too goes on without a pager it cannot start
    assert proc.stdin is not None
    os.dup2(proc.stdin.fileno(), 1)
    if os.isatty(2):
        os.dup2(proc.stdin.fileno(), 2)
        _pager_has_stderr = True
    proc.stdin.close()
    _pager = proc
    atexit.register(_wait_for_pager)


def paging() -> bool:
    """Whether a pager was started (a broken pipe then means the reader quit, not a failure)."""
    return _pager is not None


def _wait_for_pager() -> None:
    """Close our ends of the pipe so the pager sees the end of input, then wait for the reader."""
    global _pager
    proc, _pager = _pager, None
    if proc is None:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # the reader quit early: what is left is not wanted
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    if _pager_has_stderr:
        os.dup2(devnull, 2)
    os.close(devnull)
    try:
        proc.wait()
    except KeyboardInterrupt:  # Ctrl-C reaches the pager too; it decides when it is done
        proc.wait()


class Progress:
    """Progress of a slow step as one line on standard error, rewritten in place.

    Shown only where git shows its own: standard error is a terminal (or ``--progress`` asked for
    it), and not with ``--json``. Like git's delayed progress, nothing is shown before ``delay``
    seconds (a quick step stays silent), and the line is redrawn at most ten times a second. The
    library hands lines to it (it never prints itself).
    """

    def __init__(self, enabled: bool, delay: float = 0.0) -> None:
        import threading
        import time

        self.enabled = enabled
        self.delay = delay
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._drawn = 0.0
        self._kind = ""
        self._shown = False

    @classmethod
    def choose(cls, flag: bool | None, as_json: bool, delayed: bool = False) -> Progress:
        """On by ``--progress``, off by ``--no-progress`` or ``--json``, else when stderr is a terminal.

        ``delayed``: shown after a second, or after ``GIT_PROGRESS_DELAY`` seconds when that is set
        (git's own knob for the same thing)."""
        delay = 0.0
        if delayed:
            try:
                delay = float(os.environ.get("GIT_PROGRESS_DELAY", "1"))
            except ValueError:
                delay = 1.0
        return cls(flag if flag is not None else (not as_json and sys.stderr.isatty()), delay)

    @property
    def callback(self) -> Callable[[str], None] | None:
        """What to pass to the library: this object when enabled, else None (no work spent on it)."""
        return self if self.enabled else None

    def __call__(self, line: str) -> None:
        """Show ``line`` (a step, or a counter of one) unless it is too early or too soon after the last."""
        if not self.enabled:
            return
        import time

        now = time.monotonic()
        elapsed = now - self._started
        kind = line.split(":", 1)[0]  # a new step is always drawn; a counter of the same one throttled
        if elapsed < self.delay or (kind == self._kind and now - self._drawn < 0.1 and not line.endswith("done.")):
            return
        self._kind = kind
        text = f"sandbox: {line} ({elapsed:.1f}s)"
        width = _columns()
        with self._lock:
            sys.stderr.write("\r\x1b[K" + text[: max(10, width - 1)])
            sys.stderr.flush()
            self._shown = True
            self._drawn = now

    def done(self) -> None:
        """Clear the line (the command's own output follows)."""
        with self._lock:
            if self._shown:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
                self._shown = False


def _columns() -> int:
    """The terminal's width (``shutil`` imported here: only a terminal pays for it, ~1.5 ms)."""
    import shutil

    return shutil.get_terminal_size().columns
