"""Property: a fetched run is refused in one line, or its apply writes exactly what its diff shows.

Someone who controls a shared remote may rewrite a run's record there: its events (paths, modes,
blob ids, commits and parents, run ids, epochs, labels; events dropped or repeated) and the objects
they name (a call's commit replaced by one that changes something else). Whatever they do,
``sandbox fetch`` either refuses the run in one line (and installs nothing), or installs a run whose
``apply`` writes into the user's tree exactly the files ``diff --json`` shows, nothing else
(``apply`` may still refuse in one line, writing nothing). Never a traceback.

Provenance (issue 33): the user's clone B has a run of its own on the same remote, its events signed
with B's key. Whatever the forger does with MACs (strips them, writes random ones, copies B's signed
events into the run, with their run id changed or not, and their MACs onto other events) and with
merge-back (an ``apply_finished`` naming B's clone id), no event of the fetched run reads as B's, and
``undo`` in B never writes anything but the undo of B's own apply.

Bounded and derandomized: 30 examples in the normal suite, 300 with ``--soak``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pygit2
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.cli import cli
from sandbox.run.run import Run
from sandbox.store import layout, provenance
from sandbox.store.project import Project
from tests import ledger_forge as forge
from tests.conftest import git, make_repo, tree_digest

EVIL_PATHS = [
    "../escape",
    "/etc/evil",
    ".git/hooks/post-checkout",
    ".GIT/config",
    ".git /hooks/x",
    ".git./x",
    ".g\u200cit/x",
    "GIT~1/config",
    "a//b",
    "./a",
    "Makefile",
    "README.md",
    "new.txt",
    "lnk/below",
    "",
]
MODES = [None, 0o100644, 0o100755, 0o120000, 0o160000, 0o040000, 0o100664, 0o644]
MISSING = "ab" * 20


class World:
    """A run of four calls made in clone A and pushed to a bare remote, kept as templates."""

    def __init__(self, root: Path) -> None:
        runner = CliRunner()
        self.a = make_repo(root / "a", {"README.md": "hello\n", "Makefile": "all:\n\ttrue\n", "src/app.py": "x = 1\n"})
        self.bare = root / "remote.git"
        git(root, "init", "-q", "--bare", str(self.bare))
        git(self.a, "remote", "add", "origin", str(self.bare))
        git(self.a, "push", "-q", "-u", "origin", "main")
        self.b = root / "b"
        git(root, "clone", "-q", str(self.bare), str(self.b))
        # B's own run on the same remote: events signed with B's key, for the forger to copy.
        mine = runner.invoke(cli, ["-C", str(self.b), "start", "--json"], catch_exceptions=False)
        self.mine: str = json.loads(mine.output)["run"]
        for args in (["exec", self.mine, "--", "sh", "-c", "echo mine > mine.txt"], ["push", self.mine]):
            assert runner.invoke(cli, ["-C", str(self.b), *args], catch_exceptions=False).exit_code == 0
        self.signed = _signed(self.bare, self.mine)
        self.clone_b = layout.clone_id(str(self.b / ".git"))

        def sb(*args: str) -> str:
            result = runner.invoke(cli, ["-C", str(self.a), *args], catch_exceptions=False)
            assert result.exit_code == 0, result.output
            return result.output

        self.run_id: str = json.loads(sb("start", "--label", "travel", "--json"))["run"]
        for command in (
            "echo agent >> README.md",
            "printf '#!/bin/sh\\necho hi\\n' > tool.sh && chmod +x tool.sh",
            "ln -s README.md lnk && rm Makefile",
            "echo y = 2 >> src/app.py",
        ):
            sb("exec", self.run_id, "--", "sh", "-c", command)
        sb("push", self.run_id)
        self.events = forge.events(self.bare, self.run_id)
        repo = pygit2.Repository(str(self.bare))
        self.commits = [e["commit"] for _oid, e in self.events if e.get("commit")] + [self.events[0][1]["run"]["base"]]
        self.blobs = sorted(
            {f["after_hash"] for _oid, e in self.events for f in e.get("files", []) if f.get("after_hash")}
        )
        base = repo[self.events[0][1]["run"]["base"]]
        assert isinstance(base, pygit2.Commit)
        self.tree = str(base.tree_id)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return World(tmp_path_factory.mktemp("mutation"))


Mutation = tuple[str, int, int, int]  # (what, event index, file index, choice)

WHAT = ["path", "before_mode", "after_mode", "after_hash", "before_hash", "commit", "parent_commit", "run_id"]
WHAT += ["epoch", "label", "drop", "repeat", "other_commit", "drop_file", "base", "call_id", "reparent"]
WHAT += ["copy_signed", "copy_signed_here", "random_mac", "moved_mac", "forge_apply"]


def mutations() -> st.SearchStrategy[list[Mutation]]:
    one = st.tuples(st.sampled_from(WHAT), st.integers(0, 40), st.integers(0, 5), st.integers(0, 1000))
    return st.lists(one, min_size=1, max_size=3)


def _oid_choice(w: World, bare: Path, choice: int) -> str | None:
    pool: list[str | None] = [None, MISSING, w.tree, *w.commits, *w.blobs, forge.blob(bare, b"forged\n")]
    return pool[choice % len(pool)]


def mutate(w: World, bare: Path, plan: list[Mutation]) -> None:
    n = len(w.events)
    forged_commits: dict[int, str] = {}
    for what, i, _j, choice in plan:
        index = i % n
        if what == "other_commit":
            event = w.events[index][1]
            if event.get("parent_commit"):
                path = EVIL_PATHS[choice % len(EVIL_PATHS)] or "x"
                change = None if choice % 7 == 0 else (0o100644, forge.blob(bare, b"not what the event says\n"))
                forged_commits[index] = forge.commit_with(bare, event["parent_commit"], {path: change})
        elif what == "reparent":
            event = w.events[index][1]
            if event.get("commit"):
                # The same tree on other parents: the diff may even match, the chain must not.
                repo = pygit2.Repository(str(bare))
                commit = repo[event["commit"]]
                assert isinstance(commit, pygit2.Commit)
                parents = [w.commits[choice % len(w.commits)]][: choice % 3]
                forged_commits[index] = str(
                    repo.create_commit(None, forge.SIG, forge.SIG, "forged\n", commit.tree_id, parents)
                )

    def edit(k: int, event: dict[str, Any]) -> dict[str, Any] | None:
        for what, i, j, choice in plan:
            if i % n != k:
                continue
            files = event.get("files") or []
            f = files[j % len(files)] if files else None
            if what == "drop":
                return None
            if what == "path" and f is not None:
                f["path"] = EVIL_PATHS[choice % len(EVIL_PATHS)]
            elif what in ("before_mode", "after_mode") and f is not None:
                f[what] = MODES[choice % len(MODES)]
            elif what in ("after_hash", "before_hash") and f is not None:
                f[what] = _oid_choice(w, bare, choice)
            elif what in ("commit", "parent_commit"):
                event[what] = _oid_choice(w, bare, choice)
            elif what == "run_id":
                event["run_id"] = ["0000beef", event["run_id"][:7] + "0"][choice % 2]
            elif what == "epoch":
                event["epoch"] = choice - 500
            elif what == "label" and event.get("run"):
                event["run"]["label"] = ["evil\x1b[2J", "\u202eevil", "x" * 300, ""][choice % 4]
            elif what == "base" and event.get("run"):
                event["run"]["base"] = _oid_choice(w, bare, choice)
            elif what in ("other_commit", "reparent") and k in forged_commits:
                event["commit"] = forged_commits[k]
            elif what == "drop_file" and files:
                files.pop(j % len(files))
            elif what == "call_id" and event.get("call_id"):
                event["call_id"] = ["call_other", "call_\x07bell"][choice % 2]
            elif what == "forge_apply" and not event.get("run"):
                event.update(_forged_apply(w, bare, choice))
            elif what == "repeat":
                pass  # handled below by re-appending the event
        return event

    forge.rewrite(bare, w.run_id, edit)
    repeats = [i % n for what, i, _j, _c in plan if what == "repeat"]
    if repeats:
        # An event appended again at the end (same event id): the fold must ignore it.
        again = forge.events(bare, w.run_id)
        copies = [again[min(r, len(again) - 1)][1] for r in repeats]
        _append(bare, w.run_id, [(c, None) for c in copies])
    extra: list[tuple[dict[str, Any], str | None]] = []
    for what, i, _j, choice in plan:
        body, mac = w.signed[i % len(w.signed)]
        if what == "copy_signed":  # B's signed event as it is: another run's event
            extra.append((json.loads(body), mac))
        elif what == "copy_signed_here":  # B's signed event made this run's (its MAC no longer fits)
            extra.append(({**json.loads(body), "run_id": w.run_id}, mac))
        elif what == "random_mac":
            event = dict(w.events[i % n][1])
            extra.append(({**event, "event_id": f"{choice:032x}"}, f"{choice:064x}"))
        elif what == "moved_mac":  # a signed MAC of B's on one of this run's events
            event = dict(w.events[i % n][1])
            extra.append(({**event, "event_id": f"{choice + 1:032x}"}, mac))
    if extra:
        _append(bare, w.run_id, extra)


def _signed(bare: Path, run_id: str) -> list[tuple[str, str]]:
    """The events of B's run as stored (its exact JSON) with the MAC B wrote on each."""
    repo = pygit2.Repository(str(bare))
    out = []
    for oid, _event in forge.events(bare, run_id):
        commit = repo[oid]
        assert isinstance(commit, pygit2.Commit)
        head, _, body = commit.message.partition("\n\n")
        mac = provenance.message_mac(head)
        assert mac is not None, head
        out.append((body.rstrip("\n"), mac))
    return out


def _forged_apply(w: World, bare: Path, choice: int) -> dict[str, Any]:
    """An apply in B's tree, as B's clone: README put back to forged bytes by the next undo."""
    before = forge.blob(bare, b"forged\n")
    after = forge.blob(bare, b"hello\n")
    move = {"path": "README.md", "before_mode": 0o100644, "before_oid": before, "after_mode": 0o100644}
    record = {"path": "README.md", "mode": 0o100644, "oid": after, "target_mode": 0o100644, "target_oid": after}
    data = {"paths": [record], "prior": [{"path": "README.md", "drop": True}], "changed": ["README.md"]}
    data.update({"moves": [{**move, "after_oid": after}], "target": "user"})
    return {"kind": "apply_finished", "call_id": None, "data": data, "clone": [None, w.clone_b][choice % 2]}


def _append(bare: Path, run_id: str, events: list[tuple[dict[str, Any], str | None]]) -> None:
    repo = pygit2.Repository(str(bare))
    ref = forge.ledger_ref(run_id)
    tip = str(repo.references[ref].target)
    tip_commit = repo[tip]
    assert isinstance(tip_commit, pygit2.Commit)
    for event, mac in events:
        signed = f"\n{provenance.MAC_PREFIX}{mac}" if mac else ""
        message = f"sandbox-event {event.get('kind', '')}{signed}\n\n{json.dumps(event)}\n"
        tip = str(repo.create_commit(None, forge.SIG, forge.SIG, message, tip_commit.tree_id, [tip]))
    repo.references.create(ref, tip, force=True)


def rebind(b: Path) -> None:
    """B copied for one example is still B: its key names the copy's directory (else it is a copied .git)."""
    path = Path(provenance.key_file(str(b / ".git")))
    data = json.loads(path.read_text())
    st = (b / ".git").stat()
    data.update(dev=st.st_dev, ino=st.st_ino)
    path.write_text(json.dumps(data))


def invoke(where: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["-C", str(where), *args], catch_exceptions=False)
    return result.exit_code, result.output


def one_line(out: str) -> None:
    # The line naming the run acted on (id, label, origin) comes before the refusal.
    lines = [line for line in out.strip().splitlines() if line.startswith("sandbox:") and " acting on run " not in line]
    assert len(lines) >= 1 and "Traceback" not in out, out
    assert len(lines) == 1, out


def expected_tree(b: Path, before: dict[str, str], files: list[dict[str, Any]]) -> dict[str, str]:
    repo = pygit2.Repository(str(b))
    out = dict(before)
    for f in files:
        if f["after_hash"] is None:
            out.pop(f["path"], None)
            continue
        blob = repo[f["after_hash"]]
        assert isinstance(blob, pygit2.Blob)
        mode = int(f["after_mode"], 8)
        if mode == 0o120000:
            out[f["path"]] = "link:" + blob.data.decode()
        else:
            out[f["path"]] = f"{oct(0o755 & 0o111 if mode == 0o100755 else 0)}:" + hashlib.sha256(blob.data).hexdigest()
    return out


def check(w: World, tmp: Path, plan: list[Mutation], undo: bool = True) -> str:
    """Fetch the mutated run into a fresh clone and check the property; what happened."""
    bare, b = tmp / "remote.git", tmp / "b"
    shutil.copytree(w.bare, bare, symlinks=True)
    shutil.copytree(w.b, b, symlinks=True, ignore=shutil.ignore_patterns("*.sock"))  # B's host: not copied
    rebind(b)
    mutate(w, bare, plan)
    code, out = invoke(b, "fetch", str(bare), w.run_id)
    if code != 0:
        one_line(out)
        assert f"refs/sandbox/{w.run_id}/" not in git(b, "for-each-ref", "refs/sandbox"), "a refused run left refs"
        return "fetch refused"
    project, _workdir, _ = Project.discover(str(b))
    assert Run.open(project, w.mine).events()[-1][1].own(), "B's own run no longer reads as B's"
    assert not [e.kind for _oid, e in Run.open(project, w.run_id).events() if e.own()], "a foreign event reads as B's"
    code, out = invoke(b, "diff", w.run_id, "--json")
    if code != 0:
        one_line(out)
        files: list[dict[str, Any]] | None = None
    else:
        files = json.loads(out)["files"]
    before = tree_digest(b)
    code, out = invoke(b, "apply", w.run_id)
    after = tree_digest(b)
    if code != 0:
        one_line(out)
        assert after == before, "a refused apply wrote something"
        code, out = invoke(b, "undo", w.run_id)  # nothing of B's stands: a forged apply drives no write
        assert code != 0 and tree_digest(b) == before, out
        return "apply refused"
    assert files is not None, out
    assert after == expected_tree(b, before, files)
    if not undo:
        return "applied"
    code, out = invoke(b, "undo", w.run_id)  # only B's own apply is undone: back to before it, exactly
    assert code == 0 and tree_digest(b) == before, (out, tree_digest(b), before)
    return "applied"


def run_examples(world: World, tmp_path: Path, count: int) -> dict[str, int]:
    counter = [0]
    seen: dict[str, int] = {}

    @settings(
        max_examples=count,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        database=None,
    )
    @given(plan=mutations())
    def prop(plan: list[Mutation]) -> None:
        counter[0] += 1
        tmp = tmp_path / f"ex{counter[0]}"
        tmp.mkdir()
        try:
            outcome = check(world, tmp, plan)
            seen[outcome] = seen.get(outcome, 0) + 1
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    prop()
    return seen


def test_a_mutated_remote_run_is_refused_or_applies_exactly_its_diff(world: World, tmp_path: Path) -> None:
    seen = run_examples(world, tmp_path, 30)
    # Both sides of the property are reached: refused ledgers, and mutations that leave a sound run.
    assert seen.get("fetch refused", 0) > 0 and seen.get("applied", 0) + seen.get("apply refused", 0) > 0, seen


@pytest.mark.soak
def test_a_mutated_remote_run_is_refused_or_applies_exactly_its_diff_soak(world: World, tmp_path: Path) -> None:
    run_examples(world, tmp_path, 300)


def test_the_unmutated_run_applies_exactly_its_diff(world: World, tmp_path: Path) -> None:
    """The property's positive side is reachable: an honest run fetches and applies its diff."""
    assert check(world, tmp_path, [], undo=False) == "applied"
    assert (tmp_path / "b" / "README.md").read_text() == "hello\nagent\n"


@pytest.mark.parametrize("what", ["copy_signed", "copy_signed_here", "random_mac", "moved_mac", "forge_apply"])
@pytest.mark.parametrize("choice", [0, 1])
def test_each_provenance_forgery_is_foreign(world: World, tmp_path: Path, what: str, choice: int) -> None:
    """Each MAC forgery once, by name (the property's examples need not draw each): refused at fetch, or
    installed with no event reading as B's and with B's undo writing only the undo of B's own apply."""
    assert check(world, tmp_path, [(what, 2, 0, choice)]) in ("fetch refused", "applied", "apply refused")
