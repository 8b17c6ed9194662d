"""Escape attempts from inside a run: under OS confinement each fails or stays inside the run.

A real process inside a real run (``sandbox exec``, and an agent under ``sandbox run`` whose Bash
tool call is recorded through its hooks) tries every way out we know of: writing the user's tree by
absolute path, through ``..``, through ``/proc/self/cwd`` and ``/proc/<ppid>/cwd``, through symlinks
and hard links planted in the worktree; ``~/.ssh``; another repository; the user's ``.git/config``,
``hooks/``, refs, stash and worktree list through ``GIT_DIR``/``GIT_COMMON_DIR``/``git -C``; the
run's own ledger refs and files; remounting read-write; a sysctl. Before and after, the user's
files, index, refs, stash, config, hooks and worktree list, the other repositories and ``~/.ssh``
are compared byte for byte.

Under ``--isolate off`` the same attempts run and the test pins down which escapes remain there
(:data:`ESCAPE_WITHOUT_ISOLATION`): that is the documented price of opting out.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import git, make_repo, tree_digest, user_state

from sandbox.agent import agenthome, host, wire

from .helpers import open_run, sb

FIXTURES_AGENT = Path(__file__).resolve().parents[2] / "fixtures" / "agents" / "fake_claude.py"

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (make venv installs it)"
)

#: The attacker: every attempt is reported as "done" or "refused: <why>", on one JSON line.
ATTACK = r"""
import json, os, subprocess, sys
T = json.loads(sys.argv[1])
out = {}

def attempt(name, fn):
    try:
        fn()
        out[name] = "done"
    except OSError as exc:
        out[name] = "refused: " + (exc.strerror or str(exc))
    except subprocess.CalledProcessError as exc:
        out[name] = "refused: exit %d: %s" % (exc.returncode, exc.stderr.decode(errors="replace").strip()[:80])

def write(path, data="escaped\n", mode="a"):
    with open(path, mode) as fh:
        fh.write(data)

def git(*args, env=None, cwd=None):
    subprocess.run(["git", *args], check=True, capture_output=True, cwd=cwd, env={**os.environ, **(env or {})})

def sh(*args):
    subprocess.run(list(args), check=True, capture_output=True)

user, wt = T["user"], os.getcwd()
rel_readme = os.path.relpath(os.path.join(user, "README.md"), wt)
attempt("user file by absolute path", lambda: write(os.path.join(user, "README.md")))
attempt("new file in the user's tree", lambda: write(os.path.join(user, "evil.txt")))
attempt("user file through ..", lambda: write(os.path.join(wt, rel_readme)))
attempt("user file through /proc/self/cwd", lambda: write("/proc/self/cwd/" + rel_readme))
def ancestor_cwd():  # the nearest ancestor working somewhere else than the worktree, else the parent
    pid, here = os.getppid(), os.path.realpath(wt)
    while pid > 1:
        try:
            if os.readlink("/proc/%d/cwd" % pid) != here:
                break
            with open("/proc/%d/stat" % pid) as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            break
    write("/proc/%d/cwd/escaped-via-ppid.txt" % max(pid, 1))
attempt("/proc/<ppid>/cwd", ancestor_cwd)
attempt("~/.ssh", lambda: write(os.path.join(T["home"], ".ssh", "authorized_keys"), "ssh-ed25519 AAAA evil\n"))
attempt("another repository", lambda: write(os.path.join(T["other"], "README.md")))
attempt("another repository outside /tmp", lambda: write(os.path.join(T["other_visible"], "README.md")))
attempt(".git/config", lambda: write(os.path.join(T["gitdir"], "config"), "[core]\n\thooksPath = /tmp/evil\n"))
hook = os.path.join(T["gitdir"], "hooks", "pre-commit")
attempt(".git/hooks/pre-commit", lambda: write(hook, "#!/bin/sh\necho pwned\n", "w"))
GD = {"GIT_DIR": T["gitdir"]}
attempt("GIT_DIR: new branch", lambda: git("update-ref", "refs/heads/evil", "HEAD", env=GD))
attempt("GIT_DIR: core.hooksPath", lambda: git("config", "core.hooksPath", "/tmp/evil", env=GD))
attempt("GIT_COMMON_DIR: tag", lambda: git("tag", "evil-tag", env={"GIT_COMMON_DIR": T["gitdir"]}))
attempt("git -C user stash", lambda: git("-C", user, "stash"))
attempt("git -C user worktree add", lambda: git("-C", user, "worktree", "add", "--detach", user + "/wt-evil"))
forged = "refs/sandbox/%s/forged" % T["run"]
attempt("forge the run's ledger refs", lambda: git("update-ref", forged, "HEAD", env=GD))
attempt("the run's own files", lambda: write(os.path.join(T["run_dir"], "evil")))
attempt("another run's directory (its hook socket)", lambda: os.listdir(T["other_run_dir"]))
def planted_symlink():
    os.symlink(os.path.join(user, "README.md"), "planted-link")
    write("planted-link")
attempt("symlink planted in the worktree", planted_symlink)
def planted_dir_symlink():
    os.symlink(user, "planted-dir")
    write("planted-dir/evil-through-dir.txt")
attempt("symlinked directory planted in the worktree", planted_dir_symlink)
def hard_link():
    os.link(os.path.join(user, "README.md"), "hard-link")
    write("hard-link")
attempt("hard link to a user file", hard_link)
attempt("rename a user file into the worktree", lambda: os.rename(os.path.join(user, "notes.txt"), "stolen.txt"))
if os.geteuid() == 0:
    attempt("remount the user's tree read-write", lambda: sh("mount", "-o", "remount,bind,rw", user))
def sysctl():  # writes back the value it has: harmless wherever it succeeds
    with open("/proc/sys/kernel/core_uses_pid") as fh:
        value = fh.read()
    write("/proc/sys/kernel/core_uses_pid", value, "w")
attempt("sysctl", sysctl)
def sandbox_git_runs_agent_config():
    # Make the sandbox's own git (outside, when it scans the worktree) run a command of ours.
    marker = T["marker"]
    evil = "touch %s; false" % marker
    with open(".gitattributes", "a") as fh:
        fh.write("* filter=evil\n")
    done = []
    for key, value in (("core.fsmonitor", evil), ("filter.evil.clean", "touch %s; cat" % marker)):
        try:
            git("config", key, value)  # the run's own config where it has one
            done.append(key)
        except subprocess.CalledProcessError:
            pass
    gitdir = open(".git").read().split(":", 1)[1].strip() if os.path.isfile(".git") else ".git"
    if os.path.exists(os.path.join(gitdir, "commondir")):  # a linked worktree: redirect its common dir
        common = os.path.realpath(os.path.join(gitdir, open(os.path.join(gitdir, "commondir")).read().strip()))
        fake = os.path.join(wt, ".fake-common")
        os.makedirs(os.path.join(fake, "objects", "info"), exist_ok=True)
        write(os.path.join(fake, "objects", "info", "alternates"), common + "/objects\n", "w")
        subprocess.run(["cp", "-r", common + "/refs", common + "/HEAD", fake], check=True)
        if os.path.exists(common + "/packed-refs"):
            subprocess.run(["cp", common + "/packed-refs", fake], check=True)
        cfg = '[core]\n\tbare = false\n\tfsmonitor = "%s"\n[filter "evil"]\n\tclean = "touch %s; cat"\n'
        write(os.path.join(fake, "config"), cfg % (evil, marker), "w")
        write(os.path.join(gitdir, "commondir"), fake + "\n", "w")
        done.append("commondir")
    if not done:
        raise OSError(1, "no git config of the run could be written")
attempt("the sandbox's own git runs the agent's config", sandbox_git_runs_agent_config)
import socket
def host_ask(msg):  # the repository's host, as any process of the user could ask it
    path = T["host_sock"]
    if len(path) >= 100:
        path = "/proc/self/fd/%d/%s" % (os.open(os.path.dirname(path), os.O_PATH), os.path.basename(path))
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect(path)
    s.sendall((json.dumps(dict(v=1, **msg)) + "\n").encode())
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    reply = json.loads(data)
    if not reply.get("ok"):
        raise OSError(13, reply.get("error") or reply.get("message") or "refused")
def other_token():
    with open(os.path.join(T["other_run_dir"], "host.token")) as fh:
        return fh.read().strip()
def token_or_guess():
    try:
        return other_token()
    except OSError:
        return "0" * 48
attempt("host: another run's token", other_token)
EVIL = {"event": "start", "cwd": T["other_worktree"], "tool": "Evil", "call_id": "call_evil", "kind": "read"}
def on_other(op, **fields):
    return lambda: host_ask({"op": op, "run": T["other_run"], "token": token_or_guess(), **fields})
attempt("host: record into another run", on_other("hook", event=EVIL))
attempt("host: another run's watcher", on_other("end", call="x"))
attempt("host: list every run", lambda: host_ask({"op": "status"}))
attempt("host: forget another run", lambda: host_ask({"op": "forget", "run": T["other_run"]}))
attempt("host: stop the host", lambda: host_ask({"op": "stop"}))
out["visible processes"] = len([p for p in os.listdir("/proc") if p.isdigit()])
print("ATTACK " + json.dumps(out), flush=True)
"""

#: What succeeds without OS confinement (``--isolate off``): the attacks that reach the user.
ESCAPE_WITHOUT_ISOLATION = {
    "user file by absolute path",
    "new file in the user's tree",
    "user file through ..",
    "user file through /proc/self/cwd",
    "/proc/<ppid>/cwd",
    "~/.ssh",
    "another repository",
    "another repository outside /tmp",
    ".git/config",
    ".git/hooks/pre-commit",
    "GIT_DIR: new branch",
    "GIT_DIR: core.hooksPath",
    "git -C user stash",
    "git -C user worktree add",
    "forge the run's ledger refs",
    "the run's own files",
    "symlink planted in the worktree",
    "symlinked directory planted in the worktree",
    "hard link to a user file",
    "rename a user file into the worktree",
    # The repository's host trusts the user's own processes; a confined one it does not.
    "host: another run's token",
    "host: record into another run",
    "host: another run's watcher",
    "host: list every run",
    "host: forget another run",
    "host: stop the host",
}
#: ``sandbox run`` without isolation still has its reference-transaction guard (sandbox.agent.launch) on
#: the agent's git: these ref writes may be refused there even unconfined.
REF_GUARDED = {"GIT_DIR: new branch", "git -C user stash", "forge the run's ledger refs"}
#: ``sandbox exec``'s command runs inside its call: the host refuses hook payloads from it even unconfined
#: (issue 33); a ``sandbox run`` session's window is no call.
INSIDE_A_CALL = {"host: record into another run"}
#: Confined, these "succeed" but stay inside the run (checked below).
#: (git takes GIT_COMMON_DIR as no reason to leave the run's own repository: the tag lands there.)
STAYS_INSIDE = {"/proc/<ppid>/cwd", "the sandbox's own git runs the agent's config", "GIT_COMMON_DIR: tag"}


@pytest.fixture
def world(tmp_path: Path, user_repo: Path) -> Iterator[dict[str, Any]]:
    """The user's repository with a run, another repository, ~/.ssh and one repository outside /tmp."""
    home = Path(os.environ["HOME"])
    ssh = home / ".ssh"
    ssh.mkdir(exist_ok=True)
    (ssh / "authorized_keys").write_text("ssh-ed25519 AAAA user\n")
    other = make_repo(tmp_path / "other", {"README.md": "other\n"})
    try:
        visible_root = Path(tempfile.mkdtemp(prefix="sandbox-escapes-", dir="/var/tmp"))
    except OSError:
        pytest.skip("no writable /var/tmp for a repository outside /tmp")
    try:
        other_visible = make_repo(visible_root / "repo", {"README.md": "visible\n"})
        started = sb("start", "--json", cwd=user_repo)
        assert started.returncode == 0, started.stderr
        run_id = json.loads(started.stdout)["run"]
        run = open_run(user_repo, run_id)
        second = sb("start", "--json", cwd=user_repo)
        assert second.returncode == 0, second.stderr
        other_run = open_run(user_repo, json.loads(second.stdout)["run"])
        # The repository's host serves both runs (the other one is watched) during every attack.
        served = sb("serve", "--idle-exit", "600", cwd=user_repo)
        assert served.returncode == 0, served.stderr
        ping_other = {
            "event": "start",
            "cwd": other_run.worktree,
            "tool": "Read",
            "call_id": "call_ping",
            "kind": "read",
        }
        assert sb("hook", "generic", cwd=other_run.worktree, input=json.dumps(ping_other).encode()).returncode == 0
        yield {
            "user": user_repo,
            "home": home,
            "other": other,
            "other_visible": other_visible,
            "run": run_id,
            "worktree": Path(run.worktree),
            "run_dir": Path(run.dir),
            "marker": tmp_path / "PWNED",
            "other_run_dir": Path(other_run.dir),
            "other_run": other_run.run_id,
            "other_worktree": other_run.worktree,
            "common": str(user_repo / ".git"),
        }
    finally:
        host.stop_host(str(user_repo / ".git"))
        shutil.rmtree(visible_root, ignore_errors=True)
        (ssh / "authorized_keys").unlink(missing_ok=True)


def targets(w: dict[str, Any]) -> str:
    return json.dumps(
        {
            "user": str(w["user"]),
            "gitdir": str(w["user"] / ".git"),
            "home": str(w["home"]),
            "other": str(w["other"]),
            "other_visible": str(w["other_visible"]),
            "run": w["run"],
            "run_dir": str(w["run_dir"]),
            "marker": str(w["marker"]),
            "other_run_dir": str(w["other_run_dir"]),
            "other_run": w["other_run"],
            "other_worktree": w["other_worktree"],
            "host_sock": wire.socket_path(w["common"]),
        }
    )


def snapshot(w: dict[str, Any]) -> dict[str, Any]:
    """Everything of the user's that an escape could change, byte for byte."""
    user, gitdir = w["user"], w["user"] / ".git"
    run_prefix = f"refs/sandbox/{w['run']}/"
    refs = git(user, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    hooks = {p.name: p.read_bytes() for p in sorted((gitdir / "hooks").iterdir())}
    return {
        "files": tree_digest(user),
        "state": user_state(user),
        # The run's own refs move as calls are recorded; their names may not change.
        "refs": [r if not r.startswith(run_prefix) else r.split()[0] for r in refs],
        "config": (gitdir / "config").read_bytes(),
        "hooks": hooks,
        "worktrees": git(user, "worktree", "list", "--porcelain"),
        "other": tree_digest(w["other"]),
        "other config": (w["other"] / ".git" / "config").read_bytes(),
        "other outside /tmp": tree_digest(w["other_visible"]),
        "ssh": {p.name: p.read_bytes() for p in sorted((w["home"] / ".ssh").iterdir())},
        "run dir has no evil": not (w["run_dir"] / "evil").exists(),
    }


def results_of(stdout: bytes) -> dict[str, Any]:
    for line in stdout.decode(errors="replace").splitlines():
        if line.startswith("ATTACK "):
            parsed: dict[str, Any] = json.loads(line[len("ATTACK ") :])
            return parsed
    raise AssertionError(f"the attacker printed no result: {stdout!r}")


def check_confined(w: dict[str, Any], before: dict[str, Any], results: dict[str, Any]) -> None:
    escaped = sorted(
        name
        for name, outcome in results.items()
        if name != "visible processes" and outcome == "done" and name not in STAYS_INSIDE
    )
    assert escaped == [], f"escapes under confinement: {escaped}"
    assert snapshot(w) == before
    # Planting git config in the run is allowed; the sandbox's own git (outside) must not run it.
    assert not w["marker"].exists(), "the sandbox ran a command from the agent's git config"
    if results["/proc/<ppid>/cwd"] == "done":  # then it reached a process of the sandbox's own
        assert (w["worktree"] / "escaped-via-ppid.txt").exists()
    assert results["visible processes"] <= 8, results  # its own PID namespace: the attacker and its parents
    # The host outlived every attempt, still serves the other run, and recorded nothing into it.
    status = wire.status(w["common"])
    assert status is not None and w["other_run"] in status["runs"], status
    assert "call_evil" not in open_run(w["user"], w["other_run"]).state().calls
    for op in ("list every run", "forget another run", "stop the host"):
        assert results[f"host: {op}"] == "refused: Control operations are refused to confined processes.", results
    for op in ("record into another run", "another run's watcher"):
        assert "does not carry its token" in results[f"host: {op}"], results


def attack_by_exec(w: dict[str, Any], *flags: str) -> dict[str, Any]:
    proc = sb("exec", w["run"], *flags, "--", sys.executable, "-c", ATTACK, targets(w), cwd=w["user"])
    assert proc.returncode == 0, proc.stderr
    return results_of(proc.stdout)


def bash_by_agent(
    w: dict[str, Any], cwd: str, command: str, call_id: str, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``sandbox run`` of a fake Claude Code making one Bash call of ``command``; its hooks record the call."""
    pre = {
        "hook_event_name": "PreToolUse",
        "session_id": "s1",
        "cwd": cwd,
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_use_id": call_id,
    }
    post = {**pre, "hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}}
    steps = [{"pre": pre, "effect": {"sh": command}, "post": post}]
    argv = ["run", w["run"], *flags, "--hooks", "claude-code", "--", sys.executable, str(FIXTURES_AGENT), "-"]
    proc = sb(*argv, cwd=w["user"], input=json.dumps(steps).encode(), env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def attack_by_agent(w: dict[str, Any], *flags: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A fake Claude Code whose Bash tool call runs the attacker; its hooks record the call."""
    import shlex

    command = shlex.join([sys.executable, "-c", ATTACK, targets(w)])
    proc = bash_by_agent(w, str(w["worktree"]), command, "toolu_escape", *flags)
    log = json.loads(sb("log", w["run"], "--json", cwd=w["user"]).stdout)
    return results_of(proc.stdout), log


def test_exec_confined(world: dict[str, Any]) -> None:
    before = snapshot(world)
    results = attack_by_exec(world)
    check_confined(world, before, results)
    # The sandbox's own later work on the run's files (undo in the sandbox cleans them as git
    # would) must not run the agent's filter driver either.
    sb("undo", world["run"], cwd=world["user"])
    sb("diff", world["run"], cwd=world["user"])
    assert not world["marker"].exists(), "the sandbox ran a command from the agent's git config"


def test_run_confined_and_its_hooks_record_across_the_boundary(world: dict[str, Any]) -> None:
    before = snapshot(world)
    results, log = attack_by_agent(world)
    check_confined(world, before, results)
    bash = [e for e in log if e["call_id"] == "toolu_escape"]
    assert len(bash) == 1 and bash[0]["status"] == "succeeded", log  # recorded by the host, outside
    assert "planted-link" in [f["path"] for f in bash[0]["files"]]
    notes = [n for n in open_run(world["user"], world["run"]).state().data.note]
    # Other notes (processes the agent left running, stopped at its end) may come too.
    # The network by allowlist, sandbox run's default: the started agent's model endpoints.
    allow = "bwrap, network allow (api.anthropic.com, console.anthropic.com)"
    assert [n["isolation"] for n in notes if "isolation" in n] == [allow]


def test_run_confined_without_network(world: dict[str, Any]) -> None:
    before = snapshot(world)
    results, _log = attack_by_agent(world, "--network", "off")
    check_confined(world, before, results)


@pytest.mark.parametrize("command", ["exec", "run"])
def test_without_isolation_the_escapes_remain(world: dict[str, Any], command: str) -> None:
    """``--isolate off`` is today's behaviour: this pins down what it does not prevent."""
    before = snapshot(world)
    if command == "exec":
        results = attack_by_exec(world, "--isolate", "off")
    else:
        results, _log = attack_by_agent(world, "--isolate", "off")
        notes = open_run(world["user"], world["run"]).state().data.note
        # the run's record says so (other notes, e.g. processes stopped at the end, may come too)
        assert [n["isolation"] for n in notes if "isolation" in n] == ["off"]
    escaped = {name for name, outcome in results.items() if outcome == "done"}
    expected = ESCAPE_WITHOUT_ISOLATION - (REF_GUARDED if command == "run" else INSIDE_A_CALL)
    assert expected <= escaped, sorted(expected - escaped)
    after = snapshot(world)
    changed = sorted(k for k in before if before[k] != after[k])
    assert {"files", "config", "hooks", "worktrees", "other", "ssh"} <= set(changed), changed


# -- least privilege by default: what a confined process may read, inherit, reach and consume -------

#: The reader: each attempt is "done" (it got data, or connected), "empty" (a masked file) or "refused: ...".
READ_ATTACK = r"""
import json, os, socket, sys
T = json.loads(sys.argv[1])
out = {}
def attempt(name, fn):
    try:
        got = fn()
        out[name] = "empty" if got == b"" else "done"
    except OSError as exc:
        out[name] = "refused: " + (exc.strerror or str(exc))
def read(path):
    with open(path, "rb") as fh:
        return fh.read()
for name, path in T["files"].items():
    attempt("read " + name, lambda path=path: read(path))
def write(path):
    with open(path, "ab") as fh:
        fh.write(b"planted")
for name, path in T.get("writes", {}).items():
    attempt("write " + name, lambda path=path: write(path))
for var in T["env"]:
    out["env " + var] = "done" if var in os.environ else "refused: not inherited"
def connect(address):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    if len(address) >= 100:
        address = "/proc/self/fd/%d/%s" % (os.open(os.path.dirname(address), os.O_PATH), os.path.basename(address))
    s.connect(address.replace("@", "\0", 1) if address.startswith("@") else address)
    s.close()
for name, address in T["sockets"].items():
    attempt("connect " + name, lambda address=address: connect(address))
print("READS " + json.dumps(out), flush=True)
"""

#: Variables a user's shell often holds that no confined process may inherit.
LEAKY_ENV = {
    "GITHUB_TOKEN": "ghp_planted",
    "AWS_SECRET_ACCESS_KEY": "planted",
    "SSH_AUTH_SOCK": "/tmp/ssh-planted/agent.1",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/0/bus",
    "DISPLAY": ":0",
}


@pytest.fixture
def secrets_world(tmp_path: Path, user_repo: Path) -> Iterator[dict[str, Any]]:
    """Planted secrets under the (temporary) home, the user's ignored ``.env``, listening path and abstract
    sockets, and another repository with a run whose host is serving."""
    import secrets as pysecrets
    import socket

    home = Path(os.environ["HOME"])
    planted = {
        "~/.ssh/id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY-----\nplanted\n",
        "~/.aws/credentials": "[default]\naws_secret_access_key = planted\n",
        "~/.netrc": "machine github.com login u password planted\n",
        "~/.config/gh/hosts.yml": "github.com:\n  oauth_token: planted\n",
        "~/.bash_history": "export GITHUB_TOKEN=planted\n",
    }
    for rel, text in planted.items():
        path = home / rel[2:]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (user_repo / ".env").write_text("API_KEY=planted\n")  # ignored by the user's .gitignore below
    git(user_repo, "remote", "add", "origin", "https://user:ghp_planted@github.com/u/r.git")
    with open(user_repo / ".gitignore", "a") as fh:
        fh.write(".env\n")
    other = make_repo(tmp_path / "other-repo", {"README.md": "other\n"})
    started = sb("start", "--json", cwd=other)
    assert started.returncode == 0, started.stderr
    other_run = json.loads(started.stdout)["run"]
    assert sb("serve", "--idle-exit", "600", cwd=other).returncode == 0
    wire.run_token(str(other / ".git" / "sandbox" / "runs" / other_run))
    listeners = []
    sockets: dict[str, str] = {}

    def listen(name: str, address: str) -> None:
        s = socket.socket(socket.AF_UNIX)
        s.bind(address.replace("@", "\0", 1) if address.startswith("@") else address)
        s.listen(8)
        listeners.append(s)
        sockets[name] = address

    listen("~/.ssh/agent.sock", str(home / ".ssh" / "agent.sock"))
    listen("abstract socket", "@sandbox-escapes-" + pysecrets.token_hex(4))
    run_sock = Path("/run") / f"sandbox-escapes-{pysecrets.token_hex(4)}.sock"
    with contextlib.suppress(OSError):
        listen("/run/*.sock", str(run_sock))
    sockets["another repository's host.sock"] = wire.socket_path(str(other / ".git"))
    # Another run of the same repository, with a credential in its agent home (copied from the user's).
    started = sb("start", "--json", cwd=user_repo)
    assert started.returncode == 0, started.stderr
    sibling = user_repo / ".git" / "sandbox" / "runs" / json.loads(started.stdout)["run"]
    sibling_cred = Path(agenthome.make_home(str(sibling), "claude")) / ".credentials.json"
    sibling_cred.write_text('{"claudeAiOauth": {"accessToken": "planted"}}\n')
    started = sb("start", "--json", cwd=user_repo)
    assert started.returncode == 0, started.stderr
    state = user_repo / ".git" / "sandbox"
    try:
        yield {
            "user": user_repo,
            "home": home,
            "run": json.loads(started.stdout)["run"],
            "files": {
                **{rel: str(home / rel[2:]) for rel in planted},
                "the user's ignored .env": str(user_repo / ".env"),
                "the user's README in their tree": str(user_repo / "README.md"),
                "the user's .git/config (a remote URL with a token)": str(user_repo / ".git" / "config"),
                "another repository's run token": str(other / ".git" / "sandbox" / "runs" / other_run / "host.token"),
                "another run's agent home (its credentials)": str(sibling_cred),
            },
            # What the sandbox binds back read-only or below a hidden directory: never writable.
            "writes": {
                "the empty file bound over masked files": str(state / "empty"),
                "the host's directory": str(state / "host" / "planted"),
                "this run's token": str(state / "runs" / json.loads(started.stdout)["run"] / "host.token"),
                "another run's agent home": str(sibling_cred),
            },
            "env": sorted(LEAKY_ENV),
            "sockets": sockets,
        }
    finally:
        host.stop_host(str(other / ".git"))
        host.stop_host(str(user_repo / ".git"))
        for s in listeners:
            s.close()
        run_sock.unlink(missing_ok=True)
        for rel in planted:
            (home / rel[2:]).unlink(missing_ok=True)
        (home / ".ssh" / "agent.sock").unlink(missing_ok=True)


def reads_of(stdout: bytes) -> dict[str, str]:
    for line in stdout.decode(errors="replace").splitlines():
        if line.startswith("READS "):
            parsed: dict[str, str] = json.loads(line[len("READS ") :])
            return parsed
    raise AssertionError(f"the reader printed no result: {stdout!r}")


def read_targets(w: dict[str, Any]) -> str:
    return json.dumps({"files": w["files"], "writes": w["writes"], "env": w["env"], "sockets": w["sockets"]})


def check_nothing_leaked(w: dict[str, Any], reads: dict[str, str]) -> None:
    expected = {f"read {name}" for name in w["files"]} | {f"write {name}" for name in w["writes"]}
    assert set(reads) >= expected | {f"env {v}" for v in LEAKY_ENV}, reads
    leaked = sorted(name for name, outcome in reads.items() if outcome == "done")
    assert leaked == [], f"read, inherited or reached from inside: {leaked} ({reads})"


@pytest.mark.parametrize("network", ["off", "on"])
def test_exec_reads_no_secret_inherits_no_token_and_reaches_no_outside_socket(
    secrets_world: dict[str, Any], network: str
) -> None:
    w = secrets_world
    proc = sb(
        "exec",
        w["run"],
        "--network",
        network,
        "--",
        sys.executable,
        "-c",
        READ_ATTACK,
        read_targets(w),
        cwd=w["user"],
        env=LEAKY_ENV,
    )
    assert proc.returncode == 0, proc.stderr
    check_nothing_leaked(w, reads_of(proc.stdout))


def test_an_agent_under_run_reads_no_secret_inherits_no_token_and_reaches_no_outside_socket(
    secrets_world: dict[str, Any],
) -> None:
    import shlex

    w = secrets_world
    worktree = open_run(w["user"], w["run"]).worktree
    command = shlex.join([sys.executable, "-c", READ_ATTACK, read_targets(w)])
    proc = bash_by_agent(w, worktree, command, "toolu_reads", env=LEAKY_ENV)
    check_nothing_leaked(w, reads_of(proc.stdout))
    log = json.loads(sb("log", w["run"], "--json", cwd=w["user"]).stdout)
    assert [e["status"] for e in log if e["call_id"] == "toolu_reads"] == ["succeeded"], log  # hooks still record


LIMITS_ATTACK = r"""
import json, os, signal, time
out = {}
children = []
try:
    for _ in range(400):  # a fork bomb, bounded here so that a failing test cannot take the machine
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    out["forks"] = "all %d" % len(children)
except OSError as exc:
    out["forks"] = "stopped after %d: %s" % (len(children), exc.strerror)
for pid in children:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
try:
    with open("/tmp/big", "wb") as fh:
        for _ in range(32):
            fh.write(b"x" * (1 << 20))
            fh.flush()
    out["tmpfs"] = "wrote 32 MiB"
except OSError as exc:
    out["tmpfs"] = "refused: " + exc.strerror
print("LIMITS " + json.dumps(out), flush=True)
"""


def test_a_fork_bomb_is_bounded_and_a_write_past_the_tmpfs_size_is_refused(user_repo: Path) -> None:
    (user_repo / ".sandbox.toml").write_text('[isolation]\nmax_processes = 64\ntmpfs_size = "8M"\n')
    started = sb("start", "--json", cwd=user_repo)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run"]
    proc = sb("exec", run_id, "--", sys.executable, "-c", LIMITS_ATTACK, cwd=user_repo)
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.decode().splitlines() if x.startswith("LIMITS ")]
    out = json.loads(line[0][len("LIMITS ") :])
    assert out["forks"].startswith("stopped after"), out
    assert int(out["forks"].split()[2].rstrip(":")) < 64, out
    assert out["tmpfs"] == "refused: No space left on device", out


def test_a_call_that_adds_more_than_max_call_size_is_refused_in_one_line_and_nothing_is_lost(
    user_repo: Path,
) -> None:
    (user_repo / ".sandbox.toml").write_text('[isolation]\nmax_call_size = "1M"\n')
    started = sb("start", "--json", cwd=user_repo)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run"]
    small = sb("exec", run_id, "--", "sh", "-c", "head -c 1000 /dev/zero > small.bin", cwd=user_repo)
    assert small.returncode == 0, small.stderr
    big = sb("exec", run_id, "--", "sh", "-c", "head -c 2000000 /dev/zero > big.bin", cwd=user_repo)
    err = big.stderr.decode()
    assert big.returncode == 1 and "Traceback" not in err and err.count("\n") == 1, err
    assert "max_call_size" in err, err
    worktree = Path(open_run(user_repo, run_id).worktree)
    assert (worktree / "big.bin").stat().st_size == 2000000  # nothing lost: it stays in the worktree
    log = json.loads(sb("log", run_id, "--json", cwd=user_repo).stdout)
    assert [e["status"] for e in log] == ["succeeded", "failed"], log
    assert "max_call_size" in (log[-1]["error"] or ""), log
    assert [f["path"] for f in log[-1]["files"]] == [], log
