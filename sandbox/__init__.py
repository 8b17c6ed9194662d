"""sandbox: run coding agents in isolated git worktrees without putting the user's work at risk.

The library never prints, exits or reads the environment; the CLI in :mod:`sandbox.cli` does.
This module stays free of heavy imports so that ``sandbox hook`` starts fast; the two entry points
below import what they need when called.

Example::

    import sandbox

    run = sandbox.start_run("/path/to/repo", label="fix-tests")
    with run.tool_call("write_file", {"path": "src/a.py"}, idempotency="idempotent", replay="auto") as call:
        call.write("src/a.py", "print('hi')\\n")
    print(run.entries()[-1].files)
"""

from __future__ import annotations

#: ``typing`` is not imported at run time: it costs every hook ~5 ms (mypy reads this name as typing's).
TYPE_CHECKING = False

if TYPE_CHECKING:
    from sandbox.run.run import Run

__version__ = "0.1.0"
__all__ = ["open_run", "start_run", "__version__"]


def start_run(path: str, label: str | None = None, data_dir: str | None = None) -> Run:
    """Snapshot the working tree containing ``path`` into a new run and return it.

    ``data_dir`` is where the run gets its home (worktree and own git directory), keyed by
    repository below it; the CLI uses ``$XDG_DATA_HOME/sandbox``
    (:func:`sandbox.store.layout.user_data_root`). Without it the home is made under the repository's
    ``.git/sandbox/homes``, which some agents refuse to edit (Claude Code treats ``.git`` as sensitive).
    """
    from sandbox.errors import SandboxError
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, workdir, cwd_run = Project.discover(path, data_dir)
    if workdir is None:
        raise SandboxError(f"{path} is inside the worktree of run {cwd_run}; start runs from your own repository.")
    return Run.start(project, workdir, label=label)


def open_run(path: str, run_id: str | None = None) -> Run:
    """Open a run of the repository containing ``path``: ``run_id`` is an id, a label or a unique id
    prefix (see :mod:`sandbox.run.names`), or omitted when ``path`` is inside the run's worktree or
    the repository has a single run."""
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, _workdir, cwd_run = Project.discover(path)
    return Run.open(project, resolve_run(project, run_id, cwd_run))
