"""Shared test set-up: an isolated git environment and helpers that build real repositories."""

from __future__ import annotations

import fcntl
import hashlib
import os
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from reliability import matrix

from sandbox import faults
from tests import cliserver


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False, help="run long soak tests")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--soak"):  # read by examples() as test modules are collected (a copy of this module)
        os.environ["TESTS_SOAK"] = "1"


def examples(full: int) -> int:
    """A property test's hypothesis example count: ``full`` with ``--soak``, a third of it in ``make test``.

    The in-process property tests are CPU-bound and the suite runs on two cores; the seeds differ on
    every run, so CI still tries new examples each time, and a soak run tries them all."""
    return full if os.environ.get("TESTS_SOAK") == "1" else max(20, full // 3)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


#: Test modules whose tests must run on one pytest-xdist worker, in file order, and why.
ONE_WORKER = {
    # Its last test checks that the tests above it checked every documented output (CHECKED).
    "tests/e2e/test_json_vocabulary.py": "the last test reads what the others recorded",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadgroup`` (make test), with the modules of :data:`ONE_WORKER` kept on one worker each.

    pytest-xdist 3.8 groups ``xdist_group`` marks by renaming node ids, which pytest 9.2 no longer
    lets it do: the marks are silently ignored (pytest-xdist issue 1386). The scheduler runs on the
    controller, from node ids alone, so it works with either.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Scheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER else super()._split_scope(nodeid)

    return Scheduling(config, log)


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker: hand this worker's crash-matrix rows to the controller."""
    if _is_xdist_worker(session.config):
        session.config.workeroutput["crash_matrix"] = list(matrix.MATRIX_ROWS)  # type: ignore[attr-defined]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """On the pytest-xdist controller: gather the rows of each worker that finished."""
    matrix.MATRIX_ROWS.extend(getattr(node, "workeroutput", {}).get("crash_matrix", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The crash matrix (tests/reliability/test_crash_matrix.py), once, from every worker's rows."""
    if _is_xdist_worker(config) or not matrix.MATRIX_ROWS:
        return
    header, table = matrix.summary(matrix.MATRIX_ROWS)
    terminalreporter.section("crash matrix")
    terminalreporter.write_line(header)
    terminalreporter.write(table)
    try:
        matrix.MATRIX_FILE.write_text(header + "\n" + table)
    except OSError:
        pass


@pytest.fixture(autouse=True, scope="session")
def _isolated_git_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Pin git's identity and config so tests never read the developer's settings."""
    home = tmp_path_factory.mktemp("home")
    saved = dict(os.environ)
    os.environ.update(
        {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "Test User",
            "GIT_AUTHOR_EMAIL": "user@example.com",
            "GIT_COMMITTER_NAME": "Test User",
            "GIT_COMMITTER_EMAIL": "user@example.com",
            "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
            # Hooks would spawn a background `sandbox serve` per run; tests/agent/test_serve.py turns it on.
            "SANDBOX_HOOK_AUTOSTART": "0",
        }
    )
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "SANDBOX_FAULT"):
        os.environ.pop(key, None)
    # maintenance.auto off: every test's commit, fetch and merge otherwise spawned ``git maintenance run
    # --auto`` (1,700 processes over the suite, each finding nothing to do in a repository this small).
    (home / ".gitconfig").write_text(
        "[init]\n\tdefaultBranch = main\n[safe]\n\tdirectory = *\n[maintenance]\n\tauto = false\n"
    )
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def _disarm_faults() -> Iterator[None]:
    faults.arm(None)
    yield
    faults.arm(None)


@pytest.fixture(autouse=True)
def _keeps_the_working_directory() -> Iterator[None]:
    """A test gives back the worker's working directory (monkeypatch.chdir): a passing test's tmp_path
    is removed at its teardown, and the worker's next tests would run in a directory that is gone."""
    before = os.getcwd()
    yield
    try:
        after = os.getcwd()
    except FileNotFoundError:  # it was in the test's tmp_path, removed by now
        after = "a directory removed since"
    if after != before:
        os.chdir(before)
        pytest.fail(f"the test left the working directory at {after}; use monkeypatch.chdir")


def git(cwd: Path | str, *args: str, check: bool = True) -> str:
    """Run git in ``cwd`` and return its stdout."""
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.decode()}")
    return proc.stdout.decode(errors="surrogateescape")


def write(root: Path, rel: str, data: bytes | str, mode: int | None = None) -> Path:
    """Write a file below ``root``, creating parents."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)
    return path


def make_repo(root: Path, files: dict[str, str | bytes] | None = None, commit: bool = True) -> Path:
    """A fresh repository at ``root`` with ``files`` committed (when ``commit``)."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    for rel, data in (files or {"README.md": "hello\n"}).items():
        write(root, rel, data)
    if commit:
        commit_all(root, "initial")
    return root


def two_clones(tmp_path: Path, files: dict[str, str] | None = None) -> tuple[Path, Path, Path]:
    """Clone A (a repository of ``files``) pushed to a bare remote, and clone B of that remote: (A, B, remote)."""
    a = make_repo(tmp_path / "a", files or {"README.md": "hello\n", "src/app.py": "print('app')\n"})
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    git(a, "remote", "add", "origin", str(bare))
    git(a, "push", "-q", "-u", "origin", "main")
    b = tmp_path / "b"
    git(tmp_path, "clone", "-q", str(bare), str(b))
    return a, b, bare


def commit_all(root: Path, message: str = "change") -> str:
    """Stage everything and commit; returns the new HEAD."""
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)
    return git(root, "rev-parse", "HEAD").strip()


def tree_digest(root: Path) -> dict[str, str]:
    """Every file below ``root`` (outside .git) with its type, mode and content hash."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if os.path.islink(full):
                out[rel] = "link:" + os.readlink(full)
            else:
                with open(full, "rb") as fh:
                    out[rel] = f"{oct(st.st_mode & 0o111)}:" + hashlib.sha256(fh.read()).hexdigest()
    return out


def user_state(root: Path) -> dict[str, object]:
    """What must never change under the user: index bytes, refs/heads, HEAD, stash, tags."""
    gitdir = root / ".git"
    index = gitdir / "index"
    return {
        "index": index.read_bytes() if index.exists() else None,
        "HEAD": (gitdir / "HEAD").read_text(),
        "refs": git(
            root,
            "for-each-ref",
            "--format=%(refname) %(objectname)",
            "refs/heads",
            "refs/tags",
            "refs/stash",
            check=False,
        ),
        "stash": git(root, "stash", "list", check=False),
        "branches": git(root, "branch", "-a", check=False),
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with a few committed files and an uncommitted user edit."""
    root = make_repo(
        tmp_path / "repo",
        {
            "README.md": "hello\n",
            "src/app.py": "print('app')\n",
            "src/util.py": "X = 1\n",
            ".gitignore": "*.log\n",
        },
    )
    write(root, "README.md", "hello\nuser edit\n")
    write(root, "notes.txt", "untracked notes\n")
    write(root, "debug.log", "ignored\n")
    return root


class Runner(CliRunner):
    """A click runner (stderr kept separate) that lets an unexpected exception fail the test with
    its traceback, instead of hiding it in ``result.exception`` (a test that wants it caught says
    ``catch_exceptions=True``)."""

    def invoke(self, *args: Any, catch_exceptions: bool = False, **kwargs: Any) -> Result:
        """Run the command; see :meth:`click.testing.CliRunner.invoke`."""
        return super().invoke(*args, catch_exceptions=catch_exceptions, **kwargs)


@pytest.fixture
def runner() -> CliRunner:
    """A click runner (see :class:`Runner`)."""
    return Runner()


def sandbox_cmd(
    *args: str,
    cwd: Path | str,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[bytes]:
    """Run the installed ``sandbox`` script as a real process (forked from one that imported it
    already, where that runs the same: :mod:`tests.cliserver`)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return cliserver.sandbox(*args, cwd=cwd, env=full_env, input=input, timeout=timeout)


def object_dirs(root: Path) -> list[Path]:
    """Your objects directory, then each run's own store (sandbox.store.runstore)."""
    common = root / ".git" if (root / ".git").is_dir() else root
    return [common / "objects", *sorted((common / "sandbox" / "runs").glob("*/objects"))]


def loose_path(root: Path, oid: str) -> Path:
    """Where ``oid`` is stored loose (in your objects or a run's store); your objects' path when nowhere."""
    for directory in object_dirs(root):
        if (directory / oid[:2] / oid[2:]).exists():
            return directory / oid[:2] / oid[2:]
    return root / ".git" / "objects" / oid[:2] / oid[2:]


def replace_stored_object(root: Path, oid: str, new_data: bytes) -> None:
    """Make the object stored as ``oid`` hold ``new_data`` instead (a garbled object that still inflates).

    Loose: rewritten in place. Packed: the pack holding it is rewritten with the other objects as
    they were, and the original pack removed, so only the damaged copy remains.
    """
    import zlib

    from sandbox.store import packs

    dirs = object_dirs(root)  # wherever the object is
    for objects_dir in dirs:
        loose = objects_dir / oid[:2] / oid[2:]
        if loose.exists():
            header, _, _ = zlib.decompress(loose.read_bytes()).partition(b"\0")
            kind = header.split(b" ")[0]
            loose.chmod(0o644)
            loose.write_bytes(zlib.compress(b"%s %d\0" % (kind, len(new_data)) + new_data))
            return
    import pygit2

    repo = pygit2.Repository(str(root))
    for objects_dir in dirs:
        for idx in (objects_dir / "pack").glob("*.idx"):
            ids = packs.index_ids(str(idx))
            if oid not in ids:
                continue
            items = []
            for other in ids:
                kind, data = repo.odb.read(other)
                items.append((other, int(kind), new_data if other == oid else bytes(data)))
            del repo
            packs.write_pack(str(objects_dir), items, len(items))
            idx.unlink()
            idx.with_suffix(".pack").unlink()
            return
    raise AssertionError(f"object {oid} is not stored")


def stored_object_data(root: Path, oid: str) -> bytes:
    """An object's content as stored, read with plain git."""
    kind = git(root, "cat-file", "-t", oid).strip()
    proc = subprocess.run(["git", "cat-file", kind, oid], cwd=root, capture_output=True, check=True)
    return proc.stdout


def on_pty(
    *args: str,
    cwd: Path | str,
    env: Mapping[str, str | None] | None = None,
    columns: int = 100,
    timeout: float = 60,
    stdin_null: bool = False,
) -> tuple[int, bytes]:
    """Run the installed ``sandbox`` with stdout and stderr (and stdin, unless ``stdin_null``) on a
    new pseudo-terminal; its exit code and all it wrote there. ``env``: variables to set, or to
    remove with None. Bounded by ``timeout``: a process that does not finish fails the test."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    full_env = {**os.environ, "TERM": "xterm"}
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    exe = Path(sys.executable).parent / "sandbox"
    proc = subprocess.Popen(
        [str(exe), *args],
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL if stdin_null else slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    poller = select.poll()  # not select(): a long test session may hold descriptors above 1024
    poller.register(master, select.POLLIN)
    try:
        while time.monotonic() < deadline:
            ready = poller.poll(200)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal has exited
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                # Everything written is readable before EIO; one more pass, then done.
                continue
        else:
            proc.kill()
            raise AssertionError(f"sandbox {' '.join(args)} did not finish on the terminal: {out!r}")
    finally:
        os.close(master)
    return proc.wait(timeout=timeout), out


def scaled(seconds: float) -> float:
    """A deadline for this machine as loaded now: ``seconds`` on an idle machine, up to 10x that as the load
    (runnable processes per core) grows. A deadline only bounds how long a failure takes to show; on 2 busy
    cores a fixed one failed tests that were right."""
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        load = 1.0
    return seconds * min(10.0, max(1.0, load))


def wait_until(check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """The first truthy value of ``check()``, polled every 50 ms; fails the test after ``timeout`` s (scaled to
    the machine's load, :func:`scaled`)."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {check}")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False
