"""The agent's git read with the standard library equals what pygit2 (libgit2) reads.

:func:`sandbox.fast.agentgit.activity` used to walk the run's own git with pygit2; it now walks it with
:mod:`sandbox.fast.revwalk`. pygit2 stays here only as the oracle: :func:`oracle` is the former
implementation (tips pushed in the same order as the new one pushes them, since libgit2's order of
commits with equal times depends on it), and hypothesis builds random histories (merges, octopus
merges, branches, lightweight and annotated tags, a detached HEAD, an unborn branch, stash reflogs
with malformed lines, equal and skewed commit times, shallow boundaries) with ``git fast-import``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.fast import agentgit, gitread, revwalk
from sandbox.fast.agentgit import MAX_LISTED, MAX_WALK, GitActivity
from sandbox.store.layout import run_branch
from tests.conftest import examples, git

RUN = "r1"


def oracle(git_dir: str, run_id: str, base: str) -> GitActivity | None:
    """The former pygit2 implementation of :func:`sandbox.fast.agentgit.activity`."""
    try:
        repo = pygit2.Repository(git_dir)
    except (pygit2.GitError, KeyError):
        return None
    try:
        return _oracle_read(repo, run_id, base)
    except (pygit2.GitError, KeyError, ValueError):
        return None


def _oracle_read(repo: pygit2.Repository, run_id: str, base: str) -> GitActivity:
    start_ref = f"refs/heads/{run_branch(run_id)}"
    branch: str | None = None
    head: str | None = None
    if not repo.head_is_unborn:
        head = str(repo.head.target)
        if not repo.head_is_detached:
            branch = repo.head.name.removeprefix("refs/heads/")
    branches: dict[str, str] = {}
    tags: dict[str, str] = {}
    stash = 0
    tips: list[str] = [head] if head else []
    for name in sorted(repo.references):
        try:
            target = str(repo.references[name].peel(pygit2.Commit).id)
        except (pygit2.GitError, KeyError, ValueError):
            continue
        if name.startswith("refs/heads/"):
            if not (name == start_ref and target == base):
                branches[name.removeprefix("refs/heads/")] = target
            tips.append(target)
        elif name.startswith("refs/tags/"):
            tags[name.removeprefix("refs/tags/")] = target
            tips.append(target)
        elif name == "refs/stash":
            stash = sum(1 for _ in repo.references[name].log())
    tips = list(dict.fromkeys(t for t in tips if t != base))
    commits: list[tuple[str, str]] = []
    count = 0
    if tips:
        walker = repo.walk(tips[0], pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME)
        for tip in tips[1:]:
            walker.push(tip)
        walker.hide(base)
        for n, commit in enumerate(walker):
            if n >= MAX_WALK:
                break
            count += 1
            if len(commits) < MAX_LISTED:
                commits.append((str(commit.id), commit.message.split("\n", 1)[0][:100]))
    return GitActivity(branch, head, branches, tags, stash, commits, count)


# -- random histories ---------------------------------------------------------------------------------

_T0 = 1_700_000_000


@st.composite
def histories(draw: st.DrawFn) -> dict[str, object]:
    """A history as fast-import commands: commits (each with 0-3 parents among earlier ones, a time
    that may repeat or go backwards), branches and tags at some commits, a base, a HEAD."""
    n = draw(st.integers(1, 14))
    commits: list[tuple[list[int], int, str]] = []
    for i in range(n):
        parents: list[int] = []
        if i and draw(st.integers(0, 9)):
            parents.append(draw(st.integers(0, i - 1)))
            if i > 1 and not draw(st.integers(0, 3)):
                parents.extend(draw(st.lists(st.integers(0, i - 1), min_size=1, max_size=2, unique=True)))
        parents = list(dict.fromkeys(parents))
        when = _T0 + draw(st.sampled_from([i * 60, i * 60, 0, 120, draw(st.integers(0, 900))]))
        subject = draw(st.sampled_from(["work", "fix: ünïcode", "", "\n\nleading newlines", f"commit {i}"]))
        commits.append((parents, when, subject))
    refs = draw(
        st.dictionaries(
            st.sampled_from(
                ["refs/heads/feat", "refs/heads/x/y", f"refs/heads/sandbox/{RUN}", "refs/tags/v1", "refs/tags/v2"]
            ),
            st.integers(0, n - 1),
            max_size=4,
        )
    )
    annotated = draw(st.sets(st.sampled_from(["refs/tags/v1", "refs/tags/v2"])))
    head = draw(st.one_of(st.none(), st.integers(0, n - 1), st.sampled_from(["feat", "sandbox/" + RUN, "unborn"])))
    base = draw(st.integers(0, n - 1))
    stash = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=1, max_size=4)))
    shallow = draw(st.lists(st.integers(0, n - 1), max_size=2))
    return {
        "commits": commits,
        "refs": refs,
        "annotated": annotated,
        "head": head,
        "base": base,
        "stash": stash,
        "shallow": shallow,
    }


def build(path: Path, h: dict[str, object]) -> tuple[str, list[str]]:
    """The history in a new repository at ``path``: (its git dir, the commit ids by index)."""
    if path.exists():
        shutil.rmtree(path)
    git(path.parent, "init", "-q", "--bare", str(path))
    lines: list[str] = []
    commits = h["commits"]
    assert isinstance(commits, list)
    for i, (parents, when, subject) in enumerate(commits):
        message = f"{subject}\n".encode()
        lines.append(f"commit refs/hidden/c{i}")
        lines.append(f"mark :{i + 1}")
        lines.append(f"committer C <c@e> {when} +0000")
        lines.append(f"data {len(message)}")
        lines.append(message.decode())
        if parents:
            lines.append(f"from :{parents[0] + 1}")
            lines.extend(f"merge :{p + 1}" for p in parents[1:])
        else:
            lines.append("deleteall")
        lines.append(f"M 644 inline f{i}")
        lines.append("data 2\nx\n")
    lines.append("")
    # The ids from fast-import's marks and the scaffolding refs deleted in one transaction: two git
    # processes, not two per commit (the 2,003-commit history below made 4,000).
    marks = path / "marks"
    subprocess.run(
        ["git", "fast-import", "--quiet", f"--export-marks={marks}"],
        cwd=path,
        input="\n".join(lines).encode(),
        check=True,
    )
    by_mark = dict(line.split() for line in marks.read_text().splitlines())
    marks.unlink()
    ids = [by_mark[f":{i + 1}"] for i in range(len(commits))]
    deletes = "".join(f"delete refs/hidden/c{i}\n" for i in range(len(commits)))
    subprocess.run(["git", "update-ref", "--stdin"], cwd=path, input=deletes.encode(), check=True)
    refs = h["refs"]
    assert isinstance(refs, dict)
    for name, index in refs.items():
        if name in h["annotated"]:  # type: ignore[operator]
            git(path, "tag", "-a", "-m", "annotated", name.removeprefix("refs/tags/"), ids[index])
        else:
            git(path, "update-ref", name, ids[index])
    head = h["head"]
    if isinstance(head, int):
        git(path, "update-ref", "--no-deref", "HEAD", ids[head])
    elif head is not None:
        git(path, "symbolic-ref", "HEAD", f"refs/heads/{head}")
    stash = h["stash"]
    if stash is not None:
        git(path, "update-ref", "refs/stash", ids[-1])
        log = Path(path, "logs", "refs", "stash")
        log.parent.mkdir(parents=True, exist_ok=True)
        rows = [
            f"{'0' * 40} {ids[-1]} A U Thor <a@e> {_T0} +0000\tWIP on main" if good else "garbage line"
            for good in stash  # type: ignore[union-attr]
        ]
        log.write_text("\n".join(rows) + "\n")
    shallow = h["shallow"]
    if shallow:
        Path(path, "shallow").write_text("".join(f"{ids[i]}\n" for i in shallow))  # type: ignore[union-attr]
    return str(path), ids


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(h=histories())
def test_the_walk_equals_pygit2_on_random_histories(tmp_path: Path, h: dict[str, object]) -> None:
    git_dir, ids = build(tmp_path / "repo.git", h)
    base = ids[h["base"]]  # type: ignore[index]
    expected = oracle(git_dir, RUN, base)
    assert agentgit.activity(git_dir, RUN, base) == expected
    # And with the history packed (commits read from a pack, refs from packed-refs; the
    # unreachable ones pruned, the base perhaps too).
    git(git_dir, "gc", "-q", "--prune=now")
    assert agentgit.activity(git_dir, RUN, base) == oracle(git_dir, RUN, base)


def test_ties_are_broken_as_libgit2_breaks_them(tmp_path: Path) -> None:
    """Twelve branches of commits all made in the same second: only libgit2's heap and list order
    give its order."""
    h = {
        "commits": [([], _T0, "root")] + [([0], _T0, f"c{i}") for i in range(1, 13)] + [([1, 5, 9], _T0, "merge")],
        "refs": {f"refs/heads/b{i}": i for i in range(1, 13)},
        "annotated": set(),
        "head": 13,
        "base": 0,
        "stash": None,
        "shallow": [],
    }
    git_dir, _ids = build(tmp_path / "repo.git", h)
    found = agentgit.activity(git_dir, RUN, _ids[0])
    assert found is not None and found.commit_count == 13
    assert found == oracle(git_dir, RUN, _ids[0])


def _linear(path: Path, n: int, agent: int) -> tuple[str, str]:
    """``n`` commits a minute apart, then ``agent`` more on branch sandbox/r1: (git dir, base)."""
    h = {
        "commits": [([i - 1] if i else [], _T0 + 60 * i, f"c{i}") for i in range(n + agent)],
        "refs": {"refs/heads/sandbox/" + RUN: n + agent - 1},
        "annotated": set(),
        "head": "sandbox/" + RUN,
        "base": n - 1,
        "stash": None,
        "shallow": [],
    }
    git_dir, ids = build(path, h)
    git(git_dir, "gc", "-q")
    return git_dir, ids[n - 1]


def test_the_walk_stops_above_the_users_history(tmp_path: Path) -> None:
    """git's walk stops a few commits after only uninteresting ones are left: 3 agent commits on
    2,000 commits of history read 3 + a handful, not 2,003."""
    git_dir, base = _linear(tmp_path / "repo.git", 2000, 3)
    repo = gitread.Repo(git_dir)
    walker = revwalk.Walker(repo)
    tip = repo.ref("HEAD")
    assert tip is not None
    assert len(walker.walk([tip], [base])) == 3
    assert walker.parsed <= 3 + 1 + revwalk.SLOP + 1
    found = agentgit.activity(git_dir, RUN, base)
    assert found is not None and found.commit_count == 3 and found == oracle(git_dir, RUN, base)


def test_more_commits_than_listed_and_counted(tmp_path: Path) -> None:
    git_dir, base = _linear(tmp_path / "repo.git", 5, MAX_WALK + 20)
    found = agentgit.activity(git_dir, RUN, base)
    assert found is not None and found.commit_count == MAX_WALK and len(found.commits) == MAX_LISTED
    assert found == oracle(git_dir, RUN, base)


def test_a_walk_past_its_bound_is_unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal commit times keep git's walk going down the whole history; the bound stops it."""
    h = {
        "commits": [([i - 1] if i else [], _T0, f"c{i}") for i in range(60)],
        "refs": {"refs/heads/side": 10},
        "annotated": set(),
        "head": 59,
        "base": 58,
        "stash": None,
        "shallow": [],
    }
    git_dir, ids = build(tmp_path / "repo.git", h)
    found = agentgit.activity(git_dir, RUN, ids[58])
    assert found is not None and found == oracle(git_dir, RUN, ids[58])
    monkeypatch.setattr(revwalk, "MAX_PARSED", 30)
    assert agentgit.activity(git_dir, RUN, ids[58]) is None


def test_commit_messages_decode_as_pygit2_decodes_them(tmp_path: Path) -> None:
    """No encoding header: UTF-8, bad bytes replaced; a declared encoding: strict (an unknown one,
    or bytes it cannot decode, made pygit2 raise: unreadable)."""
    git_dir = tmp_path / "repo.git"
    git(tmp_path, "init", "-q", "--bare", str(git_dir))
    tree = git(git_dir, "hash-object", "-w", "-t", "tree", "/dev/null").strip()
    base = git(git_dir, "commit-tree", tree, "-m", "base").strip()

    def commit(headers: bytes, message: bytes) -> str:
        body = b"tree %s\nparent %s\nauthor A <a@e> 1 +0000\ncommitter C <c@e> 2 +0000\n%s\n%s" % (
            tree.encode(),
            base.encode(),
            headers,
            message,
        )
        proc = subprocess.run(
            ["git", "hash-object", "-w", "-t", "commit", "--literally", "--stdin"],
            cwd=git_dir,
            input=body,
            capture_output=True,
            check=True,
        )
        return proc.stdout.decode().strip()

    cases = [
        (b"", b"caf\xe9 bad utf-8\n"),
        (b"encoding ISO-8859-1\n", b"caf\xe9 latin-1\n"),
        (b"encoding no-such-codec\n", b"x\n"),
        (b"encoding hex\n", b"x\n"),
        (b"encoding UTF-8\n", b"caf\xe9 strict\n"),
        (b"", b"\n\n\nafter newlines\0hidden\n"),
        (b"", b"x" * 300 + b"\n"),
    ]
    for headers, message in cases:
        oid = commit(headers, message)
        git(git_dir, "symbolic-ref", "HEAD", "refs/heads/sandbox/" + RUN)
        git(git_dir, "update-ref", "refs/heads/sandbox/" + RUN, oid)
        try:
            expected = oracle(str(git_dir), RUN, base)
        except LookupError:  # the pygit2 version crashed `sandbox status` here; now: unreadable
            expected = None
        assert agentgit.activity(str(git_dir), RUN, base) == expected, (headers, message)


def test_odd_heads_and_refs_equal_pygit2(tmp_path: Path) -> None:
    """A ref to a tree or a blob or a missing object, garbage, a loop of symbolic refs: skipped; HEAD
    at a tree or a missing commit
    makes the walk fail (unreadable); HEAD at an annotated tag is peeled; a chain of symbolic refs."""
    git_dir = tmp_path / "repo.git"
    git(tmp_path, "init", "-q", "--bare", str(git_dir))
    tree = git(git_dir, "hash-object", "-w", "-t", "tree", "/dev/null").strip()
    blob = git(git_dir, "hash-object", "-w", "--stdin").strip()
    base = git(git_dir, "commit-tree", tree, "-m", "base").strip()
    top = git(git_dir, "commit-tree", tree, "-p", base, "-m", "top").strip()
    git(git_dir, "update-ref", "refs/heads/sandbox/" + RUN, top)
    git(git_dir, "tag", "-a", "-m", "t", "annotated", top)
    tag = git(git_dir, "rev-parse", "refs/tags/annotated").strip()
    missing = "1" * 40
    for name, value in (("refs/heads/to-tree", tree), ("refs/tags/to-blob", blob), ("refs/heads/gone", missing)):
        Path(git_dir, name).parent.mkdir(parents=True, exist_ok=True)
        Path(git_dir, name).write_text(value + "\n")
    Path(git_dir, "refs/heads/alias").write_text("ref: refs/heads/sandbox/" + RUN + "\n")
    Path(git_dir, "refs/heads/garbage").write_text("not a ref\n")
    Path(git_dir, "refs/heads/loop-a").write_text("ref: refs/heads/loop-b\n")
    Path(git_dir, "refs/heads/loop-b").write_text("ref: refs/heads/loop-a\n")
    for head in ("ref: refs/heads/alias", tag, tree, missing, top, "ref: refs/heads/nothing-yet"):
        Path(git_dir, "HEAD").write_text(head + "\n")
        new, old = agentgit.activity(str(git_dir), RUN, base), oracle(str(git_dir), RUN, base)
        assert new == old, head
    Path(git_dir, "HEAD").write_text("ref: refs/heads/alias\n")
    found = agentgit.activity(str(git_dir), RUN, base)
    assert found is not None and found.branch == "sandbox/" + RUN and found.commit_count == 1


def test_an_empty_repository(tmp_path: Path) -> None:
    """HEAD unborn, no refs: nothing walked (and the base is never looked up)."""
    git_dir = tmp_path / "repo.git"
    git(tmp_path, "init", "-q", "--bare", str(git_dir))
    found = agentgit.activity(str(git_dir), RUN, "0" * 40)
    assert found == oracle(str(git_dir), RUN, "0" * 40)
    assert found is not None and found.head is None and not found.changed


def test_odd_signatures_equal_pygit2(tmp_path: Path) -> None:
    """Times libgit2 reads (leading zeros, a sign, no time at all) or refuses (5,000 digits, past
    int64, none after the e-mail's '> '); a commit without an author (the walk's quick parse takes
    it, the listing's full parse does not)."""
    git_dir = tmp_path / "repo.git"
    git(tmp_path, "init", "-q", "--bare", str(git_dir))
    tree = git(git_dir, "hash-object", "-w", "-t", "tree", "/dev/null").strip()
    base = git(git_dir, "commit-tree", tree, "-m", "base").strip()
    git(git_dir, "symbolic-ref", "HEAD", f"refs/heads/sandbox/{RUN}")
    for author, committer in (
        (b"author A <a@e> 1 +0000\n", b"committer C <c@e> 000000000000000000000000000000042 +0000\n"),
        (b"author A <a@e> 1 +0000\n", b"committer C <c@e> -7 +0000\n"),
        (b"author A <a@e> 1 +0000\n", b"committer C <c@e>\n"),
        (b"author A <a@e> 1 +0000\n", b"committer C <c@e> " + b"9" * 5000 + b" +0000\n"),
        (b"author A <a@e> 1 +0000\n", b"committer C <c@e> 9223372036854775808 +0000\n"),
        (b"author A <a@e> 1 +0000\n", b"committer C <c@e> x12 +0000\n"),
        (b"", b"committer C <c@e> 5 +0000\n"),
        (b"author A <a@e> 1 +0000\nauthor B <b@e> 2 +0000\n", b"committer C <c@e> 5 +0000\n"),
    ):
        body = b"tree %s\nparent %s\n%s%s\nmessage\n" % (tree.encode(), base.encode(), author, committer)
        proc = subprocess.run(
            ["git", "hash-object", "-w", "-t", "commit", "--literally", "--stdin"],
            cwd=git_dir,
            input=body,
            capture_output=True,
            check=True,
        )
        git(git_dir, "update-ref", f"refs/heads/sandbox/{RUN}", proc.stdout.decode().strip())
        assert agentgit.activity(str(git_dir), RUN, base) == oracle(str(git_dir), RUN, base), committer[:40]
