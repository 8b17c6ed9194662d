"""Git's content conversions are honoured everywhere (issue #10, item 6).

Repositories with ``core.autocrlf=true``, ``* text=auto eol=crlf``, a ``binary`` attribute, an
``ident`` file and a clean/smudge filter driver defined in the repository's config. In each, the
agent changes one line of one file: ``diff`` must show exactly that line, ``apply`` must write the
file as ``git checkout`` would (so ``git diff`` in the user's repository shows the same one line)
and leave untouched files alone, and ``undo`` must bring back the user's bytes exactly.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import git, make_repo, write

from .helpers import assert_fsck_clean, ok, open_run, sb

LF = "first\nsecond\nthird\n"


def recheckout(root: Path) -> None:
    """Write every tracked file again as git's checkout would with the current config."""
    for rel in git(root, "ls-files").split():
        (root / rel).unlink()
    git(root, "checkout", "--", ".")


def autocrlf(root: Path) -> None:
    git(root, "config", "core.autocrlf", "true")
    recheckout(root)


def eol_crlf(root: Path) -> None:
    write(root, ".gitattributes", "* text=auto eol=crlf\n*.bin binary\n")
    git(root, "add", "-A")
    git(root, "add", "--renormalize", ".")
    git(root, "commit", "-q", "-m", "attributes")
    recheckout(root)


def ident(root: Path) -> None:
    write(root, ".gitattributes", "*.c ident\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "attributes")
    recheckout(root)


def driver(root: Path) -> None:
    # Blobs are stored upper-case, working files are lower-case: a filter a repository defines itself.
    git(root, "config", "filter.shout.clean", "tr a-z A-Z")
    git(root, "config", "filter.shout.smudge", "tr A-Z a-z")
    write(root, ".gitattributes", "*.txt filter=shout\n")
    git(root, "add", "-A")
    git(root, "add", "--renormalize", ".")
    git(root, "commit", "-q", "-m", "attributes")
    recheckout(root)


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "autocrlf": (autocrlf, "a.txt"),
    "eol-crlf": (eol_crlf, "a.txt"),
    "ident": (ident, "id.c"),
    "filter-driver": (driver, "a.txt"),
}


def make(tmp_path: Path, case: str) -> tuple[Path, str]:
    setup, target = CASES[case]
    root = make_repo(
        tmp_path / "repo",
        {
            "a.txt": LF,
            "b.txt": "untouched\nby the agent\n",
            "id.c": "/* $Id$ */\nint x = 1;\nint y = 2;\n",
            "data.bin": "raw\r\nbytes\n",
        },
    )
    setup(root)
    return root, target


def git_diff_lines(root: Path) -> list[str]:
    out = git(root, "diff", "--no-color", "-U0")
    return [line for line in out.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_only_the_agents_real_change_is_recorded_and_applied(tmp_path: Path, case: str) -> None:
    root, target = make(tmp_path, case)
    assert git(root, "status", "--porcelain") == "", "the setup leaves a clean checkout"
    before = {rel: (root / rel).read_bytes() for rel in ("a.txt", "b.txt", "id.c", "data.bin")}
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    wt = Path(open_run(root, run_id).worktree)
    assert (wt / target).read_bytes() == before[target], "the worktree is checked out as git would"

    # The agent changes one line of the file as it sees it (its checkout's line endings kept).
    edited = (wt / target).read_bytes().replace(b"second", b"changed").replace(b"int y", b"int z")
    ok("write", run_id, target, cwd=root, input=edited)
    # A command that rewrites an untouched file with identical bytes (as formatters do).
    ok("exec", run_id, "--", "sh", "-c", "cat b.txt > b.tmp && mv b.tmp b.txt", cwd=root)

    diff = ok("diff", run_id, cwd=root)
    changed = [ln for ln in diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert len(changed) == 2, f"diff shows more than the agent's one-line change:\n{diff}"
    assert "\r" not in diff, diff
    logged = [f["path"] for e in json.loads(ok("log", run_id, "--json", cwd=root)) for f in e["files"]]
    assert logged == [target], logged

    proc = sb("apply", run_id, cwd=root)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    checkout = subprocess.run(
        ["git", "cat-file", "--filters", f"refs/sandbox/{run_id}/head:{target}"], cwd=root, capture_output=True
    ).stdout
    assert (root / target).read_bytes() == checkout, "apply writes what git's checkout would"
    if case != "ident":  # ident: checkout writes the new blob's id into $Id$
        assert checkout == edited
    for rel in ("b.txt", "data.bin", *(r for r in ("a.txt", "id.c") if r != target)):
        assert (root / rel).read_bytes() == before[rel], rel
    assert len(git_diff_lines(root)) == 2, git(root, "diff")
    assert git(root, "status", "--porcelain").split() == ["M", target]

    ok("undo", run_id, cwd=root)
    assert (root / target).read_bytes() == before[target], "undo restores the user's bytes exactly"
    assert git(root, "status", "--porcelain") == ""
    assert_fsck_clean(root, strict=True)


def test_binary_attribute_keeps_bytes_exact_under_autocrlf(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": LF, "data.bin": "raw\r\nbytes\n", ".gitattributes": "*.bin binary\n"})
    autocrlf(root)
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    ok("write", run_id, "data.bin", cwd=root, input=b"raw\r\nnew bytes\n")
    ok("apply", run_id, cwd=root)
    assert (root / "data.bin").read_bytes() == b"raw\r\nnew bytes\n"
    blob = subprocess.run(
        ["git", "cat-file", "blob", f"refs/sandbox/{run_id}/head:data.bin"], cwd=root, capture_output=True
    )
    assert blob.stdout == b"raw\r\nnew bytes\n", "a binary file is stored byte for byte"
    assert (root / "a.txt").read_bytes() == LF.replace("\n", "\r\n").encode()


def test_three_way_merge_in_a_crlf_checkout_writes_no_markers_and_keeps_crlf(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": "one\ntwo\nthree\nfour\nfive\n"})
    autocrlf(root)
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    ok("write", run_id, "a.txt", cwd=root, input=b"one\r\nTWO\r\nthree\r\nfour\r\nfive\r\n")
    write(root, "a.txt", b"one\r\ntwo\r\nthree\r\nfour\r\nFIVE\r\n")  # the user's own edit, elsewhere
    proc = sb("apply", run_id, "--3way", cwd=root)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert (root / "a.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\nfour\r\nFIVE\r\n"


def test_rollback_files_writes_the_worktree_as_checkout_would(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": LF})
    autocrlf(root)
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    wt = Path(open_run(root, run_id).worktree)
    original = (wt / "a.txt").read_bytes()
    assert original == LF.replace("\n", "\r\n").encode()
    ok("checkpoint", run_id, "--label", "before", cwd=root)
    ok("write", run_id, "a.txt", cwd=root, input=original.replace(b"second", b"changed"))
    ok("rollback", run_id, "--files", "--to", "before", cwd=root)
    assert (wt / "a.txt").read_bytes() == original
    ok("write", run_id, "a.txt", cwd=root, input=original.replace(b"third", b"changed"))
    diff = ok("diff", run_id, cwd=root)
    removed = [ln for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert removed == ["-third"] and "\r" not in diff, diff


@pytest.mark.skipif(shutil.which("git-lfs") is None, reason="git-lfs is not installed (apt-get install git-lfs)")
def test_git_lfs_files_are_recorded_as_pointers_and_applied_as_content(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": LF}, commit=False)
    git(root, "lfs", "install", "--local")
    git(root, "lfs", "track", "*.bin")
    write(root, "data.bin", b"large\x00binary\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "lfs")
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    assert (Path(open_run(root, run_id).worktree) / "data.bin").read_bytes() == b"large\x00binary\n"
    ok("write", run_id, "data.bin", cwd=root, input=b"large\x00changed\n")
    pointer = git(root, "cat-file", "blob", f"refs/sandbox/{run_id}/head:data.bin")
    assert pointer.startswith("version https://git-lfs.github.com/spec/v1"), pointer
    ok("apply", run_id, cwd=root)
    assert (root / "data.bin").read_bytes() == b"large\x00changed\n"
    assert git(root, "status", "--porcelain").split() == ["M", "data.bin"]
    ok("undo", run_id, cwd=root)
    assert (root / "data.bin").read_bytes() == b"large\x00binary\n"
    assert git(root, "status", "--porcelain") == ""
