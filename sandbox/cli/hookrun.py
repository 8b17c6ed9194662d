"""The body of ``sandbox hook <agent>``, importing only the standard library (the hook's fast path).

Claude Code waits for every hook, so a hook's cost is mostly the interpreter's start and its
imports: this module (and :mod:`sandbox.agent.hookproto`, :mod:`sandbox.agent.adapters`) imports no click, no
pygit2, no pydantic. :func:`sandbox.cli.main` runs it directly for ``sandbox hook AGENT
[--strict]``, before click is imported; the click command in :mod:`sandbox.cli.hook` calls it too.
When no host serves the repository, the event is recorded in this process (the git libraries are
imported then) and ``sandbox serve`` (the repository's host) is spawned for the next events.
"""

from __future__ import annotations

import io
import os
import sys

TYPE_CHECKING = False  # no typing at run time: this module is the hook's fast path
if TYPE_CHECKING:
    from typing import Any, BinaryIO, Protocol

    class Writer(Protocol):
        """Where the hook's output goes (a text stream)."""

        def write(self, text: str, /) -> int:
            """Write ``text``."""
            ...


EXIT_ERROR = 1
EXIT_BLOCK = 2
AUTOSTART_ENV = "SANDBOX_HOOK_AUTOSTART"


def run(agent: str, strict: bool, stdin: BinaryIO, stdout: Writer, stderr: Writer) -> int:
    """Read one hook payload from ``stdin``, record it, answer the agent; the exit code."""
    from sandbox.agent import hookproto
    from sandbox.errors import SandboxError

    success_stdout = ""
    respond: Any = None
    deny_answer: Any = None
    payload: Any = None
    outcome: hookproto.Outcome
    event: hookproto.HookEvent | None = None
    try:
        raw = stdin.read(hookproto.MAX_PAYLOAD + 1)
        payload = hookproto.read_payload(io.BytesIO(raw))
        if agent == "generic":
            event = hookproto.HookEvent.from_dict(payload)
        else:
            from sandbox.agent import adapters

            adapter = adapters.load(agent)
            success_stdout = str(adapter.SUCCESS_STDOUT)
            respond = getattr(adapter, "respond", None)
            deny_answer = getattr(adapter, "deny_answer", None)  # an adapter answering denials only
            event = adapter.to_event(payload)
        if event is not None and event.session is None:
            # Set by `sandbox run` for the agent and everything it starts (see sandbox.agent.procs).
            event.session = os.environ.get("SANDBOX_SESSION") or None
        if event is None:
            outcome = hookproto.Outcome(True)
        elif sys.flags.no_site:
            # Started without site-packages (the fast hook command): only the hand-over to the
            # repository's host can happen here; recording in-process needs the git libraries.
            answer = hookproto.forward(hookproto.locate(event.cwd), event)
            if answer is not None:
                outcome = answer
            elif _enable_site():
                from sandbox.agent import recorder

                outcome = recorder.handle(event, _autostart if autostart_allowed() else None)
            else:
                return _with_site(agent, strict, raw, stdout, stderr)
        else:
            from sandbox.agent import recorder

            outcome = recorder.handle(event, _autostart if autostart_allowed() else None)
    except SandboxError as exc:
        outcome = hookproto.Outcome(False, exc.message)
    except Exception as exc:  # the hook must never crash the agent's tool call with a traceback
        outcome = hookproto.Outcome(False, f"unexpected error: {type(exc).__name__}: {exc}")
    if outcome.note:  # once per run and host: say why its changes are found by scanning
        stderr.write(f"sandbox: note: {outcome.note}\n")
    if outcome.ok and respond is not None:
        text, code = respond(outcome, payload)  # the agent's own answer (e.g. a deny with its reason)
        if text or success_stdout:
            stdout.write((text or success_stdout) + "\n")
        return int(code)
    if outcome.ok and outcome.decision == "deny" and deny_answer is not None:
        text, code = deny_answer(outcome.reason)
        stdout.write(str(text) + "\n")
        return int(code)
    if outcome.ok and outcome.decision == "deny":
        # An agent without its own answer format: exit 2 blocks the call, the reason on stderr.
        stderr.write(f"sandbox: {outcome.reason}\n")
        return EXIT_BLOCK
    if outcome.ok:
        if success_stdout:
            stdout.write(success_stdout + "\n")
        return 0
    stderr.write(f"sandbox: {outcome.message}\n")
    return EXIT_BLOCK if (strict or outcome.strict) and _blocks_a_call(event, payload) else EXIT_ERROR


def _blocks_a_call(event: Any, payload: Any) -> bool:
    """Whether exit 2 would block a tool call (strict is about those): never for a turn's or a
    session's end, where exit 2 would make Claude Code go on instead of stopping."""
    if event is not None:
        return bool(event.phase == "start")
    name = payload.get("hook_event_name") if isinstance(payload, dict) else None
    return name in (None, "PreToolUse", "BeforeTool")


def _enable_site() -> bool:
    """Add site-packages now (started with ``-S``), so this process can record by itself."""
    import importlib.util
    import site

    site.main()
    return all(importlib.util.find_spec(name) is not None for name in ("pygit2", "pydantic"))


def _with_site(agent: str, strict: bool, raw: bytes, stdout: Writer, stderr: Writer) -> int:
    """Run the ordinary ``sandbox hook`` (site-packages and all) on the same payload; its exit code."""
    import subprocess

    exe = [beside()] if os.access(beside(), os.X_OK) else [sys.executable, "-I", "-m", "sandbox"]
    done = subprocess.run([*exe, "hook", agent, *(["--strict"] if strict else [])], input=raw, capture_output=True)
    stdout.write(done.stdout.decode("utf-8", "replace"))
    stderr.write(done.stderr.decode("utf-8", "replace"))
    return done.returncode


def fast_main(argv: list[str]) -> int | None:
    """``sandbox hook AGENT [--strict]`` without click: the exit code, or None for anything else."""
    if len(argv) < 2 or argv[0] != "hook" or any(a != "--strict" for a in argv[2:]):
        return None
    from sandbox.agent import adapters

    # Only this agent's adapter is imported (not every agent's, as hook_names() would).
    if argv[1] != "generic" and (argv[1] not in adapters.names() or not hasattr(adapters.agent(argv[1]), "to_event")):
        return None
    code = run(argv[1], "--strict" in argv[2:], sys.stdin.buffer, sys.stdout, sys.stderr)
    sys.stdout.flush()
    return code


def autostart_allowed() -> bool:
    """False when ``SANDBOX_HOOK_AUTOSTART`` is 0/false/no/off (tests, benchmarks)."""
    return os.environ.get(AUTOSTART_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _autostart(loc: Any) -> bool:
    """Spawn the repository's host for the next events, unless one lives or was just spawned; True if spawned."""
    from sandbox.agent import wire

    if wire.claim_spawn(loc.common_dir):
        spawn_service(loc.run_id, loc.worktree)
        return True
    return False


def beside() -> str:
    """The ``sandbox`` script next to this interpreter (a virtualenv's bin directory)."""
    return os.path.join(os.path.dirname(sys.executable), "sandbox")


def spawn_service(run_id: str, worktree: str, idle_exit: float | None = None) -> None:
    """Start the repository's host (``sandbox serve RUN``, in the run's worktree) without waiting for it."""
    import subprocess

    exe = [beside()] if os.access(beside(), os.X_OK) else [sys.executable, "-m", "sandbox"]
    # Faults are armed for the hook only; the host belongs to no agent session (a session's token in
    # its environment would make it one of that session's processes, stopped when the session ends).
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOX_FAULT", "SANDBOX_SESSION")}
    subprocess.Popen(
        [*exe, "-C", worktree, "serve", run_id, *(["--idle-exit", str(idle_exit)] if idle_exit else [])],
        cwd="/",  # not the worktree: `python -m` would put it on sys.path
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,  # the agent waits for its hook's output pipes to close
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
