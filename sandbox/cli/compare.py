"""``sandbox compare RUN... [--check CMD]``: runs side by side (best-of-N)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import ensure_worktree, open_project, verified
from sandbox.cli.isolation import isolation_options, resolve
from sandbox.cli.jsonout import emit_json

if TYPE_CHECKING:
    from sandbox.run.run import Run
    from sandbox.runs.compare import CheckOutcome


@click.command()
@click.argument("run_ids", nargs=-1)
@click.option("--check", "check_cmd", default=None, help="A shell command run in each worktree, recorded as a call.")
@isolation_options(network_default="off")
@click.option("--stat", "stat_", is_flag=True, help="Per run, a line per differing path instead of its diff.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_context
def compare(
    ctx: click.Context,
    run_ids: tuple[str, ...],
    check_cmd: str | None,
    isolate: str | None,
    network: str | None,
    stat_: bool,
    as_json: bool,
) -> None:
    """Compare RUNs: calls (failed, interrupted, violations), files and lines changed, and where they disagree.

    One RUN stands for its group (the runs of one 'start --count', and forks). With --check 'CMD',
    CMD runs in each run's worktree (confined, like 'sandbox exec') and is recorded as a call there;
    without it each run's newest recorded check is shown. After the table, each run's diff of the
    paths the runs changed differently (--stat: a line per path). Runs oldest first.
    """
    from sandbox.errors import UsageError
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run
    from sandbox.runs.compare import compare as do_compare
    from sandbox.runs.many import group_of

    project, _workdir, cwd_run = open_project(ctx)
    ids = [resolve_run(project, r, cwd_run) for r in run_ids] or [resolve_run(project, None, cwd_run)]
    if len(ids) == 1:
        ids = group_of(project, Run.open(project, ids[0]))
    if len(ids) < 2:
        raise UsageError(f"Run {ids[0]} has no other run to compare with; name two or more runs.")
    runs = [verified(Run.open(project, i)) for i in dict.fromkeys(ids)]
    outputs: dict[str, bytes] = {}
    checks = {r.run_id: _check(r, check_cmd, isolate, network, outputs) for r in runs} if check_cmd else None
    result = do_compare(runs, checks)
    by_id = {r.run_id: r for r in runs}
    diffs = {row.run_id: _differing(by_id[row.run_id], result.disagree, stat_) for row in result.runs}
    if as_json:
        emit_json({**result.to_json(), "diffs": diffs})
        return
    if not result.same_base:
        click.echo("note: these runs started from different snapshots; 'unchanged' means each run's own.")
    click.echo(
        f"{'RUN':<10} {'CALLS':>5} {'FAILED':>6} {'INTERRUPTED':>11} {'VIOLATION':>9} {'FILES':>5} {'+LINES':>7} "
        f"{'-LINES':>7}  {'CHECK':<12} LABEL"
    )
    for row in result.runs:
        check = "-" if row.check is None else ("passed" if row.check.returncode == 0 else "FAILED")
        check = check if row.check is None else f"{check} ({row.check.returncode})"
        failed = f"{row.failed}" + (f"+{row.uncertain}?" if row.uncertain else "")
        click.echo(
            f"{row.run_id:<10} {row.calls:>5} {failed:>6} {row.interrupted:>11} {row.violations:>9} {row.files:>5} "
            f"{row.added:>7} {row.removed:>7}  "
            f"{check:<12} {escape.text(row.label or '')}"
        )
    click.echo(f"{len(result.agree)} path(s) changed the same way by every run; {len(result.disagree)} differ:")
    for path, states in sorted(result.disagree.items())[:50]:
        click.echo(f"  {escape.path(path)}: " + ", ".join(f"{rid} {st}" for rid, st in states.items()))
    if len(result.disagree) > 50:
        click.echo(f"  ... and {len(result.disagree) - 50} more (--json lists them all)")
    for row in result.runs:
        if diffs[row.run_id]:
            label = f" ({escape.text(row.label)})" if row.label else ""
            click.echo(f"\n== {row.run_id}{label}: its diff of the paths that differ ==")
            for line in escape.lines(diffs[row.run_id]):  # line by line: a newline is no escape
                click.echo(line)
    # The checks' own output after the table, the end of each failed one (in full: sandbox log RUN --call ID).
    for row in result.runs:
        if row.check is None or row.check.returncode == 0:
            continue
        lines = outputs.get(row.run_id, b"").decode(errors="replace").rstrip("\n").splitlines()
        click.echo(
            f"\ncheck in {row.run_id} exited {row.check.returncode}"
            + (f"; its last {min(len(lines), TAIL)} of {len(lines)} output line(s):" if lines else " with no output.")
        )
        for line in lines[-TAIL:]:
            click.echo("  " + escape.text(line))


#: Lines of a failed check's output shown after the table.
TAIL = 15


def _check(run: Run, command: str, isolate: str | None, network: str | None, outputs: dict[str, bytes]) -> CheckOutcome:
    """Run the check command in the run's worktree as one recorded call; its output (stdout and
    stderr, as the command wrote them) goes to ``outputs[run]``, not between the table's lines."""
    import sys
    import tempfile

    from sandbox.agent.execute import execute
    from sandbox.runs.compare import CheckOutcome

    made = ensure_worktree(run)
    if made:
        click.echo(f"sandbox: {made}", err=True)
    isolation = resolve(run.user_workdir, "exec", isolate, network)
    with tempfile.TemporaryFile() as captured:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        try:
            os.dup2(captured.fileno(), 1)
            os.dup2(captured.fileno(), 2)
            outcome = execute(run, ["sh", "-c", command], tool_name="check", isolation=isolation)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        captured.seek(0)
        outputs[run.run_id] = captured.read(4 * 1024 * 1024)
    return CheckOutcome(outcome.entry.call_id, outcome.returncode, outcome.entry.status.value)


def _differing(run: Run, disagree: dict[str, dict[str, str]], stat: bool) -> str:
    """The run's diff (base to head) of the paths it changed that the runs disagree on ("" for none)."""
    from sandbox.merge import select
    from sandbox.merge.preview import Range, diff_text

    mine = [p for p, states in sorted(disagree.items()) if states.get(run.run_id) != "unchanged"]
    if not mine:
        return ""
    spec = select.pathspec([":(top,literal)" + p for p in mine])
    return diff_text(run, Range(run.base, run.head()), stat=stat, spec=spec)
