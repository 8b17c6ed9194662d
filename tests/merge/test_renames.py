"""Renames (issue 34 item 2): the user's edit of a path the agent renamed follows the rename under --3way (git's
merge), and without it the refusal names the rename; undo gives back the user's file byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from click.testing import CliRunner

from sandbox.cli import cli
from sandbox.fast import renamepairs
from sandbox.merge import renames
from sandbox.run.run import Run
from sandbox.store.project import Project
from tests.conftest import tree_digest, write

BODY = "".join(f"def f{i}():\n    return {i}\n" for i in range(1, 31))


def invoke(root: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["-C", str(root), *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def setup(root: Path) -> Run:
    write(root, "src.py", BODY)
    write(root, "other.txt", "other\n")
    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("Bash", {"command": "git mv src.py lib.py"}) as call:
        call.rename("src.py", "lib.py")
    with run.tool_call("Edit") as call:
        call.write("lib.py", BODY.replace("return 25\n", "return 2500\n"))
        call.write("other.txt", "OTHER\n")
    return run


def test_your_edit_follows_the_rename_under_3way_and_is_refused_by_name_without(repo: Path) -> None:
    run = setup(repo)
    mine = BODY.replace("return 3\n", "return 'mine'\n")
    write(repo, "src.py", mine)
    digest = tree_digest(repo)
    code, out, err = invoke(repo, "apply", run.run_id)
    assert code == 1 and "the agent renamed it to 'lib.py'; you edited it" in out and "--3way" in out
    assert tree_digest(repo) == digest
    code, out, err = invoke(repo, "apply", run.run_id, "--3way", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert sorted(report["applied"]) == ["lib.py", "other.txt", "src.py"]
    assert "renamed from 'src.py'" in report["reasons"]["lib.py"]
    assert not (repo / "src.py").exists()
    assert (repo / "lib.py").read_text() == mine.replace("return 25\n", "return 2500\n")
    assert invoke(repo, "apply", run.run_id)[0] == 0  # again: nothing to do, nothing refused
    code, _, err = invoke(repo, "undo", run.run_id)
    assert code == 0, err
    assert tree_digest(repo) == digest and (repo / "src.py").read_bytes() == mine.encode()


def test_a_rename_both_sides_changed_the_same_lines_gets_markers(repo: Path) -> None:
    run = setup(repo)
    write(repo, "src.py", BODY.replace("return 25\n", "return 'yours'\n"))
    code, out, _ = invoke(repo, "apply", run.run_id, "--3way")
    assert code == 1 and "Needs attention" in out and "lib.py" in out
    text = (repo / "lib.py").read_text()
    assert "<<<<<<< yours" in text and "return 'yours'" in text and "return 2500" in text
    assert not (repo / "src.py").exists()


def test_find_pairs_as_git_does(repo: Path) -> None:
    run = setup(repo)
    blob = run.repo.create_blob(BODY.encode())
    changed = run.repo.create_blob(BODY.replace("return 1\n", "return 0\n").encode())
    other = run.repo.create_blob(b"nothing alike\n")
    from sandbox.store.objects import MODE_FILE, Entry

    pairs = renames.find(
        run.repo,
        {"a.py": Entry(MODE_FILE, str(blob)), "gone.txt": Entry(MODE_FILE, str(other))},
        {"b.py": Entry(MODE_FILE, str(changed)), "new.txt": Entry(MODE_FILE, str(blob))},
    )
    assert pairs == {"a.py": "new.txt"}  # the same blob first; gone.txt has no match


def test_diff_json_and_log_tell_the_rename_as_diff_does(repo: Path) -> None:
    run = setup(repo)
    code, out, _ = invoke(repo, "diff", run.run_id)
    assert "rename from src.py" in out and "rename to lib.py" in out
    files = {f["path"]: f for f in json.loads(invoke(repo, "diff", run.run_id, "--json")[1])["files"]}
    assert files["lib.py"]["renamed_from"] == "src.py" and files["src.py"]["renamed_to"] == "lib.py"
    assert files["other.txt"]["renamed_from"] is None and files["other.txt"]["renamed_to"] is None
    code, out, _ = invoke(repo, "log", run.run_id)
    assert "R src.py -> lib.py" in out and " D src.py" not in out and " A lib.py" not in out


def test_taking_one_side_of_a_rename_says_so(repo: Path) -> None:
    """Issue 34: with --exclude of the old path both files ended up in the tree, and nothing said so."""
    run = setup(repo)
    code, out, err = invoke(repo, "apply", run.run_id, "--exclude", "src.py", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert "lib.py" in report["applied"] and (repo / "src.py").exists()
    assert (
        report["reasons"]["lib.py"]
        == "renamed from 'src.py' by the agent; 'src.py' is left out, so both are in your tree"
    )
    code, out, _ = invoke(repo, "undo", run.run_id)
    code, out, _ = invoke(repo, "apply", run.run_id, "--exclude", "src.py")
    assert "so both are in your tree" in out


def test_status_and_list_count_a_rename_once_as_diff_stat_does_on_both_read_paths(repo: Path) -> None:
    from tests.fast.test_foldcache import drop_caches
    from tests.fast.test_foldcache import invoke as run_sandbox

    run = setup(repo)
    stat = subprocess.run(
        [sys.executable, str(Path(sys.executable).parent / "sandbox"), "diff", run.run_id, "--stat"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "2 files changed" in stat and "src.py => lib.py" in stat
    drop_caches(run.project)
    full = run_sandbox(repo, "status", run.run_id, "--json")
    fast = run_sandbox(repo, "status", run.run_id, "--json")
    assert full[3] and not fast[3]  # the first took the full path (pygit2), the second the sealed cache
    assert fast[:3] == full[:3]
    row = json.loads(full[1])
    assert (row["changed_paths"], row["renamed_paths"]) == (2, 1)
    text = run_sandbox(repo, "status", run.run_id)[1]
    assert "changed:   2 path(s) (1 renamed)" in text
    # Without the rename the count is what it always was: an exact rename of an unrelated pair is still one.
    assert renamepairs.count(
        [("a", None, Leaf(0o100644, "1" * 40)), ("b", Leaf(0o100644, "1" * 40), None)], _never
    ) == (
        1,
        1,
    )


class Leaf(NamedTuple):
    mode: int
    oid: str


def _never(oid: str) -> bytes:
    raise AssertionError(f"an exact rename reads no blob ({oid})")


def test_what_is_left_shows_a_rename_as_one_and_status_names_calls_as_log_does(repo: Path) -> None:
    run = setup(repo)
    code, out, err = invoke(repo, "apply", run.run_id, "--exclude", "src.py", "--exclude", "lib.py")
    assert code == 0, err
    code, out, err = invoke(repo, "diff", run.run_id, "--unapplied", "--no-pager")
    assert code == 0, err
    assert "rename from src.py\nrename to lib.py\n" in out and "deleted file mode" not in out
    assert "-    return 25\n+    return 2500\n" in out and "other.txt" not in out
    code, out, err = invoke(repo, "diff", run.run_id, "--unapplied", "--stat", "--no-pager")
    assert out.splitlines()[0].startswith(" src.py => lib.py | +1 -1") and "1 file(s) not in your tree yet" in out
    code, out, err = invoke(repo, "diff", run.run_id, "--unapplied", "--json")
    files = {f["path"]: f for f in json.loads(out)["files"]}
    assert files["lib.py"]["renamed_from"] == "src.py" and files["src.py"]["renamed_to"] == "lib.py"


def test_status_names_a_partly_applied_call_as_log_numbers_it(repo: Path, tmp_path: Path) -> None:
    lines = [f"{i}\n" for i in range(40)]
    write(repo, "long.txt", "".join(lines))
    run = setup(repo)
    with run.tool_call("Edit") as call:
        call.write("long.txt", "".join(["first\n", *lines[1:39], "last\n"]))
    code, out, err = invoke(repo, "diff", run.run_id, "--json", "--call", "3")
    (other,) = json.loads(out)["files"]
    picked = tmp_path / "picked"
    picked.write_text(other["hunks"][0]["id"] + "\n")
    code, out, err = invoke(repo, "apply", run.run_id, "--call", "3", "--hunks-from", str(picked))
    assert code == 0, out + err
    code, out, err = invoke(repo, "status", run.run_id)
    assert "partly applied: #3)" in out and "call_" not in out.split("changed:")[1].splitlines()[0]


def test_past_the_pair_bound_only_the_same_blob_pairs() -> None:
    # 101 deleted x 101 added texts, each nearly its partner: more pairs than MAX_PAIRS to compare, so
    # only the exact rename (the same blob) is paired, and no blob is read for similarity.
    deleted = {f"old{i}": Leaf(0o100644, f"{i:040x}") for i in range(101)}
    added = {f"new{i}": Leaf(0o100644, f"{i + 1000:040x}") for i in range(101)}
    added["moved"] = Leaf(0o100644, f"{7:040x}")
    assert (len(deleted) - 1) * (len(added) - 1) > renamepairs.MAX_PAIRS
    assert renamepairs.pair(deleted, added, _never) == {"old7": "moved"}
