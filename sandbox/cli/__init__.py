"""The command-line interface: a thin click layer over the library.

Each command lives in its own module and is registered in :mod:`sandbox.cli.commands` (``COMMANDS``;
the click group itself is in :mod:`sandbox.cli.app`). Command modules import only click at module
level and the library inside their function, and this module imports nothing at all, so that fast
paths (``sandbox hook``) do not pay for imports they do not use.
"""

from __future__ import annotations

TYPE_CHECKING = False  # as in sandbox/__init__.py: no typing at run time (the hook's start)
if TYPE_CHECKING:
    from typing import Any


def main() -> None:
    """Console-script entry point. ``sandbox hook AGENT`` takes a path without click (it is on
    every tool call of an agent: see :mod:`sandbox.cli.hookrun`), and so do ``sandbox --help`` and
    ``sandbox path [RUN]`` where they can (:mod:`sandbox.cli.quick`); ``sandbox start`` begins its
    checkout before click is imported (:mod:`sandbox.cli.earlystart`)."""
    import sys

    argv = sys.argv[1:]
    if argv[:1] == ["hook"]:
        from sandbox.cli.hookrun import fast_main

        code = fast_main(argv)
    else:
        from sandbox.cli.quick import quick_main

        code = quick_main(argv)
    if code is not None:
        sys.exit(code)
    if "start" in argv[:4]:
        from sandbox.cli import earlystart

        try:
            earlystart.begin(argv)  # its checkout runs while click, pygit2 and pydantic are imported
        except KeyboardInterrupt:
            earlystart.abandon_unused()
            sys.stderr.write("sandbox: interrupted.\n")
            sys.exit(130)
    try:
        from sandbox.store.gitlib import install

        install()  # the first `import pygit2`, if any, parses no CA bundle (see the module)
        from sandbox.cli.app import cli
        from sandbox.cli.edge import run_main

        run_main(cli)
    finally:
        if "start" in argv[:4]:
            from sandbox.cli import earlystart

            earlystart.abandon_unused()


def __getattr__(name: str) -> Any:
    # ``from sandbox.cli import cli``: the click group, built on first use (app.py).
    if name == "cli":
        from sandbox.cli.app import cli

        return cli
    if name == "COMMANDS":
        from sandbox.cli.commands import COMMANDS

        return COMMANDS
    raise AttributeError(f"module 'sandbox.cli' has no attribute {name!r}")
