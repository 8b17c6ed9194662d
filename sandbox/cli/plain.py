"""git's colour and pager settings, and colour itself, decided without click.

:mod:`sandbox.cli.output` starts the pager and writes through click; the decisions it makes are
here, so that :mod:`sandbox.cli.quick` (``list``, ``status``, ``log`` written to a pipe without
importing click) decides exactly as the click commands do. :func:`style` writes what
``click.style`` writes for the styles these commands use (tests/cli/test_quick.py holds them equal).
"""

from __future__ import annotations

import codecs
import io
import os
import sys

TYPE_CHECKING = False  # no typing at run time: the quick path's start
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sandbox.store.gitcli import Started

WHEN = ("auto", "always", "never")
_TRUE = ("true", "yes", "on", "1", "")
_FALSE = ("false", "no", "off", "0")

#: How a call's status is coloured wherever it is shown (log, status).
STATUS_COLORS = {"succeeded": "green", "failed": "red", "started": "yellow", "uncertain": "magenta"}
STATUS_COLORS.update({"interrupted": "red", "violation": "red"})

#: click's codes of the colours (``click.termui._ansi_colors``) these commands use.
_FG = {"black": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}


def style(text: str, fg: str | None = None, bold: bool | None = None, dim: bool | None = None) -> str:
    """``click.style(text, fg=fg, bold=bold, dim=dim)``: the colour, bold and dim (on, off, or as they
    are for None), the text and a reset."""
    codes = f"\x1b[{_FG[fg]}m" if fg is not None else ""
    codes += "" if bold is None else "\x1b[1m" if bold else "\x1b[22m"
    codes += "" if dim is None else "\x1b[2m" if dim else "\x1b[22m"
    return f"{codes}{text}\x1b[0m"


class Plain:
    """How one command writes on the quick path: with colour or not, at what width (no pager)."""

    def __init__(self, color: bool, width: int | None = None) -> None:
        self.color = color
        self.width = width

    def style(self, text: str, fg: str | None = None, bold: bool | None = None) -> str:
        """``text`` styled when colouring (as :meth:`sandbox.cli.output.Output.style`), else as it is."""
        return style(text, fg=fg, bold=bold) if self.color and text else text


def git_config(cwd: str) -> dict[str, str]:
    """The colour and pager settings of the git config that applies in ``cwd`` (keys lower-cased).

    Read with ``git config`` itself (one process): includes, conditional includes and
    ``GIT_CONFIG_*`` variables then count exactly as they do for git. In a run's worktree, the
    config of the user's repository: the run's own git dir is the agent's to write, and
    ``core.pager`` is a command this (unconfined) process would start.
    """
    return config_of(config_started(cwd))


def config_started(cwd: str) -> Started | OSError:
    """The git :func:`git_config` runs, started (an :class:`OSError` kept when none can start): the quick
    ``list``, ``status`` and ``log`` start it before reading the run, and :func:`config_of` reads it
    when they need it (and reaps it on every path)."""
    from sandbox.store import gitcli, layout

    where = cwd if os.path.isdir(cwd) else None
    loc = layout.locate(where) if where is not None else None
    git_dir = ["--git-dir", loc.common_dir] if loc is not None else []
    pattern = r"^(color\.(ui|diff|status|pager)|core\.pager)$"
    try:
        return gitcli.started(
            [*git_dir, "config", "-z", "--get-regexp", pattern], (loc.common_dir if loc else where) or "."
        )
    except OSError as exc:  # no git at all: every setting is at its default
        return exc


def config_of(begun: Started | OSError) -> dict[str, str]:
    """The settings the git :func:`config_started` started found, once it ended."""
    if isinstance(begun, OSError):
        return {}
    found = begun.result()[1]
    out: dict[str, str] = {}
    for record in found.split(b"\0"):
        if not record:
            continue
        key, _, value = record.decode(errors="surrogateescape").partition("\n")
        out[key.lower()] = value  # the last one wins, as in git
    return out


def colorbool(value: str | None) -> str | None:
    """A git colour setting as ``always``, ``never`` or ``auto`` (None when unset or unreadable)."""
    if value is None:
        return None
    v = value.strip().lower()
    if v in WHEN:
        return v
    if v in _FALSE:
        return "never"
    if v in _TRUE:
        return "auto"  # git: "any normal truth value defaults to 'auto'"
    return None


def want_color(
    flag: str | None,
    config: Mapping[str, str],
    slot: str,
    env: Mapping[str, str],
    stdout_tty: bool,
    paging: bool,
) -> bool:
    """Whether to colour: the flag, else ``color.<slot>``/``color.ui``, else ``NO_COLOR``, else auto."""
    setting = flag
    if setting is None:
        setting = colorbool(config.get(f"color.{slot}")) if slot != "ui" else None
        if setting is None:
            setting = colorbool(config.get("color.ui"))
        if setting in (None, "auto") and env.get("NO_COLOR"):
            return False
    if setting == "always":
        return True
    if setting == "never":
        return False
    pager_colour = colorbool(config.get("color.pager")) != "never"
    if paging and not pager_colour:
        return False
    # git's check_auto_color: a terminal, or a pager git started for us (``git -p sandbox-alias``).
    under_gits_pager = env.get("GIT_PAGER_IN_USE", "").lower() in ("true", "1", "yes", "on") and pager_colour
    return (stdout_tty or under_gits_pager) and env.get("TERM", "") != "dumb"


def pager_command(env: Mapping[str, str], config: Mapping[str, str], stdout_tty: bool) -> str | None:
    """The pager git would start here, or None (git's ``git_pager``)."""
    if not stdout_tty:
        return None
    pager = env.get("GIT_PAGER")
    if pager is None:
        pager = config.get("core.pager")
    if pager is None:
        pager = env.get("PAGER")
    if pager is None:
        pager = "less"
    if not pager.strip() or pager.strip() == "cat":
        return None
    return pager


def _write_names_as_given(exc: UnicodeError) -> tuple[str | bytes, int]:
    """An output error handler: a path's undecodable byte (a surrogate escape) is written as the
    byte it was, as ``ls`` and ``git -c core.quotePath=false`` do; anything else the terminal's
    encoding lacks is written as a backslash escape. Never an error."""
    try:
        return codecs.lookup_error("surrogateescape")(exc)
    except UnicodeError:
        return codecs.lookup_error("backslashreplace")(exc)


def lenient_output() -> None:
    """Make stdout and stderr write any name (see :func:`_write_names_as_given`): under a UTF-8
    locale Python's stdout is strict, and one file name that is not UTF-8 would end the command."""
    codecs.register_error("sandbox-names", _write_names_as_given)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="sandbox-names")
