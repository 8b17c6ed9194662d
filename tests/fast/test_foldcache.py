"""The fast read path (issue 14) says exactly what the full path says, or steps aside.

``list``, ``status``, ``log`` and ``path`` answer from the run's sealed fold cache with the standard
library only (:mod:`sandbox.fast.foldcache`). Each test runs the real ``sandbox`` twice: first with
no cache (the full path: pygit2, pydantic, the ledger's events; it leaves the cache sealed at the
tip), then again (the fast path), and the two outputs must be byte for byte the same. Which path
answered is read from ``python -X importtime`` (the fast one loads no pygit2). Then the cases the
fast path must refuse: a cache edited, a ledger that moved on, a ref rewound or deleted, a head
ref out of step, names that do not resolve. An agent that used git reads the same both ways.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import models
from sandbox.fast import foldcache, views
from sandbox.run.run import Run
from sandbox.runs.summary import summarize
from sandbox.store import layout
from sandbox.store.project import Project
from tests.conftest import git, sandbox_cmd, write

SCRIPT = str(Path(sys.executable).parent / "sandbox")


def invoke(cwd: Path, *args: str) -> tuple[int, str, str, bool]:
    """(exit code, stdout, stderr without importtime lines, whether pygit2 was loaded)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", SCRIPT, *args], cwd=cwd, capture_output=True, check=False, timeout=120
    )
    err_lines = proc.stderr.decode().splitlines()
    loaded = any(line.startswith("import time:") and line.rstrip().endswith("pygit2") for line in err_lines)
    err = "\n".join(line for line in err_lines if not line.startswith("import time:"))
    return proc.returncode, proc.stdout.decode(), err, loaded


def drop_caches(project: Project) -> None:
    for run_id in project.run_ids():
        cache = os.path.join(project.run_dir(run_id), "ledger-cache.json")
        if os.path.exists(cache):
            os.unlink(cache)


def busy_run(repo: Path) -> tuple[Project, Run, Run]:
    """Two runs; the first labelled, with calls of every kind: applied, undone, failed, denied, in flight."""
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir, label="alpha")
    with run.tool_call("write_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('agent')\n")
    with run.tool_call("bash", {"command": "touch new.txt\necho two lines"}) as call:
        call.write("new.txt", "new\n")
    with pytest.raises(RuntimeError), run.tool_call("bash", {"argv": ["make", "it fail"]}):
        raise RuntimeError("the tool broke\nwith a second line")
    with run.tool_call("write_file", {"path": "src/util.py"}) as call:
        call.write("src/util.py", "X = 2\n")
    assert sandbox_cmd("undo", run.run_id, "--in-run", "--force", cwd=repo).returncode == 0  # call 4, in the run
    assert sandbox_cmd("apply", run.run_id, "--call", "1", cwd=repo).returncode == 0
    denied = run.plan_call("bash", {"command": "rm -rf /"})
    run.deny(denied, "never on my machine")
    run.start_call("bash", {"command": "sleep 1000"})  # in flight: a crash left it started
    other = Run.start(project, workdir)
    with other.tool_call("write_file", {"path": "README.md"}) as call:
        call.write("README.md", "agent readme\n")
    return project, run, other


COMMANDS = [
    ["list"],
    ["list", "--json"],
    ["status", "alpha"],
    ["status", "alpha", "--json"],
    ["log", "alpha"],
    ["log", "alpha", "--json"],
    ["path", "alpha"],
    ["path", "alpha", "--json"],
]


def test_each_fast_command_says_exactly_what_the_full_path_says(repo: Path) -> None:
    project, run, other = busy_run(repo)
    for args in [*COMMANDS, ["status", other.run_id[:5]], ["log", other.run_id]]:
        drop_caches(project)
        full = invoke(repo, *args)
        fast = invoke(repo, *args)
        assert full[0] == 0, (args, full[2])
        assert full[3], f"{args}: the first command (no cache) should have taken the full path"
        assert not fast[3], f"{args}: the second command should have read the sealed cache"
        assert fast[:3] == full[:3], args
    # From inside the run's worktree, the run is implied.
    inside = Path(run.worktree) / "src"
    drop_caches(project)
    full = invoke(inside, "status")
    fast = invoke(inside, "status")
    assert full[0] == 0 and full[3] and not fast[3]
    assert fast[:3] == full[:3]


def test_rows_agree_with_the_full_path_in_process(repo: Path) -> None:
    project, run, other = busy_run(repo)
    for r in (run, other):
        r.seal_cache()
        fresh = Run.open(project, r.run_id)
        fast = foldcache.Repository(project.common_dir)
        assert fast.summary(r.run_id, disk=True) == summarize(fresh, disk=True)
        state = fast.state(r.run_id)
        assert views.entries(state) == [e.model_dump(mode="json") for e in fresh.entries()]
        assert views.in_flight(state) == [e.call_id for e in fresh.entries() if e.status.value == "started"]
    assert foldcache.FORMAT_VERSION == models.FORMAT_VERSION
    assert foldcache.CACHE_FILE == "ledger-cache.json" and foldcache.TIP_FILE == "ledger-tip"
    from sandbox.store import provenance

    assert foldcache.ADOPTED_FILE == provenance.ADOPTED_FILE


def _fast_state(project: Project, run_id: str) -> dict[str, object] | None:
    try:
        return foldcache.Repository(project.common_dir).state(run_id)
    except foldcache.Miss:
        return None


def test_the_fast_path_steps_aside_whenever_the_cache_is_not_the_ledger(repo: Path) -> None:
    project, run, _other = busy_run(repo)
    run.seal_cache()
    assert _fast_state(project, run.run_id) is not None
    cache = Path(project.run_dir(run.run_id)) / "ledger-cache.json"

    # An edited cache that still parses: the MAC fails; the full path says so and rebuilds it.
    sealed = json.loads(cache.read_text())
    sealed["state"] = sealed["state"].replace('"label":"alpha"', '"label":"forged"')
    cache.write_text(json.dumps(sealed))
    assert _fast_state(project, run.run_id) is None
    code, out, err, loaded = invoke(repo, "status", run.run_id)
    assert code == 0 and loaded and "(alpha)" in out and "did not match the ledger" in err
    assert _fast_state(project, run.run_id) is not None  # rebuilt and sealed again

    # The ledger moved on (another process appended): the cache is behind its tip.
    Run.open(project, run.run_id).note({"by": "another process"})
    assert _fast_state(project, run.run_id) is None
    assert invoke(repo, "log", run.run_id)[3]
    assert not invoke(repo, "log", run.run_id)[3]

    # The head ref out of step with the ledger: the full path repairs it.
    head_ref = layout.ref_name(run.run_id, "head")
    true_head = git(repo, "rev-parse", head_ref).strip()
    git(repo, "update-ref", head_ref, run.base)
    assert _fast_state(project, run.run_id) is None
    assert invoke(repo, "status", run.run_id)[0] == 0
    assert git(repo, "rev-parse", head_ref).strip() == true_head

    # The ledger ref rewound behind the sandbox's back: damage, reported by the full path.
    ledger_ref = layout.ref_name(run.run_id, "ledger")
    tip = git(repo, "rev-parse", ledger_ref).strip()
    git(repo, "update-ref", ledger_ref, tip + "~1")
    assert _fast_state(project, run.run_id) is None
    code, _out, err, _loaded = invoke(repo, "status", run.run_id)
    assert code != 0 and "sandbox repair" in err
    code, out, _err, _loaded = invoke(repo, "list")
    assert code == 0 and "DAMAGED" in out
    git(repo, "update-ref", ledger_ref, tip)

    # Deleted: the run vanished, and list says so rather than leaving it out.
    git(repo, "update-ref", "-d", ledger_ref)
    code, out, _err, loaded = invoke(repo, "list")
    assert code == 0 and loaded and "DAMAGED" in out and run.run_id in out


def test_an_agent_that_used_git_reads_the_same_both_ways(repo: Path) -> None:
    """An agent that committed, branched, tagged (lightweight and annotated), stashed and left HEAD
    on a branch of its own: both paths walk the run's git with the same function, so the fast path
    answers and says exactly what the full path says."""
    project, run, _other = busy_run(repo)
    worktree = Path(run.worktree)
    for i in range(3):
        write(worktree, "agent.txt", f"committed by the agent {i}\n")
        git(worktree, "add", "agent.txt")
        git(worktree, "commit", "-q", "-m", f"the agent's own commit {i}")
    git(worktree, "branch", "side", "HEAD~1")
    git(worktree, "tag", "light", "HEAD~2")
    git(worktree, "tag", "-a", "-m", "annotated", "v1.0")
    write(worktree, "agent.txt", "stashed\n")
    git(worktree, "stash", "-q")
    git(worktree, "checkout", "-q", "-b", "agent-work")
    write(worktree, "agent.txt", "on its branch\n")
    git(worktree, "commit", "-q", "-am", "on agent-work")
    for args in (["status", run.run_id], ["status", run.run_id, "--json"], ["log", run.run_id]):
        drop_caches(project)
        full = invoke(repo, *args)
        fast = invoke(repo, *args)
        assert full[0] == 0 and full[3], (args, full[2])
        assert not fast[3], f"{args}: the agent's git no longer sends the command to the full path"
        assert fast[:3] == full[:3], args
    shown = json.loads(invoke(repo, "status", run.run_id, "--json")[1])["agent_git"]
    assert shown["branch"] == "agent-work" and shown["commit_count"] == 4 and shown["stash"] == 1
    assert [c["subject"] for c in shown["commits"]][:2] == ["on agent-work", "the agent's own commit 2"]
    assert set(shown["tags"]) == {"light", "v1.0"} and {"side", "agent-work"} <= set(shown["branches"])
    code, out, _err, loaded = invoke(repo, "log", run.run_id)
    assert code == 0 and not loaded and "agent git:" in out and "4 commit(s) by the agent" in out
    assert not invoke(repo, "log", run.run_id, "--json")[3]


def test_names_that_do_not_resolve_get_the_full_paths_words(repo: Path) -> None:
    project, run, other = busy_run(repo)
    code, out, _err, _loaded = invoke(repo, "status")  # no RUN where several runs live: a line each
    assert code == 0 and "2 runs in this repository" in out and run.run_id in out and other.run_id in out
    code, _out, err, _loaded = invoke(repo, "status", "nosuchrun")
    assert code != 0 and "No run 'nosuchrun'" in err
    # A unique prefix and a label resolve on the fast path.
    assert not invoke(repo, "path", other.run_id[:6])[3]
    assert invoke(repo, "path", "alpha")[1].strip() == run.worktree
    outside = repo.parent / "not-a-repo"
    outside.mkdir()
    code, _out, err, _loaded = invoke(outside, "list")
    assert code != 0 and "not inside a git repository" in err


def test_discovery_matches_the_full_path(repo: Path, tmp_path: Path) -> None:
    project, run, _other = busy_run(repo)
    linked = tmp_path / "linked"
    git(repo, "worktree", "add", "-q", str(linked), "-b", "side")
    for where, workdir, in_run in (
        (repo, repo, None),
        (repo / "src", repo, None),
        (linked, linked, None),
        (Path(run.worktree) / "src", None, run.run_id),
    ):
        fast, fast_workdir, fast_run = foldcache.discover(str(where))
        full, full_workdir, full_run = Project.discover(str(where))
        assert fast.common_dir == full.common_dir
        assert (fast_workdir, fast_run) == (full_workdir, full_run)
        assert fast_workdir == (os.path.realpath(workdir) if workdir else None) and fast_run == in_run
    git(repo, "config", "core.worktree", str(repo))
    with pytest.raises(foldcache.Miss):
        foldcache.discover(str(repo))


def test_a_fetched_run_without_a_worktree_here_reads_the_same_both_ways(tmp_path: Path) -> None:
    from tests.runs.test_travel import two_clones

    a, b, _bare = two_clones(tmp_path)
    run_id = json.loads(sandbox_cmd("start", "--label", "travel", "--json", cwd=a).stdout)["run"]
    assert sandbox_cmd("exec", run_id, "--", "sh", "-c", "echo made > made.txt", cwd=a).returncode == 0
    assert sandbox_cmd("push", run_id, cwd=a).returncode == 0
    assert sandbox_cmd("fetch", cwd=b).returncode == 0
    project, _, _ = Project.discover(str(b))
    for args in (["list"], ["list", "--json"], ["status", run_id], ["status", run_id, "--json"], ["log", run_id]):
        drop_caches(project)
        full = invoke(b, *args)
        fast = invoke(b, *args)
        assert full[0] == 0 and full[3] and not fast[3], args
        assert fast[:3] == full[:3], args
    assert '"worktree": null' in invoke(b, "status", run_id, "--json")[1]
    # path makes the worktree here first: the full path's work, not the fast one's.
    code, out, err, loaded = invoke(b, "path", run_id)
    assert code == 0 and loaded and os.path.isdir(out.strip())
    assert not invoke(b, "path", run_id)[3]
