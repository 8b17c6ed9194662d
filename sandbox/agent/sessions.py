"""Each agent's own sessions: where its transcript lives, how to read, fork and continue it.

What the sandbox needs from an agent to continue or rewind its conversation (issue 22):

* ``find(session, homes)``: the transcript file of session ``session``, looked for in every
  candidate configuration home (the run's own agent state, where a confined agent keeps it, and
  the user's usual one). Only the CLI knows the environment; it passes the homes in
  (:func:`config_homes`).
* ``calls(data)``: where each tool use sits (tool-use id -> line of the message that asked for it),
  so the ledger's calls map onto the conversation.
* ``fork(data, before, new)``: a rewritten copy of the conversation cut just before tool use
  ``before``, under the new session id ``new`` (the original is never edited).
* ``place(home, cwd, session)``: where the agent looks for a session it is asked to resume.
* ``relaunch(argv, session, prompt)``: the recorded command line with its prompt replaced by
  ``prompt``, continuing ``session``.

Claude Code (2.1.x): ``<config>/projects/<cwd with every non-alphanumeric character as '-'>/<id>.jsonl``,
one JSON record per line; messages chain by ``parentUuid``; an assistant message asking for tools is
one record per content block, sharing ``message.id``. ``claude --resume ID`` continues it (measured:
a copy under a new file name with its ``sessionId`` fields rewritten resumes as its own session).
Gemini CLI (0.61): see :class:`GeminiCli`; continued and cut (its calls found by tool and input). Codex (0.171): see
:class:`Codex`; its session id reaches ``sandbox mcp`` in each call's ``_meta``; continued and cut.
"""

from __future__ import annotations

import errno
import functools
import glob
import json
import os
import re
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from sandbox.agent import adapters
from sandbox.agent.adapters import valid_session
from sandbox.errors import SandboxError


def config_homes(environ: Mapping[str, str], home: str, run_dir: str) -> dict[str, list[str]]:
    """Every agent's candidate configuration homes, the run's own first (the CLI passes its environment).

    Each agent of the registry with sessions says its own (its adapter's ``session_homes``).
    """
    return {name: list(adapters.agent(name).session_homes(environ, home, run_dir)) for name in agents()}


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


class AgentSessions:
    """What every agent's sessions offer; subclasses fill in where and how (see the module docstring)."""

    name = ""
    program = ""
    #: Options taking one value; options with an optional value take the next word unless it
    #: starts with '-'; variadic ones take every word up to the next option (commander, yargs).
    VALUE: frozenset[str] = frozenset()
    OPTIONAL: frozenset[str] = frozenset()
    VARIADIC: frozenset[str] = frozenset()
    #: How a session or a prompt was given: dropped, the relaunch gives its own.
    DROP_FLAGS: frozenset[str] = frozenset()
    DROP_VALUE: frozenset[str] = frozenset()
    DROP_OPTIONAL: frozenset[str] = frozenset()
    #: Whether a copy of the conversation can be cut and continued as a new session (rewind, fork).
    forks = False
    #: Why it cannot (said by ``rewind`` when ``forks`` is False).
    no_fork = "its tool-call ids are its own, not the ledger's, so the call's place in it is unknown"

    def find(self, session: str, homes: Sequence[str]) -> str | None:  # pragma: no cover - abstract
        """The transcript file of ``session`` among the homes, or None."""
        raise NotImplementedError

    def calls(self, data: bytes) -> dict[str, int]:  # pragma: no cover - abstract
        """Tool-use id -> the line where the message asking for it begins."""
        raise NotImplementedError

    def fork(self, data: bytes, before: str | None, new: str) -> bytes:
        """The conversation cut just before tool use ``before``, as session ``new`` (KeyError: cannot)."""
        raise KeyError(before)

    def own_call(self, data: bytes, call: str, recorded: Sequence[tuple[str, str, object]]) -> str | None:
        """The agent's own id for the ledger's call ``call`` in this conversation, or None when it is not there.

        ``recorded``: the ledger's calls of the conversation's sessions, oldest first, as (call id,
        tool name, input). Claude Code and Codex record calls under their own tool-use ids.
        """
        return call if call in self.calls(data) else None

    def lines_before(self, data: bytes, before: str | None) -> list[bytes]:
        """The transcript's lines before the one asking for tool use ``before`` (all for None; KeyError: none asks)."""
        lines = data.split(b"\n")
        if before is None:
            return lines
        where = self.calls(data).get(before)
        if where is None:
            raise KeyError(before)
        return lines[:where]

    def place(self, home: str, cwd: str, session: str) -> str:  # pragma: no cover - abstract
        """Where to write a stored copy of ``session`` for the agent to continue it."""
        raise NotImplementedError

    def relaunch(self, argv: Sequence[str], session: str | None, prompt: str, transcript: str | None) -> list[str]:
        """``argv`` with its prompt replaced by ``prompt``, continuing ``session`` (None: a new session)."""
        raise NotImplementedError  # pragma: no cover - abstract

    def pieces(self, argv: Sequence[str]) -> Iterator[tuple[str | None, list[str]]]:
        """``argv`` after its program, piece by piece: (an option's name, its words), or (None, [a prompt word])."""
        i = 1
        while i < len(argv):
            word = argv[i]
            name = word.split("=", 1)[0]
            if word == "--":
                return  # everything after it is prompt
            if not word.startswith("-") or word == "-":
                yield None, [word]
                i += 1
                continue
            has_word = i + 1 < len(argv) and not argv[i + 1].startswith("-")
            takes_next = "=" not in word and (
                name in self.VALUE | self.DROP_VALUE or (name in self.OPTIONAL | self.DROP_OPTIONAL and has_word)
            )
            width = 2 if takes_next else 1
            if name in self.VARIADIC and "=" not in word:
                width = 1
                while i + width < len(argv) and not argv[i + width].startswith("-"):
                    width += 1
            yield name, list(argv[i : i + width])
            i += width

    def options(self, argv: Sequence[str]) -> tuple[list[str], list[str]]:
        """(the options of ``argv`` to keep, the dropped option names), its prompt words left out."""
        kept: list[str] = []
        dropped: list[str] = []
        for name, words in self.pieces(argv):
            if name is None:
                continue  # a prompt word: replaced
            if name in self.DROP_FLAGS | self.DROP_VALUE | self.DROP_OPTIONAL:
                dropped.append(name)
            else:
                kept.extend(words)
        return kept, dropped

    def head(self, argv: Sequence[str]) -> tuple[list[str], list[str]]:
        """(the subcommand words right after the program that a relaunch keeps, the rest of ``argv``)."""
        return [], list(argv[1:])

    def untrusted_worktree(self) -> tuple[str, ...]:
        """The options that keep the agent from loading the worktree's own settings (its adapter's
        ``UNTRUSTED_WORKTREE``): added when a run another clone recorded is continued."""
        return tuple(getattr(adapters.agent(self.name), "UNTRUSTED_WORKTREE", ()))

    def carried(self, argv: Sequence[str], program: str) -> tuple[list[str], list[str]]:
        """A command line recorded in another clone, cut down to what may run here: (the line, what was dropped).

        The program is ``program`` (the agent's own, found by the caller), never the recorded one; an
        option is kept only where its adapter's ``CARRY_OVER`` lists it, with a value it allows (a
        value must be a plain word: never one that reads as an option); the ways a session or a prompt
        was given stay, as :meth:`relaunch` replaces them. Each dropped option is given as written.
        """
        safe = adapters.agent(self.name).CARRY_OVER
        sub, rest = self.head(argv)
        kept: list[str] = []
        dropped: list[str] = []
        for name, words in self.pieces([argv[0], *rest]):
            if name is None:
                kept.extend(words)  # a prompt word: the relaunch replaces it
            elif name in self.DROP_FLAGS | self.DROP_VALUE | self.DROP_OPTIONAL:
                kept.extend(words)  # a session or prompt: the relaunch replaces it
            elif name in safe and _allowed(words, safe[name]):
                kept.extend(words)
            else:
                dropped.append(" ".join(words))
        return [program, *sub, *kept], dropped

    @staticmethod
    def new_session() -> str:
        """A fresh session id in the agent's own shape (a UUID)."""
        return str(uuid.uuid4())


class ClaudeCode(AgentSessions):
    """Claude Code's sessions (see the module docstring)."""

    name = "claude-code"
    program = "claude"
    forks = True
    VALUE = _words(
        "--agent --agents --append-system-prompt --append-system-prompt-file --system-prompt --system-prompt-file "
        "--autocompact --debug-file --effort --environment --fallback-model --input-format --json-schema "
        "--max-budget-usd --model -n --name --output-format --permission-mode --permission-prompts "
        "--permission-prompt-tool --plugin-dir --plugin-url --remote-control-session-name-prefix "
        "--setting-sources --settings"
    )
    OPTIONAL = _words("-d --debug --cloud --from-pr --prompt-suggestions --remote-control --teleport -w --worktree")
    VARIADIC = _words(
        "--add-dir --allowedTools --allowed-tools --betas --disallowedTools --disallowed-tools --file --mcp-config "
        "--tools"
    )
    DROP_FLAGS = _words("-c --continue --fork-session --no-session-persistence")
    DROP_VALUE = frozenset(["--session-id"])
    DROP_OPTIONAL = frozenset(["-r", "--resume"])

    def find(self, session: str, homes: Sequence[str]) -> str | None:
        """The newest ``<home>/projects/*/<session>.jsonl`` among the homes, or None."""
        if not valid_session(session):
            return None
        return _newest(os.path.join(glob.escape(home), "projects", "*", session + ".jsonl") for home in homes)

    def calls(self, data: bytes) -> dict[str, int]:
        """Tool-use id -> the line where the assistant message asking for it begins."""
        first_line: dict[str, int] = {}
        out: dict[str, int] = {}
        for n, line in enumerate(data.split(b"\n")):
            if b'"assistant"' not in line:
                continue
            record = _record(line)
            message = record.get("message") if record.get("type") == "assistant" else None
            if not isinstance(message, dict):
                continue
            mid = str(message.get("id") or record.get("uuid") or n)
            first_line.setdefault(mid, n)
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    out.setdefault(block["id"], first_line[mid])
        return out

    def fork(self, data: bytes, before: str | None, new: str) -> bytes:
        """The conversation up to just before tool use ``before`` (all of it for None), as session ``new``."""
        return _as_session(self.lines_before(data, before), new)

    def place(self, home: str, cwd: str, session: str) -> str:
        """Where Claude Code looks for ``session`` when started in ``cwd`` with this config home."""
        return os.path.join(home, "projects", re.sub(r"[^A-Za-z0-9]", "-", cwd), session + ".jsonl")

    def relaunch(self, argv: Sequence[str], session: str | None, prompt: str, transcript: str | None) -> list[str]:
        """``argv`` with its prompt replaced by ``prompt``, resuming ``session`` (``--resume ID``).

        The prompt words are the positional arguments; options keep their values. The new prompt
        goes first (after the program), where no option can take it as its value.
        """
        kept, _dropped = self.options(argv)
        return [argv[0], prompt, *kept, *(["--resume", session] if session else [])]


class GeminiCli(AgentSessions):
    """Gemini CLI's sessions (0.61): ``<home>/tmp/<project>/chats/session-<time>-<id8>.jsonl``.

    The first record names the ``sessionId``; a model turn is written twice (once more with its
    ``toolCalls``, each with Gemini's own id, its ``name`` and ``args``); ``{"$set": ...}`` records
    update the session (``messages`` replaces the whole list). Gemini's hooks carry no tool-call id,
    so a ledger call is found in the chat by its tool and input (:meth:`own_call`), newest first:
    a continued chat begins with the earlier session's turns. ``gemini --session-file F`` continues
    a stored copy from any path (measured: the earlier turns are sent again, and the continued
    session gets an id of its own), so a fork is a copy cut just before the model turn asking for
    the call, its ``sessionId`` the new one.
    """

    name = "gemini"
    program = "gemini"
    forks = True
    VALUE = _words("-m --model -w --worktree --approval-mode -o --output-format --delete-session")
    VARIADIC = _words(
        "--policy --admin-policy --allowed-mcp-server-names --allowed-tools -e --extensions --include-directories"
    )
    DROP_VALUE = _words("-p --prompt -i --prompt-interactive -r --resume --session-file --session-id")

    def find(self, session: str, homes: Sequence[str]) -> str | None:
        """The newest chat file among the homes whose first record names ``session``, or None."""
        if not valid_session(session) or len(session) < 8:
            return None

        def names_session(path: str) -> bool:
            try:
                first = read_found(path, homes, prefix=64 * 1024).split(b"\n", 1)[0]
            except (OSError, SandboxError):
                return False
            return _record(first).get("sessionId") == session

        return _newest(
            (
                os.path.join(glob.escape(home), "tmp", "*", "chats", f"session-*-{glob.escape(session[:8])}.jsonl")
                for home in homes
            ),
            names_session,
        )

    def calls(self, data: bytes) -> dict[str, int]:
        """Gemini's tool-call id -> the line where the model turn asking for it first appears."""
        first_line: dict[str, int] = {}
        out: dict[str, int] = {}
        for n, line in enumerate(data.split(b"\n")):
            if b"toolCalls" not in line:
                if b'"gemini"' in line:
                    record = _record(line)
                    first_line.setdefault(str(record.get("id")), n)
                continue
            record = _record(line)
            first = first_line.setdefault(str(record.get("id")), n)
            tool_calls = record.get("toolCalls")
            for call in tool_calls if isinstance(tool_calls, list) else []:
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    out.setdefault(call["id"], first)
        return out

    def tool_calls(self, data: bytes) -> list[tuple[str, str, object]]:
        """Every tool call of the chat, in order, once each: (Gemini's id, tool name, arguments)."""
        out: list[tuple[str, str, object]] = []
        seen: set[str] = set()
        for line in data.split(b"\n"):
            if b"toolCalls" not in line:
                continue
            tool_calls = _record(line).get("toolCalls")
            for call in tool_calls if isinstance(tool_calls, list) else []:
                if isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"] not in seen:
                    seen.add(call["id"])
                    out.append((call["id"], str(call.get("name")), call.get("args")))
        return out

    def own_call(self, data: bytes, call: str, recorded: Sequence[tuple[str, str, object]]) -> str | None:
        """Gemini's id for the ledger's call ``call``: the chat's and the ledger's calls paired newest first.

        A pair needs the same tool, and the same input where the ledger kept it inline; a recorded
        call with no partner (one Gemini never wrote down: in flight at a crash) is passed over.
        """
        ours = self.tool_calls(data)
        j = len(ours)
        for call_id, name, args in reversed(recorded):
            match = next(
                (k for k in range(j - 1, -1, -1) if ours[k][1] == name and (args is None or ours[k][2] == args)),
                None,
            )
            if match is None:
                if call_id == call:
                    return None
                continue
            if call_id == call:
                return ours[match][0]
            j = match
        return None

    def fork(self, data: bytes, before: str | None, new: str) -> bytes:
        """The chat up to just before the model turn asking for Gemini tool call ``before``, as session ``new``."""
        lines = self.lines_before(data, before)
        cut = _record(data.split(b"\n")[len(lines)]).get("id") if before is not None else None

        def trim(record: dict[str, object]) -> None:
            update = record.get("$set")
            if not isinstance(update, dict):
                return
            if "sessionId" in update:
                update["sessionId"] = new
            messages = update.get("messages")
            if isinstance(messages, list) and cut is not None:
                # A whole-list update written before the cut may hold the later turns too.
                ids = [m.get("id") if isinstance(m, dict) else None for m in messages]
                if cut in ids:
                    update["messages"] = messages[: ids.index(cut)]

        return _as_session(lines, new, trim)

    def place(self, home: str, cwd: str, session: str) -> str:
        """Any path will do (``--session-file``): beside Gemini's own temporary files."""
        return os.path.join(home, "tmp", "sandbox-restored", "chats", f"session-restored-{session}.jsonl")

    def relaunch(self, argv: Sequence[str], session: str | None, prompt: str, transcript: str | None) -> list[str]:
        """``argv`` with its prompt replaced (``-p`` stays headless, else interactive), on ``transcript``."""
        kept, dropped = self.options(argv)
        interactive = "-p" not in dropped and "--prompt" not in dropped
        asked = ["-i", prompt] if interactive else ["-p", prompt]
        return [argv[0], *kept, *asked, *(["--session-file", transcript] if session and transcript else [])]


class Codex(AgentSessions):
    """Codex CLI's sessions (0.171): ``<home>/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``.

    One record per line; the first is ``session_meta`` naming the session ``id``; a tool call is a
    ``response_item`` whose payload is a ``function_call`` (or ``custom_tool_call``) with the
    model's ``call_id``. Codex works through ``sandbox mcp``, and every ``tools/call`` it sends
    carries ``_meta.callId`` (that ``call_id``) and ``_meta.sessionId`` (this session): the server
    records the call under the model's id in that session (:mod:`sandbox.mcp.server`), so the
    ledger maps onto the rollout as Claude Code's tool-use ids do. ``codex exec resume ID PROMPT``
    continues a session it finds under its home (the exec options go before ``resume``). A fork is
    a copy cut just before a call's ``function_call`` record with every mention of the session id
    replaced by the new one (measured: ``codex exec resume NEW`` finds such a copy in any dated
    folder, and its first request carries exactly the turns before the cut).
    """

    name = "codex"
    program = "codex"
    forks = True
    VALUE = _words(
        "-c --config --enable --disable --remote --remote-auth-token-env -m --model --local-provider -p --profile "
        "-s --sandbox -C --cd --add-dir --thread-source --cyber-access-program --output-schema --color -o "
        "--output-last-message -a --ask-for-approval"
    )
    VARIADIC = _words("-i --image")
    DROP_FLAGS = _words("--last --all")

    def find(self, session: str, homes: Sequence[str]) -> str | None:
        """The newest ``<home>/sessions/*/*/*/rollout-*-<session>.jsonl`` among the homes, or None."""
        if not valid_session(session):
            return None
        return _newest(
            os.path.join(glob.escape(home), "sessions", "*", "*", "*", f"rollout-*-{glob.escape(session)}.jsonl")
            for home in homes
        )

    def calls(self, data: bytes) -> dict[str, int]:
        """The model's tool-call id -> the line of the ``function_call`` record asking for it."""
        out: dict[str, int] = {}
        for n, line in enumerate(data.split(b"\n")):
            if b"call_id" not in line or b"response_item" not in line:
                continue
            record = _record(line)
            payload = record.get("payload") if record.get("type") == "response_item" else None
            if not isinstance(payload, dict) or payload.get("type") not in ("function_call", "custom_tool_call"):
                continue
            if isinstance(payload.get("call_id"), str):
                out.setdefault(payload["call_id"], n)
        return out

    def fork(self, data: bytes, before: str | None, new: str) -> bytes:
        """The rollout up to just before call ``before`` (all of it for None), as session ``new``."""
        lines = self.lines_before(data, before)
        old = _record(lines[0]).get("payload") if lines else None
        old_id = old.get("id") if isinstance(old, dict) else None
        if not isinstance(old_id, str) or not valid_session(old_id):
            raise KeyError(before)  # no session_meta first: not a rollout we know how to rewrite
        kept = b"\n".join(line for line in lines if line.strip())
        # The id is a UUID: it appears only where the session is named (meta, turn records, thread ids).
        return kept.replace(old_id.encode(), new.encode()) + b"\n" if kept else b""

    def place(self, home: str, cwd: str, session: str) -> str:
        """Where Codex keeps ``session``'s rollout: today's dated folder under ``<home>/sessions``."""
        now = time.gmtime()
        name = f"rollout-{time.strftime('%Y-%m-%dT%H-%M-%S', now)}-{session}.jsonl"
        return os.path.join(home, "sessions", *time.strftime("%Y/%m/%d", now).split("/"), name)

    def relaunch(self, argv: Sequence[str], session: str | None, prompt: str, transcript: str | None) -> list[str]:
        """``codex [exec] OPTIONS resume SESSION PROMPT`` (a new session: ``codex [exec] OPTIONS PROMPT``).

        The recorded options are kept (a ``resume`` or ``--last`` of the recorded line is dropped:
        the session is named here); its prompt words are replaced.
        """
        sub, rest = self.head(argv)
        rest = [w for w in rest if w not in ("resume", "fork")]
        kept, _dropped = self.options([argv[0], *rest])
        return [argv[0], *sub, *kept, *(["resume", session] if session else []), prompt]

    def head(self, argv: Sequence[str]) -> tuple[list[str], list[str]]:
        """``exec`` (or its alias ``e``) is kept, as ``exec``: the rest of the line goes to it."""
        rest = list(argv[1:])
        if rest and rest[0] in ("exec", "e"):
            return ["exec"], rest[1:]
        return [], rest


#: A value a carried option may take (``*`` in ``CARRY_OVER``): a model name, a number, a feature name.
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,199}$")


def _allowed(words: Sequence[str], values: tuple[str, ...]) -> bool:
    """True when an option's ``words`` (``--opt``, ``--opt V`` or ``--opt=V``) give a value ``values`` allows."""
    first = words[0]
    given = [first.split("=", 1)[1]] if "=" in first else list(words[1:])
    if not given:
        return not values  # an option without a value: listed as such
    if len(given) != 1 or not values:
        return False
    # fullmatch: ``$`` would also match before a final newline (``opus\n`` is no plain word).
    return bool(_PLAIN.fullmatch(given[0])) and ("*" in values or given[0] in values)


@functools.cache
def agents() -> dict[str, AgentSessions]:
    """Every agent whose sessions the sandbox continues, by name: the registry's agents that name their
    sessions class (an adapter's ``SESSIONS``, one of this module's :class:`AgentSessions`)."""
    out: dict[str, AgentSessions] = {}
    for name in adapters.names():
        cls = globals().get(adapters.agent(name).SESSIONS)
        if isinstance(cls, type) and issubclass(cls, AgentSessions):
            out[name] = cls()
    return out


def for_command(argv: Sequence[str]) -> AgentSessions | None:
    """The agent a recorded command line starts (by its program's name), or None when not one we continue."""
    if not argv:
        return None
    family = adapters.family_of(argv[0])
    for agent in agents().values():
        if agent.program == family:
            return agent
    return None


def read_found(path: str, homes: Sequence[str], prefix: int | None = None) -> bytes:
    """The content of ``path`` (found by :meth:`AgentSessions.find` beneath one of ``homes``; the
    first ``prefix`` bytes only when given), read beneath that home through a checked descriptor.

    The homes of a run are the agent's to write and are read here, outside its confinement: by name,
    a file the listing saw as regular could be swapped for a link to a secret or a FIFO before the
    open (:mod:`sandbox.store.agentread`). OSError, or :class:`~sandbox.errors.SandboxError` for a
    link, FIFO, swap or a file over the bound.
    """
    from sandbox.store import agentread

    for home in homes:
        base = os.path.abspath(home).rstrip("/") + "/"
        if os.path.abspath(path).startswith(base):
            return agentread.read_path(home, path, prefix=prefix)
    raise FileNotFoundError(errno.ENOENT, "not beneath any of the agent's homes", path)


def _newest(patterns: Iterable[str], keep: Callable[[str], bool] | None = None) -> str | None:
    """The most recently modified regular file matching any of the glob ``patterns`` (and ``keep``), or None.

    Never a symlink, a FIFO or a device: the run's agent homes are writable inside the sandbox, and the
    file found is read outside it (a link to a masked secret would be kept with the run's transcripts,
    a FIFO or ``/dev/zero`` would hang the reader or fill its memory).
    """
    found = []
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and (keep is None or keep(path)):
                    found.append((st.st_mtime_ns, path))
            except OSError:
                continue
    return max(found)[1] if found else None


def _as_session(lines: Sequence[bytes], new: str, also: Callable[[dict[str, object]], None] | None = None) -> bytes:
    """JSON ``lines`` with each record's ``sessionId`` set to ``new`` and ``also`` applied (blank lines
    dropped; a line that is no JSON object is not ours to understand: kept as it is)."""
    out = []
    for line in lines:
        if not line.strip():
            continue
        record = _record(line)
        if not record:
            out.append(line)
            continue
        if "sessionId" in record:
            record["sessionId"] = new
        if also is not None:
            also(record)
        out.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode())
    return b"\n".join(out) + b"\n" if out else b""


def _record(line: bytes) -> dict[str, object]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
