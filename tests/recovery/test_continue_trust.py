"""A fetched run's record picks neither what ``resume --continue`` runs nor how confined (issues 22, 20).

A run travels through a shared remote, and whoever controls the remote writes its ledger, the note
``sandbox run`` recorded included (its agent command, subdirectory and confinement). Here clone A
writes such a note by hand (a program path of its own, options that load code or widen permissions,
``isolation: off``), pushes the run, and clone B fetches it with the repository's own push and fetch.
In B, ``resume --continue`` runs the ``claude`` found on B's PATH (a fake that reports its argv and
whether it sees B's tree), keeps only the options the adapter lists as safe, runs confined, and says
each of those choices. A run made here keeps its flags and confinement; a subdirectory that leads out
of the worktree is refused for any run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox.agent import sessions, transcripts
from sandbox.confine.foreign import ForeignSettingsError
from sandbox.confine.spawn import ConfinementError, Isolation, check
from sandbox.recovery import continue_
from sandbox.recovery.resume import resume
from sandbox.run.run import Run
from sandbox.runs.many import fork
from sandbox.store.project import Project
from tests.agent.test_transcripts import SESSION, claude_lines
from tests.conftest import git, make_repo, sandbox_cmd

#: What clone A's note names: a program of its own, and options no one should carry over.
DANGEROUS = [
    "--mcp-config",
    "evil.json",
    "--dangerously-skip-permissions",
    "--add-dir",
    "/",
    "--settings",
    "evil-settings.json",
    "--plugin-dir",
    "plugins",
    "--permission-mode",
    "bypassPermissions",
    "--model",
    "--dangerously-skip-permissions",  # an option given as a value: never a plain word
]


def _bwrap_works() -> bool:
    import shutil

    program = shutil.which("bwrap")
    try:
        check(Isolation(True, False, program, "bwrap"))
    except ConfinementError:
        return False
    return program is not None


needs_bwrap = pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap with user namespaces is not available")


def open_run(where: Path, run_id: str) -> Run:
    project, _workdir, _ = Project.discover(str(where))
    return Run.open(project, run_id)


def fake_agent(folder: Path, name: str, tree: Path, says: str) -> Path:
    """An executable ``name`` in ``folder`` that prints, NUL-separated: what it is, whether it sees ``tree``
    (the user's tree, hidden inside the confinement), then its argv."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(
        "#!/bin/sh\n"
        f'if [ -e "{tree}/README.md" ]; then seen=sees-tree; else seen=tree-hidden; fi\n'
        f'printf \'%s\\0\' {says} "$seen" "$0" "$@"\n'
    )
    path.chmod(0o755)
    return path


def clone_a(tmp_path: Path) -> Path:
    """Clone A of a bare remote ``remote.git``."""
    a = make_repo(tmp_path / "a", {"README.md": "hello\n", "src/app.py": "x = 1\n"})
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(a, "remote", "add", "origin", str(bare))
    git(a, "push", "-q", "-u", "origin", "main")
    return a


def into_b(tmp_path: Path, a: Path, run_id: str) -> Path:
    """``sandbox push`` of the run from A, ``sandbox fetch`` of it into a new clone B: B."""
    pushed = sandbox_cmd("push", run_id, cwd=a)
    assert pushed.returncode == 0, pushed.stderr
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(tmp_path / "remote.git"), str(b))
    fetched = sandbox_cmd("fetch", "origin", run_id, cwd=b)
    assert fetched.returncode == 0, fetched.stderr
    return b


def fetched_run(tmp_path: Path, argv: list[str], isolation: str = "off", subdir: str = "") -> tuple[Path, str]:
    """Clone A makes a run whose session note it wrote by hand and pushes it; clone B fetches it: (B, the run)."""
    a = clone_a(tmp_path)
    started = sandbox_cmd("start", "--json", cwd=a)
    assert started.returncode == 0, started.stderr
    run_id = str(json.loads(started.stdout)["run"])
    done = sandbox_cmd("exec", run_id, "--", "sh", "-c", "echo agent >> README.md", cwd=a)
    assert done.returncode == 0, done.stderr
    open_run(a, run_id).note({"agent_command": argv, "subdir": subdir, "isolation": isolation})
    return into_b(tmp_path, a, run_id), run_id


@needs_bwrap
def test_a_fetched_runs_continue_runs_the_agent_on_path_without_its_options_confined(tmp_path: Path) -> None:
    evil = fake_agent(tmp_path / "evil", "claude", tmp_path / "b", "EVIL")
    argv = [str(evil), "-p", "Do it.", "--model", "opus", *DANGEROUS]
    b, run_id = fetched_run(tmp_path, argv)
    mine = fake_agent(tmp_path / "bin", "claude", b, "PATH-CLAUDE")
    run = open_run(b, run_id)
    recorded = transcripts.agent_command(run)
    assert recorded is not None and recorded.foreign == "fetched from origin" and recorded.isolation == "off"
    assert continue_.trusted_isolation(run) is None and continue_.recorded_isolation(run) == "off"

    # rewind --continue plans the same way (no report, a prompt of its own).
    planned = continue_.plan(run, None, {}, prompt="Go on.", search_path=["", ".", str(mine.parent), "/usr/bin"])
    assert planned.argv == [
        str(mine),
        "Go on.",
        "-p",
        "--model",
        "opus",
        "--setting-sources",
        "user",
        "--strict-mcp-config",
    ]
    assert (planned.isolate, planned.network) == ("on", None)  # confined whatever the settings say
    said = "\n".join(planned.messages)
    for words in ("--mcp-config evil.json", "--dangerously-skip-permissions", "--add-dir /", "--plugin-dir plugins"):
        assert f"dropped the recorded option '{words}'" in said
    assert "'--permission-mode bypassPermissions'" in said and "'--settings evil-settings.json'" in said
    assert f"names the program '{evil}'" in said and "ignored the recorded confinement (off)" in said
    assert f"the agent runs as: {mine} <note> -p --model opus --setting-sources user --strict-mcp-config." in said
    with pytest.raises(continue_.CannotContinueError, match="found on your PATH"):
        continue_.plan(run, None, {}, prompt="Go on.", search_path=[str(tmp_path / "nothing-here")])

    path = f"{mine.parent}{os.pathsep}{os.environ['PATH']}"
    done = sandbox_cmd("resume", run_id, "--continue", "--yes", cwd=b, env={"PATH": path})
    err = done.stderr.decode()
    assert done.returncode == 0, err
    what, seen, program, *args = done.stdout.split(b"\0")[:-1]
    assert (what, seen, program) == (b"PATH-CLAUDE", b"tree-hidden", str(mine).encode()), err  # confined
    assert [a.decode() for a in args[1:]] == [
        "-p",
        "--model",
        "opus",
        "--setting-sources",
        "user",
        "--strict-mcp-config",
    ]
    assert b"The sandbox resumed" in args[0]
    assert b"EVIL" not in done.stdout
    lines = [line for line in err.splitlines() if "dropped the recorded option" in line]
    assert len(lines) == 7 and all(line.startswith("sandbox: ") and line.endswith(".") for line in lines), err
    assert "ignored the recorded confinement (off)" in err and f"names the program '{evil}'" in err
    # The session just run here is this clone's own record: the safe line, as it ran, confined.
    again = transcripts.agent_command(open_run(b, run_id))
    assert again is not None and again.foreign is None and again.argv[0] == str(mine)
    assert again.isolation not in (None, "off") and "--mcp-config" not in again.argv


def test_the_users_own_isolate_off_is_the_only_way_down(tmp_path: Path) -> None:
    b, run_id = fetched_run(tmp_path, ["claude", "-p", "Do it."], isolation="bwrap, network on")
    run = open_run(b, run_id)
    plan = continue_.plan(
        run, resume(run), {}, search_path=["/nowhere", str(fake_agent(tmp_path / "bin", "claude", b, "X").parent)]
    )
    assert (plan.isolate, plan.network) == ("on", None)  # the settings' network here, not the recorded 'on'
    mine = continue_.plan(run, resume(run), {}, isolate="off", search_path=[str(tmp_path / "bin")])
    assert mine.isolate == "off" and "as you asked" in mine.messages[-1]
    assert "ignored the recorded confinement (bwrap, network on)" in mine.messages[-2]


def test_a_run_made_here_keeps_its_program_options_and_confinement(repo: Path) -> None:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    argv = ["/opt/agents/claude", "-p", "Do it.", "--model", "m", "--dangerously-skip-permissions"]
    run.note({"agent_command": argv, "subdir": "src", "isolation": "off"})
    recorded = transcripts.agent_command(run)
    assert recorded is not None and recorded.foreign is None
    plan = continue_.plan(run, resume(run), {}, search_path=[])
    assert plan.argv[0] == "/opt/agents/claude" and plan.argv[2:] == [
        "-p",
        "--model",
        "m",
        "--dangerously-skip-permissions",
    ]
    assert plan.isolate == "off" and plan.subdir == "src" and not any("dropped" in m for m in plan.messages)


def test_a_subdirectory_leading_out_of_the_worktree_is_refused(repo: Path, tmp_path: Path) -> None:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    worktree = Path(run.worktree)
    (worktree / "out").symlink_to(tmp_path)
    for subdir in ("..", "../..", "/etc", "src/../..", "out", "out/x", "nowhere", "src//x", "./src"):
        run.note({"agent_command": ["claude", "-p", "Do it."], "subdir": subdir})
        with pytest.raises(continue_.CannotContinueError):
            continue_.plan(run, None, {}, prompt="Go on.")
    run.note({"agent_command": ["claude", "-p", "Do it."], "subdir": "src"})
    assert continue_.plan(run, None, {}, prompt="Go on.").subdir == "src"
    # From the user's src/, where the worktree's src is now a link out: refused in one line, nothing run.
    (worktree / "src").rename(worktree / "src-moved")
    (worktree / "src").symlink_to(tmp_path)
    done = sandbox_cmd("resume", run.run_id, "--continue", "--isolate", "off", cwd=repo / "src")
    err = done.stderr.decode()
    assert done.returncode == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "goes through the link 'src'" in err


def test_a_fork_of_a_fetched_run_keeps_its_record_foreign(tmp_path: Path) -> None:
    """The fork's note is written here, but its command was not chosen here: it stays someone else's."""
    a = clone_a(tmp_path)
    project, workdir, _ = Project.discover(str(a))
    assert workdir is not None
    made = Run.start(project, workdir)
    made.note({"agent_command": ["/tmp/x/claude", "-p", "Do it.", "--mcp-config", "evil.json"], "subdir": ""})
    call = made.start_call("Bash", {"command": "x" * 600}, call_id="toolu_000000", agent_session=SESSION)
    made.finish_call(call, "succeeded", paths=[])
    data = claude_lines(1)
    transcripts.store(made, "claude-code", SESSION, data, sessions.ClaudeCode().calls(data), "session end")
    b = into_b(tmp_path, a, made.run_id)
    source = open_run(b, made.run_id)
    target = fork(source)
    homes = {"claude-code": [str(tmp_path / "home-b" / ".claude")]}
    assert transcripts.fork_conversation(source, target, None, homes) is not None
    recorded = transcripts.agent_command(target)
    assert recorded is not None and recorded.foreign == "fetched from origin"
    mine = fake_agent(tmp_path / "bin", "claude", b, "X")
    plan = continue_.plan(target, None, homes, prompt="Go on.", search_path=[str(mine.parent)])
    assert plan.argv[0] == str(mine) and "--mcp-config" not in plan.argv and plan.session is not None
    assert any("dropped the recorded option '--mcp-config evil.json'" in m for m in plan.messages)


def test_only_the_mac_decides_a_note_is_this_clones_never_the_fetch_record(repo: Path) -> None:
    """A note this clone signed stays its own whatever a fetch record says; one whose MAC was stripped,
    forged or made for another run is foreign, with no fetch record at all (it arrived by plain git)."""
    from sandbox.models import FetchedFrom, to_json
    from sandbox.store import integrity, layout
    from tests.ledger_forge import rewrite

    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir)
    run.note({"agent_command": ["claude", "-p", "Do it."], "subdir": "", "isolation": "off"})
    assert transcripts.agent_command(run) == transcripts.RecordedCommand(["claude", "-p", "Do it."], "", "off", None)
    fetched = Path(layout.fetched_file(project.common_dir, run.run_id))
    fetched.write_text(to_json(FetchedFrom(remote="origin", tip="0" * 40, events=3)))
    recorded = transcripts.agent_command(open_run(repo, run.run_id))
    assert recorded is not None and recorded.foreign is None  # signed here: a fetch record changes nothing
    fetched.unlink()
    # The MAC stripped (the forger's rewrite writes none): foreign, though nothing was fetched.
    rewrite(Path(project.common_dir), run.run_id, lambda i, e: {**e, "pid": 1} if e["kind"] == "note" else e)
    Path(layout.run_dir(project.common_dir, run.run_id), integrity.TIP_FILE).unlink()  # not the damage check here
    recorded = transcripts.agent_command(open_run(repo, run.run_id))
    assert recorded is not None and recorded.foreign == "made in another clone" and recorded.isolation == "off"
    assert continue_.trusted_isolation(open_run(repo, run.run_id)) is None


def test_a_session_only_a_fetched_ledger_names_is_never_looked_for_in_your_own_homes(tmp_path: Path) -> None:
    """A fetched ledger names a session id of yours (of another project): its transcript is not stored
    with the run (it would leave with the next push) nor continued; the run's own home is still searched,
    and a session a call made here names is found in your homes as before."""
    from tests.agent.test_transcripts import SESSION as MINE

    a = clone_a(tmp_path)
    started = sandbox_cmd("start", "--json", cwd=a)
    run_id = str(json.loads(started.stdout)["run"])
    run_a = open_run(a, run_id)
    with run_a.tool_call("Bash", {"command": "true"}, call_id="toolu_forged", agent_session=MINE):
        pass
    run_a.note({"agent_command": ["claude", "-p", "Do it."], "subdir": "", "isolation": "off"})
    b = into_b(tmp_path, a, run_id)
    run = open_run(b, run_id)
    yours = tmp_path / "your-claude"
    (yours / "projects" / "-elsewhere").mkdir(parents=True)
    (yours / "projects" / "-elsewhere" / f"{MINE}.jsonl").write_bytes(claude_lines(1))
    assert transcripts.fetched_sessions(run) == {MINE}
    assert transcripts.capture(run, {"claude-code": [str(yours)]}, "test") == []
    assert transcripts.latest(run, MINE) is None
    agent = sessions.agents()["claude-code"]
    assert continue_.place_transcript(run, agent, MINE, [str(yours)], run.worktree) == (None, False)
    # The run's own home is searched, and a session named by a call made here is yours to find.
    own_home = Path(run.dir) / "agent-state" / "homes" / "claude-code"
    (own_home / "projects" / "-run").mkdir(parents=True)
    (own_home / "projects" / "-run" / f"{MINE}.jsonl").write_bytes(claude_lines(2))
    stored = transcripts.capture(run, {"claude-code": [str(own_home), str(yours)]}, "test")
    assert [s.index.session for s in stored] == [MINE]
    run.note({"conversation_fork": {"session": MINE}})  # named here too, after the fetch: this clone's own
    assert transcripts.fetched_sessions(run) == set()


def _fetched_with_settings(tmp_path: Path, agent: str, folder: str) -> tuple[Path, str]:
    """A run of clone A whose worktree holds ``folder/settings.json`` (someone's agent settings) and whose
    record names ``agent``, fetched into clone B: (B, the run)."""
    a = clone_a(tmp_path)
    started = sandbox_cmd("start", "--json", cwd=a)
    assert started.returncode == 0, started.stderr
    run_id = str(json.loads(started.stdout)["run"])
    plant = f"mkdir -p {folder} && echo '{{\"evil\": true}}' > {folder}/settings.json"
    done = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", plant, cwd=a)
    assert done.returncode == 0, done.stderr
    open_run(a, run_id).note({"agent_command": [agent, "-p", "Do it."], "subdir": "", "isolation": "off"})
    return into_b(tmp_path, a, run_id), run_id


def _settings_probe(folder: Path, name: str, settings: str) -> Path:
    """An executable ``name`` that prints whether ``settings`` (relative to where it starts) is there."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\nif [ -e {settings} ]; then echo SETTINGS-SEEN; else echo SETTINGS-HIDDEN; fi\n")
    path.chmod(0o755)
    return path


@needs_bwrap
@pytest.mark.parametrize(("agent", "folder"), [("gemini", ".gemini"), ("codex", ".codex")])
def test_a_fetched_runs_worktree_agent_settings_are_hidden_on_continue(tmp_path: Path, agent: str, folder: str) -> None:
    """Gemini CLI and Codex have no switch that skips a workspace's settings: a foreign run's are masked by
    the confinement (an empty directory inside), said in one line; '--isolate off' is refused for it."""
    from sandbox.runs import materialize

    b, run_id = _fetched_with_settings(tmp_path, agent, folder)
    run = open_run(b, run_id)
    materialize.ensure(run)  # as resume does first
    worktree = Path(run.worktree)
    assert (worktree / folder / "settings.json").exists()
    probe = _settings_probe(tmp_path / "bin", agent, f"{folder}/settings.json")
    planned = continue_.plan(run, None, {}, prompt="Go on.", search_path=[str(probe.parent)])
    assert planned.masked == [os.path.realpath(worktree / folder)] and planned.foreign == "fetched from origin"
    assert any(f"{folder}/ is empty inside the sandbox" in m for m in planned.messages)
    path = f"{probe.parent}{os.pathsep}{os.environ['PATH']}"
    done = sandbox_cmd("resume", run_id, "--continue", "--yes", cwd=b, env={"PATH": path})
    assert done.returncode == 0, done.stderr
    assert b"SETTINGS-HIDDEN" in done.stdout and f"{folder}/ is empty inside the sandbox".encode() in done.stderr
    assert (worktree / folder / "settings.json").read_text() == '{"evil": true}\n'  # only hidden, never touched
    refused = sandbox_cmd("resume", run_id, "--continue", "--isolate", "off", cwd=b, env={"PATH": path})
    assert refused.returncode != 0 and b"SETTINGS-" not in refused.stdout
    assert b"run it without '--isolate off'" in refused.stderr


@needs_bwrap
@pytest.mark.parametrize(("agent", "folder"), [("gemini", ".gemini"), ("codex", ".codex")])
def test_a_plain_run_of_an_agent_on_a_fetched_run_hides_its_worktree_settings(
    tmp_path: Path, agent: str, folder: str
) -> None:
    """'sandbox run RUN -- AGENT' (your own command, not a relaunch of the record) goes through the same rule
    as a continue: the worktree's settings of a run from elsewhere hidden, '--isolate off' refused for it;
    the second start too, which a run of this clone's own takes on the fast path (the fold counts the
    events from elsewhere)."""
    b, run_id = _fetched_with_settings(tmp_path, agent, folder)
    probe = _settings_probe(tmp_path / "bin", agent, f"{folder}/settings.json")
    for _again in range(2):
        own = sandbox_cmd("run", run_id, "--yes", "--", str(probe), cwd=b)
        err = own.stderr.decode()
        assert own.returncode == 0 and b"SETTINGS-HIDDEN" in own.stdout, err
        assert f"{folder}/ is empty inside the sandbox" in err and "fetched from origin" in err
    refused = sandbox_cmd("run", run_id, "--isolate", "off", "--", str(probe), cwd=b)
    assert refused.returncode != 0 and b"SETTINGS-" not in refused.stdout
    assert b"run it without '--isolate off'" in refused.stderr
    # Made here, the same folder is yours: loaded.
    mine = sandbox_cmd(
        "run", "--new", "--isolate", "off", "--", "sh", "-c", f"mkdir {folder}; echo x > {folder}/s", cwd=b
    )
    assert mine.returncode == 0, mine.stderr
    runs = json.loads(sandbox_cmd("list", "--json", cwd=b).stdout)
    new = next(r["run"] for r in runs if r["run"] != run_id)
    probe_mine = _settings_probe(tmp_path / "bin2", agent, f"{folder}/s")
    seen = sandbox_cmd("run", new, "--", str(probe_mine), cwd=b)
    assert seen.returncode == 0 and b"SETTINGS-SEEN" in seen.stdout, seen.stderr


@needs_bwrap
def test_a_plain_run_of_claude_on_a_fetched_run_skips_its_project_settings_and_asks_for_the_login(
    tmp_path: Path,
) -> None:
    """Claude Code has switches for it: '--setting-sources user --strict-mcp-config' are added to your command
    (its .claude/settings.json hooks and .mcp.json servers are not loaded); your login is copied in only
    when you say so."""
    b, run_id = _fetched_with_settings(tmp_path, "claude", ".claude")
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": "yours"}')
    probe = fake_agent(tmp_path / "bin", "claude", b, "PROBE")
    env = {"HOME": str(home)}
    refused = sandbox_cmd("run", run_id, "--", str(probe), "-p", "hi", cwd=b, env=env)
    err = refused.stderr.decode()
    assert refused.returncode == 2 and b"PROBE" not in refused.stdout, err
    assert "pass --yes" in err and "was fetched from origin" in err
    done = sandbox_cmd("run", run_id, "--yes", "--", str(probe), "-p", "hi", cwd=b, env=env)
    assert done.returncode == 0, done.stderr
    _what, _seen, _program, *args = done.stdout.split(b"\0")[:-1]
    assert [a.decode() for a in args] == ["-p", "hi", "--setting-sources", "user", "--strict-mcp-config"]
    assert b"settings and MCP servers are not loaded" in done.stderr


def test_a_settings_folder_that_leads_out_of_a_fetched_worktree_is_refused(tmp_path: Path) -> None:
    from sandbox.runs import materialize

    b, run_id = _fetched_with_settings(tmp_path, "gemini", "elsewhere")
    run = open_run(b, run_id)
    materialize.ensure(run)
    (Path(run.worktree) / ".gemini").symlink_to(tmp_path)
    probe = _settings_probe(tmp_path / "bin", "gemini", ".gemini/settings.json")
    with pytest.raises(ForeignSettingsError, match="as a link out of it"):
        continue_.plan(run, None, {}, prompt="Go on.", search_path=[str(probe.parent)])


@needs_bwrap
def test_your_login_reaches_a_fetched_runs_agent_only_when_you_say_so(tmp_path: Path) -> None:
    """Without a terminal, continuing a run from elsewhere whose agent would get your login is refused in one
    line (nothing planned, nothing run); with --yes the login is copied into the run's agent home."""
    from sandbox.agent.adapters import gemini

    b, run_id = _fetched_with_settings(tmp_path, "gemini", "docs")
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "oauth_creds.json").write_text('{"refresh_token": "yours"}')
    probe = tmp_path / "bin" / "gemini"
    probe.parent.mkdir()
    probe.write_text(
        '#!/bin/sh\nif [ -e "$GEMINI_CLI_HOME/.gemini/oauth_creds.json" ]; then echo LOGIN-GIVEN; '
        "else echo NO-LOGIN; fi\n"
    )
    probe.chmod(0o755)
    env = {"PATH": f"{probe.parent}{os.pathsep}{os.environ['PATH']}", "HOME": str(home)}
    refused = sandbox_cmd("resume", run_id, "--continue", cwd=b, env=env)
    err = refused.stderr.decode()
    assert refused.returncode == 2 and b"LOGIN" not in refused.stdout, err
    assert "pass --yes" in err and "was fetched from origin" in err and "Traceback" not in err
    given = sandbox_cmd("resume", run_id, "--continue", "--yes", cwd=b, env=env)
    assert given.returncode == 0 and b"LOGIN-GIVEN" in given.stdout, given.stderr
    # What a 'no' at the terminal gives: the run's home without your login.
    run = open_run(b, run_id)
    other = tmp_path / "other-run"
    gemini.session_env(str(other), run.worktree, str(home), None, login=False)
    assert not (other / "agent-state").exists() or not list((other / "agent-state").rglob("oauth_creds.json"))
    gemini.session_env(str(other), run.worktree, str(home), None)
    assert list((other / "agent-state").rglob("oauth_creds.json"))
