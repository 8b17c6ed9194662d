"""Shared machinery of the reliability suite: real CLI processes, state snapshots and checks.

Everything here observes the user's repository the way a user would (file bytes, refs, index,
``git fsck``) or reads the sandbox's own state through the library with freshly opened objects,
so a crashed process's in-memory state can never leak into a check.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import git, make_repo, tree_digest, user_state, write

import sandbox
from sandbox import faults
from sandbox.store import layout, runstore
from tests import cliserver

SANDBOX_EXE = str(Path(sys.executable).parent / "sandbox")
#: A bound for every subprocess the suite starts: a hang is a failure, never a stuck CI job.
TIMEOUT = 60.0


def load_all_modules() -> set[str]:
    """Import every library module so each registers its fault points; returns ``faults.POINTS``."""
    for mod in pkgutil.walk_packages(sandbox.__path__, "sandbox."):
        if mod.name.endswith("__main__") or mod.name.startswith("sandbox.demo"):
            continue  # importing these runs a program
        try:
            importlib.import_module(mod.name)
        except ImportError:
            continue  # a module being written right now by someone else
    return set(faults.POINTS)


def has_command(name: str) -> bool:
    """True when the CLI command ``name`` exists (its module may not be written yet)."""
    from sandbox.cli import COMMANDS

    target = COMMANDS.get(name)
    if target is None:
        return False
    module, _, attr = target.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ImportError:
        return False
    return hasattr(loaded, attr)


def sb(
    *args: str,
    cwd: Path | str,
    fault: str | None = None,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT,
) -> subprocess.CompletedProcess[bytes]:
    """Run the installed ``sandbox`` script as a real process (optionally armed to crash)."""
    full_env = dict(os.environ)
    full_env.pop("SANDBOX_FAULT", None)
    if fault:
        full_env["SANDBOX_FAULT"] = fault
    if env:
        full_env.update(env)
    return cliserver.sandbox(*args, cwd=cwd, env=full_env, input=input, timeout=timeout)


def sb_as_user(*args: str, cwd: Path | str) -> subprocess.CompletedProcess[bytes]:
    """:func:`sb` as an ordinary user: uid 1000 in a user namespace of its own when the tests run as root
    (the sandbox then makes its own inside that one), else as the tests' own user already is."""
    if os.geteuid() != 0:
        return sb(*args, cwd=cwd)
    as_user = ["unshare", "--user", "--map-user=1000", "--map-group=1000", SANDBOX_EXE]
    return subprocess.run([*as_user, *args], cwd=cwd, capture_output=True, timeout=TIMEOUT, check=False)


def ok(*args: str, cwd: Path | str, input: bytes | None = None) -> str:
    """Run a sandbox command that must succeed; returns its stdout."""
    proc = sb(*args, cwd=cwd, input=input)
    assert proc.returncode == 0, f"sandbox {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode()}"
    return proc.stdout.decode(errors="surrogateescape")


def assert_one_line_error(proc: subprocess.CompletedProcess[bytes], *, what: str = "") -> str:
    """A clean refusal: non-zero exit (not the 'unexpected error' code 3), one 'sandbox:' line."""
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode not in (0, -9), f"{what}: expected a refusal, got exit {proc.returncode}: {err}"
    assert "Traceback" not in err, f"{what}: traceback on stderr:\n{err}"
    assert proc.returncode != 3, f"{what}: an unexpected error instead of a clear refusal: {err}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"{what}: expected exactly one line on stderr, got {len(lines)}:\n{err}"
    assert lines[0].startswith("sandbox:") or lines[0].startswith("Error:"), f"{what}: {lines[0]!r}"
    return lines[0]


def make_user_repo(root: Path) -> Path:
    """A user repository with the kinds of content users have, and uncommitted work on top."""
    make_repo(
        root,
        {
            "README.md": "hello\n",
            "src/app.py": "print('app')\n",
            "src/util.py": "X = 1\n",
            "bin/tool.sh": "#!/bin/sh\necho tool\n",
            "data/blob.bin": bytes(range(256)) * 8,
            ".gitignore": "*.log\n",
        },
        commit=False,
    )
    os.chmod(root / "bin/tool.sh", 0o755)
    os.symlink("src/app.py", root / "link-to-app")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    git(root, "tag", "v1")
    write(root, "README.md", "hello\nuncommitted user edit\n")
    write(root, "src/util.py", "X = 2  # staged\n")
    git(root, "add", "src/util.py")
    write(root, "notes.txt", "untracked notes\n")
    write(root, "debug.log", "ignored\n")
    return root


# -- reading the sandbox's state with fresh objects ------------------------------------------------


def open_run(root: Path, run_id: str) -> Any:
    """A freshly opened :class:`sandbox.run.run.Run` (nothing cached from earlier reads)."""
    from sandbox.run.run import Run
    from sandbox.store.project import Project

    project, _, _ = Project.discover(str(root))
    return Run.open(project, run_id)


def event_ids(root: Path, run_id: str) -> list[str]:
    """The run's ledger event ids, oldest first, read from git."""
    return [event.event_id for _oid, event in open_run(root, run_id).events()]


def entries(root: Path, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's ledger entries by call id, as plain JSON data."""
    return {e.call_id: e.model_dump(mode="json") for e in open_run(root, run_id).entries()}


def cli_entries(root: Path, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's ledger entries by call id, as ``sandbox log --json`` prints them."""
    import json

    return {e["call_id"]: e for e in json.loads(ok("log", run_id, "--json", cwd=root))}


def sandbox_things(root: Path) -> dict[str, set[str]]:
    """Everything of the sandbox's: refs, run dirs and admin dirs in the repository; worktrees (homes)."""
    common = root / ".git"
    refs = set(git(root, "for-each-ref", "--format=%(refname)", "refs/sandbox").split())
    admin: set[str] = set()
    wt_root = os.path.realpath(common / "sandbox" / "worktrees")
    for name in _listdir(common / "worktrees"):
        gitdir = common / "worktrees" / name / "gitdir"
        target = gitdir.read_text().strip() if gitdir.exists() else ""
        if not target or os.path.realpath(target).startswith(wt_root + os.sep) or not os.path.exists(target):
            admin.add(name)
    # Runs' homes: the CLI's data root (this session's $XDG_DATA_HOME or ~/.local/share) and the
    # library's fallback under .git/sandbox/homes; legacy worktrees under .git/sandbox/worktrees.
    real_common = os.path.realpath(common)
    homes_dirs = [
        layout.homes_dir(layout.user_data_root(os.environ, os.path.expanduser("~")), real_common),
        layout.fallback_homes_dir(real_common),
        layout.legacy_worktrees_dir(real_common),
    ]
    return {
        "refs": refs,
        "worktrees": {n for d in homes_dirs for n in _listdir(Path(d))},
        "runs": set(_listdir(common / "sandbox" / "runs")),
        "admin": admin,
        # The runs whose store the hub lists (sandbox.store.runstore): your git reads them.
        "stores": {os.path.basename(os.path.dirname(p)) for p in runstore.listed(real_common)},
    }


def _listdir(path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def things_of(things: dict[str, set[str]], run_id: str) -> list[str]:
    """What of ``run_id`` remains among ``things`` (refs, worktree dir, run dir)."""
    out = [r for r in things["refs"] if r.startswith(f"refs/sandbox/{run_id}/")]
    out += [f"worktree {w}" for w in things["worktrees"] if w == run_id]
    out += [f"run dir {r}" for r in things["runs"] if r == run_id]
    out += [f"store of {r} listed" for r in things.get("stores", ()) if r == run_id]
    return out


def live_run_ids(root: Path) -> set[str]:
    """Runs whose ledger ref exists."""
    refs = git(root, "for-each-ref", "--format=%(refname)", "refs/sandbox").split()
    return {r.split("/")[2] for r in refs if r.endswith("/ledger")}


def assert_fsck_clean(root: Path, strict: bool = False) -> None:
    """``git fsck`` finds nothing broken (dangling objects from a crash are fine: gc reclaims them)."""
    args = ["fsck", "--no-progress", "--no-dangling"] + (["--strict"] if strict else [])
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=TIMEOUT, check=False)
    out = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode == 0, f"git fsck failed ({proc.returncode}):\n{out}"
    bad = [line for line in out.splitlines() if line.split(" ")[0] in ("error:", "missing", "broken", "warning")]
    assert not bad, "git fsck:\n" + out


def assert_run_usable(root: Path, run_id: str, rel: str = "after-recovery.txt") -> None:
    """A run that survived a crash still records calls: write a file through a new call."""
    run = open_run(root, run_id)
    with run.tool_call("write_file", {"path": rel}) as call:
        call.write(rel, b"still works\n")
    assert call.entry is not None and call.entry.status.value == "succeeded"
    assert [f.path for f in call.entry.files] == [rel]
    assert open_run(root, run_id).state().head == call.entry.commit
    assert (Path(run.worktree) / rel).read_bytes() == b"still works\n"


@dataclass
class Before:
    """What the user and the sandbox had before an operation (the acknowledged state)."""

    digest: dict[str, str]
    user: dict[str, object]
    events: dict[str, list[str]] = field(default_factory=dict)
    entries: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    things: dict[str, set[str]] = field(default_factory=dict)


def capture_before(root: Path, runs: list[str]) -> Before:
    """Record the acknowledged state of the user's tree and of ``runs``."""
    return Before(
        digest=tree_digest(root),
        user=user_state(root),
        events={r: event_ids(root, r) for r in runs},
        entries={r: entries(root, r) for r in runs},
        things=sandbox_things(root),
    )


def assert_acknowledged_kept(
    root: Path, before: Before, run_id: str, after: dict[str, dict[str, Any]] | None = None
) -> None:
    """Every event and call acknowledged before the crash is still there, unchanged or advanced.

    ``after`` is the run's entries as read after recovery (``sandbox log --json`` in the call
    scenarios; by default a fresh read of the ledger from git).
    """
    after_events = event_ids(root, run_id)
    assert after_events[: len(before.events[run_id])] == before.events[run_id], "acknowledged ledger events lost"
    assert len(set(after_events)) == len(after_events), "duplicate ledger events"
    if after is None:
        after = entries(root, run_id)
    for call_id, old in before.entries[run_id].items():
        assert call_id in after, f"acknowledged call {call_id} lost"
        new = after[call_id]
        if old["status"] in ("succeeded", "failed"):
            assert new["status"] == old["status"], f"{call_id}: {old['status']} became {new['status']}"
            assert new["commit"] == old["commit"], f"{call_id}: its commit changed"
            assert [f["path"] for f in new["files"]] == [f["path"] for f in old["files"]]
        if new["commit"]:
            # The commit and every blob it records can be read back.
            repo = open_run(root, run_id).repo
            commit = repo[new["commit"]]
            for f in new["files"]:
                if f["after_hash"]:
                    assert repo.odb.exists(f["after_hash"]), f"{call_id}: blob of {f['path']} missing"
            assert commit is not None


def assert_user_untouched(root: Path, before: Before) -> None:
    """The user's files, index, HEAD, branches, tags and stash are exactly as before."""
    assert tree_digest(root) == before.digest, "the user's files changed"
    assert user_state(root) == before.user, "the user's index, HEAD or refs changed"


def write_temporaries(root: Path) -> list[str]:
    """Temporaries of apply/undo/redo writes anywhere: in the tree (walked), the staging area, the journal dir."""
    from sandbox.store import fsutil
    from sandbox.store.project import Project

    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        found += [os.path.join(dirpath, n) for n in filenames + dirnames if n.startswith(fsutil.TEMP_PREFIX)]
    state = Path(Project.discover(str(root))[0].state_dir)
    staging = state / "staging"
    if staging.exists():
        found += [str(p) for p in staging.rglob("*") if not p.is_dir()]
    found += [str(p) for p in (state / "journal").glob(f"{fsutil.TEMP_PREFIX}*")]
    return found


def make_legacy(root: Path, run_id: str) -> Path:
    """Turn a run into what ``start`` made before runs had homes: a locked, detached linked worktree
    under ``.git/sandbox/worktrees/<run>`` at the run's head, and no ``place`` in the run's directory."""
    import shutil

    run = open_run(root, run_id)
    head = run.head()
    assert run.place.home is not None
    from sandbox.store import runstore

    runstore.retire(run.project.common_dir, run_id)  # made before runs had stores: its objects are in yours
    shutil.rmtree(run.place.home)
    os.unlink(os.path.join(run.dir, layout.PLACE_FILE))
    legacy = Path(layout.legacy_place(run.project.common_dir, run_id).worktree)
    reason = f"sandbox run {run_id}: remove with 'sandbox drop {run_id}'"
    git(root, "worktree", "add", "-q", "--detach", "--lock", "--reason", reason, str(legacy), head)
    assert open_run(root, run_id).place.legacy
    return legacy
