"""Claude Code hooks as generic hook events, and Claude Code's answers to the sandbox's decisions.

Events (verified against Claude Code 2.1.328, see hooks/claude-code/README.md):

* ``PreToolUse`` → call start; ``PostToolUse`` → finish ``succeeded``; ``PostToolUseFailure`` →
  finish ``failed`` (``error`` is multi-line: the ledger keeps its first line and the rest beside it).
* ``PermissionDenied`` → refused: ``not_run`` with Claude Code's reason (sent when its automatic
  permission check refuses a call, e.g. in ``plan`` mode).
* ``Stop``, ``StopFailure``, ``SessionEnd``, ``UserPromptSubmit`` → settle: Claude Code moved on,
  so a call of this session that got a PreToolUse but no PostToolUse/PostToolUseFailure never ran
  (its own permission check refused it, another hook blocked it, or the user said no: Claude Code
  sends no event for that) and ends ``not_run``, unless it changed files or the run's transcript
  says it had started (:func:`call_evidence`: a Bash stopped with Esc has no PostToolUse, yet it
  ran): then it is ``interrupted``.

Payload fields used: ``session_id``, ``cwd``, ``hook_event_name``, ``tool_name``, ``tool_input``,
``tool_use_id`` (the call id: a call's start and finish pair exactly), ``tool_response``,
``error``, ``is_interrupt``, ``permission_mode``, ``reason`` (SessionEnd).

Answers (:func:`respond`): a denied call gets PreToolUse's decision JSON ``permissionDecision:
"deny"`` with the reason (shown to the model; the tool does not run, in every permission mode).
Otherwise the hook says nothing, so Claude Code asks or allows as it does outside the sandbox; only
with ``hooks.allow_edits = true`` does an edit the sandbox vouches for get ``"allow"``, in the
``default`` and ``acceptEdits`` modes (never in ``plan``: the user asked for no edits). A hook exit
1 is a non-blocking error, exit 2 blocks (``--strict``).

Started by ``sandbox run``, Claude Code keeps its state in the run (:func:`session_env`): its own
``CLAUDE_CONFIG_DIR`` with the sandbox's hooks in its user settings, transcripts included.
"""

from __future__ import annotations

import os

from sandbox.agent.hookproto import HookEvent, HookInputError, Outcome, classify_tool, settle_event
from sandbox.fast import fastjson

TYPE_CHECKING = False  # no typing at run time: this module is on the hook's fast path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

NAME = "claude-code"
SETTINGS_PATH = ".claude/settings.local.json"
#: The family name of its command, the variables it needs inside, its model hosts and the
#: variable that moves them, its configuration kept read-only inside, its state each run copies
#: (the registry: :mod:`sandbox.agent.adapters`).
PROGRAM = "claude"
#: The help of ``sandbox hook claude-code``.
HOOK_HELP = "Claude Code's PreToolUse / PostToolUse / PostToolUseFailure / Stop / SessionEnd ... hook."
ENV = ("ANTHROPIC_*", "CLAUDE_*", "CLAUDECODE", "IS_SANDBOX", "DISABLE_*", "MCP_*", "BASH_*_TIMEOUT_MS")
ENDPOINTS = ("api.anthropic.com", "console.anthropic.com")
BASE_URL = ("ANTHROPIC_BASE_URL",)
CONFIG = (
    "~/.claude/settings.json",
    "~/.claude/settings.local.json",
    "~/.claude/CLAUDE.md",
    "~/.claude/commands/",
    "~/.claude/agents/",
    "~/.claude/skills/",
    "~/.claude/hooks/",
    "~/.claude/plugins/",
    "~/.claude/output-styles/",
)
PRIVATE = ("~/.claude.json",)
#: Its state in your home, writable for it when it runs without a run home (``~/.local/state/claude``:
#: the native installer's locks); its login (``/login``), and the keys of ``.claude.json`` that hold
#: an account, an API key or a token (the MCP servers' headers).
STATE = ("~/.claude/", "~/.claude.json", "~/.local/state/claude/")
LOGIN = ("~/.claude/.credentials.json",)
LOGIN_KEYS = ("oauthAccount", "primaryApiKey", "customApiKeyResponses", "mcpServers", "projects/*/mcpServers")
#: The options ``resume --continue`` keeps from a command line recorded in another clone (a fetched
#: run: anyone could have written it), each with the values it may take (``*``: any plain word; none:
#: an option without a value). Model and output choices only: everything that loads code or settings
#: (``--mcp-config``, ``--settings``, ``--plugin-dir``, ``--agents``), widens what the agent may do or
#: see (``--dangerously-skip-permissions``, ``--add-dir``, ``--allowedTools``) or writes a file
#: (``--debug-file``) is dropped; the user adds what they trust after ``--``.
CARRY_OVER: dict[str, tuple[str, ...]] = {
    "-p": (),
    "--print": (),
    "--verbose": (),
    "--model": ("*",),
    "--fallback-model": ("*",),
    "--effort": ("*",),
    "--max-budget-usd": ("*",),
    "--output-format": ("text", "json", "stream-json"),
    "--input-format": ("text", "stream-json"),
    "--include-partial-messages": (),
    "--permission-mode": ("default", "acceptEdits", "plan", "dontAsk"),
}
#: Added when ``resume --continue`` relaunches a run another clone recorded: the worktree's own
#: settings (``.claude/settings*.json``: hooks, permissions, environment) and MCP servers (``.mcp.json``)
#: are not loaded. The sandbox's hooks are in the run's own user settings (``CLAUDE_CONFIG_DIR``), which stay.
UNTRUSTED_WORKTREE = ("--setting-sources", "user", "--strict-mcp-config")
MARKER = "sandbox hook claude-code"
SUCCESS_STDOUT = ""
EVENTS = {"PreToolUse": ("start", "succeeded"), "PostToolUse": ("finish", "succeeded"),
          "PostToolUseFailure": ("finish", "failed")}  # fmt: skip
#: Events after which no call of the session is running any more, and why its open calls never ran.
SETTLE = {
    "Stop": "Claude Code ended its turn without running the call (its permission check or a hook refused it, "
    "or the user said no).",
    "StopFailure": "Claude Code's turn ended on an error before the call ran.",
    "SessionEnd": "The Claude Code session ended ({reason}) before the call ran.",
    "UserPromptSubmit": "Claude Code took a new prompt without running the call (it was refused or cancelled).",
}
#: Permission modes in which the sandbox may answer "allow" for an edit inside the worktree.
ALLOW_MODES = ("default", "acceptEdits")

#: File-writing tools and the tool_input field holding the path they write.
WRITE_TOOLS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"}
READ_TOOLS = {"Read", "Glob", "Grep", "LS", "NotebookRead", "TodoRead", "TodoWrite", "BashOutput", "ExitPlanMode",
              "ToolSearch", "ListAgents"}  # fmt: skip
EXTERNAL_TOOLS = {"WebFetch", "WebSearch"}
COMMAND_TOOLS = {"Bash"}


def classify(tool: str) -> str:
    """The kind of call a Claude Code tool makes."""
    return classify_tool(tool, WRITE_TOOLS, COMMAND_TOOLS, READ_TOOLS, EXTERNAL_TOOLS)


def to_event(payload: Any) -> HookEvent | None:
    """The generic event for a Claude Code hook payload (None for events not about tool calls)."""
    if not isinstance(payload, dict):
        raise HookInputError("The Claude Code hook payload is not a JSON object; nothing recorded.")
    name = payload.get("hook_event_name")
    if name in SETTLE:
        return settle_event(payload, name, SETTLE[name], NAME)
    if name == "PermissionDenied":
        denied = _tool_event(payload, name, "refused", "failed")
        denied.error = f"Claude Code's permission check refused it: {str(payload.get('reason') or 'no reason given')}"
        denied.paths = []
        return denied
    if name not in EVENTS:
        return None
    phase, status = EVENTS[name]
    return _tool_event(payload, name, phase, status)


def _tool_event(payload: Mapping[str, object], name: str, phase: str, status: str) -> HookEvent:
    session_id = payload.get("session_id")
    session = session_id if isinstance(session_id, str) else None
    tool, call_id, cwd = payload.get("tool_name"), payload.get("tool_use_id"), payload.get("cwd")
    for key, value in (("tool_name", tool), ("tool_use_id", call_id), ("cwd", cwd)):
        if not isinstance(value, str) or not value:
            raise HookInputError(f"The {name} payload has no '{key}'; nothing recorded.")
    assert isinstance(tool, str) and isinstance(call_id, str) and isinstance(cwd, str)
    if len(call_id) > 200:
        raise HookInputError("The payload's tool_use_id is longer than 200 characters; nothing recorded.")
    tool_input = payload.get("tool_input") or {}
    if not isinstance(tool_input, dict):
        raise HookInputError(f"The {name} payload's tool_input is not an object; nothing recorded.")
    kind = classify(tool)
    paths: list[str] = []
    idempotency = replay = None
    if kind == "write":
        target = tool_input.get(WRITE_TOOLS[tool])
        if isinstance(target, str) and target:
            paths = [target]
        if tool == "Write":  # the whole content is in the input: writing it again is the same
            idempotency, replay = "idempotent", "auto"
    result: Any = None
    error = None
    if name == "PostToolUse":
        result = payload.get("tool_response")
    elif name == "PostToolUseFailure":
        error = str(payload.get("error") or "the tool failed")
        interrupted = bool(payload.get("is_interrupt", False))
        if interrupted:
            error = f"interrupted by the user: {error}"
        result = {"is_interrupt": interrupted}
    ran = payload.get("duration_ms")  # how long the tool itself ran (after the permission prompt)
    ran_ms = int(ran) if isinstance(ran, (int, float)) and not isinstance(ran, bool) and 0 <= ran < 1e12 else None
    return HookEvent(
        phase=phase,
        cwd=cwd,
        tool=tool,
        call_id=call_id,
        input=tool_input,
        kind=kind,
        paths=paths,
        status=status,
        error=error,
        result=result,
        idempotency=idempotency,
        replay=replay,
        agent=NAME,
        agent_session=session,
        interrupted=name == "PostToolUseFailure" and bool(payload.get("is_interrupt", False)),
        ran_ms=ran_ms if phase == "finish" else None,
    )


def respond(outcome: Outcome, payload: Any) -> tuple[str, int]:
    """What the hook prints on stdout and its exit code for a recorded event (``outcome.ok``).

    A deny is PreToolUse's decision JSON (exit 0): Claude Code refuses the call and tells the
    model the reason, whatever its permission mode. An allow is given only in :data:`ALLOW_MODES`.
    """
    if outcome.decision is None:
        return "", 0
    mode = payload.get("permission_mode") if isinstance(payload, dict) else None
    if outcome.decision == "allow" and mode not in ALLOW_MODES:
        return "", 0
    answer = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": outcome.decision,
            "permissionDecisionReason": outcome.reason,
        }
    }
    return fastjson.dumps(answer), 0


def hook_settings(command: str) -> dict[str, list[Any]]:
    """The ``hooks`` entries of Claude Code settings that call ``command`` for every tool and turn end."""
    group = {"matcher": "*", "hooks": [{"type": "command", "command": command, "timeout": 60}]}
    plain = {"hooks": [{"type": "command", "command": command, "timeout": 60}]}  # events without a matcher
    tools = [*EVENTS, "PermissionDenied"]
    return {**{event: [group] for event in tools}, **{event: [plain] for event in SETTLE}}


# -- the run's own Claude Code home (``sandbox run``) ---------------------------------------------

#: The run's Claude Code config home, below the run's directory (:mod:`sandbox.agent.agenthome`).
HOME_NAME = "claude"
#: The user's Claude Code state a session's run home stands in for: not writable in the sandbox.
#: (``~/.local/state/claude``, the native installer's locks, stays writable where it exists.)
REPLACES = ("~/.claude/", "~/.claude.json")
#: The user's configuration in ``~/.claude`` that Claude Code only reads: linked in, read-only; what the
#: run put in their place (a skill, an agent, a command of its own) is removed at every start.
LINKED = ("CLAUDE.md", "rules", "commands", "agents", "skills", "output-styles", "hooks")


#: Settings that run commands or steer what runs (hooks, helpers, variables, MCP servers): in the run's
#: home they are always yours (and the sandbox's hooks), whatever the agent wrote there, so that what a
#: confined agent plants never runs in a later session of the run (``--isolate off``). The helpers are
#: Claude Code 2.1.328's own list of settings that run a command; plugins bring hooks and MCP and LSP
#: servers; ``sandbox`` names the programs of Claude Code's own sandbox (``bwrapPath``, ``ripgrep``).
GUARDED_SETTINGS = (
    "hooks",
    "disableAllHooks",
    "statusLine",
    "subagentStatusLine",
    "fileSuggestion",
    "apiKeyHelper",
    "awsAuthRefresh",
    "awsCredentialExport",
    "gcpAuthRefresh",
    "otelHeadersHelper",
    "proxyAuthHelper",
    "processWrapper",
    "policyHelpers",
    "env",
    "mcpServers",
    "enabledMcpjsonServers",
    "enableAllProjectMcpServers",
    "enabledPlugins",
    "extraKnownMarketplaces",
    "pluginConfigs",
    "prependPlugins",
    "appendPlugins",
    "autoMode",
    "sandbox",
    "permissions",  # allow rules, bypass mode, more directories (its "don't ask again" goes to the worktree)
)
#: The same in ``.claude.json``: its MCP servers and tools allowed without asking, for you and per project.
GUARDED_STATE = (
    "mcpServers",
    "projects/*/allowedTools",
    "projects/*/mcpServers",
    "projects/*/enabledMcpjsonServers",
    "projects/*/enableAllProjectMcpServers",
)


def config_home(run_dir: str) -> str:
    """The run's ``CLAUDE_CONFIG_DIR``: its ``.claude.json``, settings, credentials and, under
    ``projects/<cwd>/<session>.jsonl``, the session transcripts (what ``claude --resume`` reads)."""
    from sandbox.agent import agenthome

    return agenthome.home_of(run_dir, HOME_NAME)


#: Its conversations: found, forked and continued by :class:`sandbox.agent.sessions.ClaudeCode`.
SESSIONS = "ClaudeCode"


def session_homes(environ: Mapping[str, str], home: str, run_dir: str) -> list[str]:
    """Where its sessions may be: the run's own home first ('sandbox run' gives one, and a relaunch
    writes there, never into yours), then yours (``CLAUDE_CONFIG_DIR`` or ``~/.claude``) for older runs."""
    return [config_home(run_dir), environ.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")]


def transcripts_dir(run_dir: str) -> str:
    """Where the run's Claude Code sessions keep their transcripts (one folder per working directory)."""
    return os.path.join(config_home(run_dir), "projects")


def session_env(
    run_dir: str, worktree: str, user_home: str, command: str | None, *, login: bool = True
) -> dict[str, str]:
    """Seed the run's config home from the user's (see :mod:`sandbox.agent.agenthome`) with the
    sandbox's hooks in its user settings, and return the variables that point Claude Code at it.
    ``login``: the user's credentials are merged in too (not for a run from elsewhere the user said no to).

    ``.claude.json`` (trust, onboarding, approved key, ``/config``), ``settings.json`` and the
    credentials are merged with what the run saved earlier. The user's files are
    only read. The worktree's ``.claude/settings.local.json`` is left to Claude Code (its "don't ask
    again" rules for this run).
    """
    from sandbox.agent import adapters, agenthome

    home = agenthome.make_home(run_dir, HOME_NAME)
    user_dir = os.path.join(user_home, ".claude")

    def with_hooks(settings: dict[str, object]) -> dict[str, object]:
        if command is None:  # --hooks none: the agent's home without the sandbox's hooks
            return adapters.remove_ours(settings, MARKER)
        return adapters.merge_settings(settings, hook_settings(command), MARKER)

    def base(name: str) -> str:
        return agenthome.base_of(run_dir, HOME_NAME, name)

    agenthome.seed_json(
        os.path.join(home, ".claude.json"),
        os.path.join(user_home, ".claude.json"),
        base(".claude.json"),
        guarded=GUARDED_STATE,
    )
    agenthome.seed_json(
        os.path.join(home, "settings.json"),
        os.path.join(user_dir, "settings.json"),
        base("settings.json"),
        with_hooks,
        guarded=GUARDED_SETTINGS,
    )
    if login:
        for name in (os.path.basename(p) for p in LOGIN):  # a new login outside reaches the run too
            agenthome.seed_json(os.path.join(home, name), os.path.join(user_dir, name), base(name), create=False)
    agenthome.relink_config(home, user_dir, LINKED)  # what the agent put in their place is gone
    return {"CLAUDE_CONFIG_DIR": home}


def resume_args(run_dir: str, since: float) -> list[str] | None:
    """The arguments that resume the newest session saved since ``since`` (``--resume ID``), or None."""
    from sandbox.agent import adapters, agenthome

    found = agenthome.newest(transcripts_dir(run_dir), ".jsonl", since)
    session = os.path.basename(found)[: -len(".jsonl")] if found else ""
    if not adapters.valid_session(session):  # a name the agent made up is no session id
        return None
    return ["--resume", session]


# -- what the run's transcript says about a call (evidence for calls left without their result) -----

#: How much of a transcript's end is read for a call's result: the hook stays fast on a long
#: conversation, and the result of a call still open is among the last records.
TAIL_BYTES = 1 << 20
#: The ``toolDenialKind`` of a tool result Claude Code made up for a call the user stopped: with
#: ``toolDenialBeforeRun: true`` it never started (refused at its prompt), without it the tool had
#: started (measured with 2.1.328: Esc during a running Bash gives "user-rejected" and no
#: ``toolDenialBeforeRun``; Esc at the permission prompt gives both). Other kinds (a permission rule,
#: a call still waiting when the conversation moved on) say it never ran.
#: Claude Code 2.1.328's ``toolUseResult`` for a Bash the user stopped with Esc while it ran (with
#: ``toolDenialKind: user-rejected`` and no ``toolDenialBeforeRun``). A call its permission check refused
#: without asking carries the same kind, but its result is the refusal's words ("Error: Claude requested
#: permissions to write to X, but you haven't granted it yet.", "Error: Cannot write to X while in plan
#: mode.", measured): that one never started.
STOPPED_WHILE_RUNNING = "User rejected tool use"


def call_evidence(run_dir: str, session: str | None, call_id: str) -> str | None:
    """What the run's own transcript of ``session`` says about tool use ``call_id``.

    ``"ran"``: Claude Code recorded the tool's own result (``toolUseResult`` is the tool's output
    object), or a result for a call stopped after it started (see :data:`STOPPED_WHILE_RUNNING`: a Bash
    stopped with Esc); ``"rejected"``: it says the call never started (``toolDenialBeforeRun``);
    None: no word (no transcript, no result for it, or one that does not say). Only transcripts
    inside the run's Claude Code home are read (never a path a payload names: the agent could point
    it anywhere), through no symlink, and only their last :data:`TAIL_BYTES`.
    """
    from sandbox.agent import adapters
    from sandbox.store import beneath

    if not session or not adapters.valid_session(session):
        return None
    home = config_home(run_dir)
    needle = fastjson.dumps(call_id).encode()
    said: str | None = None
    try:
        root = beneath.open_root(home)
    except OSError:
        return None
    try:
        try:
            folders = sorted(os.listdir(os.path.join(home, "projects")))
        except OSError:
            return None
        for folder in folders:
            tail = _tail(root, f"projects/{folder}/{session}.jsonl")
            for line in tail.split(b"\n"):
                if needle in line:
                    said = _result_says(line, call_id) or said
    finally:
        os.close(root)
    return said


def _tail(root: int, rel: str) -> bytes:
    """The last :data:`TAIL_BYTES` of the regular file ``rel`` beneath ``root`` (b"" when unreadable)."""
    import stat

    from sandbox.store import beneath

    try:
        fd = beneath.open_beneath(root, rel, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang the hook
    except OSError:
        return b""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b""
        start = max(0, st.st_size - TAIL_BYTES)
        data = os.pread(fd, TAIL_BYTES, start)
    except OSError:
        return b""
    finally:
        os.close(fd)
    return data if start == 0 else data.partition(b"\n")[2]  # the first line was cut: not a record


def _result_says(line: bytes, call_id: str) -> str | None:
    """ "ran" / "rejected" when ``line`` is the tool result of ``call_id`` that says so, else None."""
    try:
        record = fastjson.loads(line)
    except ValueError:
        return None
    message = record.get("message") if isinstance(record, dict) and record.get("type") == "user" else None
    content = message.get("content") if isinstance(message, dict) else None
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] if content else []
    if not isinstance(content, list) or [b.get("tool_use_id") for b in results] != [call_id]:
        return None  # not its result, or one record for several results: whose toolUseResult is unclear
    if record.get("toolDenialBeforeRun") is True:
        return "rejected"
    said = record.get("toolUseResult")
    if isinstance(said, dict) or record.get("toolDenialKind") == "interrupted":
        return "ran"
    if record.get("toolDenialKind") == "user-rejected" and said == STOPPED_WHILE_RUNNING:
        return "ran"
    if isinstance(said, str) and said.startswith("Error: "):
        return "rejected"  # refused by its permission check (not allowed, plan mode, ...): never started
    return None


if TYPE_CHECKING:  # mypy checks this module against the adapter contract
    from sandbox.agent.adapter import HookAdapter
    from sandbox.agent.adapters import claude_code as _this

    _adapter: HookAdapter = _this
