"""The generic hook protocol: one JSON object on stdin becomes a call start or a call finish.

Agents with hooks (Claude Code, Gemini CLI, an in-house loop) run ``sandbox hook <agent>`` before
and after each tool call. An adapter (:mod:`sandbox.agent.adapters`) turns the agent's payload into a
:class:`HookEvent`; ``sandbox hook generic`` reads a :class:`HookEvent` directly (documented in
``hooks/README.md``). The event is then recorded:

* by the repository's host (:mod:`sandbox.agent.host`, the background ``sandbox serve``), over its
  socket (:mod:`sandbox.agent.wire`; fast: the hook process imports neither pygit2 nor pydantic), or
* in the hook process itself when no host is live (correct, slower start-up); it then spawns
  the host for the next events (see :func:`sandbox.agent.recorder.handle`).

``start`` is durable before the hook returns, so before the tool runs. ``finish`` commits the
call's file changes: exactly the named paths for a file-writing call (O(1)), a change source's
paths for a command (:mod:`sandbox.agent.changes`), nothing for a read-only or external call, a
scan when unknown.

This module is the wire protocol only and imports only the standard library (and the stdlib-only
:mod:`sandbox.store.layout`): it is on the hook's fast path. Recording an event into the ledger
(:class:`sandbox.agent.recorder.Recorder`) needs the run and lives beside it.
"""

from __future__ import annotations

import os

from sandbox.agent import wire
from sandbox.errors import SandboxError
from sandbox.fast import fastjson
from sandbox.store import layout

TYPE_CHECKING = False  # no typing at run time: this module is on the hook's fast path
if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from typing import Any, BinaryIO

MAX_PAYLOAD = 8 * 1024 * 1024
MAX_RESULT = 64 * 1024
#: The keys of a command's reported result that hold its output's text, and the bytes of each that are
#: kept (the tail): :data:`sandbox.run.output.TEXTS` and :data:`sandbox.run.output.LIMIT` (a test
#: keeps them equal; this module is standard library only).
OUTPUT_KEYS = ("stdout", "stderr", "sandbox_output", "llmContent")
OUTPUT_LIMIT = 64 * 1024
#: The longest error text kept (its first line is the ledger's one-line ``error``; the rest beside it).
MAX_ERROR = 256 * 1024
#: The longest call id a hook may give (Claude Code's ``toolu_...`` are ~30 characters).
MAX_CALL_ID = 200
#: start/finish: one side of one call; refused: the agent refused the call before running it
#: (``error`` says why); settle: the agent says no call of its session is still running (its turn
#: or session ended), so a call it started and never finished did not run.
PHASES = ("start", "finish", "refused", "settle")
KINDS = ("write", "command", "read", "external", "unknown")
#: Default (idempotency, replay) per kind of call.
POLICY = {
    "write": ("conditional", "ask"),
    "command": ("conditional", "ask"),
    "read": ("idempotent", "auto"),
    "external": ("non_idempotent", "never"),
    "unknown": ("conditional", "ask"),
}


class HookInputError(SandboxError):
    """The hook payload is malformed, oversized, or names something outside the run."""

    exit_code = 1


def _check_id(key: str, value: object, longest: int) -> None:
    """Refuse a payload's call id (or what one is made from) that is no short printable word.

    It is printed in 'sandbox log' as a column: a newline or 5,000 characters would forge lines."""
    if value is not None and not isinstance(value, str):
        raise HookInputError(f"The hook payload's {key!r} must be a string.")
    if value and (len(value) > longest or not value.isprintable() or any(c.isspace() for c in value)):
        raise HookInputError(
            f"The hook payload's {key!r} must be at most {longest} printable characters without spaces."
        )


class HookEvent:
    """One side of one tool call, in the agent-neutral form (the generic protocol's JSON).

    A plain class, not a dataclass: ``dataclasses`` imports ``inspect``, ~4 ms of every hook's start.
    """

    #: The fields, in the generic protocol's order (``phase`` is its ``event``).
    FIELDS = (
        *("phase", "cwd", "tool", "call_id", "input", "kind", "paths", "status", "error", "result"),
        *("idempotency", "replay", "pair_prefix", "agent", "session", "agent_session", "interrupted"),
        *("ran_ms", "session_end", "summary"),
    )

    def __init__(
        self,
        phase: str,
        cwd: str,
        tool: str,
        call_id: str | None = None,
        input: Any = None,
        kind: str = "unknown",
        paths: list[str] | None = None,
        status: str = "succeeded",
        error: str | None = None,
        result: Any = None,
        idempotency: str | None = None,
        replay: str | None = None,
        pair_prefix: str | None = None,
        agent: str = "generic",
        session: str | None = None,
        agent_session: str | None = None,
        interrupted: bool = False,
        ran_ms: int | None = None,
        session_end: bool = False,
        summary: str | None = None,
    ) -> None:
        self.phase = phase
        self.cwd = cwd
        self.tool = tool
        self.call_id = call_id
        self.input = input
        self.kind = kind
        self.paths: list[str] = [] if paths is None else paths
        self.status = status
        self.error = error
        self.result = result
        self.idempotency = idempotency
        self.replay = replay
        #: finish without a call id: pair with the oldest started call of the same tool and input
        #: whose id starts with this prefix (for agents whose hooks carry no call id).
        self.pair_prefix = pair_prefix
        self.agent = agent
        #: The agent session's token (``SANDBOX_SESSION`` in the hook's environment, set by
        #: ``sandbox run``): recorded with the call's start so its processes can be found later.
        self.session = session
        #: The agent's own session id (e.g. Claude Code's session_id): a settle covers only its calls.
        self.agent_session = agent_session
        #: finish: the agent says the tool was interrupted (Ctrl-C, Esc) before it ended; settle: the
        #: user ended the session with Ctrl-C, so its open calls were interrupted.
        self.interrupted = interrupted
        #: finish: how long the tool itself ran, in milliseconds, as the agent measured it (its start
        #: came after the agent's permission prompt), when the agent says.
        self.ran_ms = ran_ms
        #: settle: the agent's whole session ended (not only its turn).
        self.session_end = session_end
        #: start: the call's one-line summary in the ledger, when the sender says (``sandbox mcp``
        #: inside a sandbox: the same summary its unconfined server records); else one from the input.
        self.summary = summary

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HookEvent) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it was

    def __repr__(self) -> str:
        return f"HookEvent({', '.join(f'{name}={getattr(self, name)!r}' for name in self.FIELDS)})"

    @classmethod
    def from_dict(cls, data: Any) -> HookEvent:
        """Validate a decoded generic-protocol object; :class:`HookInputError` when malformed."""
        if not isinstance(data, dict):
            raise HookInputError("The hook payload must be a JSON object.")
        phase = data.get("event", data.get("phase"))
        if phase not in PHASES:
            raise HookInputError("The hook payload's 'event' must be 'start', 'finish', 'refused' or 'settle'.")
        if phase == "settle":
            data = {"tool": "*", **data}
        for key in ("cwd", "tool"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise HookInputError(f"The hook payload has no '{key}' string.")
        call_id = data.get("call_id")
        _check_id("call_id", call_id, MAX_CALL_ID)
        # A call without an id is named ``pair_prefix`` + 12 hex digits: the same bounds as an id.
        _check_id("pair_prefix", data.get("pair_prefix"), MAX_CALL_ID - 12)
        kind = data.get("kind", "unknown")
        if kind not in KINDS:
            raise HookInputError(f"The hook payload's 'kind' must be one of {', '.join(KINDS)}.")
        raw_paths = data.get("paths", [])
        if not isinstance(raw_paths, list) or not all(isinstance(p, str) for p in raw_paths):
            raise HookInputError("The hook payload's 'paths' must be a list of strings.")
        status = data.get("status", "succeeded")
        if status not in ("succeeded", "failed"):
            raise HookInputError("The hook payload's 'status' must be 'succeeded' or 'failed'.")
        if phase in ("finish", "refused") and not call_id and not data.get("pair_prefix"):
            raise HookInputError(f"A {phase} event needs a 'call_id'.")
        error = data.get("error")
        agent_session = data.get("agent_session")
        if agent_session is not None and not isinstance(agent_session, str):
            raise HookInputError("The hook payload's 'agent_session' must be a string.")
        ran_ms = data.get("ran_ms")
        if ran_ms is not None and (not isinstance(ran_ms, int) or isinstance(ran_ms, bool) or ran_ms < 0):
            raise HookInputError("The hook payload's 'ran_ms' must be a non-negative integer.")
        return cls(
            phase=phase,
            cwd=data["cwd"],
            tool=data["tool"],
            call_id=call_id or None,
            input=data.get("input"),
            kind=kind,
            paths=list(raw_paths),
            status=status,
            error=None if error is None else str(error)[:MAX_ERROR],
            result=data.get("result"),
            idempotency=data.get("idempotency"),
            replay=data.get("replay"),
            pair_prefix=data.get("pair_prefix"),
            agent=str(data.get("agent", "generic")),
            session=data["session"] if isinstance(data.get("session"), str) and data["session"] else None,
            agent_session=agent_session or None,
            interrupted=data.get("interrupted") is True,
            ran_ms=ran_ms,
            session_end=data.get("session_end") is True,
            summary=data["summary"][:500] if isinstance(data.get("summary"), str) and data["summary"] else None,
        )

    def to_dict(self) -> dict[str, object]:
        """The generic-protocol object for this event."""
        out: dict[str, object] = {name: getattr(self, name) for name in self.FIELDS}
        out["paths"] = list(self.paths)
        out["event"] = out.pop("phase")
        return out


class Outcome:
    """What recording a hook event did: ``ok``, a one-line ``message``, and the strict setting.

    ``decision`` answers the agent's permission question for a start: ``deny`` (the call is
    refused before it runs; ``reason`` goes to the model), ``allow`` (the sandbox vouches for it,
    see ``hooks.allow_edits``), or None (the agent decides as it would without the sandbox).
    ``call``, ``status`` and ``files`` say what was recorded (the call, its status after the
    event, how many files a finish committed); ``note`` is a one-line remark for the user (say,
    that the run's changes are found by scanning because the inotify limits are reached);
    ``foreign``, in the host's answer to a start, whether the run holds events from another clone
    (a command started on it gets the worktree's agent settings masked: :mod:`sandbox.confine.foreign`);
    ``settings``, with it, where the run's recorded tree holds such settings (worktree-relative paths,
    :func:`sandbox.confine.settingstree.recorded`: masked there too, and in the directories above them).
    """

    def __init__(
        self,
        ok: bool,
        message: str = "",
        strict: bool = False,
        decision: str | None = None,
        reason: str = "",
        call: str | None = None,
        status: str | None = None,
        files: int | None = None,
        note: str | None = None,
        foreign: bool | None = None,
        settings: list[str] | None = None,
    ) -> None:
        self.ok = ok
        self.message = message
        self.strict = strict
        self.decision = decision
        self.reason = reason
        self.call = call
        self.status = status
        self.files = files
        self.note = note
        self.foreign = foreign
        self.settings = settings

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outcome) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it was

    def __repr__(self) -> str:
        return f"Outcome({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"

    @property
    def denied(self) -> bool:
        """The sandbox refused the call (a denial or a policy): the agent must get its deny answer."""
        return self.decision == "deny"

    def to_reply(self) -> wire.Reply:
        """The host's JSON reply for this outcome (see :func:`forward`)."""
        return wire.Reply(
            ok=self.ok,
            message=self.message,
            strict=self.strict,
            decision=self.decision,
            reason=self.reason,
            call=self.call,
            status=self.status,
            files=self.files,
            note=self.note,
            foreign=self.foreign,
            settings=self.settings,
        )

    @classmethod
    def from_reply(cls, reply: Any) -> Outcome:
        """The outcome in a host's reply (KeyError/TypeError when malformed)."""
        decision = reply.get("decision")
        files = reply.get("files")
        return cls(
            bool(reply["ok"]),
            str(reply.get("message", reply.get("error", ""))),
            bool(reply.get("strict", False)),
            decision if decision in ("allow", "deny") else None,
            str(reply.get("reason") or ""),
            reply["call"] if isinstance(reply.get("call"), str) else None,
            reply["status"] if isinstance(reply.get("status"), str) else None,
            files if isinstance(files, int) and not isinstance(files, bool) else None,
            reply["note"] if isinstance(reply.get("note"), str) else None,
            reply["foreign"] if isinstance(reply.get("foreign"), bool) else None,
            _strings(reply.get("settings")),
        )


def _strings(value: object) -> list[str] | None:
    """A list of strings as a reply carries it, or None (none, or not such a list)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return list(value)


# -- reading the payload -----------------------------------------------------------------------


def read_payload(stream: BinaryIO) -> Any:
    """Read and decode one JSON payload (at most :data:`MAX_PAYLOAD` bytes)."""
    data = stream.read(MAX_PAYLOAD + 1)
    if len(data) > MAX_PAYLOAD:
        raise HookInputError(f"The hook payload is larger than {MAX_PAYLOAD // (1024 * 1024)} MiB; nothing recorded.")
    if not data.strip():
        raise HookInputError("The hook payload is empty; expected one JSON object on stdin.")
    try:
        return fastjson.loads(data)
    except (ValueError, RecursionError) as exc:
        import json  # its error, raised by json itself (sandbox.fast.fastjson)

        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not valid JSON"
        raise HookInputError(f"The hook payload is not valid JSON ({reason}); nothing recorded.") from None


# -- finding the run from a directory, without git libraries -----------------------------------


#: A run found from a directory (see :mod:`sandbox.store.layout`, which owns the layout).
Location = layout.Location


def locate(cwd: str) -> Location:
    """The run whose worktree contains ``cwd``; :class:`HookInputError` when there is none."""
    if not os.path.isdir(cwd):
        raise HookInputError(f"The hook's cwd {cwd!r} is not a directory; nothing recorded.")
    found = layout.locate(cwd, past_nested=True)
    if found is None:
        raise HookInputError(
            f"{cwd} is not inside a sandbox run's worktree; start the agent with 'sandbox run -- AGENT' "
            "(nothing recorded)."
        )
    return found


# -- talking to the repository's host ----------------------------------------------------------


def forward(loc: Location, event: HookEvent, timeout: float = 120.0) -> Outcome | None:
    """Send the event to the repository's host (:mod:`sandbox.agent.wire`); None when none answered."""
    client = wire.Client(loc.common_dir, timeout=timeout)
    sent = event.to_dict()
    rest = sent.get("result")
    if event.kind == "command" and isinstance(rest, dict):  # the output's tails travel apart, each bounded
        sent["result"] = _trimmed(rest)
        rest = {k: v for k, v in rest.items() if k not in OUTPUT_KEYS}
    if rest is not None:  # cut here as the recorder would keep it: small requests
        text = fastjson.dumps(rest, default=str)
        if len(text) > MAX_RESULT:
            sent["result"] = {"truncated": True, "bytes": len(text)}
    reply = client.for_run(loc.run_id, loc.run_dir, "hook", wait_start=wire.STARTING, event=sent)
    if reply is None:
        return None  # no host, or it died mid-request: recording again here is idempotent
    try:
        return Outcome.from_reply(reply)
    except (KeyError, TypeError, AttributeError):
        return None


def _trimmed(result: dict[str, Any]) -> dict[str, Any]:
    """A reported command result with each stream's text cut to the tail the host keeps
    (:mod:`sandbox.run.output`), and the stream's whole size beside it: the request stays small."""
    out = dict(result)
    for key in OUTPUT_KEYS:
        text = out.get(key)
        if not isinstance(text, str) or len(text) <= OUTPUT_LIMIT // 4:
            continue
        raw = text.encode("utf-8", "surrogateescape")
        if len(raw) > OUTPUT_LIMIT:
            out[key] = raw[-OUTPUT_LIMIT:].decode("utf-8", "surrogateescape")
            out.setdefault(f"{key}_bytes", len(raw))
    return out


def settle_event(payload: Mapping[str, object], name: str, template: str, agent: str) -> HookEvent:
    """The ``settle`` event for an agent's end-of-turn or end-of-session hook ``name``.

    ``template`` is the adapter's reason for it (``{reason}``: the payload's own, if any). Ctrl-C
    (twice) or Ctrl-D at the prompt ends the session with ``prompt_input_exit``: the agent's UI reads
    them as keys, so its open calls were interrupted.
    """
    cwd = payload.get("cwd")
    if not isinstance(cwd, str) or not cwd:
        raise HookInputError(f"The {name} payload has no 'cwd'; nothing recorded.")
    session = payload.get("session_id")
    return HookEvent(
        phase="settle",
        cwd=cwd,
        tool="*",
        error=template.format(reason=str(payload.get("reason") or "no reason given")[:100]),
        agent=agent,
        agent_session=session if isinstance(session, str) and session else None,
        session_end=name == "SessionEnd",
        interrupted=name == "SessionEnd" and payload.get("reason") == "prompt_input_exit",
    )


def classify_tool(
    tool: str,
    write: Collection[str],
    command: Collection[str],
    read: Collection[str],
    external: Collection[str],
) -> str:
    """The kind of a tool (write, command, read, external, unknown) from an adapter's tool lists.

    MCP tools (``mcp__server__tool``) are external unless listed otherwise.
    """
    if tool in write:
        return "write"
    if tool in command:
        return "command"
    if tool in read:
        return "read"
    if tool in external or tool.startswith("mcp__"):
        return "external"
    return "unknown"
