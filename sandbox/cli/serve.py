"""``sandbox serve [RUN] [--idle-exit S] [--foreground]``: host a run's hooks and watcher in the background."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from typing import TYPE_CHECKING

import click

from sandbox.cli.common import ensure_worktree, open_run

if TYPE_CHECKING:
    from sandbox.run.run import Run


@click.command("serve")
@click.argument("run_id", required=False)
@click.option("--idle-exit", type=click.FloatRange(0.1), default=900.0, show_default=True, help="Exit after S idle s.")
@click.option("--foreground", is_flag=True, help="Stay attached and log to stderr instead of serve.log.")
@click.pass_context
def serve(ctx: click.Context, run_id: str | None, idle_exit: float, foreground: bool) -> None:
    """Host RUN's hook socket and worktree watcher, so hooks are fast and Bash calls exact.

    Hooks start it by themselves when no process hosts the run ([hooks] autostart = false in
    .sandbox.toml turns that off). It exits after --idle-exit seconds without a request, when the
    run is dropped, and on SIGTERM. One per run: a second one exits at once.
    """
    from sandbox.agent import service
    from sandbox.errors import UsageError

    run = open_run(ctx, run_id)
    made = ensure_worktree(run)
    if made:
        click.echo(f"sandbox: {made}", err=True)
    if not run.worktree_exists():
        raise UsageError(f"The worktree of run {run.run_id} is missing; see 'sandbox status {run.run_id}'.")
    lock = service.try_claim(run.dir)
    if lock is None:
        pid = service.service_pid(run.dir)
        by = f"by 'sandbox serve', pid {pid}" if pid else "by 'sandbox run', or a service still starting"
        click.echo(f"sandbox: run {run.run_id} is already hosted ({by}); nothing to do.")
        return
    if foreground:
        _serve(run, idle_exit, None)
        return
    read_fd, write_fd = os.pipe()
    if os.fork() == 0:  # detach: a new session, then a grandchild that init adopts
        os.close(read_fd)
        os.setsid()
        if os.fork() > 0:
            os._exit(0)
        _detached(run, idle_exit, write_fd)
    os.close(write_fd)
    lock.release()  # the service holds the same lock through its inherited descriptor
    answer = _read_answer(read_fd, timeout=120.0)
    if not answer.startswith("ready "):
        raise UsageError(f"The service for run {run.run_id} did not start: {answer or 'it died'}.")
    log_path = os.path.join(run.dir, service.LOG_FILE)
    click.echo(f"sandbox: serving run {run.run_id} in the background (pid {answer.split()[1]}); log: {log_path}")


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


def _detached(run: Run, idle_exit: float, notify: int) -> None:
    from sandbox.agent import service

    try:
        os.chdir("/")
        log_path = os.path.join(run.dir, service.LOG_FILE)
        big = os.path.exists(log_path) and os.path.getsize(log_path) > (1 << 20)
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if big else os.O_APPEND), 0o600)
        for fd, target in ((os.open(os.devnull, os.O_RDONLY), 0), (log, 1), (log, 2)):
            os.dup2(fd, target)
        _serve(run, idle_exit, notify)
    except BaseException as exc:  # never unwind past the fork into the parent's code
        with contextlib.suppress(OSError):
            os.write(notify, f"error {type(exc).__name__}: {exc}\n".encode())
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _serve(run: Run, idle_exit: float, notify: int | None) -> None:
    import signal
    import threading
    import time

    from sandbox.agent import service

    def log(line: str) -> None:
        click.echo(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {line}", err=True)

    started = []

    def ready(host: service.RunHost) -> None:
        started.append(True)
        service.write_pid(host.run.dir)
        log(f"serving run {host.run.run_id} (idle exit {idle_exit:g} s)")
        for note in host.notes:
            log(f"note: {note}")
        if notify is not None:
            os.write(notify, f"ready {os.getpid()}\n".encode())

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        reason = service.serve_run(run, stop, idle_exit=idle_exit, on_event=log, on_ready=ready)
    finally:
        service.remove_pid(run.dir)
    log(f"stopped: {reason}")
    if notify is not None and not started:  # the parent reports this line
        os.write(notify, f"stopped: {reason}\n".encode())
