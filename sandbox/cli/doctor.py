"""``sandbox doctor``: the confinement a run's agent gets here, in words, and what this machine cannot enforce."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import open_project
from sandbox.cli.group import wants_json
from sandbox.cli.jsonout import emit_json

if TYPE_CHECKING:
    from sandbox.cli.outputs.agents import DoctorOutput
    from sandbox.confine.policy import Isolation, Policy
    from sandbox.run.run import Run


@click.command()
@click.argument("run_id", required=False)
@click.option("--explain", "explain_path", default=None, help="Say whether PATH is visible inside, and why.")
@click.pass_context
def doctor(ctx: click.Context, run_id: str | None, explain_path: str | None) -> None:
    """Show what an agent of RUN (or of any run here) may read, write and reach, its limits,
    and what this machine cannot enforce. Settings: [isolation] in .sandbox.toml."""
    from sandbox.agent.hosted import user_workdir_of
    from sandbox.cli.isolation import resolve
    from sandbox.cli.outputs.agents import DoctorOutput
    from sandbox.confine import hardening, seatbelt, spawn
    from sandbox.confine.policy import home_allowlist, policy_for_run, system_hidden
    from sandbox.confine.verdict import any_run, bound_sockets, reachable_sockets
    from sandbox.run.names import resolve_run

    project, workdir, cwd_run = open_project(ctx)
    user_workdir = workdir or user_workdir_of(project.common_dir)
    runs = resolve(user_workdir, "run", None, None)
    execs = resolve(user_workdir, "exec", None, None)
    found = resolve_run(project, run_id, cwd_run) if run_id or cwd_run else None
    writable = ["the run's worktree", "the run's git directory"]
    masks: dict[str, object] = {}
    system_hidden(runs, fresh=True)  # doctor always walks the system directories afresh (and keeps the result)
    if found is not None:
        from sandbox.run.run import Run

        run = Run.open(project, found)
        policy_now = policy_for_run(runs, run)
        writable = list(policy_now.writable)
        masks = _foreign_masks(run)
    else:
        policy_now = any_run(runs, project.common_dir, user_workdir)
    hidden = dict(policy_now.reasons)
    if explain_path is not None:
        _explain(ctx, policy_now, explain_path)
        return
    problem = None
    try:
        spawn.check(runs)
    except spawn.ConfinementError as exc:
        problem = exc.message
    probe = hardening.probe() if runs.backend == "bwrap" else None
    limits = runs.limits
    data = DoctorOutput.model_validate(
        {
            "run": found,
            "isolate": runs.enabled,
            "backend": runs.backend,
            "unavailable": problem,
            "readable": "everything outside the homes, read-only, except what is hidden or masked; of the homes "
            "only their allowlist",
            "writable": writable + [p.rstrip("/") for p in runs.writable] + ["a private /tmp"],
            "read_only_inside_writable": list(runs.config),
            "hidden": [{"path": path, "why": why} for path, why in sorted(hidden.items())],
            "home_allowlist": [{"path": p, "why": why} for p, why in home_allowlist(runs)],
            "masked": [p for p in runs.masked if os.path.lexists(p)],
            "deny_read": list(runs.masked),
            "env_allow": list(runs.env_allow),
            "network": {
                "run": runs.network_mode,
                "exec": execs.network_mode,
                # sandbox run's allowlist (None: the network is all or nothing); an agent adds its model endpoints.
                "allow": list(runs.allow) if runs.allow is not None else None,
            },
            "unix_sockets": reachable_sockets(policy_now, bound_sockets()),
            "limits": {k: v for k, v in dataclasses.asdict(limits).items() if k != "memory_if_free"},
            "landlock_abi": probe.landlock_abi if probe else None,
            "cgroups": list(probe.cgroups) if probe else [],
            "cannot_enforce": [*probe.missing, hardening.later_sockets(probe.landlock_abi)]
            if probe
            else seatbelt.cannot_enforce(runs),
            "system": _system(runs, policy_now),
            **masks,
        }
    )
    if wants_json(ctx):
        emit_json(data.model_dump(mode="json"))
        return
    _show(data)


def _foreign_masks(run: Run) -> dict[str, object]:
    """For a run from another clone: the agent settings every command started on it gets masked
    (:func:`sandbox.confine.foreign.settings_paths`, the one list and rule), or why it is refused."""
    from sandbox.confine import foreign, settingstree
    from sandbox.errors import CorruptionError

    if run.state().foreign == 0:
        return {}
    try:
        paths = foreign.settings_paths(run.worktree, "", settingstree.recorded(run))
    except (foreign.ForeignSettingsError, CorruptionError) as exc:
        return {"foreign_masked": [], "foreign_refusal": exc.message}
    shown = foreign.shown(run.worktree, paths)
    return {"foreign_masked": shown.split(", ") if shown else []}


def _system(isolation: Isolation, policy: Policy) -> dict[str, object]:
    """Default deny in the system directories (:mod:`sandbox.confine.sysview`): whether it applies, what it hides."""
    from sandbox.confine import sysview
    from sandbox.confine.verdict import SYSTEM_WHY, explain, rules

    decided = rules(policy)
    hidden = [r.path for r in decided if r.verdict.why == SYSTEM_WHY]
    if not isolation.enabled or isolation.backend != "bwrap":
        why = "not enforced: no bubblewrap confinement here"
    elif os.geteuid() != 0:
        why = "nothing to hide: this user is not root, so inside it reads what it reads outside, as other users do"
    else:
        why = "holds: as root, inside you read what other users read of the system directories"
    return {
        "applies": bool(policy.system),
        "why": why,
        "walked": list(sysview.roots()),
        "listed": list(sysview.LISTED_DIRS),
        "directories": sysview.directories(isolation.system_cache),
        "hidden": hidden,
        "shown": [p for p in policy.system if p not in hidden and explain(policy, p, decided).visible],
    }


def _explain(ctx: click.Context, policy: Policy, path: str) -> None:
    """One path's verdict (``--explain``), and how to make a hidden one visible."""
    from sandbox.confine.verdict import explain

    verdict = explain(policy, os.path.abspath(path))
    hint = None
    if not verdict.visible:
        hint = f'allow_read = ["{os.path.abspath(path)}"] in [isolation] of your .sandbox.toml makes it readable'
    if wants_json(ctx):
        emit_json({"path": os.path.abspath(path), **dataclasses.asdict(verdict), "hint": hint})
        return
    why = verdict.why if verdict.visible else f"hidden: {verdict.why}"
    click.echo(f"{escape.path(os.path.abspath(path))}: {escape.text(why)}")
    if verdict.root:
        click.echo(f"  decided by the mount at {escape.path(verdict.root)}")
    if hint:
        click.echo(f"  {escape.text(hint)}")


def _size(value: int | None) -> str:
    if value is None:
        return "not bounded"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value} bytes"


def _show(data: DoctorOutput) -> None:
    from sandbox.confine import foreign

    echo = click.echo
    state = "on" if data.isolate else "OFF (--isolate off or [isolation] isolate = false)"
    echo(f"confinement: {state}, {data.backend}" + (f" (run {data.run})" if data.run else ""))
    if data.unavailable:
        echo(f"  not available here: {escape.text(data.unavailable)}")
    echo(f"readable: {data.readable}")
    echo("writable:")
    for path in data.writable:
        echo(f"  {escape.path(path)}")
    echo("hidden (an empty directory in their place):")
    for item in data.hidden:
        echo(f"  {escape.path(item.path)}: {item.why}")
    echo("visible in the homes (the rest of every home is empty inside; allow_read adds to it):")
    for item in data.home_allowlist or []:
        echo(f"  {escape.path(item.path)}: {item.why}")
    echo(f"masked secrets present here ({len(data.deny_read)} paths in the deny-read set):")
    for path in data.masked or ["(none of them exists)"]:
        echo(f"  {escape.path(path)}")
    if data.foreign_masked is not None:
        names = ", ".join(escape.path(p) for p in data.foreign_masked) or "none of them is there now"
        echo(
            f"run {data.run} holds work from another clone: its worktree's agent settings are empty inside for "
            f"every command started on it ({', '.join(foreign.AGENT_SETTINGS)}, at its root, in each directory "
            f"down to where the command starts, and in each one its recorded tree has them in); there now: {names}"
        )
    if data.foreign_refusal:
        echo(f"  refused: {escape.text(data.foreign_refusal)}")
    if data.system is not None:
        sysv = data.system
        echo(f"system files other users cannot read: {sysv.why}; {len(sysv.hidden)} hidden here")
        echo(f"  walked: {', '.join(sysv.walked)} ({sysv.directories} directories); listed: {', '.join(sysv.listed)}")
        for path in sysv.hidden:
            echo(f"  {escape.path(path)}")
        for path in sysv.shown:
            echo(f"  {escape.path(path)}: shown on purpose (allow_read)")
    net = data.network
    if net.allow is not None:
        hosts = ", ".join(escape.text(h) for h in net.allow) or "no host beyond the agent's model endpoints"
        allow = f"run through an allowlist proxy: {hosts}, plus the started agent's model endpoints"
    else:
        allow = "all or nothing"
    echo(f"network: run {net.run}, exec {net.exec} ({allow})")
    reachable = ", ".join(escape.path(s) for s in data.unix_sockets) or "none bound here now"
    echo("unix sockets reachable inside (of those bound on this machine now): " + reachable)
    echo("environment passed on: " + " ".join(data.env_allow) + " (and the agent's own names)")
    lim = data.limits
    echo(
        f"limits: /tmp and /dev/shm {_size(lim.tmpfs_bytes)}; processes {lim.max_processes or 'not bounded'}; "
        f"a file {_size(lim.max_file_bytes)}; memory {_size(lim.max_memory)}; "
        f"what one call may add: {_size(lim.max_call_bytes)}; open files {lim.max_open_files or 'not bounded'}; "
        f"inotify {lim.max_inotify_instances or 'not bounded'} instances, {lim.max_inotify_watches or 'not bounded'} "
        "watches"
    )
    if data.backend == "seatbelt":
        echo("macOS (Seatbelt) enforces the writes and the network switch, not the reads or namespaces")
    echo("this machine cannot enforce:" + ("" if data.cannot_enforce else " nothing we know of"))
    for gap in data.cannot_enforce:
        echo(f"  {escape.text(gap)}")
