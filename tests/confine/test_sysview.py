"""Default deny in the system directories (issue #31): what other users cannot read is not visible
inside, whoever runs the sandbox (:mod:`sandbox.confine.sysview`).

The machine's tests run as root, where the gap was: a confined process keeps uid 0 without capabilities,
so the owner's bits of root's files applied and ``/etc/shadow`` was readable inside ``sandbox exec`` and
``sandbox run``. Real bubblewrap; a private file is planted in ``/etc`` (a directory of its own, removed
after) to see it hidden, shown again after ``chmod o+r`` (the cache re-validated, not walked), and hidden
again after a ``chmod 600`` in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.confine import sysview
from sandbox.models import SystemViewCache, from_json
from sandbox.models.base import FORMAT_VERSION
from tests.conftest import sandbox_cmd, scaled

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="the rule hides what root's owner bits open: the tests run as root")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
SKIP = ("/run", "/var/run", "/media", "/mnt")


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path) -> Path:
    """The data directory these tests keep the cache in: made by the runs it holds, never for the cache."""
    (tmp_path / "data").mkdir(exist_ok=True)
    return tmp_path / "data"


@needs_root
def test_the_cache_never_makes_the_data_directory(tmp_path: Path) -> None:
    """A HOME with no data directory of the sandbox's (an agent's own, in the tests) gets none from the cache."""
    cache = tmp_path / "nowhere" / sysview.CACHE_FILE
    sysview.hidden_here(str(cache), SKIP)
    assert not cache.parent.exists()


def _own_dir(parent: Path, tmp_path: Path) -> Path:
    """A public directory of the test's own under ``parent`` (skipped where ``parent`` is not writable)."""
    # With the worker's pid: tmp_path's names repeat across pytest-xdist workers (a parametrized test's cases).
    place = parent / f"sandbox-test-{os.getpid()}-{tmp_path.name}"
    try:
        place.mkdir(mode=0o755)
    except OSError:
        pytest.skip(f"{parent} is not writable here")
    place.chmod(0o755)
    return place


@pytest.fixture
def planted(tmp_path: Path) -> Iterator[Path]:
    """A directory of the test's own in /etc holding a private file, a public one and a private directory."""
    place = _own_dir(Path("/etc"), tmp_path)
    try:
        (place / "secret").write_text("s3cret\n")
        (place / "secret").chmod(0o600)
        (place / "public").write_text("public\n")
        (place / "public").chmod(0o644)
        (place / "vault").mkdir(mode=0o700)
        (place / "vault" / "key").write_text("key\n")
        (place / "public2").write_text("public\n")
        (place / "public3").write_text("public\n")
        yield place
    finally:
        # Readable by all first, so that no start from now on masks them; one that listed them before (any
        # test's, on this machine) is given time to mount over them before they vanish.
        for path in (place, *place.rglob("*")):
            with contextlib.suppress(OSError):
                path.chmod(0o755 if path.is_dir() else 0o644)
        time.sleep(scaled(1))
        shutil.rmtree(place, ignore_errors=True)


def start(repo: Path, env: dict[str, str]) -> str:
    proc = sandbox_cmd("start", "--json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    run_id: str = json.loads(proc.stdout)["run"]
    return run_id


def inside(repo: Path, run_id: str, env: dict[str, str], script: str, command: str = "exec") -> str:
    """What ``script`` prints inside ``sandbox exec`` (or ``sandbox run``) of the run."""
    args = ["exec", run_id, "--"] if command == "exec" else ["run", run_id, "--hooks", "none", "--"]
    proc = sandbox_cmd(*args, "sh", "-c", script, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


def user_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    return {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share")}


def cache_of(env: dict[str, str]) -> Path:
    return Path(env["XDG_DATA_HOME"]) / "sandbox" / sysview.CACHE_FILE


@needs_root
@needs_bwrap
@pytest.mark.parametrize("command", ["exec", "run"])
def test_root_reads_no_shadow_inside(repo: Path, tmp_path: Path, command: str) -> None:
    shadow = Path("/etc/shadow")
    if not shadow.is_file() or shadow.stat().st_size == 0 or shadow.stat().st_mode & 0o004:
        pytest.skip("no private /etc/shadow with content on this machine")
    env = user_env(tmp_path)
    run_id = start(repo, env)
    script = "wc -c < /etc/shadow; cat /etc/passwd | head -1 | cut -d: -f1"
    assert inside(repo, run_id, env, script, command).split() == ["0", "root"]
    assert shadow.read_bytes()  # outside, as it was


@needs_root
@needs_bwrap
def test_a_private_system_file_is_hidden_and_follows_its_mode(repo: Path, tmp_path: Path, planted: Path) -> None:
    env = user_env(tmp_path)
    run_id = start(repo, env)
    script = f"cat {planted}/secret {planted}/public; ls -A {planted}/vault; echo end"
    assert inside(repo, run_id, env, script) == "public\nend\n"  # the secret empty, the private directory empty
    # The cache lies in the data directory, which is hidden inside: no agent can make it lie.
    assert inside(repo, run_id, env, f"ls {cache_of(env)} 2>/dev/null; echo ok") == "ok\n"
    kept = from_json(SystemViewCache, cache_of(env).read_text())
    assert kept.version == FORMAT_VERSION == sysview.FORMAT_VERSION
    assert str(planted / "secret") in {row[0] for row in kept.private}
    # Readable by others now: shown at the next start (the file's own ctime changed, not its directory's).
    (planted / "secret").chmod(0o644)
    assert inside(repo, run_id, env, script) == "s3cret\npublic\nend\n"
    # Private again, in place: its directory changed less than a minute ago, so it is listed again.
    (planted / "secret").chmod(0o600)
    assert inside(repo, run_id, env, script) == "public\nend\n"
    assert (planted / "secret").read_text() == "s3cret\n"  # outside, untouched


@needs_root
def test_the_cache_is_revalidated_not_walked_and_a_change_is_listed_again(tmp_path: Path, planted: Path) -> None:
    cache = str(tmp_path / "data" / sysview.CACHE_FILE)
    cold = sysview.load(cache, SKIP)
    assert cold.walked and str(planted / "secret") in cold.hidden_for(0, {0})
    warm = sysview.load(cache, SKIP)
    assert not warm.walked
    assert warm.listed <= len(warm.racy) + 2  # only what changed lately (the planted directory, /etc)
    assert str(planted / "secret") in warm.hidden_for(0, {0})
    # A new private file: its directory changed, so it is listed again; an ordinary user is hidden nothing.
    (planted / "later").write_text("later\n")
    (planted / "later").chmod(0o640)
    again = sysview.load(cache, SKIP)
    assert not again.walked and str(planted / "later") in again.hidden_for(0, {0})
    assert again.hidden_for(12345, {12345}) == []
    # What the cache says is what the model says.
    kept = from_json(SystemViewCache, Path(cache).read_text())
    assert kept.dirs[0][0] == "/" and str(planted) in {row[0] for row in kept.dirs}


@needs_root
@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b"",
        b'{"version": 999}',
        b"[]",
        "truncated",
        "private with a string for a number",
        "no root directory first",
        "from the future",
        "owned by another user",
        "writable by others",
    ],
)
def test_a_corrupt_or_foreign_cache_is_walked_afresh(tmp_path: Path, planted: Path, damage: bytes | str) -> None:
    cache = tmp_path / "data" / sysview.CACHE_FILE
    sysview.load(str(cache), SKIP)
    text = cache.read_text()
    data = json.loads(text)
    if damage == "truncated":
        cache.write_text(text[: len(text) // 2])
    elif damage == "private with a string for a number":
        data["private"] = [[*row[:4], "33188", *row[5:]] for row in data["private"]]
        cache.write_text(json.dumps(data))
    elif damage == "no root directory first":
        data["dirs"] = data["dirs"][1:]
        cache.write_text(json.dumps(data))
    elif damage == "from the future":
        data["walked_ns"] += 3600 * 10**9
        cache.write_text(json.dumps(data))
    elif damage == "owned by another user":  # the repository's .git/sandbox may be another user's
        data["private"] = []  # as its owner would forge it: nothing private
        cache.write_text(json.dumps(data))
        os.chown(cache, 12345, 12345)
    elif damage == "writable by others":
        data["private"] = []
        cache.write_text(json.dumps(data))
        cache.chmod(0o666)
    else:
        assert isinstance(damage, bytes)
        cache.write_bytes(damage)
    view = sysview.load(str(cache), SKIP)
    assert view.walked
    assert str(planted / "secret") in view.hidden_for(0, {0})
    assert from_json(SystemViewCache, cache.read_text()).private  # written whole again


@needs_root
def test_a_cache_with_a_row_of_the_wrong_shape_is_walked_afresh(tmp_path: Path, planted: Path) -> None:
    cache = tmp_path / "data" / sysview.CACHE_FILE
    sysview.load(str(cache), SKIP)
    data = json.loads(cache.read_text())
    data["dirs"][1] = [data["dirs"][1][0], "x"]
    cache.write_text(json.dumps(data))
    view = sysview.load(str(cache), SKIP)
    assert view.walked and str(planted / "secret") in view.hidden_for(0, {0})


@needs_root
def test_a_link_to_a_private_file_outside_the_walked_directories_hides_that_file(tmp_path: Path, planted: Path) -> None:
    # /opt is listed, not walked: a private file deep in it is found through the link in /etc that leads there.
    deep = Path("/opt") / f"sandbox-test-{tmp_path.name}" / "app"
    try:
        deep.mkdir(parents=True)
    except OSError:
        pytest.skip("/opt is not writable here")
    try:
        (deep / "token").write_text("t0ken\n")
        (deep / "token").chmod(0o600)
        (planted / "app-token").symlink_to(deep / "token")
        view = sysview.load(str(tmp_path / "data" / sysview.CACHE_FILE), SKIP)
        assert str(deep / "token") in view.hidden_for(0, {0})
        assert str(planted / "app-token") not in view.hidden_for(0, {0})
    finally:
        shutil.rmtree(deep.parent, ignore_errors=True)


def test_a_directory_mostly_private_is_hidden_whole_in_one_mount() -> None:
    view = sysview.View(roots=("/etc",), skip=())
    view.dirs = {"/etc/x": (1, 2, 3, 4), "/etc/y": (1, 3, 3, 10)}
    for name, uid in (("a", 0), ("b", 0), ("c", 0)):
        view.private[f"/etc/x/{name}"] = sysview.Private(f"/etc/x/{name}", "/etc/x", 1, 9, 0o100640, uid, 4, 1)
    view.private["/etc/y/a"] = sysview.Private("/etc/y/a", "/etc/y", 1, 8, 0o100600, 0, 0, 1)
    view.private["/etc/y/b"] = sysview.Private("/etc/y/b", "/etc/y", 1, 7, 0o100600, 0, 0, 1)
    assert view.hidden_for(0, {0}) == ["/etc/y/a", "/etc/y/b", "/etc/x"]
    # Another account's 0640 file in group 4 (adm): root without capabilities cannot read it, so no mount.
    view.private["/etc/y/c"] = sysview.Private("/etc/y/c", "/etc/y", 1, 6, 0o100640, 107, 4, 1)
    assert "/etc/y/c" not in view.hidden_for(0, {0})
    assert view.hidden_for(1000, {1000, 4}) == ["/etc/y/c", "/etc/x"]  # group adm reads them all
    assert view.hidden_for(1000, {1000}) == []


NOBODY = r"""
import os, sys
from sandbox.confine import sysview  # first: the interpreter may lie in root's home
os.setgroups([]); os.setgid(65534); os.setuid(65534)
print(sysview.hidden_here(sys.argv[1], []), os.path.exists(sys.argv[1]))
"""


@needs_root
def test_an_ordinary_user_is_hidden_nothing_and_walks_nothing(tmp_path: Path, planted: Path) -> None:
    # It cannot read root's private files anyway: inside it reads what it reads outside, groups included.
    data = tmp_path / "data"
    data.mkdir(mode=0o777, exist_ok=True)
    data.chmod(0o777)
    tmp_path.chmod(0o755)
    cache = data / sysview.CACHE_FILE
    proc = subprocess.run(
        [sys.executable, "-c", NOBODY, str(cache)],
        capture_output=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(sysview.__file__).parents[2])},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split() == ["[]", "False"]


@needs_root
@needs_bwrap
def test_doctor_says_the_rule_holds_and_what_it_hides(repo: Path, tmp_path: Path, planted: Path) -> None:
    env = user_env(tmp_path)
    Path(env["XDG_DATA_HOME"], "sandbox").mkdir(parents=True, exist_ok=True)  # a user's, made by the runs it holds
    proc = sandbox_cmd("doctor", "--json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    system = json.loads(proc.stdout)["system"]
    assert system["applies"] is True and system["why"].startswith("holds")
    assert str(planted / "secret") in system["hidden"] and str(planted / "vault") in system["hidden"]
    assert str(planted / "public") not in system["hidden"]
    assert system["directories"] > 0 and "/etc" in system["walked"]
    text = sandbox_cmd("doctor", cwd=repo, env=env).stdout.decode()
    assert "system files other users cannot read: holds" in text and f"  {planted / 'secret'}\n" in text
    explained = sandbox_cmd("doctor", "--explain", str(planted / "secret"), cwd=repo, env=env).stdout.decode()
    assert "other users cannot read" in explained


@needs_root
@needs_bwrap
def test_allow_read_naming_the_file_shows_it(repo: Path, tmp_path: Path, planted: Path) -> None:
    (repo / ".sandbox.toml").write_text(f'[isolation]\nallow_read = ["{planted / "secret"}"]\n')
    env = user_env(tmp_path)
    run_id = start(repo, env)
    assert inside(repo, run_id, env, f"cat {planted}/secret; ls -A {planted}/vault") == "s3cret\n"
    system = json.loads(sandbox_cmd("doctor", "--json", cwd=repo, env=env).stdout)["system"]
    assert str(planted / "secret") in system["shown"] and str(planted / "vault") in system["hidden"]


def test_what_the_policy_shows_on_purpose_is_not_masked_and_a_bind_above_does_not_show() -> None:
    from sandbox.confine.policy import Policy
    from sandbox.confine.verdict import SYSTEM_WHY, explain, rules

    system = ("/usr/local/etc/app.key", "/srv/work/secret", "/var/tmp/x", "/etc/shown")
    policy = Policy(
        writable=("/srv/work",),
        protected=(),
        readable=("/usr/local", "/etc/shown"),
        reasons=(("/var/tmp", "a scratch directory"),),
        system=system,
    )
    masked = {r.path for r in rules(policy) if r.verdict.why == SYSTEM_WHY}
    # The interpreter's bind of /usr/local shows only what / shows; the run's paths, a hidden place and
    # allow_read naming the entry itself decide for theirs.
    assert masked == {"/usr/local/etc/app.key"}
    assert not explain(policy, "/usr/local/etc/app.key").visible
    assert explain(policy, "/srv/work/secret").writable


@pytest.fixture
def apart(tmp_path: Path) -> Iterator[Path]:
    """A public directory of the test's own in /opt: read-only inside a sandbox like /etc, but /opt is listed,
    not walked (sysview.LISTED_DIRS), so the other tests' sandboxes never mask what flickers in it."""
    place = _own_dir(Path("/opt"), tmp_path)
    try:
        yield place
    finally:
        shutil.rmtree(place, ignore_errors=True)


@needs_root
@needs_bwrap
def test_a_private_file_that_vanishes_while_the_sandbox_starts_costs_one_more_start(
    apart: Path, tmp_path: Path
) -> None:
    """Masked, then gone before bubblewrap mounts over it (a read-only / leaves it nowhere to make one): the
    start is made once more with its mounts made anew. A file made after the mounts is not masked: the rule's
    documented limit, not asserted here. (Not in /etc: every other test's sandbox would mask the flickering
    file there and meet it gone, twice.)"""
    from sandbox.confine import spawn
    from sandbox.errors import SandboxError

    secret = apart / "secret"
    policy = spawn.Policy(writable=(str(tmp_path),), protected=(), system=(str(secret),))
    isolation = spawn.Isolation(enabled=True, network=False, program=shutil.which("bwrap"), interactive=False)
    stop = threading.Event()

    def flicker() -> None:  # bounded: the test's 40 starts end it
        while not stop.is_set():
            secret.unlink(missing_ok=True)
            time.sleep(0.002)
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, b"s3cret\n")
            os.close(fd)
            time.sleep(0.002)

    thread = threading.Thread(target=flicker, daemon=True)
    thread.start()
    outcomes = []
    try:
        for _ in range(40):
            script = f"cat {secret} 2>/dev/null; echo ok"
            proc = spawn.spawn(isolation, policy, ["sh", "-c", script], str(tmp_path), stdout=subprocess.PIPE)
            assert proc.proc.stdout is not None
            out = proc.proc.stdout.read().decode()
            try:
                outcomes.append(("ran", proc.wait(), out))
            except SandboxError as exc:
                outcomes.append(("refused", 1, str(exc)))
    finally:
        stop.set()
        thread.join(timeout=10)
    # A vanish is absorbed by the second start; both starts are hit only now and then at this flicker (0-5
    # of 40 here), where a single start without the retry is refused 14-18 times of 40.
    refused = [text for _, code, text in outcomes if code]
    assert len(refused) <= 10, refused
    assert all(text.startswith("bubblewrap could not set up the sandbox") for text in refused), refused


@needs_root
def test_without_a_data_directory_the_walk_is_kept_in_the_repositorys_sandbox_directory(tmp_path: Path) -> None:
    """A run started through the library keeps its home in the repository and makes no data directory:
    the walk is kept in the repository's sandbox directory instead (hidden inside, as the data directory
    is), so that the next confined start only re-validates it; the data directory is still never made."""
    from sandbox.confine.policy import Isolation, system_hidden

    data = tmp_path / "home" / ".local" / "share" / "sandbox"
    state = tmp_path / "repo" / ".git" / "sandbox"
    state.mkdir(parents=True)
    iso = Isolation(True, False, "/usr/bin/bwrap", "bwrap", system_cache=str(data / sysview.CACHE_FILE))
    first = system_hidden(iso, state_dir=str(state))
    kept = state / sysview.CACHE_FILE
    assert kept.is_file() and not data.exists()
    written = kept.stat().st_mtime_ns
    assert system_hidden(iso, state_dir=str(state)) == first
    racy = json.loads(kept.read_text())["racy"]
    assert racy or kept.stat().st_mtime_ns == written  # re-validated, not walked and written again
