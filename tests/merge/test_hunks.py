"""Taking part of a file: ``apply --hunks`` on a real pseudo-terminal, ``--hunks-from`` with the ids of
``diff --json``, the partial apply in the ledger, ``undo``/``redo`` of exactly what was taken."""

from __future__ import annotations

import json
import os
import pty
import select
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from sandbox.cli import cli
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import sandbox_cmd, tree_digest, user_state, write

BASE = "".join(f"line {i}\n" for i in range(1, 21))


def lines(**changes: str) -> str:
    out = [f"line {i}\n" for i in range(1, 21)]
    for key, value in changes.items():
        out[int(key[1:]) - 1] = value
    return "".join(out)


def setup(root: Path) -> Run:
    write(root, "a.txt", BASE)
    write(root, "b.txt", "b\n")
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("edit") as call:
        # Three changes: line 2 (its own hunk), lines 14 and 17 (one hunk of two changes).
        call.write("a.txt", lines(l2="TWO\n", l14="FOURTEEN\n", l17="SEVENTEEN\n"))
        call.write("b.txt", "B\n")
        call.write("new.txt", "brand new\n")
    return run


def invoke(root: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["-C", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def diff_json(root: Path, run: Run) -> dict[str, dict[str, object]]:
    code, out, err = invoke(root, "diff", run.run_id, "--json")
    assert code == 0, err
    return {f["path"]: f for f in json.loads(out)["files"]}


def ids_file(tmp_path: Path, *ids: str) -> str:
    path = tmp_path / "ids.txt"
    path.write_text("# chosen hunks\n" + "\n".join(ids) + "\n")
    return str(path)


def test_hunks_from_takes_exactly_the_named_changes(repo: Path, tmp_path: Path) -> None:
    run = setup(repo)
    files = diff_json(repo, run)
    a = files["a.txt"]
    hunks = a["hunks"]
    assert isinstance(hunks, list) and len(hunks) == 2 and len(hunks[1]["changes"]) == 2
    line14 = hunks[1]["changes"][0]["id"]
    before = user_state(repo)
    code, out, err = invoke(
        repo, "apply", run.run_id, "--json", "--hunks-from", ids_file(tmp_path, line14, files["b.txt"]["id"])
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["applied"] == ["a.txt", "b.txt"] and report["partial"] == {"a.txt": [line14]}
    assert "new.txt" in report["skipped"]
    assert (repo / "a.txt").read_text() == lines(l14="FOURTEEN\n")
    assert (repo / "b.txt").read_text() == "B\n" and not (repo / "new.txt").exists()
    assert user_state(repo) == before  # index, HEAD, refs untouched
    # The ledger knows: status and log say "partly applied"; the ids did not change.
    code, out, _ = invoke(repo, "status", run.run_id, "--json")
    call = run.entries()[0].call_id
    assert json.loads(out)["partly_applied_calls"] == [call]
    code, out, _ = invoke(repo, "log", run.run_id)
    assert "[partly applied: a.txt]" in out
    assert diff_json(repo, run)["a.txt"]["hunks"] == hunks
    # The rest later, by id: line 2 only, then everything.
    code, out, err = invoke(repo, "apply", run.run_id, "--json", "--hunks-from", ids_file(tmp_path, hunks[0]["id"]))
    assert code == 0, err
    assert (repo / "a.txt").read_text() == lines(l2="TWO\n", l14="FOURTEEN\n")
    assert json.loads(out)["partial"] == {"a.txt": [hunks[0]["changes"][0]["id"], line14]}
    code, out, err = invoke(repo, "apply", run.run_id, "--json")
    assert code == 0, err
    assert (repo / "a.txt").read_text() == lines(l2="TWO\n", l14="FOURTEEN\n", l17="SEVENTEEN\n")
    assert (repo / "new.txt").read_text() == "brand new\n"
    assert run.entries()[0].applied
    code, out, _ = invoke(repo, "log", run.run_id)
    assert "partly" not in out and "[applied]" in out


def test_undo_takes_back_exactly_the_hunks_and_redo_brings_them_back(repo: Path, tmp_path: Path) -> None:
    run = setup(repo)
    hunks = diff_json(repo, run)["a.txt"]["hunks"]
    assert isinstance(hunks, list)
    code, _, err = invoke(repo, "apply", run.run_id, "--hunks-from", ids_file(tmp_path, hunks[1]["id"]))
    assert code == 0, err
    taken = lines(l14="FOURTEEN\n", l17="SEVENTEEN\n")
    assert (repo / "a.txt").read_text() == taken
    digest = tree_digest(repo)
    code, out, err = invoke(repo, "undo", run.run_id, "--json")
    assert code == 0, err
    assert json.loads(out)["restored"] == ["a.txt"]
    assert (repo / "a.txt").read_text() == BASE
    assert (repo / "b.txt").read_text() == "b\n"
    code, _, err = invoke(repo, "redo", run.run_id)
    assert code == 0, err
    assert tree_digest(repo) == digest
    code, out, _ = invoke(repo, "log", run.run_id)
    assert "[partly applied: a.txt]" in out


def test_undo_never_overwrites_a_later_user_edit(repo: Path, tmp_path: Path) -> None:
    run = setup(repo)
    change = diff_json(repo, run)["a.txt"]["hunks"][0]["id"]  # type: ignore[index]
    assert invoke(repo, "apply", run.run_id, "--hunks-from", ids_file(tmp_path, change))[0] == 0
    write(repo, "a.txt", lines(l2="TWO\n", l5="the user's line\n"))
    digest = tree_digest(repo)
    code, out, err = invoke(repo, "undo", run.run_id)
    assert code == 1 and "changed since the sandbox wrote it" in out + err
    assert tree_digest(repo) == digest
    # And applying the rest refuses too: the user's file is neither the base nor what was written.
    code, out, err = invoke(repo, "apply", run.run_id)
    assert code == 1 and "your file differs" in out and tree_digest(repo) == digest


def test_unknown_ids_write_nothing(repo: Path, tmp_path: Path) -> None:
    run = setup(repo)
    digest = tree_digest(repo)
    code, _, err = invoke(repo, "apply", run.run_id, "--hunks-from", ids_file(tmp_path, "0123456789abcdef"))
    assert code == 1 and "0123456789abcdef" in err and "Nothing was written" in err and err.count("\n") == 1
    assert tree_digest(repo) == digest
    # An id of another selection (a call's diff is the run's diff here, so use a path filter instead).
    change = diff_json(repo, run)["a.txt"]["hunks"][0]["id"]  # type: ignore[index]
    code, _, err = invoke(repo, "apply", run.run_id, ":!a.txt", "--hunks-from", ids_file(tmp_path, change))
    assert code == 1 and change in err and tree_digest(repo) == digest


def test_hunks_needs_a_terminal(repo: Path) -> None:
    run = setup(repo)
    proc = sandbox_cmd("apply", run.run_id, "--hunks", cwd=repo, input=b"y\n")
    assert proc.returncode == 2 and b"--hunks-from" in proc.stderr and proc.stderr.count(b"\n") == 1


# -- the interactive form, through a real pseudo-terminal ---------------------------------------


def drive(root: Path, args: list[str], answers: list[bytes], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the real CLI on a pty, answering each ``[...]?`` prompt in turn; (exit code, all output)."""
    exe = str(Path(sys.executable).parent / "sandbox")
    full_env = {**os.environ, **(env or {}), "TERM": "dumb"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: the real sandbox process, its stdin/stdout the terminal
        os.chdir(root)
        os.execve(exe, [exe, *args], full_env)
    out = b""
    pending = list(answers)
    prompts = 0
    deadline = time.monotonic() + 60
    poller = select.poll()  # not select(): a long test session has descriptors above FD_SETSIZE
    poller.register(fd, select.POLLIN)
    while time.monotonic() < deadline:
        if not poller.poll(500):
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break  # EIO: the child closed the terminal
        if not chunk:
            break
        out += chunk
        while out.count(b"]? ") > prompts and pending:
            prompts += 1
            os.write(fd, pending.pop(0) + b"\n")
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


def test_interactive_split_yes_no_and_quit(repo: Path) -> None:
    run = setup(repo)
    # a.txt: hunk 1 (line 2) n; hunk 2 split into line 14 (y) and line 17 (n); b.txt: q.
    code, out = drive(repo, ["apply", run.run_id, "--hunks"], [b"n", b"s", b"y", b"n", b"q"])
    assert code == 0, out
    assert "Split into 2 hunks" in out and "-line 14" in out and "+FOURTEEN" in out
    assert (repo / "a.txt").read_text() == lines(l14="FOURTEEN\n")
    assert (repo / "b.txt").read_text() == "b\n" and not (repo / "new.txt").exists()
    assert "partly: 1 of 3 change(s)" in out
    # Again: only what is left is offered (line 2 and line 17), then the rest of the files.
    code, out = drive(repo, ["apply", run.run_id, "--hunks"], [b"y", b"y", b"y", b"n"])
    assert code == 0, out
    assert "FOURTEEN" not in out.split("Apply this hunk")[0] or "-line 14" not in out
    assert (repo / "a.txt").read_text() == lines(l2="TWO\n", l14="FOURTEEN\n", l17="SEVENTEEN\n")
    assert (repo / "b.txt").read_text() == "B\n" and not (repo / "new.txt").exists()


def test_interactive_edit_of_a_hunk(repo: Path, tmp_path: Path) -> None:
    run = setup(repo)
    editor = tmp_path / "editor.sh"
    # A broken edit (a context line changed) is refused and nothing is written.
    editor.write_text("#!/bin/sh\nsed -i 's/^ line 1$/ line one/' \"$1\"\n")
    editor.chmod(0o755)
    digest = tree_digest(repo)
    code, out = drive(repo, ["apply", run.run_id, "--hunks"], [b"e"], env={"GIT_EDITOR": str(editor)})
    assert code == 1 and "does not apply" in out
    assert tree_digest(repo) == digest
    # The "user" edits the added line of the hunk, as one would in the editor.
    editor.write_text("#!/bin/sh\nsed -i 's/^+TWO$/+TWO, edited/' \"$1\"\n")
    code, out = drive(repo, ["apply", run.run_id, "--hunks"], [b"e", b"d", b"n", b"n"], env={"GIT_EDITOR": str(editor)})
    assert code == 0, out
    assert (repo / "a.txt").read_text() == lines(l2="TWO, edited\n")
    code, out, _ = invoke(repo, "log", run.run_id)
    assert "[partly applied: a.txt]" in out
    # The rest of a file with an edited hunk is taken whole, not hunk by hunk.
    digest = tree_digest(repo)
    code, out = drive(repo, ["apply", run.run_id, "--hunks"], [b"s", b"y", b"n", b"n", b"n"])
    assert code == 1 and "edited" in out and "+TWO" not in out
    assert tree_digest(repo) == digest
    code, out = drive(repo, ["apply", run.run_id, "--hunks"], [b"y", b"n", b"n"])
    assert code == 0, out
    assert (repo / "a.txt").read_text() == lines(l2="TWO\n", l14="FOURTEEN\n", l17="SEVENTEEN\n")


def test_whole_file_units_added_files_and_all(repo: Path) -> None:
    run = setup(repo)
    code, out = drive(repo, ["apply", run.run_id, "--hunks"], [b"d", b"n", b"y"])
    assert code == 0, out
    assert "Add this file" in out
    assert (repo / "new.txt").read_text() == "brand new\n" and (repo / "a.txt").read_text() == BASE


# -- killed in the middle: the same journal as a whole-file apply --------------------------------


def agent_run(root: Path) -> Run:
    """A new run with the agent's edit of ``setup`` (the user's files are left as they are)."""
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("edit") as call:
        call.write("a.txt", lines(l2="TWO\n", l14="FOURTEEN\n", l17="SEVENTEEN\n"))
        call.write("b.txt", "B\n")
    return run


@pytest.mark.parametrize("finish", ["continue", "undo"])
@pytest.mark.parametrize("step", ["after_journal", "after_file", "before_ledger", "after_ledger"])
def test_partial_apply_killed_at_every_step_continues_or_rolls_back(
    repo: Path, tmp_path: Path, step: str, finish: str
) -> None:
    import signal

    setup(repo)
    taken = {"a.txt": lines(l2="TWO\n"), "b.txt": "B\n"}
    original = {"a.txt": BASE, "b.txt": "b\n"}

    def now() -> dict[str, str]:
        return {rel: (repo / rel).read_text() for rel in taken}

    # A second run after the first (setup's) one, as a user who tried twice: the kill is in its apply.
    run = agent_run(repo)
    files = diff_json(repo, run)
    chosen = ids_file(tmp_path, files["a.txt"]["hunks"][0]["id"], str(files["b.txt"]["id"]))  # type: ignore[index]
    proc = sandbox_cmd("apply", run.run_id, "--hunks-from", chosen, cwd=repo, env={"SANDBOX_FAULT": f"apply.{step}"})
    assert proc.returncode == -signal.SIGKILL, (step, proc.stderr)
    assert all(now()[rel] in (taken[rel], original[rel]) for rel in taken), step
    if finish == "continue":
        proc = sandbox_cmd("apply", "--continue", run.run_id, cwd=repo)
        assert proc.returncode == 0, (step, proc.stderr)
        assert now() == taken, step
        assert "[partly applied: a.txt]" in invoke(repo, "log", run.run_id)[1], step
    proc = sandbox_cmd("undo", run.run_id, cwd=repo)  # the interrupted apply, or the finished one
    assert proc.returncode == 0, (step, finish, proc.stderr)
    assert now() == original, (step, finish)


def test_applying_other_paths_leaves_a_partly_applied_call_partly_applied(repo: Path, tmp_path: Path) -> None:
    run = setup(repo)
    hunk = diff_json(repo, run)["a.txt"]["hunks"][0]["id"]  # type: ignore[index]
    assert invoke(repo, "apply", run.run_id, "--hunks-from", ids_file(tmp_path, hunk))[0] == 0
    code, _, err = invoke(repo, "apply", run.run_id, ":!a.txt")
    assert code == 0, err
    assert (repo / "b.txt").read_text() == "B\n" and (repo / "new.txt").exists()
    assert not run.entries()[0].applied
    assert "[partly applied: a.txt]" in invoke(repo, "log", run.run_id)[1]
    code, _, err = invoke(repo, "apply", run.run_id)
    assert code == 0, err
    assert run.entries()[0].applied and (repo / "a.txt").read_text() == lines(
        l2="TWO\n", l14="FOURTEEN\n", l17="SEVENTEEN\n"
    )


def test_any_subset_of_changes_assembles_and_all_of_them_give_the_agents_file(tmp_path: Path) -> None:
    import random

    import pygit2

    from sandbox.merge import hunks as hk
    from sandbox.store.objects import MODE_FILE, Entry

    repo = pygit2.init_repository(str(tmp_path / "objects.git"), bare=True)
    rng = random.Random(12)
    for _ in range(60):
        old = [f"{rng.choice('abcde')}{i % 7}\n".encode() for i in range(rng.randint(0, 40))]
        new = list(old)
        for _ in range(rng.randint(1, 8)):
            at = rng.randint(0, len(new))
            kind = rng.choice("ird")
            if kind == "i" or not new:
                new.insert(at, f"new {rng.random()}\n".encode())
            elif kind == "r" and at < len(new):
                new[at] = f"changed {rng.random()}\n".encode()
            elif at < len(new):
                del new[at]
        old_data, new_data = b"".join(old), b"".join(new)
        if rng.random() < 0.3 and new_data:
            new_data = new_data.rstrip(b"\n")  # no newline at the end
        if old_data == new_data:
            continue
        before = Entry(MODE_FILE, str(repo.create_blob(old_data)))
        after = Entry(MODE_FILE, str(repo.create_blob(new_data)))
        fh = hk.file_hunks(repo, "f.txt", before, after)
        changes = fh.changes
        chosen = {c.id for c in changes if rng.random() < 0.5}
        part = hk.take(fh, hk.Choice(ids=chosen))
        if not chosen:
            assert part is None
        elif len(chosen) == len(changes):
            assert part is not None and part.whole
        else:
            assert part is not None and part.content is not None and not part.whole
            assert sorted(part.ids) == sorted(chosen)
        everything = hk.take(fh, hk.Choice(ids={c.id for c in changes}))
        assert everything is not None and everything.whole
        assert hk.assemble(fh.old, [(c.start, c.count, c.new) for c in changes]) == new_data
        # The rest on top of a part: the same ids, computed against the same base, give the agent's file.
        fh.taken = sorted(chosen)
        rest = hk.take(fh, hk.Choice(ids={c.id for c in changes} - chosen))
        assert rest is not None and rest.whole


def test_interactive_offers_your_edited_file_and_refuses_a_touching_hunk(repo: Path) -> None:
    """Issue 34: a file the user edited offers its hunks too; one that touches the edit is refused by name."""
    run = setup(repo)
    write(repo, "a.txt", "the user's own\n")
    (repo / "b.txt").unlink()  # deleted by the user: no hunk can be placed on it, so it is not offered
    digest = tree_digest(repo)
    code, out = drive(repo, ["apply", run.run_id, "--hunks"], [b"y", b"q"])
    assert code == 1 and "Apply this hunk" in out and "touches your change" in out
    assert "Not offered: b.txt" in out
    assert tree_digest(repo) == digest


def test_help_lists_only_offered_answers_and_the_view_has_file_headers(repo: Path) -> None:
    """Issue 21 item 12: '?' on a one-change hunk does not list 's'; '---'/'+++' lines as in git add -p."""
    run = setup(repo)
    code, out = drive(repo, ["apply", run.run_id, "--hunks"], [b"?", b"q"])
    assert code == 0, out
    first = out.split("Apply this hunk")[1]
    assert "--- a/a.txt\r\n+++ b/a.txt" in out.replace("\r\r", "\r")
    assert "s - split" not in first and "y - apply this hunk" in first


@given(st.binary(max_size=200).map(lambda b: b.replace(b"x", b"\n").replace(b"y", b"\r").replace(b"z", b"\x0b")))
def test_split_lines_ends_lines_only_at_newlines_as_git_does(data: bytes) -> None:
    # Its fast path (bytes.splitlines, no carriage return in the data) and the general one agree with git:
    # only "\n" ends a line; "\r", "\v" and the like are content.
    parts = data.split(b"\n")
    expected = [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    from sandbox.merge import hunks as hk

    assert hk.split_lines(data) == expected
