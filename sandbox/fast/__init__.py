"""The standard-library fast path: git and the run's sealed state read without pygit2 or pydantic.

``sandbox list``, ``status``, ``log`` and ``path`` and the hook forwarder must start in a few tens
of milliseconds, and importing pygit2, pydantic and the models alone costs several times that. What
they need is read here with the standard library only: refs and objects (gitread, on packread), the
commit walk (revwalk), the agent's own git (agentgit), the sealed fold cache (foldcache) and the rows
built from a fold (views); with them, git's pathspecs (pathspec: pygit2 binds none) and one counted
inotify instance for the host (inotify: watchdog takes an instance per tree). Each port is measured
against its pygit2 (or watchdog, or git) counterpart in ``bench/cases/ports.py``.

One import-linter contract (pyproject.toml) keeps pygit2, pydantic, click, watchdog, the models and
the run out of this package. It sits between ``sandbox.run`` and ``sandbox.store``: it reads the
store's layout and durable-file helpers and nothing above. Keep this file empty of imports.
"""
