"""Hostile input: bad paths, bad JSON, damaged state. Each gets one clear line and changes nothing.

A refusal is checked the way a user would see it: a non-zero exit (not the 'unexpected error'
code), exactly one line on stderr starting with ``sandbox:``, no traceback, and the user's files,
index and refs, the run's worktree and the run's ledger all exactly as before. Inputs that are
odd but legitimate (submodules, case-only renames, non-UTF-8 names, file/directory swaps, a
100 MB binary) must simply work, and the test checks they were recorded correctly.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest
from conftest import git, loose_path, make_repo, object_dirs, tree_digest, user_state, write

from .helpers import (
    assert_fsck_clean,
    assert_one_line_error,
    entries,
    event_ids,
    has_command,
    ok,
    open_run,
    sb,
)


@dataclass
class Env:
    """A user repository with one run that already recorded a call."""

    root: Path
    run_id: str

    @property
    def worktree(self) -> Path:
        return Path(open_run(self.root, self.run_id).worktree)

    def state(self) -> tuple[object, ...]:
        """Everything a refused command must leave alone."""
        return (
            tree_digest(self.root),
            user_state(self.root),
            event_ids(self.root, self.run_id),
            tree_digest(self.worktree),
        )

    def refused(self, *args: str, input: bytes | None = None, what: str = "", attempt: bool = False) -> str:
        """Run a command that must be refused cleanly and change nothing; returns the error line.

        ``attempt``: the refusal comes from inside a started call, so the ledger may gain that one
        call, ended ``failed`` with no commit (evidence of the attempt, not a change).
        """
        before = self.state()
        head = open_run(self.root, self.run_id).state().head
        proc = sb(*args, cwd=self.root, input=input)
        line = assert_one_line_error(proc, what=what or " ".join(args)[:80])
        after = self.state()
        if attempt and after[2] != before[2]:
            assert isinstance(before[2], list)
            new = [e for c, e in entries(self.root, self.run_id).items() if c not in _calls_of(before[2], self)]
            assert len(new) == 1 and new[0]["status"] == "failed" and not new[0]["commit"], new
            assert open_run(self.root, self.run_id).state().head == head
            after = (after[0], after[1], before[2], after[3])
        assert after == before, f"{what or args}: something changed"
        return line


def _calls_of(events: list[str], env: Env) -> set[str]:
    """The call ids that had events among ``events`` (the ledger before a command)."""
    run = open_run(env.root, env.run_id)
    known = set(events)
    return {e.call_id for _oid, e in run.events() if e.event_id in known and e.call_id}


def start_run(root: Path) -> str:
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, workdir, _ = Project.discover(str(root))
    assert workdir is not None
    run = Run.start(project, workdir)
    with run.tool_call("write_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('agent')\n")
    return run.run_id


@pytest.fixture
def env(user_repo: Path) -> Env:
    return Env(user_repo, start_run(user_repo))


# -- paths ------------------------------------------------------------------------------------

BAD_PATHS = {
    "dotdot": "../escape.txt",
    "dotdot-inner": "a/../../escape.txt",
    "absolute": "/tmp/sandbox-hostile-abs.txt",
    "long-name": "n" * 300,
    "long-path": "/".join(["d" * 200] * 25),
    "dot-git": ".git/config",
    "dot-git-worktrees": ".git/worktrees/x/HEAD",
    "dot-git-case": "sub/.GIT/hooks/pre-commit",
    "dot-git-itself": ".git",
    "empty": "",
    "worktree-itself": "./",
}


@pytest.mark.parametrize("path", list(BAD_PATHS.values()), ids=list(BAD_PATHS))
def test_write_refuses_bad_path(env: Env, path: str) -> None:
    env.refused("write", env.run_id, path, input=b"evil\n", what=f"write {path[:40]}")
    assert not os.path.exists("/tmp/sandbox-hostile-abs.txt")
    assert not (env.root.parent / "escape.txt").exists()


@pytest.mark.parametrize("path", ["../x", ".git/index", "/etc/passwd"])
def test_call_finish_refuses_bad_path(env: Env, path: str) -> None:
    cid = open_run(env.root, env.run_id).start_call("edit", {})
    env.refused("call", "finish", env.run_id, cid, "--status", "succeeded", "--path", path)


def test_nul_in_path_refused_by_library(env: Env) -> None:
    """argv cannot carry NUL, so the library is the way in: refused before the tool runs."""
    from sandbox.errors import PathRefusedError
    from sandbox.store.paths import normalize

    with pytest.raises(PathRefusedError):
        normalize("a\0b")
    run = open_run(env.root, env.run_id)
    before = env.state()
    with pytest.raises(PathRefusedError), run.tool_call("write_file", {}) as call:
        call.write("src/a\0b.py", b"x")
    # The attempt is on the ledger as a failed call; no file and no commit came of it.
    assert tree_digest(env.worktree) == before[3]
    assert entries(env.root, env.run_id)[call.call_id or ""]["status"] == "failed"
    assert open_run(env.root, env.run_id).state().head == run.state().head


def test_nul_in_input_json_is_data_not_a_path(env: Env) -> None:
    """A NUL inside --input JSON is just data: stored verbatim, hashed, and nothing is written."""
    before = tree_digest(env.worktree)
    cid = ok("call", "start", env.run_id, "--tool", "t", "--input", '{"path": "a\\u0000b"}', cwd=env.root).strip()
    run = open_run(env.root, env.run_id)
    entry = run.entry(cid)
    assert entry.status.value == "started"
    assert entry.input == {"path": "a\0b"}  # small inputs are kept inline in the event
    assert tree_digest(env.worktree) == before


def test_symlink_escape_refused(env: Env, tmp_path: Path) -> None:
    """A symlink in the worktree pointing outside is recorded as a link, never written through."""
    outside = tmp_path / "outside"
    outside.mkdir()
    ok("exec", env.run_id, "--", "ln", "-s", str(outside), "escape", cwd=env.root)
    env.refused("write", env.run_id, "escape/file.txt", input=b"evil\n", attempt=True)
    env.refused("write", env.run_id, "escape/deeper/file.txt", input=b"evil\n", attempt=True)
    assert list(outside.iterdir()) == []


def test_write_replaces_a_symlinked_file_never_its_target(env: Env, tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    target.write_text("outside\n")
    ok("exec", env.run_id, "--", "ln", "-s", str(target), "flink", cwd=env.root)
    ok("write", env.run_id, "flink", cwd=env.root, input=b"inside\n")
    assert target.read_text() == "outside\n"
    assert (env.worktree / "flink").read_text() == "inside\n" and not (env.worktree / "flink").is_symlink()


# -- JSON and arguments -------------------------------------------------------------------------

BAD_CALL_ARGS = {
    "malformed-input": ["--input", "{not json"],
    "truncated-input": ["--input", '{"a": [1, 2'],
    "deep-input": ["--input", "[" * 60000 + "]" * 60000],
    "empty-tool": ["--input", "{}", "--tool", ""],
    "huge-tool": ["--tool", "t" * 5000],
}


@pytest.mark.parametrize("args", list(BAD_CALL_ARGS.values()), ids=list(BAD_CALL_ARGS))
def test_call_start_refuses(env: Env, args: list[str]) -> None:
    tool = [] if "--tool" in args else ["--tool", "t"]
    env.refused("call", "start", env.run_id, *tool, *args)


def test_huge_input_json_refused_from_the_library(env: Env) -> None:
    """Over the size limit: argv cannot carry it, so the parser is called as the CLI calls it."""
    from sandbox.cli.options import MAX_JSON_BYTES, parse_json
    from sandbox.errors import UsageError

    with pytest.raises(UsageError, match="larger than"):
        parse_json('"' + "x" * (MAX_JSON_BYTES + 1) + '"', "--input")


def test_large_input_json_accepted(env: Env) -> None:
    """A big but legal --input (120 KB, near argv's per-argument limit) is stored intact."""
    value = {"blob": "y" * 120_000}
    cid = ok("call", "start", env.run_id, "--tool", "t", "--input", json.dumps(value), cwd=env.root).strip()
    run = open_run(env.root, env.run_id)
    assert json.loads(run.repo[run.entry(cid).input_ref].data) == value


def test_finish_refuses_bad_result_and_status(env: Env) -> None:
    cid = open_run(env.root, env.run_id).start_call("edit", {})
    env.refused("call", "finish", env.run_id, cid, "--status", "maybe")
    env.refused("call", "finish", env.run_id, cid, "--status", "started")
    env.refused("call", "finish", env.run_id, cid, "--status", "succeeded", "--result", "{oops")


def test_finish_refuses_unknown_and_finished_calls(env: Env) -> None:
    env.refused("call", "finish", env.run_id, "call_nope", "--status", "succeeded")
    done = next(iter(entries(env.root, env.run_id)))
    env.refused("call", "finish", env.run_id, done, "--status", "failed")
    env.refused("call", "start", env.run_id, "--tool", "t", "--call-id", done)


@pytest.mark.parametrize(
    "args",
    [
        ["call", "start", "RUN", "--tool", "t", "--idempotency", "sometimes"],
        ["call", "start", "RUN"],
        ["nosuch"],
        ["apply", "RUN", "--continue", "--dry-run"],
    ],
    ids=["bad-choice", "missing-option", "unknown-command", "apply-continue-with-options"],
)
def test_click_usage_errors_are_one_line(env: Env, args: list[str]) -> None:
    args = [env.run_id if a == "RUN" else a for a in args]
    proc = sb(*args, cwd=env.root)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.decode().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("sandbox:"), lines


# -- runs and repositories ----------------------------------------------------------------------


UNKNOWN_RUNS = {
    "unknown": ["log", "deadbeef", "--", "src"],  # after "--": paths, as in git log
    "traversal": ["status", "--", "../../etc"],
    "dash": ["write", "--", "-rf", "f"],
    "overlong": ["drop", "--", "a" * 100],
    "shell-meta": ["call", "start", "--tool", "t", "--", "RUN;rm"],
}


@pytest.mark.parametrize("cmd", list(UNKNOWN_RUNS.values()), ids=list(UNKNOWN_RUNS))
def test_unknown_run(env: Env, cmd: list[str]) -> None:
    env.refused(*cmd, input=b"x")


def test_not_a_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for cmd in (["start"], ["list"], ["gc"], ["status"]):
        assert_one_line_error(sb("-C", str(plain), *cmd, cwd=tmp_path), what=f"{cmd} in a plain dir")
    assert_one_line_error(sb("-C", str(tmp_path / "missing"), "list", cwd=tmp_path), what="missing dir")
    assert list(plain.iterdir()) == []


def test_bare_repository(tmp_path: Path) -> None:
    src = make_repo(tmp_path / "src")
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(tmp_path / "bare.git")], check=True)
    refs = git(tmp_path / "bare.git", "for-each-ref")
    for cmd in (["start"], ["list"], ["gc"]):
        assert_one_line_error(sb("-C", str(tmp_path / "bare.git"), *cmd, cwd=tmp_path), what=f"bare {cmd}")
    assert git(tmp_path / "bare.git", "for-each-ref") == refs
    assert not (tmp_path / "bare.git" / "sandbox").exists()


def test_start_inside_a_run_worktree(env: Env) -> None:
    before = env.state()
    assert_one_line_error(sb("start", cwd=env.worktree), what="start inside a worktree")
    assert env.state() == before


# -- damaged state ------------------------------------------------------------------------------


def loose_object(root: Path, oid: str) -> Path:
    return loose_path(root, oid)


def pack_holding(root: Path, oid: str) -> Path:
    """The pack file (``.pack``) whose index lists ``oid``."""
    from sandbox.store import packs

    for idx in (idx for directory in object_dirs(root) for idx in (directory / "pack").glob("*.idx")):
        if oid in packs.index_ids(str(idx)):
            return idx.with_suffix(".pack")
    raise AssertionError(f"{oid} is in no pack")


def damage_ledger_tip(env: Env, damage: str, where: str = "loose") -> str:
    """Damage the object of the ledger's newest event: a loose one (a started call) or a packed one."""
    if where == "loose":
        open_run(env.root, env.run_id).start_call("noop")  # a started event: one loose object
    tip = git(env.root, "rev-parse", f"refs/sandbox/{env.run_id}/ledger").strip()
    path = loose_object(env.root, tip)
    if where == "loose":
        assert path.exists(), "a started event is expected as a loose object"
    else:
        assert not path.exists(), "a finished call's event is expected in a pack"
        path = pack_holding(env.root, tip)
    data = path.read_bytes()
    path.chmod(0o644)
    if damage == "garble":
        # Loose: inside the deflated stream. Packed: every object's data (header and trailer kept).
        start, end = (10, 40) if where == "loose" else (12, len(data) - 20)
        path.write_bytes(data[:start] + bytes(b ^ 0xFF for b in data[start:end]) + data[end:])
    elif damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.unlink()
        if where == "packed":
            path.with_suffix(".idx").unlink()
    cache = Path(open_run(env.root, env.run_id).dir) / "ledger-cache.json"
    cache.unlink(missing_ok=True)  # force a read from git, as on another machine
    return tip


def check_damage_reported(env: Env, tip: str, damage: str, timeout: float = 60.0) -> None:
    digest, user = tree_digest(env.root), user_state(env.root)
    for cmd in (["log", env.run_id], ["write", env.run_id, "x.txt"]):
        proc = sb(*cmd, cwd=env.root, input=b"x", timeout=timeout)
        line = assert_one_line_error(proc, what=f"{damage}: {cmd[0]}")
        assert "ledger" in line.lower() or "damaged" in line.lower() or "corrupt" in line.lower(), line
    assert tree_digest(env.root) == digest and user_state(env.root) == user
    assert git(env.root, "rev-parse", f"refs/sandbox/{env.run_id}/ledger").strip() == tip


@pytest.mark.parametrize("where", ["loose", "packed"])
@pytest.mark.parametrize("damage", ["garble", "delete"])
def test_damaged_ledger_object_is_reported_not_read(env: Env, damage: str, where: str) -> None:
    check_damage_reported(env, damage_ledger_tip(env, damage, where), damage)


@pytest.mark.parametrize("where", ["loose", "packed"])
def test_truncated_ledger_object_is_reported_not_read(env: Env, where: str) -> None:
    """libgit2 1.9.7 spins forever on a truncated loose object; the sandbox must not (bounded here)."""
    check_damage_reported(env, damage_ledger_tip(env, "truncate", where), "truncate", timeout=30.0)


def test_deleted_run_refs(env: Env) -> None:
    """Only the head ref gone: repaired from the ledger. The ledger ref gone: the run is unknown."""
    head = open_run(env.root, env.run_id).state().head
    git(env.root, "update-ref", "-d", f"refs/sandbox/{env.run_id}/head")
    ok("status", env.run_id, cwd=env.root)
    assert git(env.root, "rev-parse", f"refs/sandbox/{env.run_id}/head").strip() == head
    for name in ("ledger", "base", "head"):
        git(env.root, "update-ref", "-d", f"refs/sandbox/{env.run_id}/{name}")
    digest, user = tree_digest(env.root), user_state(env.root)
    for cmd in (["log", env.run_id], ["write", env.run_id, "x"], ["drop", env.run_id]):
        assert_one_line_error(sb(*cmd, cwd=env.root, input=b"x"), what=f"no refs: {cmd[0]}")
    assert tree_digest(env.root) == digest and user_state(env.root) == user


def test_deleted_worktree_directory(env: Env) -> None:
    import shutil

    shutil.rmtree(env.worktree)
    wt = env.worktree
    events = event_ids(env.root, env.run_id)
    digest, user = tree_digest(env.root), user_state(env.root)
    assert_one_line_error(sb("write", env.run_id, "f.txt", cwd=env.root, input=b"x"), what="write, no worktree")
    assert_one_line_error(sb("exec", env.run_id, "--", "true", cwd=env.root), what="exec, no worktree")
    assert event_ids(env.root, env.run_id) == events
    assert not wt.exists()
    assert tree_digest(env.root) == digest and user_state(env.root) == user


def test_deleted_worktree_directory_resume_recreates_it(env: Env) -> None:
    import shutil

    if not has_command("resume"):
        pytest.skip("'sandbox resume' does not exist yet")
    head = open_run(env.root, env.run_id).state().head
    shutil.rmtree(env.worktree)
    ok("resume", env.run_id, "--json", cwd=env.root)
    assert (env.worktree / "src/app.py").read_text() == "print('agent')\n"
    assert open_run(env.root, env.run_id).state().head == head
    assert_fsck_clean(env.root)


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Paths made immutable with chattr (root ignores mode bits); cleared afterwards."""
    made: list[Path] = []
    yield made
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False, capture_output=True)


def chattr_i(path: Path, made: list[Path]) -> None:
    proc = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {proc.stderr.decode().strip()}")
    made.append(path)


def test_read_only_directory_in_worktree(env: Env, immutable: list[Path]) -> None:
    target = env.worktree / "src"
    if os.geteuid() == 0:
        chattr_i(target, immutable)
    else:
        target.chmod(0o555)
    proc = sb("write", env.run_id, "src/new.py", cwd=env.root, input=b"x")
    assert_one_line_error(proc, what="write into a read-only directory")
    assert not (target / "new.py").exists()


def test_read_only_file_in_worktree_is_replaced_atomically(env: Env) -> None:
    """A read-only file (mode 0444) is replaced by rename, like an editor would; the mode follows git."""
    path = env.worktree / "src/app.py"
    path.chmod(0o444)
    ok("write", env.run_id, "src/app.py", cwd=env.root, input=b"new\n")
    assert path.read_bytes() == b"new\n"


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs to fill up (skipped where mounting is not permitted)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)


def fill(fs: Path) -> Path:
    filler = fs / "filler"
    with open(filler, "wb", buffering=0) as fh:  # unbuffered: nothing left to fail at close
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
    for i in range(1000):  # the last few blocks and inodes
        try:
            (fs / f"f{i}").write_bytes(b"x" * 512)
        except OSError:
            break
    return filler


def test_disk_full_during_a_call(small_fs: Path) -> None:
    root = make_repo(small_fs / "repo", {"a.txt": "a\n"})
    run_id = start_run(root)
    env = Env(root, run_id)
    calls_before = set(entries(root, run_id))
    digest, user = tree_digest(root), user_state(root)
    filler = fill(small_fs)
    payload = os.urandom(200_000)
    proc = sb("write", run_id, "big.bin", cwd=root, input=payload)
    filler.unlink()
    assert tree_digest(root) == digest and user_state(root) == user
    new = [e for e in entries(root, run_id).values() if e["call_id"] not in calls_before]
    if proc.returncode == 0:
        # There was room after all: then the call is recorded completely.
        assert [e["status"] for e in new] == ["succeeded"]
        assert (env.worktree / "big.bin").read_bytes() == payload
    else:
        assert_one_line_error(proc, what="disk full")
        # Nothing half-written: the ledger reads back, and any new call is a failed or open attempt
        # (or, when only a mirror ref failed after the ledger took the event, a complete success).
        for e in new:
            assert e["status"] in ("failed", "started") or (
                e["status"] == "succeeded" and (env.worktree / "big.bin").read_bytes() == payload
            ), new
    assert_fsck_clean(root)
    ok("write", run_id, "after.txt", cwd=root, input=b"ok\n")
    assert (env.worktree / "after.txt").read_text() == "ok\n"


def test_disk_full_leaves_a_readable_ledger(small_fs: Path) -> None:
    """Whatever the error message, a full disk never corrupts the ledger or the repository."""
    root = make_repo(small_fs / "repo", {"a.txt": "a\n"})
    run_id = start_run(root)
    before = entries(root, run_id)
    filler = fill(small_fs)
    for i in range(3):
        proc = sb("write", run_id, f"big{i}.bin", cwd=root, input=os.urandom(100_000))
        assert proc.returncode != 0 and proc.returncode != -9
        assert "Traceback" not in proc.stderr.decode()
    filler.unlink()
    after = entries(root, run_id)
    for cid, entry in before.items():
        assert after[cid] == entry
    assert_fsck_clean(root)
    ok("write", run_id, "after.txt", cwd=root, input=b"ok\n")


# -- odd but legitimate content: must work ------------------------------------------------------


def test_submodule_gitlink_kept(tmp_path: Path) -> None:
    sub = make_repo(tmp_path / "subsrc", {"s.txt": "s\n"})
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git(root, "commit", "-q", "-m", "add sub")
    gitlink = git(root, "rev-parse", "HEAD:sub").strip()
    info = json.loads(ok("start", "--json", cwd=root))
    assert info["submodules"] == ["sub"]
    run_id = info["run"]
    ok("exec", run_id, "--", "sh", "-c", "echo b > b.txt", cwd=root)
    head = open_run(root, run_id).state().head
    assert git(root, "ls-tree", head, "sub").split()[:3] == ["160000", "commit", gitlink]


def test_write_into_a_submodule_path(tmp_path: Path) -> None:
    sub = make_repo(tmp_path / "subsrc", {"s.txt": "s\n"})
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git(root, "commit", "-q", "-m", "add sub")
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    proc = sb("write", run_id, "sub/file.txt", cwd=root, input=b"x\n")
    head = open_run(root, run_id).state().head
    # Either refused, or the gitlink survives next to the new file.
    if proc.returncode == 0:
        assert git(root, "ls-tree", head, "sub").split()[:2] == ["160000", "commit"], "the submodule gitlink was lost"
    else:
        assert_one_line_error(proc)


def test_case_only_rename(env: Env) -> None:
    run = open_run(env.root, env.run_id)
    with run.tool_call("rename", {}) as call:
        call.rename("README.md", "readme.md")
    assert call.entry is not None
    changes = {f.path: (f.before_hash, f.after_hash) for f in call.entry.files}
    assert set(changes) == {"README.md", "readme.md"}
    assert changes["README.md"][1] is None and changes["readme.md"][0] is None
    assert changes["README.md"][0] == changes["readme.md"][1]
    head = open_run(env.root, env.run_id).state().head
    names = git(env.root, "ls-tree", "--name-only", head).split()
    assert "readme.md" in names and "README.md" not in names


NON_UTF8 = b"caf\xe9-\xff.txt"


def test_non_utf8_names(env: Env) -> None:
    script = f"open({NON_UTF8!r}, 'wb').write(b'latin1')"
    ok("exec", env.run_id, "--", "python3", "-c", script, cwd=env.root)
    run = open_run(env.root, env.run_id)
    last = run.entries()[-1]
    assert last.status.value == "succeeded"
    assert [os.fsencode(f.path) for f in last.files] == [NON_UTF8]
    raw = subprocess.run(
        ["git", "ls-tree", "-z", "--name-only", str(last.commit)], cwd=env.root, capture_output=True, check=True
    ).stdout
    assert NON_UTF8 in raw.split(b"\0")
    ok("diff", env.run_id, "--stat", cwd=env.root)
    assert json.loads(ok("log", env.run_id, "--json", cwd=env.root))[-1]["files"][0]["path"]


def test_non_utf8_names_in_the_users_tree(tmp_path: Path) -> None:
    """A user's tree with a non-UTF-8 name starts fine and the name reaches the worktree intact."""
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    (root / os.fsdecode(NON_UTF8)).write_bytes(b"user's latin-1 file\n")
    run_id = json.loads(ok("start", "--json", cwd=root))["run"]
    wt = Path(open_run(root, run_id).worktree)
    assert (wt / os.fsdecode(NON_UTF8)).read_bytes() == b"user's latin-1 file\n"
    ok("write", run_id, "a.txt", cwd=root, input=b"agent\n")


def test_file_directory_swaps(env: Env) -> None:
    run = open_run(env.root, env.run_id)
    with run.tool_call("swap", {}) as call:
        call.delete("src/util.py")
        call.write("src/util.py/inner.txt", "now a directory\n")
        call.delete("data")
        call.write("data", "now a file\n")
    head = open_run(env.root, env.run_id).state().head
    assert git(env.root, "cat-file", "-t", f"{head}:src/util.py").strip() == "tree"
    assert git(env.root, "show", f"{head}:src/util.py/inner.txt") == "now a directory\n"
    assert git(env.root, "show", f"{head}:data") == "now a file\n"
    assert call.entry is not None
    paths = {f.path for f in call.entry.files}
    assert {"src/util.py", "src/util.py/inner.txt", "data", "data/blob.bin"} <= paths
    # And back again, through a shell command the scan has to understand.
    ok("exec", env.run_id, "--", "sh", "-c", "rm -r src/util.py && echo file > src/util.py", cwd=env.root)
    head = open_run(env.root, env.run_id).state().head
    assert git(env.root, "show", f"{head}:src/util.py") == "file\n"
    assert_fsck_clean(env.root)


@pytest.mark.slow
def test_100_mb_binary(env: Env) -> None:
    data = os.urandom(1 << 20) * 100
    out = json.loads(ok("write", env.run_id, "big.bin", "--json", cwd=env.root, input=data))
    (change,) = out["files"]
    assert change["path"] == "big.bin" and change["after_hash"] == str(pygit2.hash(data))
    assert open_run(env.root, env.run_id).repo.odb.exists(change["after_hash"])
    diff = ok("diff", env.run_id, cwd=env.root)
    assert "big.bin" in diff and "Binary" in diff
    assert len(diff) < 10_000, "the binary's bytes must not be dumped into the diff"
    assert tree_digest(env.root)  # the user's tree is untouched by writes to the run


def test_hook_bad_json(env: Env) -> None:
    if not has_command("hook"):
        pytest.skip("'sandbox hook' does not exist yet")
    for payload in (b"{not json", b"", b"[" * 100000, b'{"tool_name": 5}', b"\xff\xfe"):
        before = env.state()
        proc = sb("hook", "claude-code", cwd=env.worktree, input=payload)
        assert "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
        assert proc.returncode != 3, proc.stderr.decode()
        assert env.state()[:2] == before[:2]


def test_write_with_stdin_closed(env: Env) -> None:
    """An empty stdin is an empty file, not a hang or an error."""
    ok("write", env.run_id, "empty.txt", cwd=env.root, input=b"")
    assert (env.worktree / "empty.txt").read_bytes() == b""


def test_wrote_nothing_outside(env: Env, tmp_path: Path) -> None:
    """After the hostile cases above in this test's own run, nothing appeared next to the repository."""
    siblings = sorted(p.name for p in env.root.parent.iterdir())
    write(env.root, "x.txt", "x")
    for path in ("../../x", "../x"):
        env.refused("write", env.run_id, path, input=b"evil")
    assert sorted(p.name for p in env.root.parent.iterdir()) == siblings


# -- merge-back under hostile conditions ----------------------------------------------------------


def need(command: str) -> None:
    if not has_command(command):
        pytest.skip(f"'sandbox {command}' does not exist yet")


def craft_call(root: Path, run_id: str, changes: dict[str, object], files: list[str] | None = None) -> str:
    """Record a call whose commit is crafted by hand (as a hostile agent or a bug could make it).

    ``changes`` maps paths to ``objects.Entry`` or None; ``files`` lists the paths the ledger
    claims changed (default: the tree diff), which a hostile ledger may get wrong on purpose.
    """
    from sandbox.models import EventKind, FileChange
    from sandbox.store import objects

    run = open_run(root, run_id)
    repo = run.repo
    head = run.state().head
    head_tree = objects.commit_tree(repo, head)
    tree = objects.edit_tree(repo, head_tree, changes)  # type: ignore[arg-type]
    sig = objects.signature()
    commit = str(repo.create_commit(None, sig, sig, "crafted\n", tree, [head]))
    diff = {c.path: c for c in objects.diff_trees(repo, head_tree, tree)}
    listed = files if files is not None else sorted(diff)
    changes_list = []
    for path in listed:
        c = diff.get(path)
        new = changes.get(path) if c is None else c.new
        old = objects.lookup(repo, head_tree, path) if c is None else c.old
        changes_list.append(
            FileChange(
                path=path,
                before_hash=old.oid if old else None,
                after_hash=new.oid if new else None,  # type: ignore[attr-defined]
                before_mode=old.mode if old else None,
                after_mode=new.mode if new else None,  # type: ignore[attr-defined]
                tool_call_id="crafted",
            )
        )
    cid = run.start_call("crafted", {"n": len(listed)})
    event = run.new_event(
        EventKind.call_succeeded,
        cid,
        commit=commit,
        parent_commit=head,
        files=changes_list,
        epoch=run.state().epoch,
    )
    run.record_event(event, keep=[commit])
    run.head()
    return cid


def user_snapshot(root: Path) -> tuple[object, ...]:
    return tree_digest(root), user_state(root), (root / ".git" / "config").read_bytes()


@pytest.mark.parametrize("bad", [".git/config", ".git/hooks/post-checkout", ".GIT/config", "sub/.git/HEAD"])
def test_apply_never_writes_git_paths_from_agent_commits(env: Env, bad: str) -> None:
    need("apply")
    from sandbox.store import objects

    repo = open_run(env.root, env.run_id).repo
    blob = objects.write_blob(repo, b"[core]\n\thooksPath = /tmp/evil\n")
    craft_call(env.root, env.run_id, {bad: objects.Entry(objects.MODE_EXEC, blob)})
    before = user_snapshot(env.root)
    hooks = sorted(os.listdir(env.root / ".git" / "hooks")) if (env.root / ".git" / "hooks").exists() else []
    proc = sb("apply", env.run_id, "--path", bad, cwd=env.root)
    if proc.returncode != 0:
        assert_one_line_error(proc, what=f"apply {bad}")
    assert user_snapshot(env.root)[2] == before[2], ".git/config was written"
    assert not (env.root / "sub" / ".git").exists()
    now = sorted(os.listdir(env.root / ".git" / "hooks")) if (env.root / ".git" / "hooks").exists() else []
    assert now == hooks
    assert user_snapshot(env.root) == before


def test_apply_dir_turned_symlink_then_file_under_it(env: Env, tmp_path: Path) -> None:
    """Call A turns src/ into a symlink to outside, call B writes src/evil.txt: nothing lands outside."""
    need("apply")
    from sandbox.store import objects

    outside = tmp_path / "outside"
    outside.mkdir()
    repo = open_run(env.root, env.run_id).repo
    link = objects.Entry(objects.MODE_LINK, objects.write_blob(repo, os.fsencode(str(outside))))
    evil = objects.Entry(objects.MODE_FILE, objects.write_blob(repo, b"evil\n"))
    call_a = craft_call(env.root, env.run_id, {"src": link})
    call_b = craft_call(env.root, env.run_id, {"src/evil.txt": evil})
    # And a single call whose file list claims both at once, in the dangerous order.
    call_c = craft_call(env.root, env.run_id, {"lib": link}, files=["lib", "lib/evil.txt"])
    for calls in ([call_a], [call_b], [call_c], []):
        args = [a for c in calls for a in ("--call", c)]
        before = user_snapshot(env.root)
        proc = sb("apply", env.run_id, *args, cwd=env.root)
        assert list(outside.iterdir()) == [], f"apply {calls} wrote outside the tree"
        if proc.returncode != 0:
            assert_one_line_error(proc, what=f"apply {calls}")
            assert user_snapshot(env.root) == before
    for dirpath, _dirs, files in os.walk(env.root):
        assert "evil.txt" not in files or not os.path.islink(dirpath)
    assert user_state(env.root) == before[1]


def test_apply_refused_mid_rebase(env: Env) -> None:
    need("apply")
    for marker in ("rebase-merge", "MERGE_HEAD"):
        path = env.root / ".git" / marker
        if marker == "rebase-merge":
            path.mkdir()
        else:
            path.write_text(git(env.root, "rev-parse", "HEAD"))
        before = user_snapshot(env.root)
        line = assert_one_line_error(sb("apply", env.run_id, cwd=env.root), what=f"apply during {marker}")
        assert "rebase" in line or "merge" in line, line
        assert user_snapshot(env.root) == before
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink()


def test_apply_nothing_to_apply_and_unknown_call(env: Env) -> None:
    need("apply")
    env.refused("apply", env.run_id, "--call", "call_nope")
    env.refused("apply", env.run_id, "--path", "../outside")


@pytest.mark.parametrize("what", ["file", "directory"])
def test_apply_onto_read_only_targets(env: Env, immutable: list[Path], what: str) -> None:
    """A read-only (immutable) target: one clear line, and nothing at all written (all or nothing)."""
    need("apply")
    run = open_run(env.root, env.run_id)
    with run.tool_call("more", {}) as call:
        call.write("aaa-first.txt", "written before the read-only one\n")
        call.write("zzz-last.txt", "written after it\n")
    target = env.root / "src" / "app.py" if what == "file" else env.root / "src"
    chattr_i(target, immutable)
    before = user_snapshot(env.root)
    proc = sb("apply", env.run_id, cwd=env.root)
    assert_one_line_error(proc, what=f"apply onto a read-only {what}")
    assert user_snapshot(env.root) == before, "a refused apply wrote some files"
    assert not list(env.root.rglob(".sandbox-tmp-*"))


def test_disk_full_during_apply(small_fs: Path) -> None:
    need("apply")
    root = make_repo(small_fs / "repo", {"a.txt": "a\n"})
    run_id = start_run(root)
    run = open_run(root, run_id)
    with run.tool_call("big", {}) as call:
        call.write("aaa.txt", "small\n")
        call.write("big.bin", os.urandom(600_000))
    before = user_snapshot(root)
    filler = fill(small_fs)
    proc = sb("apply", run_id, cwd=root)
    filler.unlink()
    for extra in small_fs.glob("f*"):
        extra.unlink()
    assert proc.returncode not in (0, -9)
    assert "Traceback" not in proc.stderr.decode()
    if tree_digest(root) != before[0]:
        # Half-way: the journal must lead out, both ways.
        ok("undo", run_id, cwd=root)
    assert user_snapshot(root) == before
    ok("apply", run_id, cwd=root)
    assert (root / "big.bin").stat().st_size == 600_000
    assert_fsck_clean(root)
