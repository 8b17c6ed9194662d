"""``sandbox serve [RUN] [--idle-exit S] [--foreground]``: host every run of the repository in the background."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import TYPE_CHECKING

import click

from sandbox.cli import escape
from sandbox.cli.finding import ensure_worktree, open_project
from sandbox.cli.group import wants_json
from sandbox.cli.jsonout import emit_json

if TYPE_CHECKING:
    from sandbox.agent.host import Host


@click.command("serve")
@click.argument("run_id", required=False)
@click.option("--idle-exit", type=click.FloatRange(0.1), default=900.0, show_default=True, help="Exit after S idle s.")
@click.option("--foreground", is_flag=True, help="Stay attached and log to stderr instead of host.log.")
@click.option(
    "--max-runs-watched", type=click.IntRange(0), default=None, help="Watch at most N runs; the rest are scanned."
)
@click.option("--max-watches", type=click.IntRange(0), default=None, help="Hold at most N inotify watches.")
@click.option("--stop", is_flag=True, help="Stop this repository's host (it is started again when needed).")
@click.pass_context
def serve(
    ctx: click.Context,
    run_id: str | None,
    idle_exit: float,
    foreground: bool,
    max_runs_watched: int | None,
    max_watches: int | None,
    stop: bool,
) -> None:
    """Host the hooks, watcher and sessions of every run of this repository: fast hooks, exact Bash calls.

    One process per repository, whatever the number of runs. Hooks, 'sandbox exec' and 'sandbox
    run' start it by themselves when none runs ([hooks] autostart = false in .sandbox.toml turns
    that off). It exits after --idle-exit seconds without a request and on SIGTERM; a second one
    exits at once. RUN, when given, must be a run of the repository (it is served at once).
    """
    from sandbox.agent import host, wire

    project, _workdir, cwd_run = open_project(ctx)
    if stop:
        _stop(project.common_dir, wants_json(ctx))
        return
    named: str | None = None
    if run_id is not None or cwd_run is not None:
        from sandbox.run.names import resolve_run
        from sandbox.run.run import Run

        named_run = Run.open(project, resolve_run(project, run_id, cwd_run))  # a wrong RUN is refused here
        named = named_run.run_id
        made = ensure_worktree(named_run)  # a run fetched from elsewhere gets its worktree here first
        if made:
            click.echo(f"sandbox: {made}", err=True)
    as_json = wants_json(ctx)
    served = host.Host(project, max_runs_watched=max_runs_watched, max_watches=max_watches)
    if wire.host_alive(project.common_dir):
        pid = host.host_pid(project.common_dir)
        if as_json:
            emit_json({"run": named, "started": False, "pid": pid, "log": None})
        else:
            click.echo(f"sandbox: this repository's runs are already hosted (pid {pid or '?'}); nothing to do.")
        return
    if foreground:
        _serve(served, idle_exit, None)
        return
    read_fd, write_fd = os.pipe()
    if os.fork() == 0:  # detach: a new session, then a grandchild that init adopts
        os.close(read_fd)
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        _detached(served, idle_exit, write_fd)
    os.close(write_fd)
    answer = _read_answer(read_fd, timeout=120.0)
    if answer.startswith("busy"):
        if as_json:
            emit_json({"run": named, "started": False, "pid": host.host_pid(project.common_dir), "log": None})
        else:
            click.echo("sandbox: this repository's runs are already hosted; nothing to do.")
        return
    if not answer.startswith("ready "):
        from sandbox.errors import UsageError

        raise UsageError(f"The host for this repository did not start: {answer or 'it died'}.")
    log_path = os.path.join(wire.host_dir(project.common_dir), wire.LOG)
    if as_json:
        emit_json({"run": named, "started": True, "pid": int(answer.split()[1]), "log": log_path})
        return
    click.echo(f"sandbox: hosting this repository's runs in the background (pid {answer.split()[1]}); log: {log_path}")


def _stop(common_dir: str, as_json: bool) -> None:
    """SIGTERM to the repository's host, then wait (10 s at most) until its lock is free."""
    import signal
    import time

    from sandbox.agent import host, wire

    pid = host.host_pid(common_dir)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pid = None
        deadline = time.monotonic() + 10.0
        while pid is not None and wire.host_alive(common_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        if wire.host_alive(common_dir):
            from sandbox.errors import SandboxError

            raise SandboxError(f"The host of this repository (pid {pid}) did not stop within 10 s; try again.")
    if as_json:
        emit_json({"run": None, "started": False, "pid": pid, "log": None, "stopped": pid is not None})
    elif pid is None:
        click.echo("sandbox: no host runs for this repository; nothing to stop.")
    else:
        click.echo(f"sandbox: stopped this repository's host (pid {pid}).")


def _read_answer(fd: int, timeout: float) -> str:
    import select
    import time

    data, deadline = b"", time.monotonic() + timeout
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while b"\n" not in data and select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))[0]:
            chunk = pipe.read(4096)
            if not chunk:
                break
            data += chunk
    return data.decode(errors="replace").strip()


def _detached(served: Host, idle_exit: float, notify: int) -> None:
    from sandbox.agent import wire

    try:
        os.chdir("/")
        log_path = os.path.join(wire.ensure_host_dir(served.common_dir), wire.LOG)
        big = os.path.exists(log_path) and os.path.getsize(log_path) > (1 << 20)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if big else os.O_APPEND), 0o600)
        for fd, target in ((os.open(os.devnull, os.O_RDONLY), 0), (log, 1), (log, 2)):
            os.dup2(fd, target)
        _serve(served, idle_exit, notify)
    except BaseException as exc:  # never unwind past the fork into the parent's code
        with contextlib.suppress(OSError):
            os.write(notify, f"error {type(exc).__name__}: {exc}\n".encode())
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _serve(served: Host, idle_exit: float, notify: int | None) -> None:
    import signal
    import time

    from sandbox.agent.host import HostBusyError

    def log(line: str) -> None:
        click.echo(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {line}", err=True)

    def ready(running: Host) -> None:
        log(f"hosting the runs of {running.common_dir} (idle exit {idle_exit:g} s)")
        for note in running.notes:
            log(f"note: {note}")
        if notify is not None:
            os.write(notify, f"ready {os.getpid()}\n".encode())

    served.on_event = log
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: served.request_stop())
    try:
        reason = served.serve(idle_exit=idle_exit, on_ready=ready)
    except HostBusyError as exc:
        if notify is not None:
            os.write(notify, b"busy\n")
            return
        click.echo(f"sandbox: {escape.text(exc.message)}", err=True)
        return
    log(f"stopped: {reason}")
