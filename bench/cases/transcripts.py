"""The agent's conversation kept with the run (issue #22): storage per checkpoint, and ``resume --continue``.

Storage: a Claude Code-shaped transcript (an assistant ``tool_use`` record and a user
``tool_result`` record per call, ~1.5 KB a call) grows to 500 calls; it is stored after every 50
calls (a checkpoint), with :func:`sandbox.agent.transcripts.store` (line-aligned chunks, only new
ones written), against storing the whole transcript as one blob each time (the reference: what a
copy per checkpoint costs without dedup). Rows: seconds per store at 500 calls, and the bytes each
store wrote, relative to the bytes the transcript grew by.

Continue: the whole ``sandbox resume RUN --continue`` process until the agent it relaunches has
started (a stand-in ``claude`` that writes the time it started into the worktree and exits: the
time to the agent's first request, minus the agent's own start), against ``sandbox run RUN --
claude`` measured the same way (reference). The same for Codex (a stand-in ``codex``), on a run
holding a Codex session of 200 calls and its stored rollout, as ``resume --continue`` finds it
in another clone: not on this machine, written back from the run's copy, then ``codex exec resume``.
The agent's own start-up comes on top of both and is not ours: ``codex exec resume ID`` run directly
took 2.8-8.2 s (median 6.0 s) to its first model request on the 2-core machine at load 14, and
``sandbox resume --continue`` 4.0-7.2 s (median 5.5 s) in the same loop (2026-12-01).
Measured at the smallest size only: both follow the run, not the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from typing import Any

from bench.cases import Context, rotate, settle
from bench.genrepo import Repo
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "transcripts"
CALLS = 500
EVERY = 50
SESSION = "9a0c3e1e-0000-4000-8000-00000000beef"
STORE = "store with dedup (sandbox)"
WHOLE = "whole transcript as one blob"
STARTED = "started.txt"
CODEX_SESSION = "9a0c3e1e-0000-4000-8000-00000000c0de"


def _lines(start: int, count: int, salt: int = 0) -> bytes:
    """``count`` calls from ``start``; ``salt`` makes each repetition's bytes new to the object store."""
    out = []
    for n in range(start, start + count):
        tool = f"toolu_{n:06d}"
        use = {
            "type": "tool_use",
            "id": tool,
            "name": "Bash",
            "input": {"command": f"make step-{n}.{salt} " + "x" * 600},
        }
        out.append({"type": "assistant", "sessionId": SESSION, "message": {"id": f"msg_{n}", "content": [use]}})
        done = {"type": "tool_result", "tool_use_id": tool, "content": "ok " * 100}
        out.append({"type": "user", "sessionId": SESSION, "message": {"role": "user", "content": [done]}})
    return b"".join(json.dumps(r).encode() + b"\n" for r in out)


def run(ctx: Context, repo: Repo) -> None:
    """Both measurements at the smallest size."""
    if repo.size != min(ctx.sizes):
        return
    _storage(ctx.results, ctx, repo)
    _continue(ctx.results, ctx, repo)
    _continue(ctx.results, ctx, repo, "codex")


def _storage(res: Results, ctx: Context, repo: Repo) -> None:
    from sandbox.agent import sessions, transcripts
    from sandbox.run.run import Run
    from sandbox.store import objects
    from sandbox.store.project import Project

    data_root = os.path.join(repo.scratch, "data")
    project, workdir, _ = Project.discover(repo.path, data_root)
    assert workdir is not None
    agent = sessions.ClaudeCode()
    group = f"storing a transcript every {EVERY} calls, up to {CALLS}"
    bytes_group = f"bytes written per store at {CALLS} calls (the transcript grew by {EVERY} calls)"
    res.row(CASE, repo.size, group, WHOLE, ref=True)
    res.row(CASE, repo.size, bytes_group, "transcript growth", unit="B", ref=True)
    for i in ctx.rounds(3, budget=60):
        run = Run.start(project, workdir, label="transcripts")
        data = b""
        for calls in range(EVERY, CALLS + 1, EVERY):
            grew = _lines(calls - EVERY, EVERY, salt=i)
            data += grew
            last = calls == CALLS
            for variant in rotate([STORE, WHOLE], i):
                settle()
                t0 = time.perf_counter()
                if variant == STORE:
                    transcripts.store(run, "claude-code", SESSION, data, agent.calls(data), f"checkpoint {calls}")
                else:
                    with run.lock(), objects.batch(run.repo):
                        objects.write_blob(run.repo, data + b"\n" * (i + 1))  # new bytes each time: no dedup
                seconds = time.perf_counter() - t0
                if last:
                    res.add(CASE, repo.size, group, variant, seconds)
            if last:
                written = transcripts.records(run)[-1]["new_bytes"]
                res.add(CASE, repo.size, bytes_group, "new chunks written (sandbox)", float(written), unit="B")
                res.add(CASE, repo.size, bytes_group, "whole transcript", float(len(data)), unit="B")
                res.add(CASE, repo.size, bytes_group, "transcript growth", float(len(grew)), unit="B", ref=True)
        run.drop(force=True)


def _fake_agent(directory: str, name: str = "claude") -> str:
    """A stand-in agent named ``name``: it writes when it started (epoch seconds) and exits."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f"#!/bin/sh\ndate +%s.%N > {STARTED}\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _codex_session(run: Any, calls: int = 200) -> None:
    """Give ``run`` a Codex session of ``calls`` recorded calls and its rollout, stored with the run."""
    from sandbox.agent import sessions, transcripts

    lines = [json.dumps({"type": "session_meta", "payload": {"id": CODEX_SESSION, "cwd": run.worktree}})]
    for n in range(calls):
        call_id = f"call_{n:04d}"
        started = run.start_call("write_file", {"path": f"a{n}.txt"}, call_id=call_id, agent_session=CODEX_SESSION)
        run.finish_call(started, "succeeded", paths=[])
        for item in (
            {"type": "function_call", "call_id": call_id, "name": "write_file", "arguments": "{}"},
            {"type": "function_call_output", "call_id": call_id, "output": "ok " * 100},
        ):
            lines.append(json.dumps({"type": "response_item", "payload": item}))
    data = ("\n".join(lines) + "\n").encode()
    transcripts.store(run, "codex", CODEX_SESSION, data, sessions.Codex().calls(data), "session end")


def _continue(res: Results, ctx: Context, repo: Repo, agent: str = "claude") -> None:
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    data_root = os.path.join(repo.scratch, "data")
    env = {"XDG_DATA_HOME": data_root, "SANDBOX_HOOK_AUTOSTART": "0"}
    claude = _fake_agent(os.path.join(repo.scratch, "fake-agent"), agent)
    project, workdir, _ = Project.discover(repo.path, data_root)
    assert workdir is not None
    run = Run.start(project, workdir, label="continue")
    started = os.path.join(run.worktree, STARTED)
    group = "to the agent's start" + ("" if agent == "claude" else f" ({agent})")
    if agent == "codex":
        _codex_session(run)
        codex_home = os.path.join(repo.scratch, "codex-home")
        env["CODEX_HOME"] = codex_home  # emptied before each continue: the rollout comes from the run

        def forget() -> None:
            from sandbox.agent.adapters import codex

            shutil.rmtree(codex_home, ignore_errors=True)
            os.makedirs(codex_home)
            # 'sandbox run' points Codex at the run's own home: the copy placed there is forgotten too.
            shutil.rmtree(os.path.join(codex.config_home(run.dir), "sessions"), ignore_errors=True)

    def measure(argv: list[str], variant: str, ref: bool = False) -> None:
        if os.path.exists(started):
            os.unlink(started)
        t0 = time.time()
        p = run_proc(argv, env=env, check=False)
        assert p.returncode == 0, p.stderr
        with open(started, encoding="ascii") as fh:
            res.add(CASE, repo.size, group, variant, float(fh.read().strip()) - t0, ref=ref)

    prompt = ["-p", "Do it."] if agent == "claude" else ["exec", "Do it."]

    def plain_run() -> None:
        measure([SANDBOX, "-C", repo.path, "run", run.run_id, "--", claude, *prompt], "sandbox run", True)

    def resume_continue() -> None:
        if agent == "codex":
            forget()
        measure([SANDBOX, "-C", repo.path, "resume", run.run_id, "--continue"], "sandbox resume --continue")

    plain_run()  # records the agent command resume --continue relaunches
    res.row(CASE, repo.size, group, "sandbox run", ref=True).stats.samples.clear()
    for i in ctx.rounds(5, budget=60):
        for fn in rotate([plain_run, resume_continue], i):
            settle()
            fn()
    run.drop(force=True)


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """resume --continue within 1 s of the agent's start; a store at 500 calls writes O(new bytes)."""
    small = min(sizes)
    out = []
    for agent in ("", " (codex)"):
        row = results.find(CASE, small, "to the agent's start" + agent, "sandbox resume --continue")
        ref = results.find(CASE, small, "to the agent's start" + agent, "sandbox run")
        name = f"what `resume --continue` adds before the agent{agent} starts, over `sandbox run`"
        if row is None or ref is None:
            out.append(Target(name, "<= 1 s", "-", None))
        else:
            added = row.stats.median - ref.stats.median
            measured = f"{added:.2f} s ({row.stats.median:.2f} s vs {ref.stats.median:.2f} s)"
            out.append(Target(name, "<= 1 s", measured, added <= 1.0))
    group = f"bytes written per store at {CALLS} calls (the transcript grew by {EVERY} calls)"
    new = results.find(CASE, small, group, "new chunks written (sandbox)")
    whole = results.find(CASE, small, group, "whole transcript")
    grew = results.find(CASE, small, group, "transcript growth")
    if new is None or whole is None or grew is None:
        out.append(Target(f"storing a {CALLS}-call transcript per checkpoint", "O(new bytes)", "-", None))
    else:
        n, w, g = new.stats.median, whole.stats.median, grew.stats.median
        measured = f"{n / 1024:.0f} KB written for {g / 1024:.0f} KB of growth ({w / 1024:.0f} KB whole)"
        out.append(Target(f"storing a {CALLS}-call transcript per checkpoint", "O(new bytes)", measured, n < 2 * g))
    return out
