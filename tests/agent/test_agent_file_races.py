"""Readers of files the agent writes, raced by a real hostile process (docs/design.md, "Reading what the agent wrote").

Each reader here runs outside the agent's confinement on a file of its home or worktree, while a
process swaps that file with a symlink to a secret outside, or with a FIFO, in a loop
(``renameat2(RENAME_EXCHANGE)``). The reader never returns the secret and never blocks: before,
each listed (or checked) the name and then opened it by name, which followed the link or waited on
the FIFO for a writer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pygit2
import pytest

from sandbox.agent import adapters, agentstate, sessions
from sandbox.agent.adapters import claude_code, gemini
from sandbox.errors import SandboxError
from sandbox.store import journal
from tests.conftest import scaled

SECRET = b'{"sessionId": "0b7c3d9e-1111-4222-8333-444455556666", "secret": "PRIVATE KEY of the user"}\n'
SESSION = "0b7c3d9e-1111-4222-8333-444455556666"

#: Swaps two names with renameat2(RENAME_EXCHANGE) until killed.
RACER = textwrap.dedent(
    """
    import ctypes, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = (os.fsencode(p) for p in sys.argv[1:3])
    print("ready", flush=True)
    while True:
        libc.renameat2(-100, a, -100, b, 2)  # AT_FDCWD, RENAME_EXCHANGE
    """
)


@contextmanager
def racing(a: Path, b: Path) -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-c", RACER, str(a), str(b)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield
    finally:
        proc.kill()
        proc.wait()


def _blocked(_sig: int, _frame: object) -> None:
    raise TimeoutError("the reader blocked (on the FIFO swapped in)")


def hammer(read: Callable[[], bytes | None], seconds: float = 2.0) -> tuple[int, set[bytes]]:
    """Call ``read`` for ``seconds``, a blocked call failing the test; (calls, what came back)."""
    seen: set[bytes] = set()
    calls = 0
    until = time.monotonic() + seconds
    old = signal.signal(signal.SIGALRM, _blocked)
    signal.alarm(int(scaled(seconds + 20)))
    try:
        while time.monotonic() < until:
            calls += 1
            try:
                got = read()
            except (OSError, SandboxError):
                continue
            if got is not None:
                seen.add(got)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return calls, seen


def plant(path: Path, content: bytes, secret: Path, kind: str) -> Path:
    """Write ``content`` at ``path`` and its hostile twin beside it: a link to ``secret`` or a FIFO."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    twin = path.with_name("twin")
    if kind == "link":
        twin.symlink_to(secret)
    else:
        os.mkfifo(twin)
    return twin


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_transcript_swapped_in_its_home_is_never_read_through_the_swap(tmp_path: Path, kind: str) -> None:
    """transcripts.capture's read: Claude Code's transcript found in the run's home, then read."""
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(SECRET)
    home = tmp_path / "run" / ".claude"
    agent = sessions.ClaudeCode()
    path = Path(agent.place(str(home), "/w/a", SESSION))
    mine = b'{"sessionId": "%s", "type": "user"}\n' % SESSION.encode()
    twin = plant(path, mine, secret, kind)

    def read() -> bytes | None:
        found = agent.find(SESSION, [str(home)])
        return None if found is None else sessions.read_found(found, [str(home)])

    with racing(path, twin):
        calls, seen = hammer(read)
    assert calls > 20
    assert seen <= {mine}, "the reader followed the swap"


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_gemini_chat_swapped_in_its_home_is_never_read_through_the_swap(tmp_path: Path, kind: str) -> None:
    """Gemini's find reads each candidate's first line; resume_args reads the newest chat's."""
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(SECRET.replace(SESSION.encode(), b"ffffffff-1111-4222-8333-444455556666"))
    run_dir = tmp_path / "run"
    chats = Path(gemini.sessions_dir(str(run_dir))) / "proj" / "chats"
    path = chats / f"session-1-{SESSION[:8]}.jsonl"
    mine = b'{"sessionId": "%s"}\n' % SESSION.encode()
    twin = plant(path, mine, secret, kind)
    homes = [str(Path(gemini.sessions_dir(str(run_dir))).parent)]

    def read() -> bytes | None:
        found = sessions.GeminiCli().find(SESSION, homes)
        args = gemini.resume_args(str(run_dir), 0.0)
        assert args is None or args[1] in (SESSION, "latest"), args
        return None if found is None else b"found"

    with racing(path, twin):
        calls, _seen = hammer(read)
    assert calls > 20


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_the_agents_settings_in_its_worktree_swapped_are_never_read_through_the_swap(tmp_path: Path, kind: str) -> None:
    """``hooks install`` / ``uninstall`` read the worktree's .claude/settings.local.json, the agent's."""
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(b'{"secret": "PRIVATE KEY of the user"}\n')
    worktree = tmp_path / "wt"
    path = worktree / str(claude_code.SETTINGS_PATH)
    mine = b'{"mine": true}\n'
    twin = plant(path, mine, secret, kind)

    rel = str(claude_code.SETTINGS_PATH)

    def read() -> bytes | None:
        adapters.uninstall(claude_code, str(worktree))  # reads it; nothing of ours to take out
        dirfd, name = adapters._open_settings_dir(str(worktree), rel, create=False)
        try:
            loaded = adapters._load_settings(dirfd, name, rel)
        finally:
            os.close(dirfd)
        return json.dumps(loaded).encode()

    with racing(path, twin):
        calls, seen = hammer(read)
    assert calls > 20
    assert seen <= {json.dumps(json.loads(mine)).encode()}, "the reader followed the swap"


@pytest.mark.parametrize("agent", [claude_code, gemini])
def test_hooks_written_into_the_worktree_never_land_through_a_swapped_settings_dir(tmp_path: Path, agent: Any) -> None:
    """``hooks install`` / ``uninstall`` write the worktree's .claude/settings.local.json (.gemini/settings.json)
    from outside the sandbox while the agent swaps ``.claude`` for a link to your own ``~/.claude`` in a loop
    (renameat2): each call writes inside the worktree or refuses in one sentence; nothing lands outside."""
    outside = tmp_path / "home" / ".claude"
    outside.mkdir(parents=True)
    worktree = tmp_path / "wt"
    rel = str(agent.SETTINGS_PATH)
    settings_dir = worktree / rel.split("/")[0]
    settings_dir.mkdir(parents=True)
    twin = worktree / "twin"
    twin.symlink_to(outside)
    command = f"{agent.MARKER} --for-tests"
    done = {"installed": 0, "removed": 0, "refused": 0}

    def write() -> bytes | None:
        try:
            adapters.install(agent, str(worktree), command)
            done["installed"] += 1
            done["removed"] += adapters.uninstall(agent, str(worktree))
        except SandboxError as exc:
            assert "symlink" in str(exc), exc  # one sentence that says why
            done["refused"] += 1
        except OSError as exc:
            raise AssertionError(f"a bare OSError escaped: {exc!r}") from exc
        return None

    with racing(settings_dir, twin):
        calls, _seen = hammer(write)
    assert calls > 20
    assert list(outside.iterdir()) == [], "a write followed the swapped link"
    assert done["installed"] and done["removed"], done
    real = twin if settings_dir.is_symlink() else settings_dir  # the racer stopped with either name the directory
    assert [p.name for p in real.iterdir()] == [rel.split("/")[1]]  # the settings, no temporary file left behind


def test_a_transcript_reader_refuses_a_sparse_file_over_the_bound_in_bounded_memory(tmp_path: Path) -> None:
    home = tmp_path / "run" / ".claude"
    path = Path(sessions.ClaudeCode().place(str(home), "/w/a", SESSION))
    path.parent.mkdir(parents=True)
    with open(path, "wb") as fh:
        fh.truncate(4 << 30)
    probe = textwrap.dedent(
        """
        import resource, sys
        from sandbox.agent import sessions
        from sandbox.errors import SandboxError
        try:
            sessions.read_found(sys.argv[1], [sys.argv[2]])
            print("read")
        except SandboxError as exc:
            print("refused", type(exc).__name__)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, str(path), str(home)], capture_output=True, timeout=scaled(60), check=True
    )
    verdict, peak = proc.stdout.decode().split("\n")[:2]
    assert verdict == "refused TooLargeError", proc.stdout
    assert int(peak) < 400, f"{peak} MiB resident"


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_undo_in_the_run_probes_a_swapped_worktree_file_never_through_the_swap(tmp_path: Path, kind: str) -> None:
    """journal.probe reads the run's worktree when a call is undone in the run (and the user's tree for apply)."""
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(SECRET)
    worktree = tmp_path / "wt"
    path = worktree / "src" / "a.txt"
    mine = b"the agent's file\n"
    twin = plant(path, mine, secret, kind)
    secret_id = str(pygit2.hash(SECRET))

    def read() -> bytes | None:
        found = journal.probe(str(worktree), "src/a.txt")
        assert found.entry is None or found.entry.oid != secret_id, "the probe hashed the secret"
        return found.entry.oid.encode() if found.kind == "file" and found.entry else None

    with racing(path, twin):
        calls, seen = hammer(read)
    assert calls > 20
    assert seen <= {str(pygit2.hash(mine)).encode()}


def test_agent_state_made_for_a_run_never_lands_through_a_swapped_state_dir(tmp_path: Path) -> None:
    """``sandbox run`` makes the started agent's missing state in your home before it starts it
    (``agentstate.prepare_state``), outside the sandbox, while another confined agent with that state
    bound writable swaps a directory of it for a link to a directory outside in a loop (renameat2):
    what is made lands inside the state directory or not at all; nothing is ever made outside."""
    home = tmp_path / "home"
    state = home / ".aider"  # bound writable for an agent without a home in the run
    cache = state / "cache"
    cache.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    twin = state / "twin"
    twin.symlink_to(outside)
    writable = [f"{state}/", f"{cache}/"]
    made = {"n": 0}

    def prepare() -> bytes | None:
        n = made["n"] = made["n"] + 1
        entries = [f"{cache}/sub{n}/", f"{cache}/sub{n}/deeper/", f"{cache}/state{n}.json"]
        agentstate.prepare_state(entries, writable=[*writable, *entries])
        return None

    with racing(cache, twin):
        calls, _seen = hammer(prepare)
    assert calls > 20
    assert list(outside.iterdir()) == [], "a directory or file was made through the swapped link"
    real = twin if cache.is_symlink() else cache  # the racer stopped with either name the directory
    assert any(p.name.startswith("sub") for p in real.iterdir()), "nothing was made inside either"
    agentstate.prepare_state([f"{home}/.aider.json", f"{state}/top.json"], writable=writable)
    assert json.loads((home / ".aider.json").read_text()) == {} and (state / "top.json").read_text() == "{}\n"
