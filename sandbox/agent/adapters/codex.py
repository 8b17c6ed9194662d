"""Codex: no hooks of its own the sandbox reads; it records through ``sandbox mcp`` (the
README's Codex section), and :mod:`sandbox.agent.sessions` continues its sessions. What the registry
(:mod:`sandbox.agent.adapters`) needs to start it confined: its variables, model hosts and
configuration.

Started by ``sandbox run``, Codex keeps its state in the run (:func:`session_env`): its own
``CODEX_HOME`` (``<run dir>/agent-state/homes/codex``, :mod:`sandbox.agent.agenthome`), seeded from
yours at every session start; its sessions, logs, history and the skills it installs stay there, and
your ``~/.codex`` is read-only inside.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

TYPE_CHECKING = False  # no typing at run time: the registry imports this module on the hook's path

NAME = "codex"
PROGRAM = "codex"
ENV = ("OPENAI_*", "CODEX_*")
ENDPOINTS = ("api.openai.com", "chatgpt.com", "auth.openai.com")
BASE_URL = ("OPENAI_BASE_URL",)
#: What your own Codex obeys, read-only in the sandbox: its settings, instructions, prompts, and its
#: execution rules (``rules/default.rules``: commands it runs without asking, outside any sandbox).
CONFIG = ("~/.codex/config.toml", "~/.codex/AGENTS.md", "~/.codex/prompts/", "~/.codex/rules/")
PRIVATE: tuple[str, ...] = ()
#: Its state in your home, and its login (``codex login``: an API key or ChatGPT tokens).
STATE = ("~/.codex/",)
LOGIN = ("~/.codex/auth.json",)
LOGIN_KEYS: tuple[str, ...] = ()
#: The options ``resume --continue`` keeps from a command line recorded in another clone (a fetched
#: run), with the values each may take (``*``: any plain word; none: no value): model and output
#: choices, its plugins, apps, browser and computer use turned off, Codex's own sandbox and
#: approvals where they do not widen. ``-c`` overrides (any MCP server, any command), ``--enable``,
#: ``--disable`` of another feature (an approval, a guard), ``--add-dir``, ``--profile``,
#: ``--dangerously-bypass-approvals-and-sandbox`` and the like are dropped.
CARRY_OVER: dict[str, tuple[str, ...]] = {
    "-m": ("*",),
    "--model": ("*",),
    "--color": ("always", "never", "auto"),
    "--json": (),
    "--strict-config": (),
    "--skip-git-repo-check": (),
    # Only features whose disabling takes something away: others are approvals and guards
    # (``write_stdin_approval``, ``guardian_approval``, ``untrusted_as_tool_output``).
    "--disable": ("plugins", "apps", "browser_use", "computer_use"),
    "-s": ("read-only", "workspace-write"),
    "--sandbox": ("read-only", "workspace-write"),
    "-a": ("untrusted", "on-failure", "on-request"),
    "--ask-for-approval": ("untrusted", "on-failure", "on-request"),
}
#: Its sessions: found, forked and continued by :class:`sandbox.agent.sessions.Codex`.
SESSIONS = "Codex"


# -- the run's own Codex home (``sandbox run``) ---------------------------------------------------

#: The run's ``CODEX_HOME``, below the run's directory (:mod:`sandbox.agent.agenthome`).
HOME_NAME = "codex"
#: The user's Codex state the run's home stands in for: not writable in the sandbox.
REPLACES = ("~/.codex/",)
#: The user's configuration that Codex only reads, linked in (read-only) at every start; what the
#: run put in their place is removed first: instructions, custom prompts, execution rules (commands
#: it runs without asking), hooks.
LINKED = ("AGENTS.md", "AGENTS.override.md", "prompts", "rules", "hooks.json")
#: Where Codex finds skills: the user's, linked one by one, and the system skills Codex installs at
#: start (``.system``), made again each session: a skill the run planted is gone at the next start.
SKILLS = "skills"
#: The login (``codex login``: an API key or ChatGPT tokens), merged at every start like the others'
#: credentials, so a new login outside reaches the run and a refresh inside holds for the run.
MERGED = tuple(os.path.basename(p) for p in LOGIN)
#: Opaque files copied the first time.
COPIED = ("installation_id",)
#: The keys of ``config.toml`` the run may choose for itself (what Codex writes there as you use it: the
#: model and its effort, trusted folders, notices dismissed, the TUI's options): merged with yours. Every
#: other key is yours at every start, whatever the run wrote: Codex 0.171 reads well over a hundred
#: (MCP servers, ``notify``, hooks, providers, profiles, features, its sandbox, approvals and
#: permissions, ``openai_base_url`` that the login is sent to, instructions and prompt files), and a
#: list of the dangerous ones is never complete; what a confined Codex plants never runs in a later
#: session of the run (``--isolate off``).
RUN_CONFIG = (
    "model",
    "review_model",
    "model_reasoning_effort",
    "plan_mode_reasoning_effort",
    "model_reasoning_summary",
    "model_verbosity",
    "personality",
    "service_tier",
    "projects",
    "notice",
    "tui",
    "hide_agent_reasoning",
    "show_raw_agent_reasoning",
    "disable_paste_burst",
    "check_for_update_on_startup",
    "suppress_unstable_features_warning",
)
#: Profiles are files beside ``config.toml`` (``--profile NAME`` layers ``NAME.config.toml``): yours, linked.
PROFILE_SUFFIX = ".config.toml"


def config_home(run_dir: str) -> str:
    """The run's ``CODEX_HOME``: its ``config.toml``, login, and the sessions under ``sessions/``."""
    from sandbox.agent import agenthome

    return agenthome.home_of(run_dir, HOME_NAME)


def user_dir(environ: Mapping[str, str], home: str) -> str:
    """Your Codex home: ``CODEX_HOME`` or ``~/.codex`` (the CLI passes its environment)."""
    return environ.get("CODEX_HOME") or os.path.join(home, ".codex")


def session_homes(environ: Mapping[str, str], home: str, run_dir: str) -> list[str]:
    """Where its sessions may be: the run's own home first ('sandbox run' gives one, and a relaunch
    writes there), then yours (``CODEX_HOME`` or ``~/.codex``) for sessions of older runs or of a
    Codex you started yourself."""
    return [config_home(run_dir), user_dir(environ, home)]


def session_env(
    run_dir: str,
    worktree: str,
    user_home: str,
    command: str | None,
    *,
    user_codex: str | None = None,
    login: bool = True,
) -> dict[str, str]:
    """Seed the run's Codex home from yours (``user_codex``, else ``~/.codex``; see
    :mod:`sandbox.agent.agenthome`) and return the variable that points Codex at it.

    ``config.toml`` is merged with what the run saved (keys other than :data:`RUN_CONFIG` are yours),
    ``auth.json`` merged, instructions, prompts, rules, hooks, profiles and skills linked in. Your
    files are only read. ``command`` (a hook command) is unused: Codex records through ``sandbox mcp``.
    """
    from sandbox.agent import agenthome

    home = agenthome.make_home(run_dir, HOME_NAME)
    mine = user_codex or os.path.join(user_home, ".codex")

    def base(name: str) -> str:
        return agenthome.base_of(run_dir, HOME_NAME, name)

    config = "config.toml"
    agenthome.seed_toml(os.path.join(home, config), os.path.join(mine, config), base(config), kept=RUN_CONFIG)
    for name in MERGED if login else ():  # the login: not for a run from elsewhere the user said no to
        agenthome.seed_json(os.path.join(home, name), os.path.join(mine, name), base(name), create=False)
    for name in COPIED:
        agenthome.copy_missing(os.path.join(home, name), os.path.join(mine, name))
    agenthome.relink_config(home, mine, [*LINKED, *_profiles(home, mine)])
    _seed_skills(home, mine)
    return {"CODEX_HOME": home}


def _profiles(home: str, mine: str) -> list[str]:
    """The profile files in the run's home or yours (``NAME.config.toml``)."""
    found: set[str] = set()
    for where in (home, mine):
        with contextlib.suppress(OSError):
            found.update(n for n in os.listdir(where) if n.endswith(PROFILE_SUFFIX))
    return sorted(found)


def _seed_skills(home: str, mine: str) -> None:
    """The run's ``skills/`` made again: your skills linked in, nothing else (Codex installs its own)."""
    from sandbox.agent import agenthome

    skills = os.path.join(home, SKILLS)
    if os.path.lexists(skills):
        agenthome.remove_entry(skills)
    theirs = os.path.join(mine, SKILLS)
    try:
        names = [n for n in os.listdir(theirs) if n != ".system"]  # Codex's own, installed again inside
    except OSError:
        return
    with agenthome.pinned_dir(skills) as pinned:  # another Codex session of the run could swap it for a link
        agenthome.link_config(pinned, theirs, names)


def resume_args(run_dir: str, since: float) -> list[str] | None:
    """``resume ID`` for the newest session saved in the run since ``since``, else None."""
    import glob

    from sandbox.agent import adapters

    pattern = os.path.join(glob.escape(config_home(run_dir)), "sessions", "*", "*", "*", "rollout-*.jsonl")
    found = []
    for path in glob.glob(pattern):
        with contextlib.suppress(OSError):
            mtime = os.lstat(path).st_mtime
            if mtime >= since and not os.path.islink(path):
                found.append((mtime, path))
    if not found:
        return None
    name = os.path.basename(max(found)[1])[: -len(".jsonl")]
    session = name[-36:]  # rollout-<time>-<uuid>: the id is the UUID at the end
    return ["resume", session] if adapters.valid_session(session) and name[-37:-36] == "-" else None


if TYPE_CHECKING:  # mypy checks this module against the adapter contract
    from sandbox.agent.adapter import AgentAdapter
    from sandbox.agent.adapters import codex as _this

    _adapter: AgentAdapter = _this
