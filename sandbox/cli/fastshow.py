"""What ``list``, ``status`` and ``log`` print, line by line, and their fast read, without click.

The click commands (:mod:`sandbox.cli.list_runs`, :mod:`sandbox.cli.status`, :mod:`sandbox.cli.log`)
and the quick path (:mod:`sandbox.cli.quick`: their plain forms written to a pipe, without importing
click) both build their text here, handing each line to ``echo``, so the two cannot drift apart.
``out`` styles text (:class:`sandbox.cli.output.Output` on the click path, :class:`sandbox.cli.plain.Plain`
on the quick one) and knows the width lines are fitted to.
"""

from __future__ import annotations

import os

from sandbox.cli import escape
from sandbox.cli.fmt import call_numbers, command_of, duration, fit, local_time
from sandbox.cli.plain import STATUS_COLORS
from sandbox.fast import views
from sandbox.fast.views import parse_time
from sandbox.store.fsutil import human_size

TYPE_CHECKING = False  # no typing at run time: the quick path's start
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Protocol

    from sandbox.fast.foldcache import Repository
    from sandbox.fast.foldjson import AgentGitJson, EntryJson, RefusalJson, RunRowJson, StateJson, StatusHostJson

    class Styled(Protocol):
        """What the text needs of its output: styles, and the width lines are fitted to."""

        width: int | None

        def style(self, text: str, *, fg: str | None = ..., bold: bool | None = ...) -> str:
            """``text`` in these styles when colouring."""

    Echo = Callable[[str], None]

#: What ``list`` prints when there is no run.
NO_RUNS = "No runs. Start one with 'sandbox start'."
#: The gemini adapter's call id prefix (``sandbox.agent.adapters.gemini.CALL_PREFIX``; a test keeps them
#: equal): only its calls can carry the untimed note, and only they import the adapter.
GEMINI_PREFIX = "gemini_"


def fast_open(directory: str, run_id: str | None) -> tuple[Repository, str] | None:
    """The repository around ``directory`` and the id of the run named (or the one we are in) as the
    fast read path finds them (:mod:`sandbox.fast.foldcache`); None when it cannot: take the full path."""
    from sandbox.fast import foldcache

    if os.environ.get("GIT_DIR"):
        return None  # the fast path finds repositories from the directory only: GIT_DIR is the full path's
    try:
        repo, _workdir, cwd_run = foldcache.discover(directory)
        found = repo.resolve(run_id, cwd_run)
        repo.state(found)  # the run reads whole from its sealed cache
        return repo, found
    except foldcache.Miss:
        return None


# -- list ---------------------------------------------------------------------------------------


def list_rows(directory: str, disk_limit: int | None) -> list[RunRowJson] | None:
    """Every run's row from the sealed fold caches (None: one of them needs the full path)."""
    from sandbox.fast import foldcache

    try:
        repo, _, _ = foldcache.discover(directory)
        rows = [repo.summary(run_id, disk=True, disk_limit=disk_limit) for run_id in repo.run_ids()]
    except foldcache.Miss:
        return None
    rows.sort(key=lambda r: r["created_at"] or "")
    return rows


def list_table(rows: list[RunRowJson], out: Styled, limit: int | None, echo: Echo) -> None:
    """``list``'s table of ``rows`` (at least one)."""
    echo(out.style(f"{'RUN':<10} {'CREATED':<25} {'CALLS':>5} {'PATHS':>5} {'DISK':>10}  LABEL", bold=True))
    for r in rows:
        created = local_time(r["created_at"])
        run_col = out.style(f"{r['run']:<10}", fg="yellow")
        echo(
            f"{run_col} {created:<25} {r['calls']:>5} {r['changed_paths']:>5} "
            f"{_disk(r):>10}  {escape.text(r['label'] or '')}"
            + _came_from(r)
            + ("" if r["worktree_exists"] or r.get("damaged") or _not_here(r) else "  (worktree missing)")
            + (
                out.style(f"  DAMAGED: {r['error']}", fg="red")
                if r.get("damaged")
                else f"  ({r['error']})"
                if r.get("error")
                else ""
            )
        )
    if not all(r.get("disk_complete", True) for r in rows):
        echo(
            ">SIZE: more than SIZE ("
            + (
                f"the first {limit} files of that run counted; 'sandbox list --disk' counts them all)"
                if limit is not None
                else "not every directory of that run could be read: nested past what a path names, or unreadable)"
            )
        )


def _disk(row: RunRowJson) -> str:
    """The DISK column: the size, or ``>SIZE`` (more than that) when the count stopped at its bound."""
    size = human_size(row["disk_bytes"])
    return size if row.get("disk_complete", True) else ">" + size


def _came_from(row: Mapping[str, object]) -> str:
    """Where a run came from: the remote it was fetched from and the machine it was started on."""
    fetched = row.get("fetched_from")
    host = row.get("made_on")
    if isinstance(fetched, dict):
        return f"  (from {fetched['remote']}" + (f", made on {host})" if host else ")")
    return ""


def _not_here(row: Mapping[str, object]) -> bool:
    """A run fetched from elsewhere that has no worktree here yet (nothing is missing)."""
    return "worktree" in row and row["worktree"] is None


# -- status -------------------------------------------------------------------------------------


def status_row(directory: str, run_id: str | None, disk_limit: int | None) -> tuple[RunRowJson, str] | None:
    """The status row from the run's sealed fold cache, and the common dir (None: take the full path)."""
    from sandbox.fast import foldcache

    fast = fast_open(directory, run_id)
    if fast is None:
        return None
    repo, found = fast
    try:
        row = repo.summary(found, disk=True, disk_limit=disk_limit)
        row["agent_git"] = repo.agent_git(found, row["base"])
    except foldcache.Miss:
        return None
    row["in_flight"] = views.in_flight(repo.state(found))
    row["host"] = host_of(repo.common_dir, found)
    row["network_refused"] = views.network_refusals(repo.state(found)["data"]["note"])
    return row, repo.common_dir


def host_of(common_dir: str, run_id: str) -> StatusHostJson | None:
    """The repository's host as far as this run goes (None: no host runs)."""
    from sandbox.agent import wire  # standard library only: status stays a fast command

    status = wire.status(common_dir)
    if status is None:
        return None
    mine = status["runs"].get(run_id)
    return {
        "pid": status["pid"],
        "serves_run": mine is not None,
        "watched": bool(mine and mine["watched"]),
        "note": mine["note"] if mine else None,
    }


def status_text(row: RunRowJson, out: Styled, limit: int | None, common_dir: str, echo: Echo) -> None:
    """``status``'s lines for one run."""
    echo(out.style(f"Run {row['run']}", fg="yellow") + (f" ({row['label']})" if row["label"] else ""))
    echo(f"  created:   {local_time(row['created_at'])}")
    missing = out.style("  (MISSING)", fg="red")
    if row["worktree"] is None:
        echo("  worktree:  none in this repository yet (exec, run, path or resume makes one at the run's head)")
    else:
        echo(f"  worktree:  {row['worktree']}" + ("" if row["worktree_exists"] else missing))
        echo(f"  git dir:   {row['git_dir']} (the run's own)")
    echo(f"  base:      {row['base'][:12]}   your HEAD at start: {(row['user_head'] or 'none')[:12]}")
    echo(f"  head:      {(row['run_head'] or 'none')[:12]}")
    by = ", ".join(f"{v} {out.style(k, fg=STATUS_COLORS.get(k))}" for k, v in sorted(row["by_status"].items()))
    echo(f"  calls:     {row['calls']} ({by or 'none'})")
    partly = row.get("partly_applied_calls") or []
    numbers = row.get("call_numbers") or {}
    more = f" ({len(partly)} partly applied: {call_numbers(numbers, partly)})" if partly else ""
    renamed = f" ({row['renamed_paths']} renamed)" if row.get("renamed_paths") else ""
    echo(f"  changed:   {row['changed_paths']} path(s){renamed}; {row['unapplied_calls']} call(s) not applied{more}")
    _disk_line(row, limit, echo)
    markers = row.get("conflict_markers") or []
    if markers:
        shown = ", ".join(escape.path(p) for p in markers)
        echo(f"  attention: {out.style(shown, fg='red')} (conflict markers from apply --3way to resolve)")
    in_flight = row["in_flight"]
    uncertain = set(row.get("uncertain_calls") or [])
    running = [c for c in in_flight if c not in uncertain]
    if running:
        flight = out.style(call_numbers(numbers, running), fg="yellow")
        echo(f"  in flight: {flight} (run 'sandbox resume' after a crash)")
    if uncertain:
        shown = out.style(call_numbers(numbers, [c for c in in_flight if c in uncertain]), fg="yellow")
        echo(
            f"  uncertain: {shown} (started, end never recorded: check, then "
            f"'sandbox call resolve {row['run']} ID --status succeeded|failed')"
        )
    echo(f"  host:      {_host_line(row['host'])}")
    refused = row.get("network_refused") or []
    if refused:
        shown = ", ".join(escape.text(f"{r['host']}:{r['port']}") for r in refused[-5:])
        more = f" (the last 5 of {len(refused)}; all in 'sandbox log')" if len(refused) > 5 else ""
        echo(f"  network:   {len(refused)} connection(s) refused by the allowlist: {shown}{more}")
    agent_git = row.get("agent_git")
    if agent_git:
        first, *rest = views.describe_agent_git(agent_git)
        echo(f"  agent git: {escape.text(first)}")  # branch names and commit subjects are the agent's
        for line in rest:
            echo(f"             {escape.text(line)}")
    if row["worktree_exists"] and row.get("worktree") and row.get("git_dir"):
        _warn_git(out, str(row["worktree"]), str(row["git_dir"]), common_dir, echo)


def _disk_line(row: RunRowJson, limit: int | None, echo: Echo) -> None:
    """The disk use of the run's worktree and git dir, or a lower bound and why."""
    if not row["worktree_exists"]:
        return
    if row.get("disk_complete", True):
        echo(f"  disk:      {human_size(row['disk_bytes'])} (worktree and the run's own git dir)")
        return
    echo(
        f"  disk:      more than {human_size(row['disk_bytes'])} ("
        + (
            f"the first {limit} files counted; 'sandbox status --disk' counts them all)"
            if limit is not None
            else "some directories could not be read: nested deeper than a path can name, or not readable)"
        )
    )


def _warn_git(out: Styled, worktree: str, git_dir: str, common_dir: str, echo: Echo) -> None:
    """A warning for each setting, hook or pointer of the run's git that would run a program for
    your own git in the worktree and that the sandbox did not put there (sandbox.store.gitguard)."""
    from sandbox.store import gitguard

    found = gitguard.findings(worktree, git_dir, common_dir)
    if not found:
        return
    echo(
        out.style("  warning:   ", fg="red")
        + "the run's git has what your own git in its worktree would run or read; do not run git there"
        " before you have looked (or drop the run):"
    )
    for item in found:
        echo(f"             {escape.text(item)}")


def _host_line(info: StatusHostJson | None) -> str:
    if info is None:
        return "none running (the next hook, exec or run starts one)"
    if not info["serves_run"]:
        return f"pid {info['pid']}; it has not served this run yet"
    if info["watched"]:
        return f"pid {info['pid']}; this run's changes come from its watcher"
    return f"pid {info['pid']}; this run's changes are found by scanning ({info['note']})"


# -- log ----------------------------------------------------------------------------------------


def log_text(run_id: str, state: StateJson, agent: AgentGitJson | None, out: Styled, echo: Echo) -> None:
    """``log``'s lines for a whole run read from its sealed fold cache (``agent``: what the agent did
    with the run's own git; :meth:`sandbox.fast.foldcache.Repository.agent_git`)."""
    entries = views.entries(state)
    if not entries:
        echo(f"Run {run_id} has no calls yet.")
        session_refusals(refusals_by_call(state), out, echo)
        return
    log_header(out, echo)
    partly = views.partial_paths(state)
    refused = refusals_by_call(state)
    for e in entries:
        log_row(run_id, e, out, echo, partly.get(e["call_id"]), refused.pop(e["call_id"], None))
    session_refusals(refused, out, echo)
    if agent is not None:
        show_agent_git(agent, echo)


def log_header(out: Styled, echo: Echo) -> None:
    """The two header lines of ``log``'s rows."""
    echo(out.style(f"{'#':>3}  {'CALL':<18} {'STATUS':<10} {'TOOL':<16} COMMIT", bold=True))
    echo(out.style(f"{'':>7}{'STARTED':<25} {'TOOK':>6}  COMMAND", bold=True))


def refusals_by_call(state: StateJson) -> dict[str | None, list[RefusalJson]]:
    """The network allowlist's refusals per call running then (None: between calls)."""
    found: dict[str | None, list[RefusalJson]] = {}
    for item in views.network_refusals(state["data"]["note"]):
        found.setdefault(item["call_id"], []).append(item)
    return found


def _refused_line(item: RefusalJson, out: Styled) -> str:
    when = local_time(item["at"]) if item["at"] else "?"
    where = escape.text(f"{item['host']}:{item['port']}")
    return f"       {out.style('refused:', fg='red')} network {where} at {when} (not in the allowlist)"


def session_refusals(left: dict[str | None, list[RefusalJson]], out: Styled, echo: Echo) -> None:
    """Refusals between calls (or of calls not listed): after the calls, tied to the session."""
    items = [item for group in left.values() for item in group]
    if items:
        echo("network refused outside any call (during an agent session):")
        for item in items:
            echo(_refused_line(item, out))


def _untimed(e: EntryJson) -> str | None:
    """Why the call's TOOK may include a wait at the agent's prompt (its agent gives no tool time), or None."""
    if not str(e["call_id"]).startswith(GEMINI_PREFIX):
        return None
    ended = e["started_at"] and e["finished_at"] and e["status"] != "not_run"
    same = e["started_at"] is not None and parse_time(e["started_at"]) == parse_time(e["created_at"])
    if not (ended and same):
        return None
    from sandbox.agent.adapters import gemini

    return gemini.UNTIMED if str(e["call_id"]).startswith(gemini.CALL_PREFIX) else None


def log_row(
    run_id: str,
    e: EntryJson,
    out: Styled,
    echo: Echo,
    partly: list[str] | None = None,
    refused: list[RefusalJson] | None = None,
) -> None:
    """One call's lines; ``e`` is its ledger entry as JSON data (both read paths give it so)."""
    approval = e["approval"]
    asked, started = parse_time(e["created_at"]), e["started_at"]
    # The tool's own start came after the agent's permission prompt: that wait is not its TOOK.
    tool_start = parse_time(started) if started else asked
    waited = duration(asked, tool_start) if (tool_start - asked).total_seconds() >= 0.5 else ""
    untimed = _untimed(e)
    flags = "".join(
        [
            f" [waited {waited} at the agent's prompt]" if waited else "",
            f" [{untimed}]" if untimed else "",
            " [undone]" if e["undone"] else "",
            " [rolled back]" if e.get("rolled_back") else "",
            " [applied]" if e["applied"] else "",
            f" [partly applied: {', '.join(escape.path(p) for p in partly)}]" if partly else "",
            f" [denied: {escape.text(e['denial_reason'] or 'no reason')}]" if approval == "denied" else "",
        ]
    )
    commit = e["commit"][:10] if e["commit"] else "-"
    status = e["status"]
    seq = f"{e['seq']:>3}"
    echo(
        f"{out.style(seq, fg='yellow')}  {escape.text(e['call_id']):<18} "
        f"{out.style(f'{status:<10}', fg=STATUS_COLORS.get(status))} {escape.text(e['tool_name']):<16} "
        f"{out.style(commit, fg='yellow')}{flags}"
    )
    finished = e["finished_at"]
    # A call that never ran took no time (its finish is when the agent moved on).
    took = duration(parse_time(started), parse_time(finished)) if started and finished and status != "not_run" else ""
    when = f"{local_time(started or e['created_at']):<25} {took:>6}"
    command = command_of(e["tool_name"], e["input"], e["summary"])
    echo(fit(f"       {when}  {command}".rstrip(), out.width))
    error = e["error"]
    if error:
        more = f"  (in full: sandbox log {run_id} --call {e['call_id']})" if e["error_detail"] or e["error_ref"] else ""
        first = escape.text(error.strip().splitlines()[0] if error.strip() else error)  # older: multi-line
        echo(fit(f"       {out.style('error:', fg='red')} {first}{more}", None if more else out.width))
    _files(e, out, echo)
    for item in refused or []:
        echo(_refused_line(item, out))


def _files(e: EntryJson, out: Styled, echo: Echo) -> None:
    """The call's changed files, one a line; a file moved whole (git mv) is one rename, as 'diff'
    shows it: the deletion and the addition of one blob."""
    gone = {f["before_hash"]: f["path"] for f in e["files"] if f["after_hash"] is None and f["before_hash"]}
    moved = {
        f["path"]: gone.pop(f["after_hash"]) for f in e["files"] if f["before_hash"] is None and f["after_hash"] in gone
    }
    sources = set(moved.values())
    for f in e["files"]:
        if f["path"] in sources:
            continue
        kind = "A" if f["before_hash"] is None else "D" if f["after_hash"] is None else "M"
        if kind == "M" and f["before_hash"] == f["after_hash"]:
            kind = "T"
        name = escape.path(f["path"])
        if f["path"] in moved:
            kind, name = "R", f"{escape.path(moved[f['path']])} -> {name}"
        echo(f"       {out.style(kind, fg={'A': 'green', 'D': 'red'}.get(kind))} {name}")


def show_agent_git(found: AgentGitJson, echo: Echo) -> None:
    """What the agent did with the run's own git, after the calls (only when it did something)."""
    if not views.agent_git_changed(found):
        return
    first, *rest = views.describe_agent_git(found)  # branch names and commit subjects are the agent's
    echo(f"agent git: {escape.text(first)}")
    for line in rest:
        echo(f"           {escape.text(line)}")
