"""``sandbox demo``: the main job end to end on a throwaway repository (what ``make demo`` runs)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import subprocess
import sys
import tempfile

import click

#: The environment of the demo's commands: set by :func:`_demo` (its data directory, when nothing is kept).
_ENV: dict[str, str] | None = None


def _sh(args: list[str], cwd: str, input: bytes | None = None, show: bool = True) -> subprocess.CompletedProcess[bytes]:
    if show:
        click.secho("$ " + " ".join(shlex.quote(a) for a in args), fg="cyan")
    proc = subprocess.run(args, cwd=cwd, input=input, capture_output=True, check=False, env=_ENV)
    if show:
        out = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
        if out.strip():
            click.echo(out.rstrip())
    return proc


def _fingerprint(repo: str) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, repo)] = hashlib.sha256(fh.read()).hexdigest()[:12]
    for name in ("index", "HEAD"):
        with open(os.path.join(repo, ".git", name), "rb") as fh:
            out[".git/" + name] = hashlib.sha256(fh.read()).hexdigest()[:12]
    refs = subprocess.run(
        ["git", "for-each-ref", "refs/heads", "refs/tags", "refs/stash"], cwd=repo, capture_output=True, check=True
    ).stdout
    out["refs"] = hashlib.sha256(refs).hexdigest()[:12]
    return out


@click.command()
@click.option("--keep", is_flag=True, help="Keep the throwaway repository and print its path.")
@click.pass_context
def demo(ctx: click.Context, keep: bool) -> None:
    """Build a throwaway repository, let a scripted agent work in a run, and show the evidence.

    With --json the walk-through goes to stderr and stdout carries what it showed, as JSON.
    """
    from sandbox.cli.group import wants_json
    from sandbox.cli.jsonout import emit_json, stdout_to_stderr

    with stdout_to_stderr(wants_json(ctx)):
        facts = _demo(keep)
    if wants_json(ctx):
        emit_json(facts)
    if not facts["ok"]:
        sys.exit(1)


def _demo(keep: bool) -> dict[str, object]:
    exe = os.path.join(os.path.dirname(sys.executable), "sandbox")
    sandbox = [exe] if os.path.exists(exe) else [sys.executable, "-m", "sandbox"]
    tmp = tempfile.mkdtemp(prefix="sandbox-demo-")
    repo = os.path.join(tmp, "project")
    if keep:
        return _walk(sandbox, tmp, repo, keep=True)
    # Nothing of a demo that keeps nothing goes outside its throwaway directory: the runs' homes are
    # made in a data directory inside it (never the user's), and whatever ends the walk (a failure,
    # Ctrl-C, 'sandbox demo | head' closing the pipe), the repository's host is stopped and the
    # directory removed.
    global _ENV
    _ENV = dict(os.environ, XDG_DATA_HOME=os.path.join(tmp, "data"))
    try:
        return _walk(sandbox, tmp, repo, keep=False)
    finally:
        _clean_up(sandbox, tmp, repo)
        _ENV = None


def _clean_up(sandbox: list[str], tmp: str, repo: str) -> None:
    """Stop the demo repository's host (waiting for it to end), then remove ``tmp`` whole."""
    import shutil
    import signal
    import time

    from sandbox.agent.host import host_pid

    pid = host_pid(os.path.join(repo, ".git")) if os.path.isdir(os.path.join(repo, ".git")) else None
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _ended(pid):
            time.sleep(0.02)
    shutil.rmtree(tmp, ignore_errors=True)


def _ended(pid: int) -> bool:
    """True once ``pid`` is gone or a zombie (where there is no ``/proc``: at once)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _walk(sandbox: list[str], tmp: str, repo: str, keep: bool) -> dict[str, object]:
    _make_repository(repo)
    click.secho(f"A throwaway repository at {repo}, with an uncommitted edit in README.md.\n", bold=True)
    before = _fingerprint(repo)

    click.secho("1. Start a run: a snapshot of the working tree, in its own worktree.", bold=True)
    proc = _sh([*sandbox, "start", "--label", "demo", "--json"], repo)
    import json

    run = run_id = json.loads(proc.stdout)["run"]
    import shutil

    # Commands run confined (bubblewrap); without it the demo still runs, and says so.
    iso = [] if shutil.which("bwrap") or sys.platform == "darwin" else ["--isolate", "off"]
    if iso:
        click.echo("(bubblewrap is not installed: the commands below run without OS confinement.)")
    click.echo()
    click.secho("2. A scripted agent makes recorded calls.", bold=True)
    _sh([*sandbox, "write", run, "src/hello.py"], repo, input=b"print('written by the agent')\n")
    _sh([*sandbox, "exec", run, *iso, "--tool", "edit_file", "--", "sed", "-i", "s/hello /hi /", "src/app.py"], repo)
    _sh([*sandbox, "exec", run, *iso, "--tool", "delete_file", "--", "rm", "src/old.py"], repo)
    _sh([*sandbox, "exec", run, *iso, "--", "sh", "-c", "mkdir -p build && echo 'report' > build/report.txt"], repo)
    _sh([*sandbox, "exec", run, *iso, "--tool", "run_tests", "--", "make", "-s", "test"], repo)
    click.echo()
    click.secho("3. The evidence: one ledger entry per call, one commit per changing call.", bold=True)
    _sh([*sandbox, "log", run], repo)
    click.echo()
    click.secho("4. The agent's patch against the snapshot.", bold=True)
    _sh([*sandbox, "diff", run], repo)
    click.echo()
    click.secho("5. Until you apply, your files, index and branches are exactly as they were.", bold=True)
    after = _fingerprint(repo)
    same = before == after
    click.echo(f"   files+index+HEAD+refs unchanged: {'yes' if same else 'NO'}")
    click.echo()
    click.secho("6. Apply: only the agent's paths, and only where your file is what the agent started from.", bold=True)
    _sh([*sandbox, "apply", run], repo)
    _sh(["git", "status", "--short"], repo)
    click.echo()
    click.secho("7. Take single calls back out of your tree: the newest change, then the one before.", bold=True)
    _sh([*sandbox, "undo", run, "--call", "4"], repo)
    _sh([*sandbox, "undo", run, "--call", "3"], repo)
    click.echo()
    click.secho("8. You edit a file the agent changed; undoing the apply now refuses and writes nothing.", bold=True)
    with open(os.path.join(repo, "src", "app.py"), "a") as fh:
        fh.write("# my own edit\n")
    refused = _sh([*sandbox, "undo", run], repo)
    with open(os.path.join(repo, "src", "app.py")) as fh:
        kept = fh.read().endswith("# my own edit\n")
    click.echo(f"   undo refused (exit {refused.returncode}); your edit kept: {'yes' if kept else 'NO'}")
    ok = same and refused.returncode == 1 and kept
    click.echo()
    _next_steps(run if keep else "RUN", repo, keep)
    return {
        "ok": ok,
        "run": run_id,
        "repository": repo if keep else None,
        "your_tree_unchanged_before_apply": same,
        "undo_refused_over_your_edit": refused.returncode == 1,
        "your_edit_kept": kept,
    }


def _make_repository(repo: str) -> None:
    """The demo's throwaway repository: a commit, then an uncommitted edit of the user's."""
    env_git = ["git", "-c", "user.name=Demo User", "-c", "user.email=demo@example.com"]
    os.makedirs(os.path.join(repo, "src"))
    files = {
        "README.md": "# Demo project\n",
        "src/app.py": "def greet(name):\n    return 'hello ' + name\n",
        "src/old.py": "LEGACY = True\n",
        "Makefile": "test:\n\tpython3 -c 'import sys; sys.exit(1)'\n",
    }
    for rel, text in files.items():
        with open(os.path.join(repo, rel), "w") as fh:
            fh.write(text)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run([*env_git, "commit", "-q", "-m", "initial"], cwd=repo, check=True)
    with open(os.path.join(repo, "README.md"), "a") as fh:
        fh.write("\nUncommitted note by the user.\n")


def _next_steps(run: str, repo: str, keep: bool) -> None:
    """What a user would type next (``RUN`` when the demo's run goes with its repository)."""
    click.secho("Next, a user would type:", bold=True)
    if keep:
        click.echo(f"   cd {repo}")
    click.echo(f"   sandbox log {run}           # what each call did")
    click.echo(f"   sandbox diff {run} --stat   # the agent's patch")
    click.echo(f"   sandbox apply {run}         # write it into your tree (never over your edits)")
    click.echo(f"   sandbox conflicts {run}     # where apply refuses: base, agent and yours")
    click.echo(f"   sandbox branch {run} NAME   # keep the run as a branch of per-call commits")
    click.echo(f"   sandbox undo {run}          # take your last apply back out")
    click.echo(f"   sandbox resume {run}        # after a crash: what happened, what not to repeat")
    click.echo(f"   sandbox drop {run} --force  # throw the run away; 'sandbox gc' reclaims leftovers")
    if not keep:
        click.echo("\n(The throwaway repository, its run and its host are removed now; 'demo --keep' keeps them.)")
