"""``sandbox exec`` through the run's host, answered without importing click.

``import click`` and the click group cost ~25 ms of an ``exec`` whose whole budget is 200 ms at 100k files
(issue 30); the hosted call needs nothing of them. :func:`exec_main` serves exactly the forms

    sandbox [-C DIR] exec [RUN] [--isolate on|off] [--network on|off] [--call-id ID] -- COMMAND...

(each option once, its value as the next word) when the run's host answers: the call goes through
:func:`sandbox.agent.hosted.run_hosted` as from the click command, and the same line is said on stderr
(:func:`report_lines`, which the click command says too). Anything else, and a run no host serves
(nothing has run then), returns None: the click group does it as before. An error is said by the click
edge's :func:`sandbox.cli.edge.said`, imported only then. tests/cli/test_quick_exec.py holds the two
paths to the same ledger, lines and exit codes.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # no typing at run time: the quick path's start
if TYPE_CHECKING:
    from sandbox.agent.hosted import HostedOutcome

#: The options served here, with the values each may take (None: any word not starting with '-').
OPTIONS: dict[str, tuple[str, ...] | None] = {
    "--isolate": ("on", "off"),
    "--network": ("on", "off"),
    "--call-id": None,
}


def parse(argv: list[str]) -> tuple[str | None, str | None, dict[str, str], list[str]] | None:
    """(``-C`` directory, RUN, options, command) of a form served here; None for any other."""
    directory = None
    if argv[:1] == ["-C"] and len(argv) > 2 and not argv[1].startswith("-"):
        directory, argv = argv[1], argv[2:]
        if not os.path.isdir(directory):
            return None  # (click's words for a -C that is no directory)
    if argv[:1] != ["exec"] or "--" not in argv:
        return None
    cut = argv.index("--")
    words, command = argv[1:cut], argv[cut + 1 :]
    if not command:
        return None
    run_id = None
    options: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word in OPTIONS and word not in options and i + 1 < len(words):
            value, allowed = words[i + 1], OPTIONS[word]
            if value.startswith("-") or (allowed is not None and value not in allowed) or not value:
                return None
            options[word] = value
            i += 2
        elif run_id is None and not word.startswith("-") and word.strip():
            run_id = word  # (a blank RUN, "$RUN" unset, is the click command's to refuse)
            i += 1
        else:
            return None
    return directory, run_id, options, command


def exec_main(argv: list[str]) -> int | None:
    """Run a served form of ``sandbox exec`` through the run's host (the exit code), or None."""
    parsed = parse(argv)
    if parsed is None:
        return None
    directory, run_id, options, command = parsed
    from sandbox.cli.plain import lenient_output

    lenient_output()
    here = os.path.abspath(directory or os.getcwd())
    try:
        hosted = _run_hosted(here, run_id, options, command)
    except (Exception, KeyboardInterrupt) as exc:
        from sandbox.cli.edge import said

        return said(exc)
    if hosted is None:
        return None  # no host served it and nothing ran: the click command records it itself
    lines = report_lines(
        hosted.call_id,
        hosted.status,
        hosted.returncode,
        hosted.files,
        hosted.cannot_start,
        hosted.unrecorded,
        hosted.masked,
    )
    text = "".join(line + "\n" for line in lines)
    sys.stderr.write(text)
    sys.stderr.flush()
    return exit_code(hosted.returncode, hosted.unrecorded)


def _run_hosted(here: str, run_id: str | None, options: dict[str, str], command: list[str]) -> HostedOutcome | None:
    from sandbox.agent.hosted import run_hosted
    from sandbox.cli.machine import resolver
    from sandbox.store.paths import subdir_in_run

    return run_hosted(
        here,
        run_id,
        command,
        tool_name="run_command",
        idempotency="conditional",
        replay="ask",
        call_id=options.get("--call-id"),
        isolation=resolver("exec", options.get("--isolate"), options.get("--network")),
        subdir=lambda worktree, user_workdir: subdir_in_run(here, worktree, user_workdir),
    )


def report_lines(
    call_id: str,
    status: str,
    returncode: int,
    files: int | None,
    why: str | None,
    unrecorded: str | None,
    masked: str | None = None,
) -> list[str]:
    """What ``sandbox exec`` says of its call on stderr without ``--json``: what the command did not see
    (``masked``: a run from elsewhere, its agent settings), then the call, its status, its exit code and
    how many files it changed; ``why`` it could not start, or why its changes were not recorded
    (``unrecorded``)."""
    said = []
    if masked is not None:
        from sandbox.escape import text

        said.append(f"sandbox: {text(masked)}")
    if unrecorded is not None:
        return [*said, f"sandbox: {unrecorded}"]
    if why is not None:
        return [*said, f"sandbox: {why.rstrip('.')}; recorded as {call_id} ({status}, exit {returncode})."]
    count = "?" if files is None else str(files)
    return [*said, f"sandbox: {call_id} {status} (exit {returncode}), {count} file(s) changed"]


def exit_code(returncode: int, unrecorded: str | None) -> int:
    """The command's exit code; 1 when it exited 0 but its changes could not be recorded (the call
    ended failed: a script must not go on as if they were)."""
    return returncode if returncode or unrecorded is None else 1
