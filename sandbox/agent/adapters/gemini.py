"""Gemini CLI hooks (BeforeTool, AfterTool) as generic hook events, and what a run needs to host it.

Payload fields used (Gemini CLI hooks reference, docs/hooks/reference.md, checked against the real
0.61 binary): ``session_id``, ``cwd``, ``hook_event_name``, ``tool_name``, ``tool_input``, and on
AfterTool ``tool_response`` (``llmContent``, ``returnDisplay``, optional ``error``). Gemini CLI gives
a hook no call id, so a BeforeTool gets a fresh id prefixed by the session, and its AfterTool is
paired with the oldest started call of that session with the same tool and input (Gemini passes
the same ``tool_input`` object to both).

A shell command that exits non-zero is *not* an error for Gemini: ``tool_response`` has no
``error`` and the exit code is only in the text the model gets (``Output: ...`` then ``Exit Code:
N`` among a fixed set of trailing sections), so :func:`shell_outcome` reads it from there.

Exit codes Gemini CLI gives meaning to: 0 success, stdout parsed as JSON (so ``{}`` is printed, or
``{"decision": "deny", "reason": ...}`` to refuse the tool: the reason goes to the model as the
tool's error and the turn continues); 2 blocks the tool (stderr is the reason); any other code is
a warning and the CLI continues.

Trust: Gemini CLI 0.61 runs headless only in a folder it trusts (else it exits 55), and loads a
project's hooks only there. :func:`agent_env` writes a trusted-folders file naming just the run's
worktree into the run's directory and points the agent's ``GEMINI_CLI_TRUSTED_FOLDERS_PATH`` at it:
the user's own ``~/.gemini/trustedFolders.json`` is neither read nor changed for that process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sandbox.agent.hookproto import HookEvent, HookInputError, classify_tool, settle_event

NAME = "gemini"
SETTINGS_PATH = ".gemini/settings.json"
#: Its command, variables, model hosts, configuration (the registry: :mod:`sandbox.agent.adapters`).
PROGRAM = "gemini"
#: The help of ``sandbox hook gemini``.
HOOK_HELP = "Gemini CLI's BeforeTool / AfterTool hook."
#: The variables Gemini CLI 0.61 reads (its bundle's ``process.env``), not the whole ``GOOGLE_*`` family
#: (a Google Cloud user's other credentials) nor its IDE companion's port and token.
ENV = (
    "GEMINI_API_KEY",
    "GEMINI_API_KEY_AUTH_MECHANISM",
    "GEMINI_BASE_URL",
    "GEMINI_MODEL",
    "GEMINI_DEFAULT_AUTH_TYPE",
    "GEMINI_SYSTEM_MD",
    "GEMINI_WRITE_SYSTEM_MD",
    "GEMINI_SANDBOX",
    "GEMINI_EXP",
    "GEMINI_DEBUG_LOG_FILE",
    "GEMINI_FORCE_FILE_STORAGE",
    "GEMINI_FORCE_ENCRYPTED_FILE_STORAGE",
    "GEMINI_STRICT_TELEMETRY_LIMITS",
    "GEMINI_TELEMETRY_*",
    "GEMINI_CLI_TRUST_WORKSPACE",
    "GEMINI_CLI_TRUSTED_FOLDERS_PATH",
    "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
    "GEMINI_CLI_SYSTEM_DEFAULTS_PATH",
    "GEMINI_CLI_NO_RELAUNCH",
    "GEMINI_CLI_USE_COMPUTE_ADC",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_VERTEX_BASE_URL",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_GCA",
    "GOOGLE_GENAI_API_VERSION",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_PROJECT_ID",
    "GOOGLE_CLOUD_LOCATION",
    "GOOGLE_CLOUD_QUOTA_PROJECT",
    "GOOGLE_CLOUD_UNIVERSE_DOMAIN",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_ACCESS_TOKEN",
)
ENDPOINTS = (
    "generativelanguage.googleapis.com",
    "cloudcode-pa.googleapis.com",  # Code Assist: a Google-account login's model endpoint
    "oauth2.googleapis.com",  # refreshing that login's token
)
BASE_URL = ("GOOGLE_GEMINI_BASE_URL",)
CONFIG = (
    "~/.gemini/settings.json",
    "~/.gemini/GEMINI.md",
    "~/.gemini/commands/",
    "~/.gemini/extensions/",
    "~/.gemini/policies/",
)
PRIVATE: tuple[str, ...] = ()
#: Its state in your home, and its login (a Google account's tokens; an API key comes in ``ENV``).
STATE = ("~/.gemini/",)
LOGIN = ("~/.gemini/oauth_creds.json", "~/.gemini/google_accounts.json")
LOGIN_KEYS: tuple[str, ...] = ()
#: The options ``resume --continue`` keeps from a command line recorded in another clone (a fetched
#: run), with the values each may take (``*``: any plain word; none: no value): model and output
#: choices, Gemini's own sandbox (more confinement, never less). ``--yolo``, ``--extensions``,
#: ``--include-directories``, ``--allowed-tools``, policies and the like are dropped.
CARRY_OVER: dict[str, tuple[str, ...]] = {
    "-m": ("*",),
    "--model": ("*",),
    "-o": ("text", "json", "stream-json"),
    "--output-format": ("text", "json", "stream-json"),
    "--approval-mode": ("default", "auto_edit", "plan"),
    "-s": (),
    "--sandbox": (),
}
MARKER = "sandbox hook gemini"
SUCCESS_STDOUT = "{}"
EVENTS = {"BeforeTool": "start", "AfterTool": "finish"}
#: Events after which no call of the session is running any more, and why its open calls never ran
#: (a call the user rejected in Gemini's UI gets a BeforeTool and nothing after it).
SETTLE = {
    "BeforeAgent": "Gemini CLI took a new prompt without running the call (the user rejected or cancelled it).",
    "AfterAgent": "Gemini CLI ended its turn without running the call (the user rejected or cancelled it).",
    "SessionEnd": "The Gemini CLI session ended ({reason}) before the call ran.",
}
TRUST_FILE = "gemini-trusted-folders.json"
#: How every call id the sandbox gives a Gemini CLI call begins (Gemini's hooks carry no call id).
CALL_PREFIX = "gemini_"
#: Gemini CLI 0.61 gives no time of the tool's own: its BeforeTool comes before the permission
#: prompt (``_processToolCall``: the hook, then ``resolveConfirmation``), and neither AfterTool nor
#: its chat record carries a start or a duration. So a call's TOOK runs from the BeforeTool and
#: includes any wait at that prompt; ``log`` says so rather than show it as the tool's time.
UNTIMED = "TOOK includes any wait at Gemini's prompt: it reports no tool time"

WRITE_TOOLS = {"write_file": "file_path", "replace": "file_path"}
READ_TOOLS = {"read_file", "read_many_files", "list_directory", "glob", "search_file_content", "write_todos"}
EXTERNAL_TOOLS = {"web_fetch", "google_web_search", "web_search", "save_memory"}
COMMAND_TOOLS = {"run_shell_command"}
#: Gemini CLI names MCP tools ``mcp_<server>_<tool>``.
MCP_PREFIX = "mcp_"

#: The sections the shell tool appends after ``Output: ...``, in this order (Gemini CLI 0.61).
_TAIL = re.compile(r"^(Error|Exit Code|Signal|Background PIDs|Process Group PGID): ?(.*)$")
_WRAP = ("<untrusted_context>\n", "\n</untrusted_context>")


def classify(tool: str) -> str:
    """The kind of call a Gemini CLI tool makes."""
    if tool.startswith(MCP_PREFIX) and tool not in WRITE_TOOLS:
        return "external"
    return classify_tool(tool, WRITE_TOOLS, COMMAND_TOOLS, READ_TOOLS, EXTERNAL_TOOLS)


def shell_outcome(response: Any) -> tuple[int | None, str | None]:
    """(exit code, signal) of a ``run_shell_command`` result; (None, None) when it exited 0.

    The text is ``Output: <output>`` followed by optional ``Error:``, ``Exit Code:``, ``Signal:``,
    ``Background PIDs:`` and ``Process Group PGID:`` lines, wrapped in ``<untrusted_context>``.
    The command's own output may contain a line ``Exit Code: 7``; where ``returnDisplay`` is the
    output itself (the usual case) that prefix is cut off exactly, so only Gemini's own sections are
    read. Otherwise only the trailing run of section lines counts.
    """
    if not isinstance(response, dict):
        return None, None
    content = response.get("llmContent")
    if not isinstance(content, str):
        return None, None
    if content.startswith(_WRAP[0]) and content.endswith(_WRAP[1]):
        content = content[len(_WRAP[0]) : -len(_WRAP[1])]
    display = response.get("returnDisplay")
    lines: list[str]
    for output in ([display] if isinstance(display, str) and display else []) + ["(empty)"]:
        prefix = f"Output: {output}\n"
        if content.startswith(prefix):
            lines = content[len(prefix) :].split("\n")
            break
    else:
        tail: list[str] = []
        for line in reversed(content.split("\n")):
            if not _TAIL.match(line):
                break
            tail.append(line)
        lines = list(reversed(tail))
    code: int | None = None
    signal: str | None = None
    for line in lines:
        found = _TAIL.match(line)
        if found is None:
            continue
        if found.group(1) == "Exit Code" and re.fullmatch(r"-?\d+", found.group(2).strip()):
            code = int(found.group(2))
        elif found.group(1) == "Signal" and found.group(2).strip():
            signal = found.group(2).strip()
    return (code if code else None), signal


#: How Gemini CLI 0.61's shell tool begins the model's text of a command it stopped (then nothing else
#: says so: no ``error``, no exit code). A command's own output never starts the text: that is ``Output: ``.
_CANCELLED = ("Command was cancelled by user before it could ", "Command was automatically cancelled because ")


def shell_cancelled(response: Any) -> str | None:
    """Why Gemini CLI stopped a ``run_shell_command`` before it ended, or None when it did not.

    ``"user"``: cancelled in its UI (Ctrl-C, Esc); ``"timeout"``: Gemini's own limit on a command
    without output. Read from the start of ``llmContent`` (inside its ``<untrusted_context>`` wrapper),
    which only Gemini writes: the command's output comes after ``Output: `` or after these sentences.
    """
    content = response.get("llmContent") if isinstance(response, dict) else None
    if not isinstance(content, str):
        return None
    if content.startswith(_WRAP[0]):
        content = content[len(_WRAP[0]) :]
    if content.startswith(_CANCELLED[0]):
        return "user"
    if content.startswith(_CANCELLED[1]):
        return "timeout"
    return None


def to_event(payload: Any) -> HookEvent | None:
    """The generic event for a Gemini CLI hook payload (None for events not about tool calls)."""
    if not isinstance(payload, dict):
        raise HookInputError("The Gemini CLI hook payload is not a JSON object; nothing recorded.")
    name = payload.get("hook_event_name")
    agent_session = payload.get("session_id") if isinstance(payload.get("session_id"), str) else None
    if name in SETTLE:
        return settle_event(payload, name, SETTLE[name], NAME)
    if name not in EVENTS:
        return None
    tool, cwd = payload.get("tool_name"), payload.get("cwd")
    for key, value in (("tool_name", tool), ("cwd", cwd)):
        if not isinstance(value, str) or not value:
            raise HookInputError(f"The {name} payload has no '{key}'; nothing recorded.")
    assert isinstance(tool, str) and isinstance(cwd, str)
    tool_input = payload.get("tool_input") or {}
    if not isinstance(tool_input, dict):
        raise HookInputError(f"The {name} payload's tool_input is not an object; nothing recorded.")
    session = str(payload.get("session_id") or "nosession")
    import hashlib  # here: every exec's confinement reads this module (its state paths); ~2.5 ms

    prefix = CALL_PREFIX + hashlib.sha256(session.encode()).hexdigest()[:8] + "_"
    kind = classify(tool)
    paths: list[str] = []
    if kind == "write":
        target = tool_input.get(WRITE_TOOLS[tool])
        if isinstance(target, str) and target:
            paths = [target]
    status, error, result = "succeeded", None, None
    interrupted = False
    if name == "AfterTool":
        response = payload.get("tool_response")
        result = response
        failure = response.get("error") if isinstance(response, dict) else None
        cancelled = shell_cancelled(response) if kind == "command" else None
        if failure:
            status = "failed"
            error = str(failure.get("message", failure) if isinstance(failure, dict) else failure)
        elif cancelled == "user":
            status, interrupted = "failed", True
            error = "interrupted by the user: Gemini CLI cancelled the command before it completed (Ctrl-C or Esc)"
        elif cancelled == "timeout":
            status = "failed"
            error = "Gemini CLI cancelled the command: it ran past Gemini's time limit without output"
        elif kind == "command":
            code, signal = shell_outcome(response)
            if code is not None or signal is not None:
                status = "failed"
                error = f"exit code {code}" if code is not None else f"terminated by signal {signal}"
    return HookEvent(
        phase=EVENTS[name],
        cwd=cwd,
        tool=tool,
        call_id=None,
        input=tool_input,
        kind=kind,
        paths=paths,
        status=status,
        error=error,
        result=result,
        interrupted=interrupted,
        pair_prefix=prefix,
        agent=NAME,
        # The session's transcript is stored with the run, and continued (sandbox.agent.sessions).
        agent_session=agent_session or None,
    )


def deny_answer(reason: str) -> tuple[str, int]:
    """(stdout, exit code) that makes Gemini CLI refuse the tool and tell the model ``reason``."""
    return json.dumps({"decision": "deny", "reason": reason}), 0


def hook_settings(command: str) -> dict[str, list[Any]]:
    """The ``hooks`` entries of Gemini CLI settings that call ``command`` for every tool and turn end."""
    hook = {"name": "sandbox", "type": "command", "command": command, "timeout": 60000}
    tools = {event: [{"matcher": ".*", "hooks": [hook]}] for event in EVENTS}
    return {**tools, **{event: [{"hooks": [hook]}] for event in SETTLE}}


def agent_env(run_dir: str, worktree: str) -> dict[str, str]:
    """Environment for a Gemini CLI started by ``sandbox run``: the run's worktree, and only it, trusted.

    Writes ``<run dir>/gemini-trusted-folders.json`` (Gemini's trustedFolders format) naming the
    worktree; the variable makes Gemini read that file instead of the user's, for this process and
    its children only.
    """
    from sandbox.store.fsutil import atomic_write

    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, TRUST_FILE)
    data = (json.dumps({os.path.realpath(worktree): "TRUST_FOLDER"}, indent=2) + "\n").encode()
    try:
        with open(path, "rb") as fh:
            same = fh.read(len(data) + 1) == data
    except OSError:
        same = False
    if not same:  # written once per run: its fsync is not paid before every session's first screen
        atomic_write(path, data, 0o600)
    return {"GEMINI_CLI_TRUSTED_FOLDERS_PATH": path}


# -- the run's own Gemini CLI home (``sandbox run``) ----------------------------------------------

#: The run's Gemini CLI home, below the run's directory (:mod:`sandbox.agent.agenthome`).
HOME_NAME = "gemini"
#: The user's Gemini CLI state a session's run home stands in for: not writable in the sandbox.
REPLACES = ("~/.gemini/",)
#: The user's configuration in ``~/.gemini`` that Gemini CLI only reads: linked in, read-only; what the
#: run put in their place (an extension, whose MCP servers start with the CLI) is removed at every start.
LINKED = ("GEMINI.md", "commands", "extensions", "policies", "skills", "agents")
#: The same beside ``.gemini`` in its home (Gemini CLI 0.61 reads skills from ``~/.agents/skills`` too).
ROOT_LINKED = (".agents",)
#: The login, merged into the run's home at every start like the settings.
MERGED = tuple(os.path.basename(p) for p in LOGIN)
#: Opaque files copied into the run's home the first time (the installation's ids).
COPIED = ("installation_id", "user_id")


#: Settings that run commands (hooks, MCP servers and the command that starts one, tool discovery, the
#: shell's pager, its sandbox's command), allow tools without asking or loosen its safety settings, send
#: the prompts elsewhere (telemetry) or put more into the model's context (folders, the ``.env``): in
#: the run's home always yours (and the sandbox's hooks), so that what a confined agent plants never
#: runs in a later session of the run. The auth type chosen inside (``security.auth``) holds.
GUARDED_SETTINGS = (
    "hooks",
    "hooksConfig",
    "mcpServers",
    "mcp",
    "telemetry",
    "advanced",
    "admin",
    "context/includeDirectories",
    *(
        f"tools/{key}"
        for key in (
            "discoveryCommand",
            "callCommand",
            "shell",
            "sandbox",
            "sandboxAllowedPaths",
            "sandboxNetworkAccess",
            "core",
            "allowed",
            "exclude",
            "confirmationRequired",
        )
    ),
    *(
        f"security/{key}"
        for key in (
            "toolSandboxing",
            "disableYoloMode",
            "disableAlwaysAllow",
            "enablePermanentToolApproval",
            "autoAddToPolicyByDefault",
            "blockGitExtensions",
            "allowedExtensions",
            "folderTrust",
            "environmentVariableRedaction",
            "enableConseca",
        )
    ),
)


def cli_home(run_dir: str) -> str:
    """The run's ``GEMINI_CLI_HOME`` (Gemini CLI 0.61 uses it in place of ``~``): its state is in
    ``.gemini/`` there (settings, sessions under ``tmp/<project>/chats/``)."""
    from sandbox.agent import agenthome

    return agenthome.home_of(run_dir, HOME_NAME)


#: Its chats: found, forked and continued by :class:`sandbox.agent.sessions.GeminiCli`.
SESSIONS = "GeminiCli"


def session_homes(environ: Mapping[str, str], home: str, run_dir: str) -> list[str]:
    """Where its chats may be: the run's own ``.gemini`` first ('sandbox run' gives one, and a relaunch
    writes there, never into yours), then yours (``~/.gemini``) for older runs."""
    return [os.path.join(cli_home(run_dir), ".gemini"), os.path.join(home, ".gemini")]


def sessions_dir(run_dir: str) -> str:
    """Where the run's Gemini CLI sessions are saved (a folder per project, ``chats/`` in each)."""
    return os.path.join(cli_home(run_dir), ".gemini", "tmp")


def session_env(
    run_dir: str, worktree: str, user_home: str, command: str | None, *, login: bool = True
) -> dict[str, str]:
    """Seed the run's Gemini home from the user's ``~/.gemini`` (see :mod:`sandbox.agent.agenthome`),
    with the sandbox's hooks in its user settings (so no project-level hook warning), and return the
    variables for Gemini CLI: the home, and the worktree trusted (:func:`agent_env`)."""
    from sandbox.agent import adapters, agenthome

    home = agenthome.make_home(run_dir, HOME_NAME)
    user_dir = os.path.join(user_home, ".gemini")

    def with_hooks(settings: dict[str, object]) -> dict[str, object]:
        if command is None:  # --hooks none: the agent's home without the sandbox's hooks
            return adapters.remove_ours(settings, MARKER)
        return adapters.merge_settings(settings, hook_settings(command), MARKER)

    # .gemini is not the home's mount point: another Gemini session of the run could swap it for a link.
    with agenthome.pinned_dir(os.path.join(home, ".gemini")) as state:
        base = agenthome.base_of(run_dir, HOME_NAME, "settings.json")
        user_settings = os.path.join(user_dir, "settings.json")
        agenthome.seed_json(
            os.path.join(state, "settings.json"), user_settings, base, with_hooks, guarded=GUARDED_SETTINGS
        )
        for name in MERGED if login else ():  # the login: not for a run from elsewhere the user said no to
            found = os.path.join(user_dir, name)
            agenthome.seed_json(
                os.path.join(state, name), found, agenthome.base_of(run_dir, HOME_NAME, name), create=False
            )
        for name in COPIED:
            agenthome.copy_missing(os.path.join(state, name), os.path.join(user_dir, name))
        agenthome.relink_config(state, user_dir, LINKED)  # a planted extension is gone (its MCP servers)
    agenthome.relink_config(home, user_home, ROOT_LINKED)
    return {**agent_env(run_dir, worktree), "GEMINI_CLI_HOME": home}


def resume_args(run_dir: str, since: float) -> list[str] | None:
    """``--resume ID`` for the newest session saved in the run since ``since`` (``latest`` when its
    file names no ``sessionId``), else None."""
    from sandbox.agent import adapters, agenthome
    from sandbox.errors import SandboxError
    from sandbox.store import agentread

    root = sessions_dir(run_dir)
    try:
        projects = [os.path.join(root, name, "chats") for name in os.listdir(root)]
    except OSError:
        return None
    # 0.61 writes chats/session-<time>-<id>.jsonl, its first line naming the session; older ones .json.
    found = [
        f for c in projects for f in (agenthome.newest(c, ".jsonl", since), agenthome.newest(c, ".json", since)) if f
    ]
    if not found:
        return None
    session: Any = None
    with contextlib.suppress(OSError, ValueError, AttributeError, SandboxError):
        newest = max(found, key=lambda f: os.stat(f, follow_symlinks=False).st_mtime)
        # The run's agent home is the agent's to write: read beneath it, never by name (agentread).
        first = agentread.read_path(root, newest, prefix=64 * 1024).split(b"\n", 1)[0]
        session = json.loads(first).get("sessionId")
    ok = isinstance(session, str) and adapters.valid_session(session)
    return ["--resume", session if ok and isinstance(session, str) else "latest"]


if TYPE_CHECKING:  # mypy checks this module against the adapter contract
    from sandbox.agent.adapter import HookAdapter
    from sandbox.agent.adapters import gemini as _this

    _adapter: HookAdapter = _this
