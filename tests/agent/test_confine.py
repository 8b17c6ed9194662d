"""OS confinement (sandbox.confine.spawn): the policy, refusals, signals, exit codes, the network switch.

The escape attempts themselves are in tests/reliability/test_escapes.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandbox.agent import adapters, agentstate
from sandbox.confine import bwrap, envfilter, seatbelt, spawn
from sandbox.confine.policy import policy_for, run_writable_paths
from sandbox.run import config
from tests.conftest import sandbox_cmd, scaled, wait_until

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap is not installed (make venv installs it)")


def start(repo: Path) -> tuple[str, Path]:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    return info["run"], Path(info["worktree"])


def visible() -> tuple[str, ...]:
    """This interpreter and package, kept visible inside (the clone may lie below the private /tmp)."""
    from sandbox.cli.isolation import installed_paths

    return tuple(installed_paths([]))


def isolation(**kw: object) -> spawn.Isolation:
    fields: dict[str, object] = {"enabled": True, "network": False, "program": BWRAP, "interactive": False}
    fields.update(kw)
    return spawn.Isolation(**fields)  # type: ignore[arg-type]


# -- the policy ---------------------------------------------------------------------------------


def test_mounts_go_parents_first_and_the_users_paths_are_protected_last() -> None:
    policy = spawn.Policy(
        writable=("/r/.git/sandbox/worktrees/x", "/r/.git/worktrees/x"),
        protected=("/r", "/r/.git"),
        network=False,
        extra_writable=("/home/u/.claude",),
    )
    argv = bwrap.bwrap_argv("bwrap", policy, ["true"], "/r/.git/sandbox/worktrees/x")
    mounts = [(argv[i], argv[i + 1]) for i, a in enumerate(argv) if a.startswith("--") and i + 1 < len(argv)]
    order = [m for m in mounts if m[0] in ("--bind", "--bind-try", "--ro-bind-try", "--tmpfs")]
    paths = [p for _flag, p in order]
    assert paths.index("/r") < paths.index("/r/.git") < paths.index("/r/.git/worktrees/x")
    assert ("--ro-bind-try", "/r/.git") in order and ("--bind", "/r/.git/sandbox/worktrees/x") in order
    assert ("--tmpfs", "/tmp") in order and ("--bind-try", "/home/u/.claude") in order
    for flag in ("--cap-drop", "--die-with-parent", "--unshare-pid", "--unshare-net", "--new-session"):
        assert flag in argv
    assert argv[argv.index("--chdir") + 1] == "/r/.git/sandbox/worktrees/x"


def test_interactive_keeps_the_terminal_and_network_on_keeps_the_network() -> None:
    policy = spawn.Policy(writable=("/w",), protected=(), network=True, interactive=True)
    argv = bwrap.bwrap_argv("bwrap", policy, ["true"], "/w")
    assert "--new-session" not in argv and "--unshare-net" not in argv


def test_writable_paths_come_from_the_users_repository_not_the_worktree(repo: Path) -> None:
    proc = sandbox_cmd("start", "--json", cwd=repo)
    info = json.loads(proc.stdout)
    run_id, worktree, git_dir = info["run"], Path(info["worktree"]), info["git_dir"]
    paths = run_writable_paths(str(repo / ".git"), run_id, str(worktree))
    assert paths == [os.path.realpath(worktree), os.path.realpath(git_dir)]
    # An agent rewriting its worktree's .git file cannot widen them.
    (worktree / ".git").write_text(f"gitdir: {Path.home()}\n")
    assert run_writable_paths(str(repo / ".git"), run_id, str(worktree)) == paths
    with pytest.raises(spawn.ConfinementError, match="not where the repository places run"):
        run_writable_paths(str(repo / ".git"), run_id, str(Path.home()))
    # The run's home (with the origin file hooks find the run by) is visible, read-only, wherever it is.
    policy = policy_for(
        spawn.Isolation(), common_dir=str(repo / ".git"), run_id=run_id, worktree=str(worktree), user_workdir=None
    )
    assert os.path.realpath(Path(git_dir).parent) in policy.readable


def test_settings(tmp_path: Path) -> None:
    (tmp_path / ".sandbox.toml").write_text(
        '[isolation]\nisolate = false\nnetwork_exec = true\nagent_state = ["~/.a/"]\nwritable = ["/opt/cache"]\n'
    )
    cfg = config.load(str(tmp_path))
    assert (cfg.isolate, cfg.network_run, cfg.network_exec) == (False, "allow", True)
    assert cfg.agent_state == ["~/.a/"] and cfg.writable == ["/opt/cache"]
    (tmp_path / ".sandbox.toml").write_text("[isolation]\nisolate = 'maybe'\n")
    with pytest.raises(config.ConfigError, match="isolation.isolate must be true or false"):
        config.load(str(tmp_path))
    (tmp_path / ".sandbox.toml").write_text("[isolation]\nnetwork = true\n")
    with pytest.raises(config.ConfigError, match="unknown isolation setting 'network'"):
        config.load(str(tmp_path))


def test_state_paths_refuse_relative_paths_and_the_whole_home(tmp_path: Path) -> None:
    home = str(tmp_path)
    got = agentstate.state_paths(["~/.claude/", "~/.claude.json"], home)
    assert got == [f"{home}/.claude/", f"{home}/.claude.json"]
    with pytest.raises(spawn.ConfinementError, match="not absolute"):
        agentstate.state_paths(["cache"], home)
    with pytest.raises(spawn.ConfinementError, match="your home"):
        agentstate.state_paths(["~"], home)
    agentstate.prepare_state([f"{home}/.claude/", f"{home}/.claude.json", f"{home}/.x"])
    assert (tmp_path / ".claude").is_dir() and json.loads((tmp_path / ".claude.json").read_text()) == {}
    assert not (tmp_path / ".x").exists()


def test_seccomp_program_shape() -> None:
    for machine in ("x86_64", "aarch64"):
        program = bwrap.seccomp_program(machine)
        assert program is not None and len(program) % 8 == 0
    assert bwrap.seccomp_program("sparc") is None


def test_seatbelt_profile_has_the_same_policy() -> None:
    policy = spawn.Policy(writable=("/r/.git/sandbox/worktrees/x",), protected=("/r", "/r/.git"), network=False)
    profile = seatbelt.seatbelt_profile(policy)
    assert "(deny file-write*)" in profile and '(subpath "/r/.git/sandbox/worktrees/x")' in profile
    assert profile.index('(deny file-write* (subpath "/r")') < profile.rindex("/r/.git/sandbox/worktrees/x")
    assert "(deny network*)" in profile and "(allow network* (remote unix-socket))" in profile


@pytest.mark.skipif(sys.platform != "darwin", reason="sandbox-exec exists only on macOS")
def test_seatbelt_confines_on_macos(tmp_path: Path) -> None:  # pragma: no cover - macOS only
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    iso = spawn.Isolation(enabled=True, network=False, program="/usr/bin/sandbox-exec", backend="seatbelt")
    policy = spawn.Policy(writable=(str(inside),), protected=(str(outside),), network=False)
    proc = spawn.spawn(iso, policy, ["sh", "-c", f"echo a > ok.txt; echo b > {outside}/no.txt"], str(inside))
    assert proc.wait() != 0
    assert (inside / "ok.txt").exists() and not (outside / "no.txt").exists()


# -- refusals -----------------------------------------------------------------------------------


def test_no_bubblewrap_is_a_one_line_refusal_naming_the_fix_and_the_opt_out(repo: Path, tmp_path: Path) -> None:
    run_id, worktree = start(repo)
    bare_path = tmp_path / "bin"
    bare_path.mkdir()
    for tool in ("git", "sh", "touch"):
        os.symlink(shutil.which(tool) or tool, bare_path / tool)
    env = {"PATH": str(bare_path)}
    for args in (("exec", run_id, "--", "touch", "x"), ("run", run_id, "--hooks", "none", "--", "touch", "x")):
        proc = sandbox_cmd(*args, cwd=repo, env=env)
        lines = proc.stderr.decode().strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert "apt-get install bubblewrap" in lines[0] and "--isolate off" in lines[0]
    assert not (worktree / "x").exists()
    assert json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo).stdout) == []  # nothing recorded
    proc = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "touch", "x", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo).stdout)[-1]
    assert entry["input"] == {"argv": ["touch", "x"], "isolation": "off"}


@needs_bwrap
def test_a_sandbox_that_cannot_be_set_up_is_never_taken_for_the_commands_exit(tmp_path: Path) -> None:
    policy = spawn.Policy(writable=(str(tmp_path / "missing"),), protected=())
    proc = spawn.spawn(isolation(), policy, ["true"], str(tmp_path))
    with pytest.raises(spawn.ConfinementError, match="could not set up the sandbox"):
        proc.wait()


# -- running ------------------------------------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_reach_the_command_and_a_death_by_signal_is_128_plus_n(tmp_path: Path, signum: int) -> None:
    policy = spawn.Policy(writable=(str(tmp_path),), protected=())
    proc = spawn.spawn(isolation(), policy, ["sleep", "60"], str(tmp_path))
    # Until `sleep` runs: bubblewrap is then known to hold the signal sent to it (a signal before the command runs
    # is held for it by send_signal: tests/confine/test_signals_at_start.py).
    wait_until(lambda: "sleep" in {spawn._comm(p) for p in proc.command_pids()}, 30)
    os.kill(proc.pid, signum)  # bubblewrap itself ignores it (blocked) and keeps the sandbox
    time.sleep(0.1)
    assert proc.poll() is None
    proc.send_signal(signum)
    assert proc.wait() == 128 + signum


@needs_bwrap
def test_the_mcp_servers_token_is_never_handed_to_a_confined_command(repo: Path) -> None:
    """A user who fixes ``sandbox mcp --http``'s token in their shell must not give it to the agents
    they start from that shell: with it, a confined agent could drive the server over loopback."""
    run_id = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    env = {envfilter.MCP_TOKEN_ENV: "secret-token", "TZ": "kept"}  # never this one
    shown = "echo token=${SANDBOX_MCP_TOKEN:-none} other=$TZ"
    proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", shown, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().strip() == "token=none other=kept"


@needs_bwrap
def test_exit_codes_pass_through(tmp_path: Path) -> None:
    policy = spawn.Policy(writable=(str(tmp_path),), protected=())
    assert spawn.spawn(isolation(), policy, ["sh", "-c", "exit 7"], str(tmp_path)).wait() == 7
    assert spawn.spawn(isolation(), policy, ["no-such-command-xyz"], str(tmp_path)).wait() == 127


@needs_bwrap
def test_tiocsti_is_refused(tmp_path: Path) -> None:
    """Typing into the user's terminal: EPERM from the filter (ENOTTY on /dev/null without it)."""
    code = (
        "import fcntl, os, termios\n"
        "fd = os.open('/dev/null', os.O_RDWR)\n"
        "try:\n    fcntl.ioctl(fd, termios.TIOCSTI, b'x')\nexcept OSError as e:\n    print(e.errno)\n"
    )
    policy = spawn.Policy(writable=(str(tmp_path),), protected=(), interactive=True, readable=visible())
    out = tmp_path / "out"
    proc = spawn.spawn(
        isolation(interactive=True), policy, ["sh", "-c", f'{sys.executable} -c "$0" > out', code], str(tmp_path)
    )
    assert proc.wait() == 0
    assert out.read_text().strip() == "1"  # EPERM


def _seccomp_verdict(program: bytes, arch: int, nr: int, cmd: int) -> str:
    """Run the classic BPF ``program`` on one call, as the kernel would: "allow" or "deny"."""
    data = struct.pack("=iIQQQ", nr, arch, 0, 0, cmd)  # seccomp_data: nr, arch, ip, args[0], args[1]
    insns = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            (acc,) = struct.unpack_from("=I", data, k)
        elif code == 0x15:  # BPF_JMP | BPF_JEQ | BPF_K
            pc += jt if acc == k else jf
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            acc &= k
        else:  # BPF_RET | BPF_K
            return "allow" if k == 0x7FFF0000 else "deny"
        pc += 1


def test_of_the_terminals_ioctls_only_those_a_program_needs_pass() -> None:
    """The 'T' family is allowed by name (termios, window size, process groups, FIONBIO/FIOCLEX, which
    share its range); the rest of it refused; any other ioctl is not the filter's business."""
    program = bwrap.seccomp_program("x86_64")
    assert program is not None
    allowed = {"TCGETS": 0x5401, "TCSETSW": 0x5403, "TIOCSPGRP": 0x5410, "TIOCGWINSZ": 0x5413, "FIONBIO": 0x5421}
    allowed |= {"FIOCLEX": 0x5451, "TCGETS2": 0x802C542A, "SIOCGIFCONF": 0x8912, "BLKGETSIZE64": 0x80081272}
    denied = {"TIOCSTI": 0x5412, "TIOCLINUX": 0x541C, "TIOCSETD": 0x5423, "TIOCEXCL": 0x540C, "TIOCCONS": 0x541D}
    for arch, ioctl in ((0xC000003E, 16), (0x40000003, 54)):
        for name, cmd in allowed.items():
            assert _seccomp_verdict(program, arch, ioctl, cmd) == "allow", name
        for name, cmd in denied.items():
            assert _seccomp_verdict(program, arch, ioctl, cmd) == "deny", name


@needs_bwrap
def test_the_users_terminal_keeps_its_line_discipline_and_stays_openable(tmp_path: Path) -> None:
    """An agent sharing the user's terminal set its line discipline to N_NULL (the terminal then reads and
    shows nothing, after the sandbox ended too) and made it exclusive (the user's sudo or ssh cannot
    open /dev/tty): both refused, while termios and the window size still work."""
    import pty
    import termios

    code = (
        "import fcntl, struct, termios\n"
        "out = []\n"
        "for req, arg in ((0x5423, struct.pack('i', 27)), (0x540C, 0)):\n"
        "    try:\n        fcntl.ioctl(0, req, arg); out.append('done')\n"
        "    except OSError as e:\n        out.append(str(e.errno))\n"
        "termios.tcsetattr(0, termios.TCSANOW, termios.tcgetattr(0))\n"
        "fcntl.ioctl(0, termios.TIOCGWINSZ, b'\\0' * 8)\n"
        "print(' '.join(out))\n"
    )
    master, slave = pty.openpty()
    try:
        policy = spawn.Policy(writable=(str(tmp_path),), protected=(), interactive=True, readable=visible())
        argv = ["sh", "-c", f'{sys.executable} -c "$0" > out', code]
        proc = spawn.spawn(isolation(interactive=True), policy, argv, str(tmp_path), stdin=slave)
        assert proc.wait() == 0
        assert (tmp_path / "out").read_text().split() == ["1", "1"]  # EPERM, EPERM
        assert struct.unpack("i", fcntl.ioctl(slave, 0x5424, b"\0" * 4))[0] == 0  # TIOCGETD: N_TTY still
        fd = os.open(os.ttyname(slave), os.O_RDWR | os.O_NOCTTY)  # not exclusive: opens
        os.close(fd)
        assert termios.tcgetattr(slave)
    finally:
        fcntl.ioctl(slave, 0x540D)  # TIOCNXCL, whatever happened
        os.close(master)
        os.close(slave)


def test_seccomp_refuses_tiocsti_through_the_32_bit_table_too() -> None:
    """``int 0x80`` from a 64-bit process is an i386 call to the filter: ioctl is 54 there, not 16."""
    tiocsti, tcgets = 0x5412, 0x5401
    cases = {"x86_64": (0xC000003E, 16, 0x40000003, 54), "aarch64": (0xC00000B7, 29, 0x40000028, 54)}
    for machine, (native, ioctl, compat, compat_ioctl) in cases.items():
        program = bwrap.seccomp_program(machine)
        assert program is not None
        assert _seccomp_verdict(program, native, ioctl, tiocsti) == "deny"
        assert _seccomp_verdict(program, compat, compat_ioctl, tiocsti) == "deny"
        assert _seccomp_verdict(program, compat, compat_ioctl, 0x541C) == "deny"  # TIOCLINUX
        assert _seccomp_verdict(program, native, ioctl, tcgets) == "allow"
        assert _seccomp_verdict(program, compat, compat_ioctl, tcgets) == "allow"
        assert _seccomp_verdict(program, native, 0, tiocsti) == "allow"  # read(), whatever its arguments
        assert _seccomp_verdict(program, compat, 3, tiocsti) == "allow"
    assert _seccomp_verdict(bwrap.seccomp_program("x86_64") or b"", 0xC000003E, 0x40000000 | 514, tiocsti) == "deny"


@needs_bwrap
@pytest.mark.skipif(os.uname().machine != "x86_64" or shutil.which("cc") is None, reason="x86-64 with a C compiler")
def test_tiocsti_through_int_0x80_is_refused(tmp_path: Path) -> None:
    """A real 64-bit process calling ioctl through the i386 table: EPERM, not ENOTTY from the tty layer."""
    (tmp_path / "t.c").write_text(
        "#include <stdio.h>\n#include <fcntl.h>\nint main(void) {\n"
        '  int fd = open("/dev/null", O_RDWR); long ret; char c = 0;\n'
        '  __asm__ volatile ("int $0x80" : "=a"(ret) : "a"(54), "b"(fd), "c"(0x5412), "d"(&c) : "memory");\n'
        '  printf("%ld\\n", ret); return 0;\n}\n'
    )
    if subprocess.run(["cc", "-o", str(tmp_path / "t"), str(tmp_path / "t.c")], capture_output=True).returncode:
        pytest.skip("cannot compile here")
    policy = spawn.Policy(writable=(str(tmp_path),), protected=(), interactive=True, readable=visible())
    proc = spawn.spawn(isolation(interactive=True), policy, ["sh", "-c", "./t > out"], str(tmp_path))
    assert proc.wait() == 0
    assert (tmp_path / "out").read_text().strip() == "-1"  # -EPERM (-25, ENOTTY, without the filter)


@needs_bwrap
def test_exec_network_is_off_by_default_and_on_by_flag(repo: Path) -> None:
    run_id, _worktree = start(repo)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    accepted: list[bool] = []

    def serve() -> None:
        server.settimeout(30)
        try:
            while len(accepted) < 1:
                conn, _ = server.accept()
                accepted.append(True)
                conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), 5)"
    off = sandbox_cmd("exec", run_id, "--", sys.executable, "-c", probe, cwd=repo)
    assert off.returncode != 0 and b"Connection refused" in off.stderr and not accepted
    on = sandbox_cmd("exec", run_id, "--network", "on", "--", sys.executable, "-c", probe, cwd=repo)
    assert on.returncode == 0, on.stderr
    thread.join(timeout=10)
    server.close()
    assert accepted == [True]
    inputs = [e["input"] for e in json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo).stdout)]
    assert [i["isolation"] for i in inputs] == ["bwrap, network off", "bwrap, network on"]


@needs_bwrap
def test_a_hook_that_cannot_reach_the_host_from_inside_blocks_the_tool(repo: Path) -> None:
    """Confined without a host (here: under exec), a hook cannot record; it fails closed (exit 2)."""
    run_id, worktree = start(repo)
    event = json.dumps({"event": "start", "cwd": str(worktree), "tool": "Bash", "call_id": "c1", "kind": "command"})
    hook = f"printf '%s' '{event}' | {Path(sys.executable).parent / 'sandbox'} hook generic; echo $? > hook.rc"
    proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", hook, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert (worktree / "hook.rc").read_text().strip() == "2"
    assert b"cannot be recorded and is blocked" in proc.stderr
    assert "c1" not in [e["call_id"] for e in json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo).stdout)]


def test_interactive_agent_keeps_its_terminal(repo: Path) -> None:
    """Under a pseudo-terminal the agent's stdin is still a terminal, with its size (no new session)."""
    if BWRAP is None:
        pytest.skip("bubblewrap is not installed")
    import pty

    run_id, _worktree = start(repo)
    probe = "import os, sys; print('TTY', os.isatty(0), os.get_terminal_size(0).columns, flush=True)"
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(repo)
        exe = str(Path(sys.executable).parent / "sandbox")
        os.execv(exe, [exe, "run", run_id, "--hooks", "none", "--", sys.executable, "-c", probe])
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    _pid, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, output
    assert b"TTY True" in output, output


@needs_bwrap
def test_a_confined_run_records_through_the_repositorys_host_while_another_session_runs(repo: Path) -> None:
    """Both sessions' hooks go to the one host of the repository: neither depends on the other."""
    run_id, worktree = start(repo)
    exe = str(Path(sys.executable).parent / "sandbox")
    agent = "import time; print('ready', flush=True); time.sleep(60)"
    first = subprocess.Popen(
        [exe, "run", run_id, "--hooks", "none", "--", sys.executable, "-c", agent],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert first.stdout is not None and first.stdout.readline() == b"ready\n"
        second = sandbox_cmd("run", run_id, "--hooks", "none", "--", "sh", "-c", "echo two > two.txt", cwd=repo)
        assert second.returncode == 0, second.stderr
        assert (Path(worktree) / "two.txt").exists()
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    log = json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo).stdout)
    assert "two.txt" in [f["path"] for e in log for f in e["files"]]


@needs_bwrap
def test_an_agents_own_sandbox_exec_is_recorded_through_the_host_inside_the_same_sandbox(repo: Path) -> None:
    """bubblewrap cannot nest without capabilities: the inner exec runs in the agent's sandbox."""
    run_id, worktree = start(repo)
    exe = str(Path(sys.executable).parent / "sandbox")
    agent = f"{exe} exec {run_id} --call-id call_nested -- sh -c 'echo nested > nested.txt'"
    proc = sandbox_cmd("run", run_id, "--hooks", "none", "--", "sh", "-c", agent, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    entries = {e["call_id"]: e for e in json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo).stdout)}
    nested = entries["call_nested"]
    assert nested["status"] == "succeeded" and [f["path"] for f in nested["files"]] == ["nested.txt"]
    assert nested["input"]["isolation"].startswith("inherited")
    assert (worktree / "nested.txt").read_text() == "nested\n"
    # Outside any sandbox the variable alone changes nothing.
    outside = sandbox_cmd("exec", run_id, "--", "true", cwd=repo, env={envfilter.CONFINED_ENV: "1"})
    assert outside.returncode == 0
    last = json.loads(sandbox_cmd("log", run_id, "--json", cwd=repo).stdout)[-1]
    assert last["input"]["isolation"] == "bwrap, network off"


@needs_bwrap
def test_a_confined_agents_leftover_processes_die_with_it(repo: Path) -> None:
    """The agent is its PID namespace's first process: what it leaves running (setsid too) dies with it."""
    # Durations no one else uses, so a stray `sleep 300` elsewhere on the machine is not taken for ours.
    script = "sleep 3071 & setsid sleep 3073 & echo started; exit 4"
    proc = sandbox_cmd("run", "--new", "--", "sh", "-c", script, cwd=repo)
    assert proc.returncode == 4, proc.stderr
    deadline = time.monotonic() + 10  # the namespace's end is asynchronous: give a loaded machine time
    while True:
        alive = subprocess.run(["pgrep", "-f", "^sleep 307[13]$"], capture_output=True, text=True).stdout.split()
        if alive == [] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert alive == [], alive


# -- least privilege: settings, the environment, hidden commands, doctor --------------------------


def test_least_privilege_settings_and_their_refusals(tmp_path: Path) -> None:
    (tmp_path / ".sandbox.toml").write_text(
        "[isolation]\n"
        'deny_read = ["~/work/keys/"]\nallow_read = ["~/.npmrc"]\nenv_allow = ["MY_*"]\n'
        'unix_sockets = ["/run/podman.sock"]\ntmpfs_size = "64M"\nmax_processes = 100\n'
        'max_file_size = 4096\nmax_memory = "2G"\nmax_call_size = "10MiB"\n'
    )
    cfg = config.load(str(tmp_path))
    assert cfg.deny_read == ["~/work/keys/"] and cfg.allow_read == ["~/.npmrc"] and cfg.env_allow == ["MY_*"]
    assert cfg.unix_sockets == ["/run/podman.sock"]
    assert cfg.limits == {
        "tmpfs_size": 64 * 2**20,
        "max_processes": 100,
        "max_file_size": 4096,
        "max_memory": 2 * 2**30,
        "max_call_size": 10 * 2**20,
    }
    for bad, message in (
        ('tmpfs_size = "lots"', "isolation.tmpfs_size must be a positive size"),
        ("max_processes = 0", "isolation.max_processes must be a positive whole number"),
        ('max_processes = "10"', "isolation.max_processes must be a positive whole number"),
        ("deny_read = '~/.x'", "isolation.deny_read must be an array of strings"),
        ("deny_read = ['keys/']", "isolation.deny_read entry 'keys/' is not absolute"),
        ("allow_read = ['~user/.npmrc']", "isolation.allow_read entry '~user/.npmrc' is not absolute"),
    ):
        (tmp_path / ".sandbox.toml").write_text(f"[isolation]\n{bad}\n")
        with pytest.raises(config.ConfigError, match=message):
            config.load(str(tmp_path))


def test_the_environment_passes_by_allowlist_and_the_sandboxs_own_variables_after_it() -> None:
    env = {
        "PATH": "/bin",
        "LC_ALL": "C",
        "GITHUB_TOKEN": "t",
        "SSH_AUTH_SOCK": "/s",
        "DBUS_SESSION_BUS_ADDRESS": "x",
        "ANTHROPIC_API_KEY": "k",
        "SANDBOX_RUN": "r",
        envfilter.MCP_TOKEN_ENV: "m",
    }
    assert envfilter.filter_env(env, envfilter.DEFAULT_ENV_ALLOW) == {"PATH": "/bin", "LC_ALL": "C", "SANDBOX_RUN": "r"}
    claude = (*envfilter.DEFAULT_ENV_ALLOW, *adapters.agent("claude-code").ENV)
    assert "ANTHROPIC_API_KEY" in envfilter.filter_env(env, claude)
    assert "GITHUB_TOKEN" in envfilter.filter_env(env, (*claude, "GITHUB_*"))


@needs_bwrap
def test_a_command_hidden_inside_gets_one_line_naming_its_path_and_why(repo: Path) -> None:
    run_id, _worktree = start(repo)
    tool = repo / "tool.sh"
    tool.write_text("#!/bin/sh\necho ran\n")
    tool.chmod(0o755)
    proc = sandbox_cmd("exec", run_id, "--", str(tool), cwd=repo)
    err = proc.stderr.decode()
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert err.count("\n") == 1 and str(tool) in err and "your working tree" in err, err
    assert b"ran" not in proc.stdout


@needs_bwrap
def test_the_sandbox_and_the_agent_stay_visible_wherever_they_are_installed(tmp_path: Path) -> None:
    """Installed below /tmp (private inside), the interpreter, the sandbox's package and the agent's
    executable are bound back read-only."""
    from sandbox.cli.isolation import installed_paths

    agent = tmp_path / "tools" / "node_modules" / "@x" / "agent" / "bin" / "agent"
    agent.parent.mkdir(parents=True)
    agent.write_text("#!/bin/sh\necho agent-ran\n")
    agent.chmod(0o755)
    paths = installed_paths([str(agent)])
    assert str(tmp_path / "tools" / "node_modules") in paths
    assert os.path.abspath(sys.prefix) in paths
    policy = spawn.Policy(writable=(str(tmp_path / "w"),), protected=(), readable=tuple(paths))
    (tmp_path / "w").mkdir()
    code = (
        "import sandbox, sys; print('py-ran', sandbox.__name__); sys.stdout.flush(); "
        f"import subprocess; subprocess.run([{str(agent)!r}])"
    )
    box = spawn.spawn(isolation(), policy, [sys.executable, "-c", code], str(tmp_path / "w"), stdout=subprocess.PIPE)
    out = box.proc.communicate(timeout=60)[0]
    assert box.wait() == 0 and b"py-ran sandbox" in out and b"agent-ran" in out, out


@needs_bwrap
def test_doctor_says_the_effective_policy(repo: Path) -> None:
    from sandbox.cli import outputs

    home = Path(os.environ["HOME"])
    (home / ".aws").mkdir(exist_ok=True)
    (home / ".aws" / "credentials").write_text("[default]\n")
    (repo / ".sandbox.toml").write_text('[isolation]\nmax_processes = 77\ntmpfs_size = "64M"\n')
    run_id, worktree = start(repo)
    proc = sandbox_cmd("doctor", run_id, "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    data = outputs.check("doctor", json.loads(proc.stdout))
    assert data.run == run_id and data.isolate and str(worktree.resolve()) in data.writable
    assert str(home / ".aws") in data.masked
    hidden = {h.path: h.why for h in data.hidden}
    assert "your working tree" in hidden[str(repo.resolve())]
    assert data.limits.max_processes == 77 and data.limits.tmpfs_bytes == 64 * 2**20
    assert "SSH_AUTH_SOCK" not in data.env_allow and data.network.run == "allow" and data.network.exec == "off"
    human = sandbox_cmd("doctor", cwd=repo)
    text = human.stdout.decode()
    assert human.returncode == 0 and "this machine cannot enforce" in text and "processes 77" in text, text


@needs_bwrap
def test_allow_read_keeps_one_file_of_a_masked_directory_readable(repo: Path) -> None:
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh" / "known_hosts").write_text("github.com ssh-ed25519 AAAA\n")
    (home / ".ssh" / "id_test").write_text("PRIVATE\n")
    try:
        (repo / ".sandbox.toml").write_text('[isolation]\nallow_read = ["~/.ssh/known_hosts"]\n')
        run_id, _worktree = start(repo)
        shown = f"cat {home}/.ssh/known_hosts; cat {home}/.ssh/id_test || echo masked"
        proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", shown, cwd=repo)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.decode().split("\n")[:2] == ["github.com ssh-ed25519 AAAA", "masked"], proc.stdout
    finally:
        (home / ".ssh" / "id_test").unlink()


def test_env_patterns_match_as_fnmatch_does_without_compiling_them() -> None:
    import fnmatch

    allow = (*envfilter.DEFAULT_ENV_ALLOW, *adapters.agent("claude-code").ENV, "A?B", "X[YZ]", "Q*R*", "")
    names = ["PATH", "PATHX", "LC_ALL", "LC_", "lc_all", "BASH_X_TIMEOUT_MS", "BASH_TIMEOUT", "AXB", "XY", "XQ"]
    names += ["QxRy", "QR", "SANDBOX_", "GIT_AUTHOR_NAME", "", "*"]
    for patterns in (allow, ("*",), ("[",), ("A[",), ()):
        passes = envfilter.env_matcher(patterns)
        for name in names:
            assert passes(name) == any(fnmatch.fnmatchcase(name, p) for p in patterns), (patterns, name)


def test_a_v1_cgroup_is_joined_through_its_one_thread_door_and_children_are_born_inside() -> None:
    """Writing ``0`` to a v1 ``tasks`` moves only the writer (a one-thread ``sh``) and skips the kernel's
    global thread-group lock, whose RCU wait cost 9-14 ms of every confined ``sandbox exec``."""
    from sandbox.confine import hardening

    groups = hardening.make_cgroups(64, 1 << 30)
    if not groups.dirs:
        pytest.skip("no cgroup can be made here")
    try:
        for path, door in zip(groups.dirs, groups.join_files, strict=True):
            v1 = any(path.startswith(os.path.join(hardening.CGROUP_ROOT, c) + "/") for c in ("pids", "memory"))
            assert door == os.path.join(path, "tasks" if v1 else "cgroup.procs")
        show = "cat /proc/self/cgroup; sh -c 'cat /proc/self/cgroup'"
        proc = subprocess.run([*groups.join_argv(), "/bin/sh", "-c", show], capture_output=True, check=True)
        out = proc.stdout.decode()
        for path in groups.dirs:
            assert out.count("/" + os.path.basename(path) + "\n") == 2, out  # the shell and its child
    finally:
        groups.remove()
    assert groups.dirs == [] and groups.join_files == []


DIE_WITH_PARENT = r"""
import os, sys, time
from sandbox.confine import spawn
iso = spawn.Isolation(enabled=True, network=True, program=sys.argv[1], interactive=False)
policy = spawn.Policy(writable=(sys.argv[2],), protected=(), readable=tuple(sys.argv[3:]), network=True)
proc = spawn.spawn(iso, policy, ["sleep", "60"], sys.argv[2])
deadline = time.monotonic() + 10
while not proc.command_pids() and time.monotonic() < deadline:
    time.sleep(0.02)
print(proc.command_pids()[0], flush=True)
time.sleep(60)
"""


@needs_bwrap
def test_a_sandbox_sharing_the_network_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """With the host's network shared, bubblewrap is started from a Landlock-scoped thread, and its
    --die-with-parent is tied to that thread: the thread lives as long as the sandbox, so a killed
    ``sandbox`` process takes its sandbox along (and a live one is never killed by the thread's end)."""
    from sandbox.confine import hardening

    if hardening.landlock_abi() < hardening.SCOPE_ABI:
        pytest.skip("this kernel has no Landlock scoping: the sandbox is started from the caller's thread")
    starter = subprocess.Popen(
        [sys.executable, "-c", DIE_WITH_PARENT, str(BWRAP), str(tmp_path), *visible()],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert starter.stdout is not None
        inner = int(starter.stdout.readline())
        time.sleep(0.5)  # long past the scoped thread's start: it must still be holding the sandbox
        assert os.path.exists(f"/proc/{inner}"), "the sandbox died while its starter lived"
    finally:
        starter.kill()
        starter.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{inner}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{inner}"), "the sandbox outlived the process that started it"


@needs_bwrap
def test_sandboxes_sharing_the_network_started_side_by_side_all_run_to_their_end(tmp_path: Path) -> None:
    """The Landlock-scoped thread that starts bubblewrap outlives it: when it ended at once, a
    bubblewrap that had armed --die-with-parent by then was SIGKILLed (a sandbox "that could not be
    set up", or a command dead of signal 9), one start in a few when several start together."""
    from concurrent.futures import ThreadPoolExecutor

    from sandbox.confine import hardening

    if hardening.landlock_abi() < hardening.SCOPE_ABI:
        pytest.skip("this kernel has no Landlock scoping: the sandbox is started from the caller's thread")
    policy = spawn.Policy(writable=(str(tmp_path),), protected=(), readable=visible(), network=True)

    def one(_: int) -> int:
        return spawn.spawn(isolation(network=True), policy, ["sh", "-c", "sleep 0.2"], str(tmp_path)).wait()

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(one, range(40)))
    assert codes == [0] * 40


@needs_bwrap
def test_exec_is_bounded_in_memory_where_that_costs_no_slow_cgroup_move(repo: Path) -> None:
    """``sandbox exec`` gets the memory bound by default wherever it is free (a v1 memory hierarchy
    joined through ``tasks``, or the v2 cgroup made for the process bound anyway); with a small
    ``max_memory`` a command that allocates past it is stopped, its sandbox's other limits intact."""
    from sandbox.confine import hardening

    parents = hardening.cgroup_parents()
    memory = parents.get("memory")
    if memory is None:
        pytest.skip("no memory cgroup can be made here")
    v1 = memory.startswith(os.path.join(hardening.CGROUP_ROOT, "memory"))
    free = v1 or (os.geteuid() == 0 and parents.get("pids") == memory)
    run_id, _worktree = start(repo)
    proc = sandbox_cmd("exec", run_id, "--", "cat", "/proc/self/cgroup", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().splitlines()
    bounded = any(hardening.CGROUP_PREFIX in line and ("memory" in line or line.startswith("0::")) for line in lines)
    assert bounded == free, lines
    (repo / ".sandbox.toml").write_text('[isolation]\nmax_memory = "64M"\n')
    hog = "b = bytearray(256 * 1024 * 1024); print('survived')"
    proc = sandbox_cmd("exec", run_id, "--", sys.executable, "-c", hog, cwd=repo)
    assert proc.returncode != 0 and b"survived" not in proc.stdout, (proc.returncode, proc.stdout, proc.stderr)


_LAUNCHER = """
import signal, subprocess, sys
signal.signal(signal.SIGINT, lambda *_: None)  # handled, not ignored: the child gets its default back
child = subprocess.Popen([sys.executable, "-c", "import time; open('child.started', 'w').close(); time.sleep(60)"])
sys.exit(child.wait() and 130)
"""


@needs_bwrap
def test_sigint_reaches_a_launchers_child_as_a_terminals_would(tmp_path: Path) -> None:
    """An agent whose launcher ignores Ctrl-C and relaunches itself (Gemini CLI's node does): SIGINT sent to
    the sandbox's command without a terminal reaches the whole group, so the child stops too (it ran on)."""
    policy = spawn.Policy(writable=(str(tmp_path),), protected=(), readable=visible())
    proc = spawn.spawn(isolation(), policy, [sys.executable, "-c", _LAUNCHER], str(tmp_path))
    wait_until(lambda: (tmp_path / "child.started").exists(), timeout=30)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait() == 130
    assert time.monotonic() - started < scaled(20)  # the child slept 60 s


@needs_bwrap
def test_the_sandboxs_own_bubblewrap_is_known_while_it_ends(tmp_path: Path) -> None:
    """A bubblewrap that is ending has no ``exe`` link any more; it is still the sandbox's own (by its name
    and its place in the PID namespaces), never reported as a process the agent left running."""
    from sandbox.agent import procs

    proc = subprocess.Popen(["bwrap", "--ro-bind", "/", "/", "true"])
    try:
        wait_until(lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z", 30)
        with pytest.raises(OSError):
            os.readlink(f"/proc/{proc.pid}/exe")
        assert procs.sandbox_own(proc.pid)
    finally:
        proc.wait()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert not procs.sandbox_own(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
