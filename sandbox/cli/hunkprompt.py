"""``apply --hunks``: choosing the agent's hunks one by one on a terminal, the way ``git add -p`` does.

The choice is made before the apply takes its lock, from a read-only plan; the apply then plans
again under the lock and takes the chosen hunks by their stable ids, so a file that changed in
between is refused, never half-written (see :mod:`sandbox.merge.hunks`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from sandbox.fast.pathspec import Pathspec
    from sandbox.merge.hunks import Choice, FileHunks, Hunk
    from sandbox.run.run import Run

HELP = """y - apply this hunk to your tree
n - do not apply this hunk
q - quit; do not apply this hunk or any of the remaining ones
a - apply this hunk and all later hunks in the file
d - do not apply this hunk or any of the later hunks in the file
s - split the current hunk into smaller hunks
e - manually edit the current hunk
? - print help"""

EDIT_NOTE = """# Manual hunk edit mode -- see bottom for a quick guide.
{hunk}# ---
# To remove '-' lines, make them ' ' lines (context).
# To remove '+' lines, delete them.
# Lines starting with # will be removed.
# If the patch applies cleanly, the edited hunk will be taken.
# Save and close the editor to go on; an empty file takes nothing from this hunk.
"""


class Quit(Exception):
    """The user answered q."""


def choose(run: Run, calls: list[str] | None, spec: Pathspec | None, with_deps: bool) -> Choice | None:
    """Ask about every hunk the apply would write; None when nothing was chosen."""
    from sandbox.merge import hunks, mergeback, partial, planning

    if not sys.stdin.isatty():
        raise click.UsageError("--hunks asks on a terminal; give the hunk ids with --hunks-from FILE instead.")
    plan = planning.plan(run, calls, spec, with_deps=with_deps)
    if plan.conflicts:
        mergeback.refuse(plan.conflicts, plan.report(dry_run=True))
    choice = hunks.Choice()
    files = partial.offered(run.repo, plan)
    if not files:
        click.echo("Every selected change is already in your tree; there is no hunk to choose.")
    try:
        for fh in files:
            _ask_file(fh, choice, run.user_workdir)
    except Quit:
        pass
    return choice if choice.ids or choice.edits else None


def _color(text: str, code: str) -> str:
    return click.style(text, fg=code) if sys.stdout.isatty() else text


def _show(data: bytes) -> None:
    from sandbox import escape

    for line in data.decode(errors="replace").splitlines():
        raw = escape.terminal(line)  # never paged: the agent's lines reach the terminal only escaped (tabs kept)
        if raw.startswith("@@"):
            click.echo(_color(raw, "cyan"))
        elif raw.startswith("+"):
            click.echo(_color(raw, "green"))
        elif raw.startswith("-"):
            click.echo(_color(raw, "red"))
        else:
            click.echo(raw)


def _answer(prompt: str, allowed: str) -> str:
    while True:
        click.echo(_color(prompt + f" [{','.join(allowed)},?]? ", "blue"), nl=False)
        line = sys.stdin.readline()
        if not line:
            raise Quit  # end of input: take what was chosen so far
        key = line.strip()[:1].lower()
        if key in allowed:
            return key
        shown = help_for(allowed)  # as git add -p: only the answers this prompt offers
        click.echo(shown if key == "?" or key == "" else f"Unknown answer {key!r}.\n{shown}")


def help_for(allowed: str) -> str:
    """The help lines of the answers ``allowed`` (and ``?``), in the usual order."""
    return "\n".join(line for line in HELP.splitlines() if line[:1] in allowed + "?")


def _ask_file(fh: FileHunks, choice: Choice, root: str) -> None:
    from sandbox.merge import hunks

    click.echo(
        click.style(f"diff --git a/{fh.path} b/{fh.path}", bold=True)
        if sys.stdout.isatty()
        else f"diff --git a/{fh.path} b/{fh.path}"
    )
    if fh.text:
        # git's file header, as git add -p shows it before the first hunk.
        click.echo(f"--- a/{fh.path}\n+++ b/{fh.path}")
    if not fh.text:
        what = "Add this file" if fh.before is None else "Delete this file" if fh.after is None else "Apply this change"
        kind = "" if fh.before is None or fh.after is None else " (binary, symlink or mode change: taken whole)"
        click.echo(f"{what}{kind}: {fh.path}")
        key = _answer(f"(1/1) {what}", "ynqad")
        if key in "ya":
            choice.ids.add(fh.id)
        elif key == "q":
            raise Quit
        return
    taken = set(fh.taken)
    queue: list[Hunk] = []
    for h in fh.hunks:
        if h.id in taken:
            continue  # taken earlier as a whole (an edited hunk)
        open_changes = [c for c in h.changes if c.id not in taken]
        if len(open_changes) == len(h.changes):
            queue.append(h)
        else:  # partly taken earlier: offer what is left, change by change
            queue.extend(hunks.change_hunk(fh, c) for c in open_changes)
    i = 0
    while i < len(queue):
        h = queue[i]
        _show(hunks.hunk_text(h))
        allowed = "ynqad" + ("s" if len(h.changes) > 1 else "") + "e"
        key = _answer(f"({i + 1}/{len(queue)}) Apply this hunk to your tree", allowed)
        if key == "y":
            choice.ids.add(h.id)
        elif key == "a":
            choice.ids.update(x.id for x in queue[i:])
            return
        elif key == "d":
            return
        elif key == "q":
            raise Quit
        elif key == "s":
            parts = [hunks.change_hunk(fh, c) for c in h.changes]
            click.echo(f"Split into {len(parts)} hunks.")
            queue[i : i + 1] = parts
            continue
        elif key == "e":
            edited = _edit(h, root)
            if edited is not None:
                hunks.parse_edit(h, b"".join(edited))  # refuse a broken edit now, not after the questions
                choice.edits[h.id] = edited
        i += 1


def _editor(root: str) -> list[str]:
    """The editor as git chooses it: GIT_EDITOR, core.editor, VISUAL, EDITOR, then vi."""
    import pygit2

    if os.environ.get("GIT_EDITOR"):
        return shlex.split(os.environ["GIT_EDITOR"])
    config = pygit2.Repository(root).config  # the repository's, the user's and the system's config
    if "core.editor" in config and str(config["core.editor"]).strip():
        return shlex.split(str(config["core.editor"]))
    for var in ("VISUAL", "EDITOR"):
        if os.environ.get(var):
            return shlex.split(os.environ[var])
    return ["vi"]


def _edit(h: Hunk, root: str) -> list[bytes] | None:
    """The hunk after the user edited it in their editor; None for an emptied file."""
    from sandbox.merge import hunks

    fd, path = tempfile.mkstemp(prefix="sandbox-hunk-", suffix=".diff")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(
                EDIT_NOTE.replace("{hunk}", hunks.hunk_text(h).decode(errors="surrogateescape")).encode(
                    errors="surrogateescape"
                )
            )
        # The editor runs on the terminal like git's does (inherits stdin/stdout); its exit code is
        # not trusted, the file it leaves is.
        subprocess.run([*_editor(root), path], check=False)
        with open(path, "rb") as fh:
            data = fh.read()
    finally:
        os.unlink(path)
    lines = [line for line in hunks.split_lines(data) if not line.startswith(b"#")]
    return lines or None
