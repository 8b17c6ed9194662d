"""``resume --continue``: relaunch the interrupted agent on its own conversation, after the checks.

:func:`plan` runs after the conservative resume (:mod:`sandbox.recovery.resume`: processes, drift,
uncertain calls) and decides what to start:

1. the agent command ``sandbox run`` last recorded for the run (a ``note`` event naming
   ``agent_command``): the same agent and flags, its prompt replaced by the resume note;
2. the agent session to continue: the one the run's last call ran in, or the fork a ``rewind``
   made after it (:func:`current_session`);
3. its transcript: the agent's own file when this machine has it (the agent appends to it), else
   the run's stored copy (:mod:`sandbox.agent.transcripts`) written where the agent looks for it
   (a run pushed from another clone continues its conversation here). With neither, the agent
   starts a new session and the note says so;
4. every uncertain call that must not be repeated blindly (``ask_first``, ``do_not_replay``) is
   blocked: a ``call_denied`` event with a reason the model understands, so the same tool with the
   same input is refused at the hook (:class:`sandbox.agent.recorder.Recorder`) until
   ``sandbox approve RUN CALL`` lifts it;
5. whose record it is (:func:`sandbox.agent.transcripts.agent_command`). A run fetched from someone
   else carries a ledger anybody could have written, so its record is data, not a choice: the
   program is the agent's own found on the user's PATH (never the recorded path), only the options
   its adapter lists as safe (``CARRY_OVER``) are kept, and the recorded confinement is ignored (the
   settings here confine it; only the user's ``--isolate``/``--network`` choose less). Each dropped
   option and ignored choice is said in :attr:`ContinuePlan.messages`, with the command line that runs.
   For every run, the subdirectory must be a directory inside the worktree reached without a link.

The caller (``sandbox resume --continue``) starts the command as ``sandbox run`` does, confined.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox.agent import sessions, transcripts
from sandbox.agent.transcripts import RecordedCommand, agent_command, current_session, primary_home
from sandbox.confine import foreign, settingstree
from sandbox.errors import SandboxError
from sandbox.models import EventKind, ResumeReport
from sandbox.run import comments

if TYPE_CHECKING:
    from sandbox.run.run import Run


class CannotContinueError(SandboxError):
    """The run's agent cannot be relaunched (not started by ``sandbox run``, or an agent we cannot continue)."""


@dataclass
class ContinuePlan:
    """What ``resume --continue`` starts, and why."""

    argv: list[str]
    subdir: str
    agent: str
    #: The session continued (None: the agent starts a new one).
    session: str | None
    #: The transcript the agent resumes, when one was found or written here.
    transcript: str | None = None
    #: True when the transcript was written here from the run's stored copy.
    restored: bool = False
    blocked: list[str] = field(default_factory=list)
    prompt: str = ""
    messages: list[str] = field(default_factory=list)
    #: ``--isolate`` for the relaunch: as the recorded session ran ("on"/"off"; None: nothing recorded).
    isolate: str | None = None
    #: ``--network`` for the relaunch: as the recorded session ran (None: nothing recorded).
    network: str | None = None
    #: How the recorded session was confined (:meth:`sandbox.confine.spawn.Isolation.describe`).
    recorded_isolation: str | None = None
    #: Where the record came from when it is not this clone's (``fetched from origin``), else None.
    foreign: str | None = None
    #: The worktree's agent settings masked inside the confinement (a foreign run's, :mod:`sandbox.confine.foreign`).
    masked: list[str] = field(default_factory=list)


def recorded_isolation(run: Run) -> str | None:
    """How the last ``sandbox run`` session of the run was confined (its note's ``isolation``), or None."""
    recorded = agent_command(run)
    return recorded.isolation if recorded is not None else None


def trusted_isolation(run: Run) -> str | None:
    """:func:`recorded_isolation` when this clone wrote it; None for a record from elsewhere (ignored)."""
    recorded = agent_command(run)
    return recorded.isolation if recorded is not None and recorded.foreign is None else None


def confinement_of(phrase: str | None) -> tuple[str | None, str | None]:
    """The ``--isolate`` and ``--network`` that give a relaunch the confinement recorded as ``phrase``.

    ``phrase`` is what the session's note says (``bwrap, network allow (hosts)``, ``off``, ...);
    None, or a session confined by a calling agent's sandbox (``inherited``), leaves both to the
    settings. The backend itself is not kept: bubblewrap and Seatbelt make the same promise.
    """
    if phrase is None or phrase.startswith("inherited"):
        return None, None
    if phrase == "off":
        return "off", None
    _backend, _, rest = phrase.partition(", ")
    mode = rest.removeprefix("network ").split(" ", 1)[0] if rest.startswith("network ") else ""
    return "on", mode if mode in ("allow", "on", "off") else None


def place_transcript(
    run: Run, agent: sessions.AgentSessions, session: str, homes: Sequence[str], cwd: str
) -> tuple[str | None, bool]:
    """Make sure the agent finds ``session`` here: (its transcript's path or None, whether it was written).

    Found only outside the home the agent is relaunched with (the run's own: a session of an older
    run, kept in your ``~/.codex``), the run's stored copy is written there, where it will look.
    """
    path = agent.find(session, transcripts.homes_for(run, session, homes, transcripts.fetched_sessions(run)))
    primary = primary_home(homes)
    if path is not None and (primary is None or path.startswith(primary.rstrip("/") + "/")):
        return path, False
    stored = transcripts.latest(run, session)
    if stored is None or primary is None:
        return path, False
    dest = transcripts.write_for_agent(agent, homes, cwd, session, transcripts.load(run, stored))
    return (dest, True) if dest is not None else (path, False)


def block_uncertain(run: Run, report: ResumeReport) -> list[str]:
    """Deny every uncertain call that must not be repeated blindly, until the user approves it; their ids."""
    blocked = []
    state = run.state()
    for call_id in [*report.do_not_replay, *report.ask_first]:
        entry = state.calls.get(call_id)
        if entry is None or entry.approval is not None:
            continue  # the user already decided: approved stays approved
        reason = (
            "its outcome is unknown: the agent was interrupted while it ran. Check what it did (files, processes) "
            f"instead of running it again; the user can allow it with 'sandbox approve {run.run_id} {call_id}'"
        )
        run.record(EventKind.call_denied, call_id, reason=reason, epoch=state.epoch)
        blocked.append(call_id)
    return blocked


def _prompt(report: ResumeReport, continued: bool, blocked: list[str], run: Run) -> str:
    note = report.note
    if continued:
        note = note.replace(
            "Resumed without a checkpoint: no message history was saved; rely on these observations.", ""
        ).strip()
        head = (
            "The sandbox stopped and resumed this session (the agent was interrupted). This is the sandbox's "
            "record of what happened since; the conversation above is yours."
        )
    else:
        head = (
            "The sandbox resumed an interrupted run, but your earlier conversation could not be found here, so "
            "this is a new session. This is the sandbox's record of what happened."
        )
    parts = [head, note]
    if blocked:
        parts.append(
            f"Calls {', '.join(blocked)} are blocked until the user approves them: the same command with the same "
            "input will be refused. Check the current state first and continue the task from there."
        )
    return "\n\n".join(p for p in parts if p)


def check_subdir(worktree: str, subdir: str) -> str:
    """``subdir`` when it is a directory inside ``worktree`` reached without a link; else refused in one line.

    It becomes the agent's working directory and names where its session is kept: a recorded one
    (a fetched run's is anybody's text) or one taken from where the user stands must not lead out.
    """
    if not subdir:
        return ""
    parts = subdir.split("/")
    if os.path.isabs(subdir) or "\0" in subdir or any(p in ("", ".", "..") for p in parts):
        raise CannotContinueError(
            f"The subdirectory {subdir!r} to start the agent in is not a plain relative path inside the run's "
            "worktree; run the command from the worktree's root or from your tree's."
        )
    current = worktree
    for part in parts:
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except OSError:
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode):
            link = st is not None and stat.S_ISLNK(st.st_mode)
            raise CannotContinueError(
                f"The subdirectory {subdir!r} to start the agent in "
                + (f"goes through the link {os.path.relpath(current, worktree)!r}" if link else "is no directory")
                + " in the run's worktree; run the command from the worktree's root or from your tree's."
            )
    return subdir


def program_on_path(program: str, search_path: Sequence[str], run: Run) -> str | None:
    """The first executable ``program`` in ``search_path`` (the user's PATH), outside the run; or None.

    Relative entries (``.``, empty) are skipped: they would name the agent's own files in the worktree.
    """
    inside = [os.path.realpath(run.worktree), os.path.realpath(run.dir)]
    for folder in search_path:
        if not folder or not os.path.isabs(folder):
            continue
        candidate = os.path.join(folder, program)
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        real = os.path.realpath(candidate)
        if any(real == root or real.startswith(root + os.sep) for root in inside):
            continue
        return candidate
    return None


def _foreign_argv(
    run: Run, agent: sessions.AgentSessions, recorded: RecordedCommand, search_path: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """The recorded command line of a run from elsewhere, made safe to run here; and what was said about it."""
    where = recorded.foreign
    if search_path is None:
        program = agent.program  # the caller's PATH finds it (a library caller that gives none)
    else:
        found = program_on_path(agent.program, search_path, run)
        if found is None:
            raise CannotContinueError(
                f"Run {run.run_id} was {where}, so its agent is started as {agent.program!r} found on your PATH, "
                f"and there is none; install {agent.name} or put it on your PATH, then continue again."
            )
        program = found
    argv, dropped = agent.carried(recorded.argv, program)
    messages = []
    if recorded.argv[0] != agent.program:
        messages.append(
            f"the record of run {run.run_id} ({where}) names the program {recorded.argv[0]!r}; "
            f"{program} from your PATH runs instead."
        )
    for words in dropped:
        messages.append(
            f"dropped the recorded option {words!r} (a run {where} keeps only the options {agent.name} lists as "
            "safe; give it after '--' if you trust it)."
        )
    return argv, messages


def _shown(argv: Sequence[str], prompt: str) -> str:
    """The command line as a person reads it, the prompt (the sandbox's note) as a placeholder."""
    return " ".join("<note>" if a == prompt else shlex.quote(a) for a in argv)


def plan(
    run: Run,
    report: ResumeReport | None,
    homes: Mapping[str, Sequence[str]],
    extra: Sequence[str] = (),
    subdir: str | None = None,
    prompt: str | None = None,
    isolate: str | None = None,
    network: str | None = None,
    search_path: Sequence[str] | None = None,
) -> ContinuePlan:
    """Decide what ``resume --continue`` starts (steps 1-4 of the module docstring); blocks calls.

    ``subdir``: where in the worktree the agent will start (default: where it ran before).
    ``report`` None with a ``prompt`` (``rewind --continue``): no resume note, no calls blocked.
    ``isolate``/``network``: the user's explicit choice, over the confinement the session ran with.
    ``search_path``: the user's PATH, where the agent of a run from elsewhere is found (step 5).
    """
    recorded = agent_command(run)
    if recorded is None:
        raise CannotContinueError(
            f"Run {run.run_id} has no agent command recorded ('sandbox run' records it); start your agent yourself "
            f"with the note from 'sandbox resume {run.run_id}'."
        )
    argv = recorded.argv
    subdir = check_subdir(run.worktree, recorded.subdir if subdir is None else subdir)
    agent = sessions.for_command(argv)
    if agent is None:
        raise CannotContinueError(
            f"Run {run.run_id}'s agent ({os.path.basename(argv[0])}) cannot be continued by the sandbox yet (Claude "
            f"Code, Gemini CLI and Codex can); start it yourself with the note from 'sandbox resume {run.run_id}'."
        )
    messages: list[str] = []
    if recorded.foreign is not None:
        argv, said = _foreign_argv(run, agent, recorded, search_path)
        messages.extend(said)
    agent_homes = list(homes.get(agent.name, ()))
    transcripts.capture(run, homes, "resume")
    session = current_session(run)
    cwd = os.path.join(run.worktree, subdir) if subdir else run.worktree
    path, restored = (None, False)
    if session is not None:
        path, restored = place_transcript(run, agent, session, agent_homes, cwd)
    continued = path is not None
    blocked = block_uncertain(run, report) if report is not None else []
    pending = comments.unsent(run) if report is not None else []
    if report is not None:
        prompt = _prompt(report, continued, blocked, run)
        if pending:  # the reviewer's words, as the next user message
            prompt = f"{prompt}\n\n{comments.message(run, pending)}"
    elif prompt is None or not prompt.strip():
        raise ValueError("plan() needs a resume report or a prompt")
    # The worktree's agent settings are someone else's while the run holds anything from elsewhere, even
    # once a session continued here made the record this clone's own.
    guard = foreign_launch(run, agent, recorded.foreign, subdir)
    untrusted, masked = (guard.untrusted, guard.masked) if guard is not None else ((), [])
    messages.extend(guard.messages if guard is not None else [])
    outside = guard.where if guard is not None else None
    new_argv = [*agent.relaunch(argv, session if continued else None, prompt, path), *untrusted, *extra]
    if pending:
        comments.mark_sent(run, pending, session if continued else None, agent.name)
        messages.append(f"handing {len(pending)} review comment(s) to the agent: {', '.join(c.id for c in pending)}.")
    if continued:
        where = "from the run's stored copy" if restored else "where the agent left it"
        messages.insert(0, f"continuing {agent.name} session {session} ({where}).")
    else:
        messages.insert(0, f"no conversation of run {run.run_id} was found; the agent starts a new session.")
    if blocked:
        messages.append(f"blocked until approved: {', '.join(blocked)}.")
    messages.append(f"the agent runs as: {_shown(new_argv, prompt)}.")
    isolate, network, said = _confinement(recorded, isolate, network)
    return ContinuePlan(
        isolate=isolate,
        network=network,
        recorded_isolation=recorded.isolation,
        argv=new_argv,
        subdir=subdir,
        agent=agent.name,
        session=session if continued else None,
        transcript=path,
        restored=restored,
        blocked=blocked,
        prompt=prompt,
        messages=[*messages, *said],
        foreign=outside,
        masked=masked,
    )


@dataclass
class ForeignLaunch:
    """What an agent launched on a run holding anything from elsewhere is kept from (:func:`foreign_launch`)."""

    #: Where the run's events from elsewhere came from (``fetched from origin``).
    where: str
    #: The agent's options that keep it from loading the worktree's settings (added to its command).
    untrusted: tuple[str, ...] = ()
    #: The worktree's agent settings masked inside the confinement (:func:`sandbox.confine.foreign.settings_paths`).
    masked: list[str] = field(default_factory=list)
    #: What is said about it, one sentence each.
    messages: list[str] = field(default_factory=list)


def foreign_launch(
    run: Run, agent: sessions.AgentSessions | None, recorded_from: str | None = None, subdir: str = ""
) -> ForeignLaunch | None:
    """The one rule for every launch of an agent on a run (``sandbox run RUN -- AGENT``, ``resume`` and
    ``rewind --continue``): None while every event of the run is this clone's (its MAC verifies);
    else the worktree's agent settings (hooks, MCP servers: whoever wrote the run chose them) are not
    loaded: masked inside the confinement whatever the program (:mod:`sandbox.confine.foreign`, down to
    ``subdir``, where it starts), and skipped by the agent's own switches when it has them. The caller
    asks before the user's login is copied into the run's agent home.
    ``recorded_from``: where the agent command on record came from, when it is not this clone's."""
    outside = recorded_from or foreign_origin(run)
    if outside is None:
        return None
    guard = ForeignLaunch(outside)
    if agent is not None:
        guard.untrusted = agent.untrusted_worktree()
    if guard.untrusted and agent is not None:
        guard.messages.append(
            f"the worktree's own {agent.name} settings and MCP servers are not loaded (a run {outside}): "
            f"{' '.join(guard.untrusted)}."
        )
    guard.masked = foreign.settings_paths(run.worktree, subdir, settingstree.recorded(run))
    if guard.masked:
        guard.messages.append(foreign.said(run.worktree, guard.masked, run.run_id, outside))
    return guard


def foreign_origin(run: Run) -> str | None:
    """Where the run's events from elsewhere came from (:func:`sandbox.agent.transcripts.origin`), or None
    when every event is this clone's own (its MAC verifies: the fold counts those that do not)."""
    if run.state().foreign == 0:
        return None
    return transcripts.origin(run)


def _confinement(
    recorded: RecordedCommand, isolate: str | None, network: str | None
) -> tuple[str | None, str | None, list[str]]:
    """The relaunch's ``--isolate`` and ``--network`` (None: the settings), and what to say about them.

    "Same flags as recorded": the session's own confinement, not today's settings (a session that
    ran unconfined, as Codex's whose tools are 'sandbox mcp''s, stays unconfined; a confined one is
    never relaunched with less because the settings changed since). Not so for a record from
    elsewhere: it runs confined whatever the settings say (their network choice stands), and only
    the user's own options choose otherwise.
    """
    phrase = recorded.isolation
    said = []
    was_isolate: str | None
    was_network: str | None
    if recorded.foreign is not None:
        if phrase is not None:
            said.append(
                f"ignored the recorded confinement ({phrase}): a run {recorded.foreign} runs confined, "
                "with the network your settings give 'sandbox run'."
            )
        was_isolate, was_network = "on", None
    else:
        was_isolate, was_network = confinement_of(phrase)
    if isolate is not None or network is not None:
        asked = " ".join(f"--{k} {v}" for k, v in (("isolate", isolate), ("network", network)) if v)
        said.append(f"relaunched with {asked} as you asked (its session ran: {phrase or 'not recorded'}).")
    elif recorded.foreign is not None:
        pass  # said above: confined, whatever the record says
    elif was_isolate == "off":
        said.append("relaunched without OS confinement, as its recorded session ran.")
    elif was_isolate == "on":
        said.append(f"relaunched confined as its recorded session ran ({phrase}).")
    return (
        isolate if isolate is not None else was_isolate,
        network if network is not None else (was_network if isolate != "off" else None),
        said,
    )
