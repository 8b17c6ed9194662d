"""Where ``sandbox mcp --http`` keeps its bearer token for its clients: a file of the user's, in the
default data directory, never in the client's configuration.

A token written into a client's settings (``claude mcp add --header "Authorization: Bearer ..."``)
lands in ``~/.claude.json``, which every ``sandbox run`` of Claude Code seeds into the run's home,
where the agent's own commands read it and could drive the server (loopback reaches it). Instead the
client runs ``sandbox mcp --headers-for PORT`` (Claude Code's ``headersHelper``) whenever it
connects: outside a sandbox it prints the header; inside one, where the data directory and the home
are not visible, it finds nothing.
"""

from __future__ import annotations

import json
import os

from sandbox.errors import UsageError


def token_path(port: int) -> str:
    """The file that holds the token of the server on ``port`` (in the default data directory)."""
    from sandbox.store import layout

    return os.path.join(layout.user_data_root(os.environ, os.path.expanduser("~")), "mcp", f"{port}.token")


def store_token(port: int, token: str) -> str:
    """Write ``token`` for ``port`` (mode 0600, replaced whole); its path."""
    path = token_path(port)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, token.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def forget_token(port: int, token: str) -> None:
    """Remove the token file of ``port`` when it still holds ``token`` (a later server's stays)."""
    path = token_path(port)
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == token:
                os.unlink(path)
    except OSError:
        pass


def headers_json(port: int) -> str:
    """``{"Authorization": "Bearer TOKEN"}`` for the server on ``port``, as a client's header helper prints it."""
    try:
        with open(token_path(port), encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError:
        token = ""
    if not token:
        raise UsageError(
            f"No 'sandbox mcp --http {port}' is serving here (or this process, inside a sandbox, cannot see "
            "its token); start it outside any sandbox first."
        )
    return json.dumps({"Authorization": f"Bearer {token}"})
