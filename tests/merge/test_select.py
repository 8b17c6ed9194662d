"""Selecting what to take: pathspecs with exclusion, several calls and ranges, dependencies between calls."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd, tree_digest, user_state, write


def start(root: Path) -> Run:
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    return Run.start(project, workdir)


def invoke(root: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["-C", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def three_files(run: Run) -> None:
    with run.tool_call("edit") as call:
        call.write("src/app.py", "print('agent')\n")
        call.write("src/util.py", "X = 2\n")
        call.write("tests/test_make.py", "def test(): pass\n")
        call.write("docs/guide.md", "# guide\n")


def test_exclude_pathspec_and_option_leave_paths_out(repo: Path) -> None:
    run = start(repo)
    three_files(run)
    code, out, err = invoke(repo, "apply", run.run_id, "--json", ":!tests/test_make.py", ":(exclude)*.md")
    assert code == 0, err
    assert sorted(json.loads(out)["applied"]) == ["src/app.py", "src/util.py"]
    assert not (repo / "tests/test_make.py").exists() and not (repo / "docs").exists()
    code, out, err = invoke(repo, "apply", run.run_id, "--json", "--exclude", "src")
    assert code == 0, err
    assert sorted(json.loads(out)["applied"]) == ["docs/guide.md", "tests/test_make.py"]


def test_globs_and_path_option_select(repo: Path) -> None:
    run = start(repo)
    three_files(run)
    code, out, _ = invoke(repo, "apply", run.run_id, "--dry-run", "--json", "--path", "*.py", "--exclude", "tests")
    assert code == 0
    assert sorted(json.loads(out)["would_apply"]) == ["src/app.py", "src/util.py"]
    code, out, _ = invoke(repo, "apply", run.run_id, "--dry-run", "--json", ":(glob)src/*")
    assert sorted(json.loads(out)["would_apply"]) == ["src/app.py", "src/util.py"]


def test_pathspec_is_relative_to_the_current_directory(repo: Path) -> None:
    run = start(repo)
    three_files(run)
    proc = sandbox_cmd("apply", run.run_id, "--json", "app.py", ":/docs", cwd=repo / "src")
    assert proc.returncode == 0, proc.stderr
    assert sorted(json.loads(proc.stdout)["applied"]) == ["docs/guide.md", "src/app.py"]


def test_pathspec_that_matches_nothing_is_refused(repo: Path) -> None:
    run = start(repo)
    three_files(run)
    digest = tree_digest(repo)
    code, _, err = invoke(repo, "apply", run.run_id, "nothing/here")
    assert code == 1 and "do not touch 'nothing/here'" in err and err.count("\n") == 1
    code, _, err = invoke(repo, "apply", run.run_id, ":(attr:x)src")
    assert code == 2 and "attr" in err
    assert tree_digest(repo) == digest


def test_conflict_hint_names_a_flag_that_leaves_the_path_out(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("edit") as call:
        call.write("README.md", "agent\n")
        call.write("src/app.py", "print('agent')\n")
    write(repo, "README.md", "the user's later edit\n")
    code, out, _ = invoke(repo, "apply", run.run_id)
    assert code == 1 and "your file differs" in out
    hint = next(line for line in out.splitlines() if "what to do" in line)
    assert "--exclude :/README.md" in hint
    code, out, err = invoke(repo, "apply", run.run_id, "--exclude", ":/README.md")
    assert code == 0, err
    assert (repo / "src/app.py").read_text() == "print('agent')\n"
    assert (repo / "README.md").read_text() == "the user's later edit\n"


def test_read_only_hint_names_exclude(repo: Path) -> None:
    run = start(repo)
    with run.tool_call("edit") as call:
        call.write("src/util.py", "X = 3\n")
    os.chmod(repo / "src/util.py", stat.S_IRUSR)
    try:
        code, _, err = invoke(repo, "apply", run.run_id)
    finally:
        os.chmod(repo / "src/util.py", stat.S_IRUSR | stat.S_IWUSR)
    assert code == 1 and "--exclude PATH" in err


def calls_on_one_file(run: Run) -> list[str]:
    ids = []
    for text in ("v1\n", "v2\n", "v3\n"):
        with run.tool_call("edit") as call:
            call.write("src/util.py", text)
        assert call.call_id
        ids.append(call.call_id)
    with run.tool_call("other") as call:
        call.write("other.txt", "o\n")
    assert call.call_id
    ids.append(call.call_id)
    return ids


def test_later_call_alone_names_the_call_it_needs_not_the_user(repo: Path) -> None:
    run = start(repo)
    ids = calls_on_one_file(run)
    before, digest = user_state(repo), tree_digest(repo)
    code, out, err = invoke(repo, "apply", run.run_id, "--call", ids[2])
    assert code == 1
    assert "#1 (edit), #2 (edit) changed this file first" in out
    assert "--call 1 --call 2" in out and "--with-deps" in out
    assert "conflict with your changes" not in err and "your file differs" not in out
    assert "need calls that are not selected" in err
    assert tree_digest(repo) == digest and user_state(repo) == before
    code, out, err = invoke(repo, "apply", run.run_id, "--call", "3", "--with-deps", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["applied"] == ["src/util.py"] and report["calls"] == ids[:3]
    assert (repo / "src/util.py").read_text() == "v3\n" and not (repo / "other.txt").exists()


def test_dependency_satisfied_by_an_earlier_apply(repo: Path) -> None:
    run = start(repo)
    ids = calls_on_one_file(run)
    assert invoke(repo, "apply", run.run_id, "--call", ids[0])[0] == 0
    code, out, _ = invoke(repo, "apply", run.run_id, "--call", ids[2])
    assert code == 1 and "#2 (edit) changed this file first" in out and "#1" not in out
    code, _, err = invoke(repo, "apply", run.run_id, "--call", ids[2], "--with-deps")
    assert code == 0, err
    assert (repo / "src/util.py").read_text() == "v3\n"


def test_a_real_user_edit_is_still_blamed_on_the_user(repo: Path) -> None:
    run = start(repo)
    ids = calls_on_one_file(run)
    write(repo, "src/util.py", "the user's own\n")
    code, out, err = invoke(repo, "apply", run.run_id, "--call", ids[2])
    assert code == 1 and "your file differs" in out and "conflict with your changes" in err
    assert "--with-deps adds them" in out
    code, out, err = invoke(repo, "apply", run.run_id, "--call", ids[2], "--with-deps")
    assert code == 1 and "your file differs" in out


def test_several_calls_ranges_and_sequence_numbers(repo: Path) -> None:
    run = start(repo)
    ids = calls_on_one_file(run)
    code, out, err = invoke(repo, "apply", run.run_id, "--call", "1..3", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["calls"] == ids[:3]
    code, out, err = invoke(repo, "apply", run.run_id, "--call", ids[3][:10], "--call", "..2", "--json")
    assert code == 0, err
    assert json.loads(out)["calls"] == [ids[0], ids[1], ids[3]]
    assert (repo / "src/util.py").read_text() == "v2\n" and (repo / "other.txt").read_text() == "o\n"
    code, out, err = invoke(repo, "diff", run.run_id, "--json", "--call", "@~3..@~1")
    assert code == 0 and json.loads(out)["calls"] == ids[:3], err
    code, _, err = invoke(repo, "apply", run.run_id, "--call", "3..1")
    assert code == 2 and "backwards" in err
    code, _, err = invoke(repo, "apply", run.run_id, "--call", "9")
    assert code == 2 and "has no call #9" in err


def test_diff_takes_calls_ranges_and_pathspecs(repo: Path) -> None:
    run = start(repo)
    ids = calls_on_one_file(run)
    code, out, _ = invoke(repo, "diff", run.run_id, "--call", "2..3", "--no-color")
    assert code == 0 and "-v1\n+v3\n" in out and "other.txt" not in out
    code, out, _ = invoke(repo, "diff", run.run_id, ":!src", "--stat")
    assert code == 0 and "other.txt" in out and "util.py" not in out
    code, out, _ = invoke(repo, "diff", run.run_id, "--json", "--call", ids[1], "--call", ids[3])
    files = json.loads(out)["files"]
    assert [f["path"] for f in files] == ["other.txt", "src/util.py"]
    assert "-v1\n+v2\n" in files[1]["patch"]


def test_diff_json_runs_no_git_process(repo: Path, tmp_path: Path) -> None:
    run = start(repo)
    with run.tool_call("edit") as call:
        for i in range(30):
            call.write(f"many/f{i}.txt", f"{i}\n")
    log = tmp_path / "git.log"
    shim = tmp_path / "bin"
    shim.mkdir()
    real = subprocess.run(["which", "git"], capture_output=True, text=True, check=True).stdout.strip()
    (shim / "git").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n')
    (shim / "git").chmod(0o755)
    env = {"PATH": f"{shim}:{os.environ['PATH']}"}
    proc = sandbox_cmd("diff", run.run_id, "--json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["files"]) == 30

    def diffs() -> list[str]:
        lines = log.read_text().splitlines() if log.exists() else []
        return [line for line in lines if "diff" in line.split()]

    assert diffs() == []
    proc = sandbox_cmd("diff", run.run_id, cwd=repo, env=env)
    assert proc.returncode == 0 and len(diffs()) == 1  # the text diff: one git process for the whole run


def test_pathspec_from_a_subdirectory_of_the_runs_worktree(repo: Path) -> None:
    run = start(repo)
    three_files(run)
    proc = sandbox_cmd("diff", run.run_id, "--stat", "app.py", cwd=Path(run.worktree) / "src")
    assert proc.returncode == 0, proc.stderr
    assert b"src/app.py" in proc.stdout and b"util.py" not in proc.stdout


def test_pathspecs_outside_the_tree_and_bad_hunk_lists_are_one_line_errors(repo: Path, tmp_path: Path) -> None:
    run = start(repo)
    three_files(run)
    digest = tree_digest(repo)
    for args, code in (
        (["../outside"], 2),
        ([":(top)src/../../x"], 2),
        (["--exclude", "/etc/passwd"], 1),
        (["/etc"], 1),
    ):
        got, out, err = invoke(repo, "apply", run.run_id, *args)
        assert got == code and err.count("\n") == 1 and "Traceback" not in err, (args, err)
    bad = tmp_path / "ids.json"
    for text in ('["a", 3]', "[not json", '{"ids": []}'):
        bad.write_text(text)
        got, _, err = invoke(repo, "apply", run.run_id, "--hunks-from", str(bad))
        assert got in (1, 2) and err.count("\n") == 1 and "Traceback" not in err, (text, err)
    got, _, err = invoke(repo, "apply", run.run_id, "--hunks", "--3way")
    assert got == 2
    assert tree_digest(repo) == digest


def test_diff_refuses_a_pathspec_that_matches_nothing(repo: Path) -> None:
    run = start(repo)
    three_files(run)
    for args in (["nothing/here"], ["--stat", "nothing/here"], ["--json", "nothing/here"]):
        code, _, err = invoke(repo, "diff", run.run_id, *args)
        assert code == 1 and "do not touch 'nothing/here'" in err, args


def test_dependencies_follow_a_long_chain_one_step_each(repo: Path) -> None:
    """select.dependencies looks at one earlier change per path (linear, not quadratic in the calls): a
    call at the end of a 40-call chain on one file needs every earlier one, each needed by the next, oldest
    first; a call on another file in between is not named; an applied call ends the chain."""
    from sandbox.merge import select

    run = start(repo)
    ids = []
    for i in range(40):
        with run.tool_call("edit") as call:
            call.write("src/util.py", f"v{i}\n")
            if i == 20:
                call.write("other.txt", "o\n")
        assert call.call_id
        ids.append(call.call_id)
    with run.tool_call("other") as call:
        call.write("other.txt", "o2\n")
    state = run.state()
    deps = select.dependencies(state, [ids[-1]], lambda path: True)
    assert [d.call.call_id for d in deps] == ids[:-1]
    assert all(d.paths == ["src/util.py"] and d.needed_by == [ids[i + 1]] for i, d in enumerate(deps))
    assert select.dependencies(state, [ids[-1], ids[10]], lambda path: True)[9].needed_by == [ids[10]]
    assert invoke(repo, "apply", run.run_id, "--call", f"..{ids[29]}")[0] == 0
    deps = select.dependencies(run.state(), [ids[-1]], lambda path: path == "src/util.py")
    assert [d.call.call_id for d in deps] == ids[30:-1]
