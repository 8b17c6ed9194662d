"""``sandbox ui [--port N] [--no-browser] [RUN...]``: review runs in a local page."""

from __future__ import annotations

import click

from sandbox.cli.finding import open_project
from sandbox.cli.group import wants_json


@click.command("ui")
@click.argument("run_ids", nargs=-1, metavar="[RUN]...")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Port on 127.0.0.1 (default: a free one).")
@click.option("--no-browser", is_flag=True, help="Print the address only; do not open a browser.")
@click.pass_context
def ui(ctx: click.Context, run_ids: tuple[str, ...], port: int, no_browser: bool) -> None:
    """Review runs in a local page: calls, diffs, best-of-N and approvals; apply, undo and approve there.

    The page is served on 127.0.0.1 only, with a new token in the printed address each time (after
    '#': it stays in the browser's tab, never in a cookie); the browser opened here gets a one-time
    code instead. It stops on Ctrl-C. RUN limits the page to those runs.
    """
    import errno
    import secrets
    import socket

    import uvicorn

    from sandbox.errors import UsageError
    from sandbox.run.names import resolve_run
    from sandbox.ui.server import Settings, build

    project, _workdir, cwd_run = open_project(ctx)
    ids = tuple(dict.fromkeys(resolve_run(project, r, cwd_run) for r in run_ids))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        why = "it is in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise UsageError(f"Cannot listen on 127.0.0.1:{port}: {why}; choose another --port (0: a free one).") from None
    sock.listen(64)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(24)
    url = f"http://127.0.0.1:{port}/#token={token}"
    settings = Settings(project, token, port, ids)
    if wants_json(ctx):  # one line, before the page serves: a script reads it and goes on
        import json

        click.echo(json.dumps({"url": url, "port": port, "runs": list(ids)}))
    else:
        click.echo(f"sandbox: reviewing this repository's runs at {url}", err=True)
        click.echo("sandbox: Ctrl-C stops the page.", err=True)
    import sys

    sys.stdout.flush()
    if not no_browser:
        import webbrowser

        try:
            # A command line is readable by every local user: the browser gets a code worth one load.
            webbrowser.open(f"http://127.0.0.1:{port}/?code={settings.codes.issue()}")
        except Exception:  # no browser here: the address above is enough  # noqa: BLE001
            pass
    app = build(settings)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not wants_json(ctx):
        click.echo("sandbox: the page stopped.", err=True)
