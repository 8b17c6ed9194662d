"""Chosen hunks on a file the user edited (issue 34 item 1): placed where their context still matches, as
``git apply`` places them; one that touches the user's change refused by name with nothing written, or merged
with markers under ``--3way``; files no hunk was chosen from are not looked at; undo gives the user's file back."""

from __future__ import annotations

import json
from pathlib import Path

from sandbox.merge import hunks as hk
from tests.conftest import tree_digest, write
from tests.merge.test_hunks import BASE, diff_json, ids_file, invoke, lines, setup


def yours(**changes: str) -> str:
    """The base with the user's own edits: ``after8`` inserts lines after line 8, ``lN`` replaces line N."""
    out = [f"line {i}\n" for i in range(1, 21)]
    for key, value in changes.items():
        if key.startswith("l"):
            out[int(key[1:]) - 1] = value
    if "after8" in changes:
        out[8:8] = [changes["after8"]]
    return "".join(out)


def test_a_chosen_hunk_lands_on_your_edited_file_with_an_offset(repo: Path, tmp_path: Path) -> None:
    run = setup(repo)
    hunks = diff_json(repo, run)["a.txt"]["hunks"]
    assert isinstance(hunks, list)
    mine = yours(after8="the user's\nthree new\nlines\n")
    write(repo, "a.txt", mine)
    code, out, err = invoke(repo, "apply", run.run_id, "--json", "--hunks-from", ids_file(tmp_path, hunks[1]["id"]))
    assert code == 0, err
    report = json.loads(out)
    assert report["applied"] == ["a.txt"] and "onto your edits" in report["reasons"]["a.txt"]
    expected = mine.replace("line 14\n", "FOURTEEN\n").replace("line 17\n", "SEVENTEEN\n")
    assert (repo / "a.txt").read_text() == expected
    assert (repo / "b.txt").read_text() == "b\n"  # nothing chosen from it: left as it was
    code, out, _ = invoke(repo, "log", run.run_id)
    assert "[partly applied: a.txt]" in out
    # The other hunk later, on top: then all of the agent's change is in, with the user's lines kept.
    code, out, err = invoke(repo, "apply", run.run_id, "--json", "--hunks-from", ids_file(tmp_path, hunks[0]["id"]))
    assert code == 0, err
    assert (repo / "a.txt").read_text() == expected.replace("line 2\n", "TWO\n")
    report = json.loads(out)
    assert report["reasons"]["a.txt"] == "all of the agent's change, placed on your edits" and not report["partial"]
    code, out, err = invoke(repo, "apply", run.run_id, "a.txt", "--json")
    assert code == 0, err
    assert json.loads(out)["reasons"]["a.txt"].startswith("applied earlier")
    # Undo twice: byte for byte the user's own file again.
    assert invoke(repo, "undo", run.run_id)[0] == 0
    assert (repo / "a.txt").read_text() == expected
    assert invoke(repo, "undo", run.run_id)[0] == 0
    assert (repo / "a.txt").read_bytes() == mine.encode()


def test_a_hunk_touching_your_change_is_refused_by_name_and_3way_marks_it(repo: Path, tmp_path: Path) -> None:
    run = setup(repo)
    hunks = diff_json(repo, run)["a.txt"]["hunks"]
    assert isinstance(hunks, list)
    mine = yours(l14="the user's line 14\n")
    write(repo, "a.txt", mine)
    digest = tree_digest(repo)
    chosen = ids_file(tmp_path, hunks[1]["id"], hunks[0]["id"])
    code, out, err = invoke(repo, "apply", run.run_id, "--hunks-from", chosen)
    assert code == 1 and "nothing was written" in err
    assert "@@ -14 +14 @@" in out and "touches your change to line(s) 14-14" in out and "--3way" in out
    assert tree_digest(repo) == digest
    # Line 2's hunk alone is far from the edit: it is taken.
    code, _, err = invoke(repo, "apply", run.run_id, "--hunks-from", ids_file(tmp_path, hunks[0]["id"]))
    assert code == 0, err
    assert (repo / "a.txt").read_text() == mine.replace("line 2\n", "TWO\n")
    assert invoke(repo, "undo", run.run_id)[0] == 0
    assert (repo / "a.txt").read_bytes() == mine.encode()
    # With --3way the touching hunk is merged with git's markers; exit 1 says they need attention.
    chosen = ids_file(tmp_path, hunks[1]["id"], hunks[0]["id"])
    code, out, err = invoke(repo, "apply", run.run_id, "--3way", "--hunks-from", chosen)
    assert code == 1, err
    text = (repo / "a.txt").read_text()
    assert "<<<<<<< yours" in text and "the user's line 14" in text and "SEVENTEEN" in text and "TWO\n" in text
    assert "Needs attention" in out
    assert invoke(repo, "undo", run.run_id)[0] == 0
    assert (repo / "a.txt").read_bytes() == mine.encode()


def test_files_without_a_chosen_hunk_are_not_looked_at(repo: Path, tmp_path: Path) -> None:
    """Issue 34: --hunks-from refused over a file none of whose hunks was chosen."""
    run = setup(repo)
    files = diff_json(repo, run)
    write(repo, "b.txt", "the user's own b\n")  # a conflict, but nothing of b.txt is chosen
    write(repo, "new.txt", "the user's new file\n")
    line2 = files["a.txt"]["hunks"][0]["id"]  # type: ignore[index]
    code, out, err = invoke(repo, "apply", run.run_id, "--json", "--hunks-from", ids_file(tmp_path, line2))
    assert code == 0, err
    report = json.loads(out)
    assert report["applied"] == ["a.txt"] and sorted(report["skipped"]) == ["b.txt", "new.txt"]
    assert (repo / "a.txt").read_text() == lines(l2="TWO\n")
    assert (repo / "b.txt").read_text() == "the user's own b\n"
    # Choosing b.txt's unit is refused as before: the user's b.txt is in the way, and nothing is written.
    digest = tree_digest(repo)
    code, out, err = invoke(repo, "apply", run.run_id, "--hunks-from", ids_file(tmp_path, str(files["b.txt"]["id"])))
    assert code == 1 and "b.txt" in out and tree_digest(repo) == digest


def test_placement_follows_git_apply() -> None:
    """The placement alone: shifted by the user's lines above, refused when the change or its context moved."""
    old = hk.split_lines(BASE.encode())
    part = [(13, 1, [b"FOURTEEN\n"])]
    mine = yours(after8="x\ny\n").encode()
    placed = hk.onto_yours(old, mine, part)
    assert placed == mine.replace(b"line 14\n", b"FOURTEEN\n")
    # Three lines of context each side, as git diff writes them: lines 11 to 17 must be as they were.
    for near, touching in (("l10", False), ("l11", True), ("l14", True), ("l17", True), ("l18", False)):
        over = hk.onto_yours(old, yours(**{near: "edited\n"}).encode(), part)
        assert isinstance(over, hk.Overlap) == touching, near
    # Lines appended at the end of the file, far below: no offset needed.
    assert hk.onto_yours(old, (BASE + "tail\n").encode(), part) == (lines(l14="FOURTEEN\n") + "tail\n").encode()


def test_diff_unapplied_shows_only_what_is_left(repo: Path, tmp_path: Path) -> None:
    """Issue 34 item 3: after partial applies, 'diff --unapplied' (and --json) shows only what is not in the tree."""
    run = setup(repo)
    files = diff_json(repo, run)
    hunks = files["a.txt"]["hunks"]
    assert isinstance(hunks, list)
    line14 = hunks[1]["changes"][0]["id"]
    code, _, err = invoke(
        repo, "apply", run.run_id, "--hunks-from", ids_file(tmp_path, line14, str(files["b.txt"]["id"]))
    )
    assert code == 0, err
    code, out, err = invoke(repo, "diff", run.run_id, "--unapplied", "--json")
    assert code == 0, err
    rest = {f["path"]: f for f in json.loads(out)["files"]}
    assert sorted(rest) == ["a.txt", "new.txt"]  # b.txt is in the tree
    left_ids = [h["id"] for h in rest["a.txt"]["hunks"]]
    line17 = hunks[1]["changes"][1]["id"]
    assert left_ids == [hunks[0]["id"], line17]  # line 2's hunk, and the untaken part of the split one
    code, out, _ = invoke(repo, "diff", run.run_id, "--unapplied")
    assert "+SEVENTEEN" in out and "+TWO" in out and "FOURTEEN" not in out and "b.txt" not in out
    code, out, _ = invoke(repo, "diff", run.run_id, "--unapplied", "--stat")
    assert "a.txt | +2 -2 (partly applied: 2 hunk(s) left of 2)" in out and "2 file(s)" in out
    # The ids left are the ones apply takes: applying them leaves nothing.
    code, _, err = invoke(
        repo, "apply", run.run_id, "--hunks-from", ids_file(tmp_path, *left_ids, str(rest["new.txt"]["id"]))
    )
    assert code == 0, err
    code, out, _ = invoke(repo, "diff", run.run_id, "--unapplied")
    assert code == 0 and out.startswith("Nothing left")
    assert json.loads(invoke(repo, "diff", run.run_id, "--unapplied", "--json")[1])["files"] == []


def test_a_read_only_file_you_edited_is_refused_before_any_write(repo: Path, tmp_path: Path) -> None:
    run = setup(repo)
    line2 = diff_json(repo, run)["a.txt"]["hunks"][0]["id"]  # type: ignore[index]
    write(repo, "a.txt", yours(l10="the user's line 10\n"))
    (repo / "a.txt").chmod(0o444)
    digest = tree_digest(repo)
    try:
        code, _, err = invoke(repo, "apply", run.run_id, "--hunks-from", ids_file(tmp_path, line2))
        assert code == 1 and "Read-only in your tree: a.txt" in err
        assert tree_digest(repo) == digest  # the user's file, bytes and mode, as it was
    finally:
        (repo / "a.txt").chmod(0o644)
