"""The git a ``search`` of ``sandbox mcp`` runs in a run's worktree: where the model's commands run, and
never for longer than a deadline.

That git (``git grep -l``, else ``ls-files``) opens by name what the model wrote: the files it greps,
every ``.gitignore`` and ``.gitattributes`` (is a file binary?), the git dir's ``info`` files, and the
exclude and attributes files a config names. So it runs in the run's sandbox when the server confines
the model's commands (it then reads what the model's own git reads: the agent's global git config,
nothing of your home), and is killed after :data:`SEARCH_DEADLINE` seconds either way. A file it would
block on (a FIFO) is refused at once when it is there before git starts (:func:`blocking_file`); one
swapped in while git reads stops that search at the deadline, never the server.
"""

from __future__ import annotations

import subprocess
import tempfile

from sandbox.confine import spawn
from sandbox.errors import UsageError
from sandbox.mcp.state import kill
from sandbox.run.run import Run

#: Seconds a search's git may read the worktree (a large tree's grep takes a few).
SEARCH_DEADLINE = 60.0


def confinement(run: Run, isolation: spawn.Isolation | None) -> tuple[spawn.Isolation, spawn.Policy] | None:
    """(isolation, policy) the search's git runs under for ``run``: the model's commands' (None: they are
    not confined, by the user's choice or because the server is inside a sandbox already).
    :class:`~sandbox.confine.spawn.ConfinementError` when it was asked for and cannot be had."""
    if isolation is None or not isolation.enabled:
        return None
    from sandbox.confine.policy import policy_for_run

    spawn.check(isolation)
    return isolation, policy_for_run(isolation, run)


def blocking_file(run: Run, confined: tuple[spawn.Isolation, spawn.Policy] | None) -> str | None:
    """The first file the search's git would read that is not plain (relative to the worktree where it
    lies there), or None: the repository's, every rule file of the tree, and the agent's global config
    (with what it names) when confined."""
    from sandbox.store import gitfiles

    if not gitfiles.repository_plain(run.worktree):
        return ".git"
    agent_config = confined[1].git_config if confined is not None else None
    if agent_config is not None and not gitfiles.config_files_plain(agent_config):
        return f"a file the agent's git config names (or that config, {agent_config})"
    return gitfiles.tree_rules_plain(run.worktree)


def run_git(
    run: Run, confined: tuple[spawn.Isolation, spawn.Policy] | None, args: list[str], deadline: float
) -> tuple[int, bytes, bytes]:
    """(exit code, standard output, standard error) of ``git ARGS`` in the run's worktree, confined as
    given; :class:`UsageError` once it ran ``deadline`` seconds (it is killed, with all it started)."""
    from sandbox.store import gitcli

    argv, env = gitcli.command(args)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        box = None
        if confined is not None:
            own = gitcli.pinned_env()  # back after the policy's filter of the environment
            box = spawn.spawn(
                *confined, argv, run.worktree, env=env, own_env=own, stdin=subprocess.DEVNULL, stdout=out, stderr=err
            )
            proc = box.proc
        else:
            proc = subprocess.Popen(
                argv,
                cwd=run.worktree,
                env=env,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        try:
            proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            kill(proc, box)
            if box is not None:
                box.discard()  # its cgroups removed, the thread that started it let go
            raise UsageError(
                f"The search was stopped after {deadline:g} s: git did not finish reading the worktree (a rule "
                "file that is a FIFO, or a very large tree); narrow the path or glob."
            ) from None
        code = box.wait() if box is not None else proc.returncode
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read()
