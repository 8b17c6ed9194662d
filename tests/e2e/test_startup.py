"""Start-up budget (issue 14): each fast command imports only what it uses.

Not a wall-clock test (bench/cases/startup.py measures the ratios against ``python3 -c pass``):
``python -X importtime`` lists the modules a real ``sandbox`` process loaded, and each command may
load only the heavy ones named here. A command that starts importing more (the merge package for
``status``, pygit2 for ``--help``, the agent layer for ``log``) fails this test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import git, scaled

#: What counts as heavy: third-party packages, and library parts a read-only command has no use for.
HEAVY_PACKAGES = ("pygit2", "pydantic", "pydantic_core", "watchdog", "click")
HEAVY_PARTS = ("sandbox.merge", "sandbox.recovery", "sandbox.agent")
HEAVY_MODULES = (
    "sandbox.models",
    "sandbox.run.run",
    "sandbox.run.checkpoint",
    "sandbox.run.recording",
    "sandbox.store.capture",
    "sandbox.store.journal",
    "sandbox.store.snapshot",
)

READ = {"click", "pygit2", "pydantic", "pydantic_core", "sandbox.models", "sandbox.run.run"}
ALLOWED: dict[str, set[str]] = {
    "--help": {"click"},
    # list, status, log and path read the sealed fold cache with the standard library (sandbox.fast.foldcache)
    "list": {"click"},
    "status": {"click", "sandbox.agent"},  # only sandbox.agent.wire (stdlib): the line on the repository's host
    "log": {"click", "sandbox.agent"},  # only sandbox.agent.adapters.gemini (stdlib): its calls' TOOK note
    "path": {"click"},
    "diff": READ | {"sandbox.merge"},  # the patch preview lives with merge-back (sandbox.merge.preview)
    # a one-file apply plans and writes through the merge package and the write journal
    "apply": READ | {"sandbox.merge", "sandbox.store.journal", "sandbox.store.snapshot"},
}


#: Every library module a one-file ``sandbox apply RUN`` may load (besides the command's own module):
#: the merge-back path and what it stands on, and nothing else: not the hunk picker
#: (``sandbox.merge.hunks``, only for --hunks/--hunks-from), the patch preview, undo, recovery, the
#: agent layer or the checkpoint store. A module added here costs every apply its import time
#: (measured with bench/cases/startup.py).
APPLY_MODULES = {
    "sandbox",
    "sandbox.cli",
    "sandbox.cli.app",
    "sandbox.cli.commands",
    "sandbox.cli.escape",
    "sandbox.cli.edge",
    "sandbox.cli.which",  # the line naming the run acted on when a label or prefix named it (issue 33)
    "sandbox.cli.finding",
    "sandbox.cli.machine",  # the data directory (data_root), read without click for exec's quick path
    "sandbox.cli.group",
    "sandbox.cli.jsonout",
    "sandbox.escape",  # what the agent wrote, made safe to show (standard library only)
    "sandbox.cli.fmt",  # the report's paths, quoted as git quotes them (standard library only)
    "sandbox.cli.quick",  # the entry point's forms answered without click (not apply: it falls through)
    "sandbox.cli.output",
    "sandbox.cli.plain",  # output.py's colour and pager decisions, made without click (the quick path's too)
    "sandbox.cli.selection",
    "sandbox.errors",
    "sandbox.faults",
    "sandbox.store.provenance",  # which events this clone wrote: the ledger reads each event's MAC (issue 33)
    "sandbox.store.durable",  # the ledger's append: objects, then the ref, fsyncs of a phase together (issue 30)
    "sandbox.merge",
    "sandbox.merge.brings",  # what the run brings: the one decision diff and apply read
    "sandbox.merge.decide",  # the per-path verdict
    "sandbox.merge.mergeback",
    "sandbox.merge.obstacles",
    "sandbox.merge.planned",  # the plan's types
    "sandbox.merge.planning",
    "sandbox.merge.select",
    "sandbox.merge.validate",  # the plan checked whole before the journal (issue 25)
    "sandbox.merge.threeway",  # --3way's merge (git merge-file), imported with the plan
    "sandbox.merge.renames",  # renames paired as git diff -M pairs them: the plan's refusal names them
    "sandbox.fast.renamepairs",  # the pairing itself, standard library (status counts renames with it too)
    "sandbox.merge.writing",  # the journaled write
    "sandbox.models",
    # the persisted formats, one module per format (the package's __init__ names them all)
    *(f"sandbox.models.{m}" for m in ("base", "event", "mergeback", "payloads", "ledgerstate", "journal")),
    *(f"sandbox.models.{m}" for m in ("applyreport", "checkpoint", "resume", "host", "integrity", "fetched")),
    "sandbox.models.eventdata",
    "sandbox.models.transcript",
    "sandbox.models.sysview",  # the system view's cache (the package names every persisted format)
    "sandbox.models.settingsfound",  # where a run's tree holds agent settings (the package names them all)
    "sandbox.run",
    "sandbox.run.config",
    "sandbox.run.core",  # the run's state and write path (sandbox.run.run names the operations on its calls)
    "sandbox.run.fold",  # how the ledger's events fold into the calls' state
    "sandbox.run.ids",
    "sandbox.run.include",
    "sandbox.run.names",
    "sandbox.run.run",
    "sandbox.run.verify",  # the ledger checked against its commits before apply decides (issue 25)
    "sandbox.store",
    "sandbox.store.convert",
    "sandbox.store.agentread",  # the run's files read beneath the worktree, no link followed (standard library)
    "sandbox.store.beneath",
    "sandbox.store.fsutil",
    "sandbox.store.blobreads",  # blobs read once per apply (verified, then diffed for hunks); standard library
    "sandbox.store.gitcli",
    "sandbox.store.gitlib",  # pygit2 imported without parsing the CA bundle twice (issue 30; standard library)
    "sandbox.store.gitpath",  # git's path rules, for both of the above (standard library only)
    "sandbox.store.gitfiles",  # the converter's check that no FIFO waits where libgit2 reads (stdlib)
    "sandbox.store.integrity",
    "sandbox.store.journal",
    "sandbox.store.layout",
    "sandbox.store.ledger",
    "sandbox.store.locks",
    "sandbox.store.objects",
    "sandbox.store.lru",  # objects' cache of parsed commits and trees (split out of it)
    "sandbox.store.repository",  # the repositories written through, a run's own store's (split out of objects)
    "sandbox.store.packs",
    "sandbox.store.paths",
    "sandbox.fast",  # the package of the next line (git's pathspecs, standard library only)
    "sandbox.fast.pathspec",
    "sandbox.store.project",
    "sandbox.store.moved",  # a moved repository's runs follow it: one small read (standard library only)
    "sandbox.store.snapshot",
    "sandbox.store.snapadd",  # snapshot's first half (standard library only), with it
    "sandbox.store.treediff",
    "sandbox.store.sparse",
    "sandbox.store.trailers",  # the Sandbox-* trailers of the sandbox's commits (standard library only)
}


def loaded_names(stderr: str) -> set[str]:
    """Every module named in ``python -X importtime`` output."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if "|" in line} - {"imported package"}


def heavy_loaded(stderr: str) -> set[str]:
    """The heavy modules in ``python -X importtime`` output, by package or part."""
    out: set[str] = set()
    for line in stderr.splitlines():
        if "|" not in line:
            continue
        name = line.rsplit("|", 1)[1].strip()
        top = name.split(".")[0]
        if top in HEAVY_PACKAGES:
            out.add(top)
        for part in HEAVY_PARTS:
            if name == part or name.startswith(part + "."):
                out.add(part)
        if name in HEAVY_MODULES:
            out.add(name)
    return out


def importtime_of(args: list[str], cwd: Path) -> str:
    """The ``python -X importtime`` report of a real ``sandbox`` process."""
    script = str(Path(sys.executable).parent / "sandbox")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", script, *args], cwd=cwd, capture_output=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return proc.stderr.decode()


def imports_of(args: list[str], cwd: Path) -> set[str]:
    return heavy_loaded(importtime_of(args, cwd))


@pytest.fixture
def started(repo: Path) -> Run:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("write_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('agent')\n")
    run.seal_cache()  # as any command that opened the run leaves it (tests/fast/test_foldcache.py)
    return run


@pytest.mark.parametrize("command", ["--help", "list", "status", "log", "path", "diff"])
def test_a_fast_command_loads_only_what_it_may(command: str, repo: Path, started: Run) -> None:
    args = [command] if command in ("--help", "list") else [command, started.run_id]
    loaded = imports_of(args, repo)
    assert loaded <= ALLOWED[command], f"{command} also loads {sorted(loaded - ALLOWED[command])}"


def test_apply_of_a_one_file_patch_loads_only_what_it_may(repo: Path, started: Run) -> None:
    report = importtime_of(["apply", started.run_id, "--call", "@"], repo)
    loaded = heavy_loaded(report)
    assert loaded <= ALLOWED["apply"], f"apply also loads {sorted(loaded - ALLOWED['apply'])}"
    library = {name for name in loaded_names(report) if name == "sandbox" or name.startswith("sandbox.")}
    assert library <= APPLY_MODULES, f"apply also loads {sorted(library - APPLY_MODULES)}"
    assert (repo / "src/app.py").read_text() == "print('agent')\n"


def test_heavy_loaded_reads_importtime_lines() -> None:
    sample = (
        "import time: self [us] | cumulative | imported package\n"
        "import time:       120 |        120 |   pygit2._pygit2\n"
        "import time:        80 |        900 | sandbox.merge.mergeback\n"
        "import time:        10 |         10 | sandbox.store.layout\n"
    )
    assert heavy_loaded(sample) == {"pygit2", "sandbox.merge"}
    assert loaded_names(sample) == {"pygit2._pygit2", "sandbox.merge.mergeback", "sandbox.store.layout"}


#: What ``sandbox run RUN -- AGENT`` may load before the agent is spawned (issue #26's start-up): the
#: CLI (click) and the standard-library parts of the agent layer (sandbox.agent.early and what it
#: stands on: confinement, the host's wire, the allowlist proxy), never pygit2, pydantic or the run.
RUN_BEFORE_SPAWN = {"click", "sandbox.agent"}


@pytest.mark.parametrize("isolate", ["on", "off"])
def test_run_spawns_the_agent_before_the_heavy_imports(isolate: str, repo: Path, started: Run) -> None:
    # The armed point SIGKILLs 'sandbox run' right after the spawn, so the report ends there: no timing.
    script = str(Path(sys.executable).parent / "sandbox")
    args = ["run", started.run_id, "--isolate", isolate, "--hooks", "none", "--", "true"]
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", script, *args],
        cwd=repo,
        capture_output=True,
        check=False,
        timeout=120,
        env={**os.environ, "SANDBOX_FAULT": "run.agent_spawned"},
    )
    report = proc.stderr.decode()
    assert proc.returncode == -signal.SIGKILL, report[-2000:]  # it got as far as the spawn
    loaded = heavy_loaded(report)
    assert loaded <= RUN_BEFORE_SPAWN, f"sandbox run loads {sorted(loaded - RUN_BEFORE_SPAWN)} before the agent starts"
    assert "sandbox.agent.early" in loaded_names(report)
    # The allowlist proxy's socket listens before the spawn; its asyncio loop is imported after it.
    assert "asyncio" not in loaded_names(report)


def test_start_spawns_its_gits_before_the_heavy_imports(repo: Path, tmp_path: Path) -> None:
    """``sandbox start`` starts the checkout of your HEAD and the snapshot's ``git add`` before it imports
    click, pygit2 or pydantic (issue 30): killed right after the two spawns, the process had loaded none of
    them, and what it left is a run directory and a home that ``sandbox gc`` removes."""
    script = str(Path(sys.executable).parent / "sandbox")
    env = {**os.environ, "SANDBOX_FAULT": "start.after_spawn", "XDG_DATA_HOME": str(tmp_path / "data")}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", script, "start", "--json"],
        cwd=repo,
        capture_output=True,
        check=False,
        timeout=120,
        env=env,
    )
    report = proc.stderr.decode()
    assert proc.returncode == -signal.SIGKILL, report[-2000:]  # it got as far as the spawns
    loaded = heavy_loaded(report)
    assert not loaded, f"sandbox start loads {sorted(loaded)} before its checkout starts"
    assert {"sandbox.cli.earlystart", "sandbox.run.prestart", "sandbox.fast.gitread"} <= loaded_names(report)
    runs = repo / ".git" / "sandbox" / "runs"
    homes = tmp_path / "data" / "sandbox" / "repos"
    (run_id,) = os.listdir(runs)
    assert [os.listdir(homes / key) for key in os.listdir(homes)] == [[run_id]]
    del env["SANDBOX_FAULT"]
    gc = subprocess.run([script, "gc"], cwd=repo, capture_output=True, check=False, timeout=120, env=env)
    assert gc.returncode == 0, gc.stderr.decode()
    assert os.listdir(runs) == []
    assert [os.listdir(homes / key) for key in os.listdir(homes)] == [[]]


def _a_repository(root: Path, files: int) -> Path:
    """A repository of ``files`` one-line files with long names, committed (4,000 make an index over a MiB),
    and one of them edited."""
    root.mkdir()
    git(root, "init", "-q")
    long = "f" * 200
    for i in range(files):
        folder = root / f"d{i // 1000:02d}"
        if i % 1000 == 0:
            folder.mkdir()
        (folder / f"{long}{i:05d}.txt").write_text(f"{i}\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "big")
    (root / "d00" / f"{long}00000.txt").write_text("edited\n")
    return root


@pytest.mark.parametrize("files, slow_add, waits", [(4_500, False, True), (50, False, False), (4_500, True, False)])
def test_start_in_a_big_repository_imports_after_the_snapshots_add(
    tmp_path: Path, files: int, slow_add: bool, waits: bool
) -> None:
    """In a repository whose index is over a MiB, ``sandbox start`` imports click, pygit2 and pydantic only once
    the snapshot's ``git add`` has ended (issue 30, item 5): beside the checkout and the add, on two cores, the
    imports slowed the checkout. A git in front of the real one looks, when the add has ended and a moment
    later, whether the ``sandbox`` process has loaded pygit2; in a small repository it has (no wait), and so it
    has where the add outlasts the checkout (the wait ends with the checkout). The git in front orders the two
    gits by files (the one that should end last waits for the other's), so the order does not depend on the
    machine's load."""
    repo = _a_repository(tmp_path / "repo", files)
    wrapper = tmp_path / "bin"
    wrapper.mkdir()
    mark, checked_out = tmp_path / "mark", tmp_path / "checked-out"
    real = shutil.which("git")
    assert real is not None

    # A bounded wait (60 s) for a file to exist.
    def wait_for(path: Path) -> str:
        return f'i=0; while [ ! -e "{path}" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; '

    (wrapper / "git").write_text(
        "#!/bin/sh\n"
        'case " $* " in\n'
        f'  *" add -A "*) {wait_for(checked_out) if slow_add else ""}"{real}" "$@"; rc=$?; sleep {scaled(0.5):.1f}\n'
        f'    if grep -q pygit2 /proc/$PPID/maps; then echo loaded > "{mark}"; else echo waiting > "{mark}"; fi\n'
        "    exit $rc;;\n"
        f'  *" read-tree "*) {"" if slow_add else wait_for(mark)}"{real}" "$@"; rc=$?; touch "{checked_out}"\n'
        "    exit $rc;;\n"
        "esac\n"
        f'exec "{real}" "$@"\n'
    )
    (wrapper / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{wrapper}{os.pathsep}{os.environ['PATH']}", "XDG_DATA_HOME": str(tmp_path / "data")}
    script = str(Path(sys.executable).parent / "sandbox")
    proc = subprocess.run([script, "start", "--json"], cwd=repo, capture_output=True, check=False, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    assert mark.read_text().strip() == ("waiting" if waits else "loaded")
    run = Run.open(Project(str(repo / ".git")), json.loads(proc.stdout)["run"])
    assert (Path(run.worktree) / "d00" / f"{'f' * 200}00000.txt").read_text() == "edited\n"
    assert (Path(run.worktree) / "d00" / f"{'f' * 200}00001.txt").read_text() == "1\n"


def test_run_without_a_sealed_cache_takes_the_full_path(repo: Path, started: Run) -> None:
    # A run whose fold cache is not sealed at its ledger's tip is opened (and verified) before the agent starts.
    with started.tool_call("write_file", {"path": "src/other.py"}) as call:
        call.write("src/other.py", "x = 1\n")
    script = str(Path(sys.executable).parent / "sandbox")
    args = ["run", started.run_id, "--isolate", "off", "--hooks", "none", "--", "true"]
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", script, *args],
        cwd=repo,
        capture_output=True,
        check=False,
        timeout=120,
        env={**os.environ, "SANDBOX_FAULT": "run.agent_spawned"},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert "sandbox.run.run" in heavy_loaded(proc.stderr.decode())


#: Every module of the package the hook command Claude Code runs (``-I -S``, see
#: :func:`sandbox.cli.hooks_cmd.hook_command`) may load while a host serves the run (issue 30): the
#: hand-over to the host and this one agent's adapter, not the other agents' adapters.
HOOK_MODULES = {
    "sandbox",
    "sandbox.cli",
    "sandbox.cli.hookrun",
    "sandbox.errors",
    "sandbox.agent",
    "sandbox.agent.adapters",
    "sandbox.agent.adapters.claude_code",
    "sandbox.agent.hookproto",
    "sandbox.agent.wire",
    "sandbox.fast",  # (its package: empty)
    "sandbox.fast.fastjson",  # json's C functions without json (which imports re, enum, functools)
    "sandbox.store",
    "sandbox.store.layout",
}
#: Standard-library modules the hook has no use for, each a few milliseconds of every tool call
#: (measured with bench/cases/startup.py): ``typing``, ``dataclasses`` (it imports ``inspect``),
#: ``secrets`` (``hmac``, ``hashlib``, ``random``), ``pkgutil`` (``importlib.util``), ``pathlib``, ``subprocess``,
#: ``socket`` (its enums and ``selectors``: the client uses ``_socket``), ``json`` (see below).
HOOK_NEVER = {
    *("typing", "inspect", "dataclasses", "secrets", "hmac", "hashlib", "random", "pkgutil", "importlib.util"),
    *("pathlib", "subprocess", "ast", "tokenize", "socket", "selectors"),
    # json and re (json's pure-Python parts need re, which imports enum, functools and the collections):
    # about as much as the interpreter's own start (sandbox.fast.fastjson calls json's C functions).
    *("json", "re", "enum", "functools", "collections", "contextlib"),
}

#: Prepended to a ``python -c`` program: the names in ``sys.modules`` when the process exits, one a line,
#: into the file ``sys.argv`` names after the program's own arguments are taken off. ``-X importtime``
#: does not see what ``importlib.import_module`` loads (the commands of the group, the agents' adapters).
AT_EXIT = (
    "import atexit, sys; _out = sys.argv.pop(); "
    "atexit.register(lambda: open(_out, 'w', encoding='utf-8').write('\\n'.join(sorted(sys.modules)))); "
)


def modules_at_exit(argv: list[str], out: Path, **kwargs: Any) -> tuple[set[str], subprocess.CompletedProcess[bytes]]:
    """Run ``argv`` (a ``python -c PROGRAM ARGS...`` whose program starts with :data:`AT_EXIT`): what it loaded."""
    proc = subprocess.run([*argv, str(out)], capture_output=True, check=False, timeout=120, **kwargs)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return set(out.read_text(encoding="utf-8").split("\n")), proc


def test_the_hook_claude_code_runs_loads_only_what_it_uses(repo: Path, started: Run, tmp_path: Path) -> None:
    import json
    import shlex
    import threading

    from sandbox.agent import wire
    from sandbox.agent.host import Host
    from sandbox.cli.hooks_cmd import hook_command
    from tests.conftest import wait_until
    from tests.hook_fixtures import payload, reopen

    argv = shlex.split(hook_command("claude-code"))
    assert argv[1:4] == ["-I", "-S", "-c"]  # as installed: the interpreter without site
    argv[4] = AT_EXIT + argv[4]
    common = started.project.common_dir
    host = Host(Project(common))
    thread = threading.Thread(target=host.serve, kwargs={"idle_exit": 600.0, "tick": 0.1}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: wire.Client(common).ping())
        data = json.dumps(payload("Read", "pre", started.worktree, "toolu_startup")).encode()
        env = {**os.environ, "SANDBOX_HOOK_AUTOSTART": "0"}
        names, _ = modules_at_exit(argv, tmp_path / "modules", input=data, cwd=started.worktree, env=env)
    finally:
        host.request_stop()
        thread.join(timeout=30)
    assert reopen(started).entry("toolu_startup").status.value == "started"  # recorded by the host
    library = {name for name in names if name == "sandbox" or name.startswith("sandbox.")}
    assert library <= HOOK_MODULES, f"the hook also loads {sorted(library - HOOK_MODULES)}"
    assert "sandbox.agent.adapters.claude_code" in library  # what the file lists is what ran
    third_party = {name.split(".")[0] for name in names} & set(HEAVY_PACKAGES)
    assert not third_party, f"the hook loads {sorted(third_party)}"
    assert not names & HOOK_NEVER, f"the hook loads {sorted(names & HOOK_NEVER)}"


def test_the_help_imports_no_command(repo: Path, tmp_path: Path) -> None:
    """``sandbox --help`` lists the commands from their registered summaries (sandbox.cli.commands): without
    click where its width is the default (sandbox.cli.quick), else through the click group."""
    from sandbox.cli.commands import COMMANDS

    program = AT_EXIT + "sys.argv[0] = 'sandbox'; from sandbox.cli import main; main()"
    modules = {target.partition(":")[0] for target in COMMANDS.values()}
    for columns, group in (("", False), ("60", True)):
        env = {**os.environ, "COLUMNS": columns}
        names, proc = modules_at_exit(
            [sys.executable, "-c", program, "--help"], tmp_path / "modules", cwd=repo, env=env
        )
        assert b"Commands:" in proc.stdout and b"  start " in proc.stdout
        assert ("sandbox.cli.app" in names) == group and ("click" in names) == group
        assert not names & modules, f"--help imports {sorted(names & modules)}"


#: What ``list``, ``log`` and ``path`` (written to a pipe, from the sealed fold cache) have no use for,
#: together about twice the interpreter's own start (issue 30; bench/cases/startup.py): click, typing,
#: re (and with it enum, functools, contextlib), json (fast/fastjson), hmac and hashlib (OpenSSL: the
#: cache's MAC and the objects' ids use the interpreter's own hashes), subprocess (git runs through
#: posix_spawn). ``status`` also checks the run's git for what would run a program (store/gitguard),
#: without a regular expression since the command itself stopped importing ``re`` (issue 30).
QUICK_NEVER = {
    *("click", "typing", "json", "hmac", "hashlib", "_hashlib", "subprocess", "threading", "selectors"),
    *("re", "enum", "functools", "contextlib", "dataclasses", "inspect", "shlex", "signal"),
}


@pytest.mark.parametrize("command", ["list", "status", "log", "path"])
def test_the_quick_reads_load_only_what_they_use(command: str, repo: Path, started: Run, tmp_path: Path) -> None:
    program = AT_EXIT + "sys.argv[0] = 'sandbox'; from sandbox.cli import main; main()"
    names, proc = modules_at_exit([sys.executable, "-c", program, command], tmp_path / "modules", cwd=repo)
    assert proc.stdout  # (answered)
    # What the interpreter loads by itself here (an editable install's finder imports re at start).
    floor, _ = modules_at_exit([sys.executable, "-c", AT_EXIT], tmp_path / "floor", cwd=repo)
    assert not (names - floor) & QUICK_NEVER, f"{command} loads {sorted((names - floor) & QUICK_NEVER)}"


def test_the_installed_command_imports_only_the_cli() -> None:
    # The command is a script of its own (pyproject's script-files): the wrapper pip writes for a console
    # entry point imports re before anything else, 6 ms of every start, more than all the quick list loads.
    script = Path(sys.executable).parent / "sandbox"
    lines = script.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#!") and "python" in lines[0]
    imports = [line for line in lines if line.startswith(("import ", "from "))]
    assert imports == ["import sys", "from sandbox.cli import main"]
