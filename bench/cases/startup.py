"""Start-up: whole-process time of the fast commands against ``python3 -c pass`` (issue 14).

A small repository (50 files) with one run; ``sandbox list``, ``status``, ``log``, ``path`` and
``--help`` are run as processes, interleaved with ``python -c pass`` of the interpreter the
sandbox runs on (the reference), so load on the machine hits them alike. ``apply`` of a 1-file
patch: a call changing one file is recorded (not timed), applied by a ``sandbox apply --call``
process (timed), then a call writing the file back is recorded and applied (not timed). The fast
commands read the run's sealed fold cache (sandbox.fast.foldcache); ``status`` right after another
process appended to the ledger takes the full path once, and is measured on its own row. Measured
once, on its own repository, whatever ``--sizes`` says: start-up does not depend on it.

The row ``import click, pygit2, sandbox.models`` is what any in-process apply must load before it
does anything (the CLI, libgit2, the persisted formats): it shows how much of apply's ratio is that
floor and how much is sandbox's own. ``import click`` is the same floor for the fast commands.

The hook (issue 30): the command Claude Code runs for ``sandbox hook claude-code`` as installed
(:func:`sandbox.cli.hooks_cmd.hook_command`: the interpreter with ``-I -S``), fed a PreToolUse Read
payload with a new call id each time, while ``sandbox serve`` hosts the repository (the hook hands
the event over its socket), as a whole process; Claude Code starts it through ``sh -c``, measured
on the row after it. Measure from a wheel install (``python -m build --wheel`` into a fresh venv,
then ``VENV/bin/python -m bench.run --only startup`` from the source tree): an editable install
adds ~30 ms to every Python start in its venv.

The package is byte-compiled first by ``bench.run`` (as ``pip install`` does): with ``PYTHONDONTWRITEBYTECODE`` set,
an editable install would otherwise compile every module from source on every run (measured: about
a third of ``sandbox list``'s start-up).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time

from bench.cases import Context, rotate
from bench.genrepo import Repo, git
from bench.results import Results, Target
from bench.timing import SANDBOX, run_proc

CASE = "startup"
GROUP = "50-file repository"
REF = "python3 -c pass (same interpreter)"
FAST = ("--help", "list", "status", "log", "path")
APPLY = "apply --call (1-file patch)"
BEHIND = "status, first after another process appended (full path)"
#: What any in-process apply must load: click, pygit2 and the persisted formats (pydantic models).
FLOOR = "python3 -c 'import click, pygit2, sandbox.models' (apply's floor)"
CLICK = "python3 -c 'import click' (the fast commands' floor)"
HOOK = "sandbox hook claude-code, the installed -I -S command, host up (PreToolUse Read)"
HOOK_SH = "the same through sh -c (as Claude Code starts it)"
#: The hook's floor measured the same way: an interpreter started as the hook is (``-I -S``) that only reads
#: its payload, through ``sh -c``; and the host's answer alone (``hookproto.forward`` in this process: the
#: host's checks and the ledger's write, fsyncs included), which no client can go below.
HOOK_FLOOR = "floor: python3 -I -S reading the payload, through sh -c"
HOOK_HOST = "the host's answer alone (hookproto.forward in-process, PreToolUse Read)"
FILES = 50
_done: set[str] = set()


def _small_repo(scratch: str, name: str = "startup-repo") -> str:
    root = os.path.join(scratch, name)
    if os.path.isdir(root):
        import shutil

        shutil.rmtree(root)
    os.makedirs(root)
    git(["init", "-q"], cwd=root)
    for i in range(FILES):
        with open(os.path.join(root, f"f{i:02d}.txt"), "w", encoding="utf-8") as fh:
            fh.write(f"line {i}\n")
    git(["add", "-A"], cwd=root)
    git(["commit", "-q", "-m", "small"], cwd=root)
    return root


def run(ctx: Context, repo: Repo) -> None:
    """Measure every variant, interleaved (once per benchmark run)."""
    if CASE in _done:
        return
    _done.add(CASE)
    from sandbox.merge import mergeback
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    res = ctx.results
    root = _small_repo(repo.scratch)
    project, workdir, _ = Project.discover(root)
    assert workdir is not None
    sandbox_run = Run.start(project, workdir)
    counter = [0]

    def ref() -> None:
        p = run_proc([sys.executable, "-c", "pass"], cwd=root)
        res.add(CASE, None, GROUP, REF, p.seconds, ref=True)

    def fast(command: str) -> None:
        args = [command] if command in ("--help", "list") else [command, sandbox_run.run_id]
        p = run_proc([SANDBOX, *args], cwd=root, rss=True)
        res.add(CASE, None, GROUP, f"sandbox {command}", p.seconds, rss_kb=p.max_rss_kb)

    def apply() -> None:
        counter[0] += 1
        with sandbox_run.tool_call("Write", {"n": counter[0]}) as call:
            call.write("f00.txt", f"agent {counter[0]}\n")
        assert call.call_id is not None
        p = run_proc([SANDBOX, "apply", sandbox_run.run_id, "--call", call.call_id], cwd=root, rss=True)
        res.add(CASE, None, GROUP, f"sandbox {APPLY}", p.seconds, rss_kb=p.max_rss_kb)
        # The original content back, in the run and then in the user's tree (not timed).
        with sandbox_run.tool_call("Write", {"n": counter[0], "restore": True}) as back:
            back.write("f00.txt", "line 0\n")
        assert back.call_id is not None
        restoring = Run.open(Project(project.common_dir), sandbox_run.run_id)
        mergeback.apply(restoring, calls=[back.call_id])
        restoring.seal_cache()  # as the CLI leaves it after any command that opened the run

    def behind() -> None:
        # Another process appended (an agent's hook, recorded by the host) and nothing read the run
        # since: the cache is behind the ledger, so this status takes the full path (and re-seals).
        Run.open(Project(project.common_dir), sandbox_run.run_id).note({"bench": "behind"})
        p = run_proc([SANDBOX, "status", sandbox_run.run_id], cwd=root, rss=True)
        res.add(CASE, None, GROUP, BEHIND, p.seconds, rss_kb=p.max_rss_kb)

    def floor(code: str, variant: str) -> None:
        p = run_proc([sys.executable, "-c", code], cwd=root, rss=True)
        res.add(CASE, None, GROUP, variant, p.seconds, rss_kb=p.max_rss_kb)

    # The hook's run is in a repository of its own: a call recorded there leaves its run's fold cache
    # behind the ledger until the host seals it, and 'list' would take the full path for it.
    hook_root = _small_repo(repo.scratch, "startup-hook-repo")
    hook_project, hook_workdir, _ = Project.discover(hook_root)
    assert hook_workdir is not None
    hook_run = Run.start(hook_project, hook_workdir)
    hook_argv = _hook_argv()

    def hook(shell: bool) -> None:
        counter[0] += 1
        payload = {
            **{"session_id": "bench", "cwd": hook_run.worktree, "hook_event_name": "PreToolUse"},
            **{"tool_name": "Read", "tool_input": {"file_path": os.path.join(hook_run.worktree, "f01.txt")}},
            "tool_use_id": f"toolu_bench_{os.getpid()}_{counter[0]}",
        }
        argv = ["sh", "-c", shlex.join(hook_argv)] if shell else hook_argv
        p = run_proc(argv, cwd=hook_run.worktree, input=json.dumps(payload).encode(), env=_NO_AUTOSTART, rss=True)
        res.add(CASE, None, GROUP, HOOK_SH if shell else HOOK, p.seconds, rss_kb=p.max_rss_kb)

    def hook_floor() -> None:
        reader = shlex.join([sys.executable, "-I", "-S", "-c", "import sys; sys.stdin.buffer.read()"])
        p = run_proc(["sh", "-c", reader], cwd=hook_run.worktree, input=b"{}" * 200, rss=True)
        res.add(CASE, None, GROUP, HOOK_FLOOR, p.seconds, rss_kb=p.max_rss_kb)

    def hook_host() -> None:
        from sandbox.agent import hookproto
        from sandbox.agent.adapters import claude_code

        counter[0] += 1
        payload = {
            **{"session_id": "bench", "cwd": hook_run.worktree, "hook_event_name": "PreToolUse"},
            **{"tool_name": "Read", "tool_input": {"file_path": os.path.join(hook_run.worktree, "f01.txt")}},
            "tool_use_id": f"toolu_bench_host_{os.getpid()}_{counter[0]}",
        }
        event = claude_code.to_event(payload)
        assert event is not None
        t0 = time.perf_counter()
        answer = hookproto.forward(hookproto.locate(event.cwd), event)
        res.add(CASE, None, GROUP, HOOK_HOST, time.perf_counter() - t0)
        assert answer is not None and answer.ok, answer
        # Its end (not timed): the host keeps this process as the open call's starter until then, and
        # refuses the next hook process (a child of this one) as sent from inside the call's command.
        ended = claude_code.to_event({**payload, "hook_event_name": "PostToolUse", "tool_response": {"ok": True}})
        assert ended is not None
        closing = hookproto.forward(hookproto.locate(ended.cwd), ended)
        assert closing is not None and closing.ok, closing

    variants = [ref, *[(lambda c=c: fast(c)) for c in FAST], apply, behind]
    variants += [lambda: floor("import click, pygit2, sandbox.models", FLOOR), lambda: floor("import click", CLICK)]
    host = _serve(hook_run.run_id, hook_root, hook_project.common_dir)
    if host:
        variants += [lambda: hook(False), lambda: hook(True), hook_floor, hook_host]
    else:
        res.skip(CASE, None, "the hook rows: 'sandbox serve' did not start a host")
    res.row(CASE, None, GROUP, REF, ref=True)
    try:
        for i in ctx.rounds(15, budget=150, minimum=5):
            for fn in rotate(variants, i):
                fn()  # type: ignore[operator]
    finally:
        from sandbox.agent.host import stop_host

        stop_host(hook_project.common_dir)
    Run.open(Project(project.common_dir), sandbox_run.run_id).drop(force=True)
    Run.open(Project(hook_project.common_dir), hook_run.run_id).drop(force=True)


#: The hook records nothing by itself if the host went away (it would spawn one).
_NO_AUTOSTART = {"SANDBOX_HOOK_AUTOSTART": "0"}


def _hook_argv() -> list[str]:
    """The hook command as ``sandbox hooks install claude-code`` writes it, for this interpreter: asked of
    the installed package (from ``/``, so not of the source tree ``python -m bench.run`` runs in)."""
    program = "from sandbox.cli.hooks_cmd import hook_command; print(hook_command('claude-code'))"
    done = subprocess.run([sys.executable, "-c", program], cwd="/", capture_output=True, text=True, check=True)
    return shlex.split(done.stdout.strip())


def _serve(run_id: str, root: str, common_dir: str) -> bool:
    """Start the repository's host (``sandbox serve``); True once it answers."""
    from sandbox.agent import wire

    run_proc([SANDBOX, "serve", run_id], cwd=root, check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if wire.Client(common_dir).ping() is not None:
            return True
        time.sleep(0.05)
    return False


def targets(results: Results, sizes: list[int]) -> list[Target]:
    """Fast commands within 3x of ``python3 -c pass`` (issue 30; ``import click`` alone is its floor),
    a 1-file apply within 8x, the installed hook command within 2.5x (whole process)."""
    ref = results.find(CASE, None, GROUP, REF)
    out = []
    goals = [*((f"sandbox {c}", 3.0) for c in FAST), (f"sandbox {APPLY}", 8.0), (HOOK, 2.5)]
    for variant, goal in goals:
        row = results.find(CASE, None, GROUP, variant)
        name = f"`{variant}` whole process vs `python3 -c pass`"
        if row is None or ref is None:
            out.append(Target(name, f"<= {goal:g}x", "-", None))
            continue
        ratio = row.stats.median / ref.stats.median
        measured = f"{row.stats.median * 1000:.0f} ms vs {ref.stats.median * 1000:.0f} ms = {ratio:.1f}x"
        out.append(Target(name, f"<= {goal:g}x", measured, ratio <= goal))
    return out
