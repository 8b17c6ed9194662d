"""What you review is what lands, over random sequences (issue 21): a hypothesis state machine.

Three trees are modelled as plain dicts (path -> ("file", bytes, executable) or ("link", target)):
the *base* the run started from, the *run* (the agent's files), the *user's* tree. The rules drive
the real library: the agent's calls through the recording API (write, delete, mkdir, file <->
directory, symlink, chmod, rename, one call writing several files), the user's edits and deletions
on disk, and the sandbox's operations (apply of the whole run, of a pathspec, of some calls, with
``--3way``, some hunks by id; undo; redo; checkpoint; ``rollback --files``; ``rewind`` and its undo
and redo; fork; push, fetch and apply in a second clone). After every step:

* the run's worktree is exactly the modelled run tree, and what the run brings (``diff``'s new side)
  is the run tree on every path it differs from the base;
* an apply writes exactly what ``diff`` (the same selection) showed, lists exactly the paths it
  changed, and changes nothing else; a refused apply writes nothing;
* an undo puts each path the apply (or redo) wrote back byte for byte and lists exactly those; a
  redo writes the same bytes again; a refused one writes nothing;
* no edit of the user's is ever lost: each line the user wrote is still in their file (a 3-way
  merge keeps it next to the agent's), unless the user removed it.

``make test`` runs a fixed, derandomized budget; ``--soak`` a long one. What it found became plain
tests: ``test_hunks_that_leave_out_a_deletion_in_the_way_write_nothing`` (tests/merge/test_review_contract.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sandbox.errors import SandboxError
from sandbox.merge import brings, mergeback, planning, treeops
from sandbox.merge.mergeback import ApplyConflict
from sandbox.merge.undo import undo
from sandbox.models import ApplyReport
from sandbox.recovery.actions import rollback_files
from sandbox.recovery.rewind import rewind
from sandbox.recovery.rewind_undo import redo_rewind, undo_rewind
from sandbox.run.run import Run
from sandbox.store import objects
from sandbox.store.project import Project
from tests.conftest import git, make_repo

#: A small universe: a file that can become a directory (d vs d/x), a nested one, a link.
NAMES = ["a", "b", "d", "d/x", "d/y", "e/f"]
Node = tuple[str, bytes, bool] | tuple[str, str]
Tree = dict[str, Any]

BASE: dict[str, str] = {
    "a": "".join(f"a{i}\n" for i in range(12)),  # long enough for two hunks (apply --hunks takes one)
    "b": "b1\nb2\nb3\n",
    "d/x": "x1\nx2\nx3\n",
}


#: What the steps did, counted over a whole test (printed by the hunting test: see the rules' reach).
SEEN: Counter[str] = Counter()


def event(what: str) -> None:
    SEEN[what] += 1


def snapshot(root: Path) -> Tree:
    """Every file and link below ``root`` (outside .git): ("file", bytes, executable) or ("link", target)."""
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel == ".git":
                continue  # a worktree's pointer to its git directory
            if os.path.islink(full):
                out[rel] = ("link", os.readlink(full))
            else:
                with open(full, "rb") as fh:
                    out[rel] = ("file", fh.read(), bool(os.lstat(full).st_mode & 0o111))
    return out


def entry_node(run: Run, entry: objects.Entry | None) -> Any:
    """A tree entry as a modelled node (None: absent)."""
    if entry is None:
        return None
    data = objects.read_blob(run.repo, entry.oid)
    if entry.mode == objects.MODE_LINK:
        return ("link", os.fsdecode(data))
    return ("file", data, entry.mode == objects.MODE_EXEC)


def _blocked(tree: Tree, path: str) -> bool:
    """True when ``path`` cannot be a file in ``tree``: a parent is a file, or files lie below it."""
    parts = path.split("/")
    if any("/".join(parts[:i]) in tree for i in range(1, len(parts))):
        return True
    return any(p.startswith(path + "/") for p in tree)


class ReviewModel(RuleBasedStateMachine):
    """Random agent calls, user edits and sandbox operations against the three modelled trees."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="review-model-")
        self.root = make_repo(Path(self.tmp) / "repo", dict(BASE))
        project, workdir, _ = Project.discover(str(self.root))
        assert workdir is not None
        self.run = Run.start(project, workdir)
        self.base: Tree = snapshot(self.root)
        self.agent: Tree = dict(self.base)
        self.user_lines: dict[str, bytes] = {}
        self.counter = 0
        self.checkpoints: dict[str, Tree] = {}
        #: The run tree just before each call (what ``rewind`` to it puts back).
        self.before_call: dict[str, Tree] = {}
        #: The newest rewind's run trees, just before it and right after it (what its undo and redo put back).
        self.rewound: tuple[Tree, Tree] | None = None
        #: Applies (and redos) in effect: (paths written, the tree before, the tree after), newest last.
        self.done: list[tuple[list[str], Tree, Tree]] = []
        self.undone: list[tuple[list[str], Tree, Tree]] = []
        self.forks = 0
        self.clone: Path | None = None
        self.user_tree_seen: Tree = {}

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def token(self, who: str) -> bytes:
        self.counter += 1
        return f"{who}{self.counter}".encode()

    # -- the agent ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _call(self, name: str) -> Iterator[Any]:
        with self.run.tool_call(name) as call:
            assert call.call_id is not None
            self.before_call[call.call_id] = dict(self.agent)  # the rules change the model after the call
            yield call

    @rule(path=st.sampled_from(NAMES), line=st.sampled_from([0, 1, 9]))
    def agent_write(self, path: str, line: int) -> None:
        if _blocked(self.agent, path) or (self.agent.get(path) or ("",))[0] == "link":
            return
        old = self.agent.get(path)
        lines = (old[1] if old else b"").splitlines(keepends=True) or [b"new\n"]
        lines[min(line, len(lines) - 1)] = self.token("agent") + b"\n"
        if line == 9 and len(lines) > 9:
            lines[0] = self.token("agent") + b"\n"  # two edits far apart: two hunks
        data = b"".join(lines)
        with self._call("write") as call:
            call.write(path, data)
        self.agent[path] = ("file", data, bool(old and old[0] == "file" and old[2]))

    @rule(path=st.sampled_from(NAMES))
    def agent_delete(self, path: str) -> None:
        if path not in self.agent:
            return
        with self._call("delete") as call:
            call.delete(path)
        del self.agent[path]

    @rule(path=st.sampled_from(["a", "b", "d"]))
    def agent_file_to_dir(self, path: str) -> None:
        """A file (or nothing) becomes a directory holding one file; a directory becomes a file."""
        below = [p for p in self.agent if p.startswith(path + "/")]
        data = self.token("agent") + b"\n"
        with self._call("retype") as call:
            if below:
                call.delete(path)
                call.write(path, data)
            else:
                if path in self.agent:
                    call.delete(path)
                call.write(path + "/x", data)
        for p in below:
            del self.agent[p]
        self.agent.pop(path, None)
        self.agent[path if below else path + "/x"] = ("file", data, False)

    @rule(path=st.sampled_from(["a", "b", "l"]), to=st.sampled_from(["a", "d/x", "../outside"]))
    def agent_symlink(self, path: str, to: str) -> None:
        if _blocked(self.agent, path):
            return
        with self._call("link") as call:
            if path in self.agent:
                call.delete(path)
            call.symlink(path, to)
        self.agent[path] = ("link", to)

    @rule(path=st.sampled_from(NAMES))
    def agent_chmod(self, path: str) -> None:
        node = self.agent.get(path)
        if node is None or node[0] != "file":
            return
        with self._call("chmod") as call:
            call.chmod(path, not node[2])
        self.agent[path] = ("file", node[1], not node[2])

    @rule(src=st.sampled_from(NAMES), dst=st.sampled_from(["n", "e/f", "b"]))
    def agent_rename(self, src: str, dst: str) -> None:
        if src not in self.agent or src == dst or dst in self.agent or _blocked(self.agent, dst):
            return
        with self._call("rename") as call:
            call.rename(src, dst)
        self.agent[dst] = self.agent.pop(src)

    @rule(paths=st.lists(st.sampled_from(["b", "n", "e/f", "d/y"]), min_size=2, max_size=3, unique=True))
    def agent_command(self, paths: list[str]) -> None:
        """One call writing several files (a command)."""
        paths = [p for p in paths if not _blocked(self.agent, p) and (self.agent.get(p) or ("",))[0] != "link"]
        if not paths:
            return
        with self._call("run_command") as call:
            for p in paths:
                data = self.token("cmd") + b"\n"
                call.write(p, data)
                old = self.agent.get(p)
                self.agent[p] = ("file", data, bool(old and old[0] == "file" and old[2]))

    # -- the user -----------------------------------------------------------------------------

    @rule(path=st.sampled_from(["a", "b", "d/x", "n"]))
    def user_edit(self, path: str) -> None:
        full = self.root / path
        if os.path.islink(full) or (full.exists() and not full.is_file()) or not full.parent.is_dir():
            return
        lines = full.read_bytes().splitlines(keepends=True) if full.exists() else []
        mine = self.token("user") + b"\n"
        full.write_bytes(b"".join([*lines[:-1], mine] if len(lines) > 3 else [*lines, mine]))
        self.user_lines[path] = mine

    @rule(path=st.sampled_from(["a", "b", "d/x"]))
    def user_delete(self, path: str) -> None:
        full = self.root / path
        if os.path.islink(full) or not full.is_file():
            return
        full.unlink()
        self.user_lines.pop(path, None)

    # -- the sandbox --------------------------------------------------------------------------

    def _shown(self, calls: list[str] | None, spec: list[str] | None) -> dict[str, Any]:
        """What diff shows for the selection: the new side of each path it changes."""
        pathspec = planning.as_pathspec(spec)
        brought = brings.brings(self.run, calls=calls, spec=pathspec, check=False)
        return {p: entry_node(self.run, brought.last()[p]) for p in brought.changed()}

    def _ops(self) -> int:
        return len(treeops.stack(self.run, self.run.state()).done)

    def _check_apply(self, before: Tree, report: ApplyReport, shown: dict[str, Any], ops: int) -> None:
        after = snapshot(self.root)
        changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
        assert set(report.applied) == changed, (report.applied, changed)
        for path in report.applied:
            assert path in shown, f"{path} was written but diff did not show it"
            if path not in report.merged:
                assert after.get(path) == shown[path], f"{path}: apply wrote other bytes than diff showed"
        if self._ops() > ops:
            self.done.append((sorted(changed), before, after))
            self.undone.clear()

    @rule(
        selection=st.sampled_from(["all", "spec", "exclude", "calls"]),
        three_way=st.booleans(),
    )
    def apply(self, selection: str, three_way: bool) -> None:
        calls = spec = None
        live = [e.call_id for e in brings.select.live_calls(self.run.state())]
        if selection == "spec":
            spec = ["a", "d"]
        elif selection == "exclude":
            spec = [":!b"]
        elif selection == "calls":
            if not live:
                return
            calls = live[-2:]
        before, ops = snapshot(self.root), self._ops()
        try:
            shown = self._shown(calls, spec)
            report = mergeback.apply(self.run, calls, spec, three_way=three_way, allow_moved_head=False)
        except ApplyConflict as exc:
            event(f"apply {selection}: refused")
            assert snapshot(self.root) == before, "a refused apply wrote something"
            assert exc.report.refused and exc.report.applied == []
            return
        except SandboxError as exc:
            event(f"apply {selection}: {type(exc).__name__}")
            assert snapshot(self.root) == before
            return
        event(f"apply {selection}: wrote {'some' if report.applied else 'none'}{' merged' if report.merged else ''}")
        self._check_apply(before, report, shown, ops)

    @rule(data=st.data())
    def apply_hunks(self, data: st.DataObject) -> None:
        """apply --hunks-from: some of the hunk ids ``diff --json`` shows."""
        from sandbox.merge import hunks, preview

        files = preview.diff_files(self.run, preview.preview_range(self.run))
        ids = [h["id"] for f in files for h in f["hunks"]] + [f["id"] for f in files if not f["hunks"]]
        ids += [c["id"] for f in files for h in f["hunks"] for c in h["changes"] if len(h["changes"]) > 1]
        if not ids:
            return
        chosen = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True))
        before, ops = snapshot(self.root), self._ops()
        try:
            shown = self._shown(None, None)
            report = mergeback.apply(self.run, choice=hunks.Choice(ids=set(chosen)))
        except SandboxError as exc:
            event(f"apply hunks: {type(exc).__name__}: {str(exc)[:90]}")
            assert snapshot(self.root) == before, "a refused apply of hunks wrote something"
            return
        event(f"apply hunks: wrote {'some' if report.applied else 'none'}{' partly' if report.partial else ''}")
        partial = set(report.partial)
        for path in partial:
            shown.pop(path, None)  # only some hunks of it: not the agent's whole file
        after = snapshot(self.root)
        changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
        assert set(report.applied) == changed, (report.applied, changed)
        for path in set(report.applied) - partial:
            assert after.get(path) == shown[path], f"{path}: apply wrote other bytes than diff showed"
        if self._ops() > ops:
            self.done.append((sorted(changed), before, after))
            self.undone.clear()

    @rule()
    def undo_last(self) -> None:
        before, ops = snapshot(self.root), self._ops()
        try:
            report = undo(self.run)
        except SandboxError as exc:
            event(f"undo: {type(exc).__name__}")
            assert snapshot(self.root) == before, "a refused undo wrote something"
            return
        event(f"undo: restored {'some' if report.restored else 'none'}")
        after = snapshot(self.root)
        changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
        assert set(report.restored) == changed, (report.restored, changed)
        if self._ops() < ops:
            paths, was, _now = self.done.pop()
            for path in paths:
                assert after.get(path) == was.get(path), f"undo did not put {path} back byte for byte"
            self.undone.append((paths, after, before))

    @rule()
    def redo_last(self) -> None:
        ops = treeops.stack(self.run, self.run.state())
        if not ops.undone:
            return
        before = snapshot(self.root)
        try:
            report = treeops.move(self.run, ops.undone[-1], "redo")
        except SandboxError as exc:
            event(f"redo: {type(exc).__name__}")
            assert snapshot(self.root) == before, "a refused redo wrote something"
            return
        event("redo: done")
        after = snapshot(self.root)
        changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
        assert set(report.applied) == changed
        if self.undone:  # the model's undone operations follow the ledger's (a new apply clears both)
            paths, _was, redone = self.undone.pop()
            for path in paths:
                assert after.get(path) == redone.get(path), f"redo did not write {path} again"
            self.done.append((paths, before, after))

    @rule()
    def checkpoint(self) -> None:
        self.counter += 1
        label = f"c{self.counter}"
        self.run.checkpoint(label)
        self.checkpoints[label] = dict(self.agent)

    @precondition(lambda self: bool(self.checkpoints))
    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        label = data.draw(st.sampled_from(sorted(self.checkpoints)))
        rollback_files(self.run, label)
        self.agent = dict(self.checkpoints[label])

    @precondition(lambda self: bool(self.before_call))
    @rule(data=st.data())
    def rewind_to_call(self, data: st.DataObject) -> None:
        """``sandbox rewind --to CALL``: its files part is a ``rollback --files`` to just before the call."""
        call_id = data.draw(st.sampled_from(sorted(self.before_call)))
        rewind(self.run, call_id, {})
        event("rewind")
        self.rewound = (dict(self.agent), dict(self.before_call[call_id]))
        self.agent = dict(self.before_call[call_id])

    @precondition(lambda self: self.rewound is not None)
    @rule(then_redo=st.booleans())
    def undo_the_rewind(self, then_redo: bool) -> None:
        """``sandbox undo`` right after a rewind: the run's files as they were before it; ``sandbox redo``
        right after that always rewinds again."""
        if self._rewind_step("undo") and then_redo:
            self.run_is_the_model()
            assert self._rewind_step("redo"), "redo right after undoing a rewind did not rewind again"

    @precondition(lambda self: self.rewound is not None)
    @rule()
    def redo_the_rewind(self) -> None:
        """``sandbox redo`` right after undoing a rewind: the run's files rewound again."""
        self._rewind_step("redo")

    def _rewind_step(self, op: str) -> bool:
        """Undo or redo the newest rewind; True when it moved the run's files."""
        assert self.rewound is not None
        try:
            move = undo_rewind(self.run) if op == "undo" else redo_rewind(self.run)
        except SandboxError as exc:
            event(f"rewind {op}: {type(exc).__name__}")
            return False
        event(f"rewind {op}: {'done' if move else 'not the newest step'}")
        if move is not None:
            self.agent = dict(self.rewound[0] if op == "undo" else self.rewound[1])
        return move is not None

    @precondition(lambda self: self.forks < 1)
    @rule()
    def fork(self) -> None:
        """Go on in a fork of the run (same base, one call bringing the source's changes)."""
        from sandbox.runs.many import fork

        self.run = fork(self.run)
        self.forks += 1
        # The fork is a run of its own: its applies, undos and checkpoints start afresh.
        self.done, self.undone, self.checkpoints, self.before_call = [], [], {}, {}
        self.rewound = None

    @rule()
    def apply_in_a_second_clone(self) -> None:
        """Push the run, fetch it into a second clone, apply it there: what diff shows there lands there."""
        from sandbox.runs import remote

        if self.clone is None:
            bare = Path(self.tmp) / "remote.git"
            git(Path(self.tmp), "init", "-q", "--bare", str(bare))
            git(self.root, "remote", "add", "origin", str(bare))
            git(self.root, "push", "-q", "origin", "main")
            git(Path(self.tmp), "clone", "-q", str(bare), str(Path(self.tmp) / "clone"))
            self.clone = Path(self.tmp) / "clone"
        remote.push(self.run.project, [self.run.run_id], "origin")
        project, _workdir, _ = Project.discover(str(self.clone))
        remote.fetch(project, "origin", [self.run.run_id])
        there = Run.open(project, self.run.run_id)
        self.user_tree_seen, before = snapshot(self.root), snapshot(self.clone)
        brought = brings.brings(there, check=False)
        shown = {p: entry_node(there, brought.last()[p]) for p in brought.changed()}
        try:
            report = mergeback.apply(there)
        except SandboxError as exc:
            event(f"second clone: {type(exc).__name__}")
            assert snapshot(self.clone) == before, "a refused apply in the second clone wrote something"
            return
        event(f"second clone: wrote {'some' if report.applied else 'none'}")
        after = snapshot(self.clone)
        changed = {p for p in set(before) | set(after) if before.get(p) != after.get(p)}
        assert set(report.applied) == changed
        for path in report.applied:
            assert after.get(path) == shown[path], f"{path}: the second clone got other bytes than diff showed"
        assert snapshot(self.root) == self.user_tree_seen, "applying in the second clone touched the first"

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def run_is_the_model(self) -> None:
        worktree = {p: n for p, n in snapshot(Path(self.run.worktree)).items() if not self.run.is_private(p)}
        assert worktree == self.agent, "the run's worktree is not the modelled run tree"
        shown = self._shown(None, None)
        expected = {p: n for p, n in self.agent.items() if self.base.get(p) != n}
        expected.update({p: None for p in self.base if p not in self.agent})
        assert shown == expected, "diff of the whole run is not the run's tree against its base"

    @invariant()
    def user_lines_kept(self) -> None:
        for path, line in self.user_lines.items():
            full = self.root / path
            assert full.is_file() and not full.is_symlink(), f"the user's {path} is gone"
            assert line in full.read_bytes(), f"the user's edit of {path} was lost"


def _settings(examples: int, steps: int) -> settings:
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )


def test_review_model() -> None:
    ReviewModel.TestCase.settings = _settings(EXAMPLES, 12)
    ReviewModel.TestCase().runTest()


@pytest.mark.soak
def test_review_model_soak() -> None:
    ReviewModel.TestCase.settings = _settings(600, 30)
    ReviewModel.TestCase().runTest()


#: The budget in ``make test`` (measured: see the module's note in docs/apply-and-undo.md).
EXAMPLES = 30


def test_review_model_hunt() -> None:
    """A random (not derandomized) run for hunting, when ``REVIEW_MODEL_HUNT`` names a budget."""
    budget = int(os.environ.get("REVIEW_MODEL_HUNT", "0"))
    if not budget:
        pytest.skip("set REVIEW_MODEL_HUNT=N to hunt with N random examples")
    ReviewModel.TestCase.settings = settings(
        max_examples=budget, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
    )
    SEEN.clear()
    ReviewModel.TestCase().runTest()
    print(sorted(SEEN.items()))
