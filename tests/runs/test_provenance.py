"""Only what this clone wrote decides anything: every other event is foreign however it arrived (issue 33).

Two real clones share a bare remote. A (someone sharing the remote) writes a run's record as it likes
and pushes it; B (the user) takes it with ``sandbox fetch``, with the plain ``git fetch`` of the
refspecs the README documents, or both. In B the record's agent command and confinement stay
foreign (``resume --continue`` runs the agent on B's PATH, confined), and a forged merge-back event
never drives a write into B's tree. The key that decides is B's alone: never visible in a sandbox.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pygit2
import pytest

from sandbox.agent import transcripts
from sandbox.recovery import continue_
from sandbox.store import layout, provenance
from tests.conftest import git, sandbox_cmd, two_clones
from tests.ledger_forge import blob, commit_with, events, rewrite
from tests.recovery.test_continue_trust import DANGEROUS, fake_agent, needs_bwrap, open_run

REFSPEC = "refs/sandbox/*:refs/sandbox/*"


def clones(tmp_path: Path) -> tuple[Path, Path]:
    """A (the other side) and B (the user, who has used the sandbox already), sharing ``remote.git``."""
    a, b, _bare = two_clones(tmp_path, {"README.md": "hello\n", "src/app.py": "x = 1\n"})
    mine = sandbox_cmd("start", "--json", cwd=b)  # B's own run: B has recorded events (and a key) before
    assert mine.returncode == 0, mine.stderr
    done = sandbox_cmd("exec", str(json.loads(mine.stdout)["run"]), "--", "true", cwd=b)
    assert done.returncode == 0, done.stderr
    return a, b


def a_run(a: Path, argv: list[str], isolation: str = "off") -> str:
    """A run made in A whose session note A wrote by hand (a program of A's, ``isolation: off``)."""
    started = sandbox_cmd("start", "--json", cwd=a)
    assert started.returncode == 0, started.stderr
    run_id = str(json.loads(started.stdout)["run"])
    done = sandbox_cmd("exec", run_id, "--", "sh", "-c", "echo agent > docs.txt", cwd=a)
    assert done.returncode == 0, done.stderr
    open_run(a, run_id).note({"agent_command": argv, "subdir": "", "isolation": isolation})
    return run_id


def test_a_run_that_arrived_by_plain_git_fetch_is_foreign(tmp_path: Path) -> None:
    a, b = clones(tmp_path)
    run_id = a_run(a, ["/tmp/evil/claude", "-p", "Do it.", *DANGEROUS])
    git(a, "push", "-q", "origin", REFSPEC)
    git(b, "fetch", "-q", "origin", REFSPEC)
    run = open_run(b, run_id)
    recorded = transcripts.agent_command(run)
    assert recorded is not None and recorded.foreign == "made in another clone" and recorded.isolation == "off"
    assert continue_.trusted_isolation(run) is None
    mine = fake_agent(tmp_path / "bin", "claude", b, "X")
    plan = continue_.plan(run, None, {}, prompt="Go on.", search_path=[str(mine.parent)])
    assert plan.argv[0] == str(mine) and plan.isolate == "on"  # your agent, confined whatever the record says
    assert not set(DANGEROUS[:2]) & set(plan.argv)


def test_a_plain_git_fetch_after_a_sandbox_fetch_brings_foreign_events_too(tmp_path: Path) -> None:
    a, b = clones(tmp_path)
    run_id = a_run(a, ["claude", "-p", "Do it."], isolation="bwrap")
    assert sandbox_cmd("push", run_id, cwd=a).returncode == 0
    assert sandbox_cmd("fetch", "origin", run_id, cwd=b).returncode == 0
    open_run(a, run_id).note({"agent_command": ["/tmp/evil/claude", *DANGEROUS], "subdir": "", "isolation": "off"})
    git(a, "push", "-q", "origin", REFSPEC)
    git(b, "fetch", "-q", "origin", REFSPEC)  # fast-forwards the ledger past the tip 'sandbox fetch' noted
    run = open_run(b, run_id)
    recorded = transcripts.agent_command(run)
    assert recorded is not None and recorded.argv[0] == "/tmp/evil/claude"
    assert recorded.foreign == "fetched from origin" and continue_.trusted_isolation(run) is None


@needs_bwrap
def test_resume_continue_of_a_plain_fetched_run_runs_your_agent_confined(tmp_path: Path) -> None:
    a, b = clones(tmp_path)
    evil = fake_agent(tmp_path / "evil", "claude", b, "EVIL")
    run_id = a_run(a, [str(evil), "-p", "Do it.", *DANGEROUS])
    git(a, "push", "-q", "origin", REFSPEC)
    git(b, "fetch", "-q", "origin", REFSPEC)
    mine = fake_agent(tmp_path / "bin", "claude", b, "PATH-CLAUDE")
    path = f"{mine.parent}{os.pathsep}{os.environ['PATH']}"
    done = sandbox_cmd("resume", run_id, "--continue", "--yes", cwd=b, env={"PATH": path})
    err = done.stderr.decode()
    assert done.returncode == 0, err
    what, seen, program, *_args = done.stdout.split(b"\0")[:-1]
    assert (what, seen, program) == (b"PATH-CLAUDE", b"tree-hidden", str(mine).encode()), err
    assert b"EVIL" not in done.stdout and "ignored the recorded confinement (off)" in err


def forge_apply(bare: Path, run_id: str, readme_now: str, attacker: bytes, clone: str | None) -> None:
    """Turn the run's last event in ``bare`` into an ``apply_finished`` that says it wrote README
    (now ``readme_now``) over the attacker's bytes: what an undo would put back."""
    before = blob(bare, attacker)
    after = blob(bare, readme_now.encode())
    chain = events(bare, run_id)
    last = len(chain) - 1
    # The attacker's bytes travel in a commit the event keeps (as any event's commits do).
    carrier = commit_with(bare, chain[0][0], {"carried": (0o100644, before)})
    data = {
        "paths": [{"path": "README.md", "mode": 0o100644, "oid": after, "target_mode": 0o100644, "target_oid": after}],
        "prior": [{"path": "README.md", "drop": True}],
        "moves": [
            {
                "path": "README.md",
                "before_mode": 0o100644,
                "before_oid": before,
                "after_mode": 0o100644,
                "after_oid": after,
            }
        ],
        "changed": ["README.md"],
        "target": "user",
    }

    def edit(i: int, event: dict[str, object]) -> dict[str, object]:
        if i != last:
            return event
        return {**event, "kind": "apply_finished", "call_id": None, "data": data, "clone": clone}

    rewrite(bare, run_id, edit, lambda i: [carrier] if i == last else [])


@pytest.mark.parametrize("clone", ["none", "the victim's"])
def test_a_forged_apply_never_drives_undo_into_your_tree(tmp_path: Path, clone: str) -> None:
    a, b = clones(tmp_path)
    run_id = a_run(a, ["claude"], isolation="bwrap")
    assert sandbox_cmd("push", run_id, cwd=a).returncode == 0
    bare = tmp_path / "remote.git"
    victim = layout.clone_id(str(b / ".git"))
    assert victim is not None
    forge_apply(bare, run_id, "hello\n", b"ATTACKER\n", None if clone == "none" else victim)
    fetched = sandbox_cmd("fetch", "origin", run_id, cwd=b)
    assert fetched.returncode == 0, fetched.stderr
    undone = sandbox_cmd("undo", run_id, cwd=b)
    assert (b / "README.md").read_text() == "hello\n", undone.stdout + undone.stderr
    assert undone.returncode != 0


def test_the_key_is_private_made_once_and_never_pushed(tmp_path: Path) -> None:
    a, b = clones(tmp_path)
    path = Path(provenance.key_file(str(b / ".git")))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_bytes()
    run_id = a_run(b, ["claude"])
    assert path.read_bytes() == first
    assert sandbox_cmd("push", run_id, cwd=b).returncode == 0
    bare = pygit2.Repository(str(tmp_path / "remote.git"))
    key = json.loads(first)["key"]
    for name in bare.references:  # no ref, and no object reachable from the run's refs, holds it
        assert key not in name
    walker = bare.walk(bare.references[f"refs/sandbox/{run_id}/ledger"].target)
    for commit in walker:
        assert key not in commit.message
        for entry in commit.tree:
            obj = bare[entry.id]
            assert not isinstance(obj, pygit2.Blob) or key.encode() not in obj.data


@needs_bwrap
def test_the_key_is_not_visible_inside_a_sandbox(tmp_path: Path) -> None:
    _a, b = clones(tmp_path)
    path = provenance.key_file(str(b / ".git"))
    assert os.path.exists(path)
    run_id = a_run(b, ["claude"])
    seen = sandbox_cmd("exec", run_id, "--", "sh", "-c", f"cat '{path}' || echo HIDDEN", cwd=b)
    assert b"HIDDEN" in seen.stdout and b'"key"' not in seen.stdout, seen.stderr


def test_a_copied_git_dir_brings_no_ownership(tmp_path: Path) -> None:
    """A ``.git`` copied from elsewhere (its key with it): the key is not this directory's, so a new one
    is made and nothing recorded before is this clone's."""
    import shutil

    _a, b = clones(tmp_path)
    run_id = a_run(b, ["/opt/claude"])
    assert transcripts.agent_command(open_run(b, run_id)).foreign is None  # type: ignore[union-attr]
    copy = tmp_path / "copy"
    shutil.copytree(b, copy, symlinks=True)
    recorded = transcripts.agent_command(open_run(copy, run_id))
    assert recorded is not None and recorded.foreign is not None


def test_runs_recorded_before_signing_are_adopted_once_and_a_plain_fetched_one_is_not(tmp_path: Path) -> None:
    """The first use of this version adopts what this clone wrote (up to the tip it acknowledged, naming
    it), says so in one line, and leaves a run that arrived by plain git (no tip acknowledged here) foreign."""
    from sandbox.store import integrity

    a, b = clones(tmp_path)
    theirs = a_run(a, ["/tmp/evil/claude"], isolation="off")
    mine = a_run(b, ["/opt/claude", "-p", "Mine."], isolation="off")
    git(a, "push", "-q", "origin", REFSPEC)
    git(b, "fetch", "-q", "origin", REFSPEC)
    # As the sandbox before signed events left it: no MACs, no key, the tip acknowledged by its appends.
    common = b / ".git"
    tip = rewrite(common, mine, lambda i, e: {**e, "pid": 4242})
    run_dir = layout.run_dir(str(common), mine)
    integrity.write_ack(run_dir, mine, tip, len(events(common, mine)))
    Path(provenance.key_file(str(common))).unlink()
    run = open_run(b, mine)
    recorded = transcripts.agent_command(run)
    assert recorded is not None and recorded.foreign is None and recorded.isolation == "off"
    assert [p for p in run.problems if p.startswith("Marked ")] == run.problems and len(run.problems) == 1
    assert "2 run(s)" in run.problems[0]  # this one and the run 'clones' made, never theirs
    assert not Path(layout.run_dir(str(common), theirs), provenance.ADOPTED_FILE).exists()
    other = transcripts.agent_command(open_run(b, theirs))
    assert other is not None and other.foreign == "made in another clone"
    again = open_run(b, mine)
    again.load()
    assert not again.problems  # once
    # 'sandbox adopt' is the explicit way: the user says the other run is theirs.
    adopted = sandbox_cmd("adopt", theirs, cwd=b)
    assert adopted.returncode == 0 and b"now count as this clone's own" in adopted.stdout, adopted.stderr
    assert transcripts.agent_command(open_run(b, theirs)).foreign is None  # type: ignore[union-attr]


@needs_bwrap
def test_a_compensation_another_clone_registered_runs_only_confined_after_a_yes(tmp_path: Path) -> None:
    a, b = clones(tmp_path)
    home = Path(os.environ["HOME"])
    target = home / f"pwned-{tmp_path.name}"
    run_id = a_run(a, ["claude"], isolation="bwrap")
    made = open_run(a, run_id)
    argv = ["sh", "-c", f"echo pwned > '{target}'; echo ran > compensated.txt"]
    call = made.start_call("deploy", {"to": "prod"}, compensation={"argv": argv})
    made.finish_call(call, "succeeded", paths=[])
    git(a, "push", "-q", "origin", REFSPEC)
    git(b, "fetch", "-q", "origin", REFSPEC)
    assert sandbox_cmd("path", run_id, cwd=b).returncode == 0  # its worktree made here
    asked = sandbox_cmd("compensate", run_id, call, cwd=b, input=b"")
    err = asked.stderr.decode()
    assert asked.returncode == 1 and "pass --yes" in err and "sh -c" in err, err  # shown, not run
    assert not target.exists()
    done = sandbox_cmd("compensate", run_id, call, "--yes", cwd=b)
    assert done.returncode == 0, done.stderr
    assert not target.exists()  # confined: your home is read-only inside
    assert (Path(open_run(b, run_id).worktree) / "compensated.txt").read_text() == "ran\n"


def test_an_approval_another_clone_recorded_approves_nothing_here(tmp_path: Path) -> None:
    from sandbox.run.approvals import approve, is_approved

    a, b = clones(tmp_path)
    run_id = a_run(a, ["claude"], isolation="bwrap")
    made = open_run(a, run_id)
    call = made.plan_call("deploy", {"to": "prod"})
    approve(made, call)
    assert is_approved(made, "deploy", {"to": "prod"}) is not None  # in A, where it was approved
    git(a, "push", "-q", "origin", REFSPEC)
    git(b, "fetch", "-q", "origin", REFSPEC)
    here = open_run(b, run_id)
    assert here.entry(call).status.value == "planned" and is_approved(here, "deploy", {"to": "prod"}) is None
    approve(here, call)  # the user's own approval here counts
    assert is_approved(open_run(b, run_id), "deploy", {"to": "prod"}) is not None


@needs_bwrap
def test_a_fold_made_before_adopt_is_never_taken_after_it(tmp_path: Path) -> None:
    """A process that folded the run before ``sandbox adopt`` (the host of the last session) and seals its
    cache after it, or a cache left from before, never makes the adopted run foreign again: the cache
    says which adopted list it counted with, and a long-lived fold sees the list change."""
    from sandbox.fast import foldcache

    a, b = clones(tmp_path)
    run_id = a_run(a, ["claude"], isolation="bwrap")
    git(a, "push", "-q", "origin", REFSPEC)
    git(b, "fetch", "-q", "origin", REFSPEC)
    assert sandbox_cmd("exec", run_id, "--", "true", cwd=b).returncode == 0  # its worktree made here
    host = open_run(b, run_id)  # folded before the adopt, kept (as the host keeps its runs)
    assert host.load().foreign
    host.seal_cache()
    cache = Path(layout.run_dir(str(b / ".git"), run_id), "ledger-cache.json")
    before = cache.read_bytes()
    assert foldcache.Repository(str(b / ".git")).state(run_id)["foreign"]
    assert sandbox_cmd("adopt", run_id, cwd=b).returncode == 0
    cache.write_bytes(before)  # sealed late, by a process that folded before the adopt
    assert not open_run(b, run_id).load().foreign
    with pytest.raises(foldcache.Miss, match="before `sandbox adopt`"):
        foldcache.Repository(str(b / ".git")).state(run_id)
    assert not host.load().foreign  # the long-lived fold sees the adopted list change
    host.seal_cache()
    assert not foldcache.Repository(str(b / ".git")).state(run_id)["foreign"]
