"""What an agent adapter provides: the contract every module of :mod:`sandbox.agent.adapters` keeps.

An adapter is a module, not a class (the hook's fast path imports one module and nothing else), and
mypy checks each module against :class:`AgentAdapter` (and :class:`HookAdapter` for an agent whose
hooks the sandbox records) with two lines at its end::

    if TYPE_CHECKING:
        from sandbox.agent.adapters import codex as _this
        from sandbox.agent.adapter import AgentAdapter

        _adapter: AgentAdapter = _this

So a new agent is one module: every per-agent fact the sandbox uses elsewhere (its variables, the
state and login files in your home, its configuration kept read-only, its run home, its sessions) is
read from the registry, never from a list kept beside it. Members are read-only properties so that a
module's tuples (``("a", "b")`` is a ``tuple[str, str]``) conform. Imported only by mypy and tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from sandbox.agent.hookproto import HookEvent


@runtime_checkable
class AgentAdapter(Protocol):
    """An agent the sandbox knows: how it is started, confined, given a home in the run and resumed."""

    @property
    def NAME(self) -> str:
        """Its adapter name (``claude-code``): the module's file name, ``-`` for ``_``."""

    @property
    def PROGRAM(self) -> str:
        """The family name of its command (``claude`` for ``claude``, ``claude-2.1``)."""

    @property
    def ENV(self) -> tuple[str, ...]:
        """The environment variables it needs inside the sandbox (fnmatch patterns)."""

    @property
    def ENDPOINTS(self) -> tuple[str, ...]:
        """Its model hosts: the allowlist of ``sandbox run --network allow``."""

    @property
    def BASE_URL(self) -> tuple[str, ...]:
        """The variables that move its model hosts (their host joins the allowlist)."""

    @property
    def STATE(self) -> tuple[str, ...]:
        """Its state in your home (``~/`` paths, a directory ending in ``/``): writable for it alone when
        it runs without a run home of its own (:data:`sandbox.agent.agentstate.DEFAULT_AGENT_STATE`)."""

    @property
    def LOGIN(self) -> tuple[str, ...]:
        """Its login files in your home (``~/`` paths): seeded into its run home, seen by no one else."""

    @property
    def LOGIN_KEYS(self) -> tuple[str, ...]:
        """The keys of its state file that hold a login or a token (``a/*/b`` for nested keys)."""

    @property
    def CONFIG(self) -> tuple[str, ...]:
        """Its configuration in your home, kept read-only inside (hooks, MCP servers, instructions)."""

    @property
    def PRIVATE(self) -> tuple[str, ...]:
        """Its state files each run writes a copy of instead of yours."""

    @property
    def HOME_NAME(self) -> str:
        """The name of its home in the run (``claude``)."""

    @property
    def REPLACES(self) -> tuple[str, ...]:
        """Your state its run home stands in for: not writable in the sandbox."""

    @property
    def LINKED(self) -> tuple[str, ...]:
        """Your configuration it only reads, linked into its run home read-only."""

    @property
    def SESSIONS(self) -> str:
        """The class of :mod:`sandbox.agent.sessions` that finds, forks and continues its conversations."""

    @property
    def CARRY_OVER(self) -> Mapping[str, tuple[str, ...]]:
        """The options of a fetched run's command line ``resume --continue`` keeps, with their values."""

    def session_homes(self, environ: Mapping[str, str], home: str, run_dir: str) -> list[str]:
        """The configuration homes its sessions may be in, the run's own first."""

    def session_env(
        self, run_dir: str, worktree: str, user_home: str, command: str | None, *, login: bool = True
    ) -> dict[str, str]:
        """Seed its run home (with the sandbox's hooks when ``command``; with your login unless ``login``
        is False: a run from elsewhere you said no to) and the variables that point it there."""

    def resume_args(self, run_dir: str, since: float) -> list[str] | None:
        """The arguments that resume its newest session saved since ``since``, or None."""


@runtime_checkable
class HookAdapter(AgentAdapter, Protocol):
    """An agent whose hooks the sandbox records (``sandbox hook NAME``)."""

    @property
    def SETTINGS_PATH(self) -> str:
        """Its local settings file, relative to the worktree (where ``hooks install`` writes)."""

    @property
    def MARKER(self) -> str:
        """What marks a hook entry of its settings as the sandbox's."""

    @property
    def SUCCESS_STDOUT(self) -> str:
        """What the hook prints when all went well."""

    @property
    def HOOK_HELP(self) -> str:
        """The help of ``sandbox hook NAME``."""

    def to_event(self, payload: Any) -> HookEvent | None:
        """A hook payload as a generic event, or None for an event the sandbox does not record."""

    def hook_settings(self, command: str) -> dict[str, list[Any]]:
        """The settings entries that call the hook ``command``."""

    def classify(self, tool: str) -> str:
        """The kind of call a tool makes (``write``, ``read``, ``command``, ``external``, ``unknown``)."""
