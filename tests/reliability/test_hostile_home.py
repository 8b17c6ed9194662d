"""Default deny in the home (issue #31, item 1): a confined command sees nothing of the user's home
but its allowlist: toolchains read-only, the git identity alone, what ``allow_read`` adds.

A prompt-injected agent's command, from inside a real ``sandbox exec`` (real bubblewrap), tries to
read credential files that no deny list names (Maven's ``settings.xml``, ``rclone.conf``, a shell rc
file, another project's ``.env`` and ``.git/config``, the agents' logins), to list the home and
another user's home, and to read the ``http.extraHeader`` token of the user's ``~/.gitconfig``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import sandbox_cmd

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

#: Reads each path, lists each directory; one JSON line: path -> text, listing or "refused: why".
PROBE = r"""
import json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        out[path] = sorted(os.listdir(path)) if os.path.isdir(path) else open(path).read()
    except OSError as exc:
        out[path] = "refused: " + (exc.strerror or str(exc))
print(json.dumps(out))
"""

SECRETS = {
    ".m2/settings.xml": "<password>maven-secret</password>",
    ".gradle/gradle.properties": "token=gradle-secret",
    ".config/rclone/rclone.conf": "pass = rclone-secret",
    ".s3cfg": "secret_key = s3-secret",
    ".bashrc": "export API_TOKEN=bashrc-secret",
    "work/other/.env": "DB_PASSWORD=env-secret",
    "work/other/.git/config": "[remote]\n\turl = https://user:git-secret@example.com/x",
    ".claude/.credentials.json": '{"token": "claude-secret"}',
    ".codex/auth.json": '{"token": "codex-secret"}',
    ".cargo/credentials.toml": "token = cargo-secret",
}
TOOLS = {
    ".m2/repository/org/x/x.jar": "jar",
    ".cargo/bin/mytool": "#!/bin/sh\necho tool\n",
    ".cargo/registry/cache/x.crate": "crate",
    ".local/bin/helper": "#!/bin/sh\necho helper\n",
    ".npm/_cacache/index": "npm-cache",
}
GITCONFIG = (
    "[user]\n\tname = Ada Lovelace\n\temail = ada@example.com\n"
    '[http "https://example.com/"]\n\textraHeader = Authorization: Bearer gitconfig-secret\n'
    "[credential]\n\thelper = store\n[safe]\n\tdirectory = *\n"
)


def make_home(home: Path) -> None:
    for rel, text in {**SECRETS, **TOOLS}.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    for rel in (".cargo/bin/mytool", ".local/bin/helper"):
        os.chmod(home / rel, 0o755)
    (home / ".gitconfig").write_text(GITCONFIG)
    (home / "allowed").mkdir()
    (home / "allowed" / "notes.txt").write_text("allowed by the user")


def env_for(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def start(repo: Path, env: dict[str, str]) -> str:
    proc = sandbox_cmd("start", "--json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    run_id: str = json.loads(proc.stdout)["run"]
    return run_id


def probe(repo: Path, run_id: str, env: dict[str, str], *paths: str, script: str = PROBE) -> dict[str, object]:
    """What ``script`` (a confined command printing one JSON line last) finds for ``paths``."""
    proc = sandbox_cmd("exec", run_id, "--", "python3", "-c", script, *paths, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    found: dict[str, object] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return found


def test_the_home_is_empty_inside_but_for_its_allowlist(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "userhome"
    make_home(home)
    (repo / ".sandbox.toml").write_text(f'[isolation]\nallow_read = ["{home}/allowed"]\n')
    env = env_for(home)
    run_id = start(repo, env)
    secrets = [str(home / rel) for rel in SECRETS]
    tools = [str(home / rel) for rel in TOOLS]
    seen = probe(repo, run_id, env, *secrets, *tools, str(home), str(home / "allowed" / "notes.txt"))
    leaked = {p: v for p, v in seen.items() if p in secrets and not str(v).startswith("refused")}
    assert not leaked, f"credential files readable inside: {leaked}"
    for rel, text in TOOLS.items():
        assert seen[str(home / rel)] == text, f"toolchain {rel} not readable inside"
    assert seen[str(home / "allowed" / "notes.txt")] == "allowed by the user"
    listing = seen[str(home)]
    assert isinstance(listing, list)
    assert not {"work", ".bashrc", ".s3cfg", ".claude", ".codex"} & set(listing), listing


def test_the_git_identity_passes_alone(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "userhome"
    make_home(home)
    env = env_for(home)
    run_id = start(repo, env)
    # The agent's git reads its own settings file, which includes ~/.gitconfig (sandbox.store.gitguard).
    script = (
        'echo "user.name=$(git config user.name)"; echo "user.email=$(git config user.email)"; '
        "git config --includes --list; cat ~/.gitconfig"
    )
    proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", script, cwd=repo, env=env)
    out = proc.stdout.decode()
    assert "user.name=Ada Lovelace" in out and "user.email=ada@example.com" in out, out + proc.stderr.decode()
    assert "gitconfig-secret" not in out and "credential" not in out, out


def test_toolchains_run_read_only(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "userhome"
    make_home(home)
    env = env_for(home)
    run_id = start(repo, env)
    script = f"{home}/.cargo/bin/mytool && helper; echo x > {home}/.cargo/bin/planted || echo refused"
    proc = sandbox_cmd("exec", run_id, "--", "sh", "-c", f"PATH={home}/.local/bin:$PATH; {script}", cwd=repo, env=env)
    assert proc.stdout.decode().split() == ["tool", "helper", "refused"], proc.stderr.decode()
    assert not (home / ".cargo" / "bin" / "planted").exists()


def test_other_homes_are_hidden(repo: Path, tmp_path: Path) -> None:
    env = env_for(tmp_path / "userhome")
    make_home(tmp_path / "userhome")
    run_id = start(repo, env)
    homes = [h for h in ("/home", "/root") if os.path.isdir(h) and os.access(h, os.R_OK)]
    if not homes:
        pytest.skip("no other home on this machine")
    seen = probe(repo, run_id, env, *homes)
    for home in homes:
        listing = seen[home]
        # Only what the sandbox binds back (its own interpreter, the repository) may show there.
        assert not isinstance(listing, list) or len(listing) <= len(os.listdir(home)), listing
        if isinstance(listing, list) and os.listdir(home):
            assert set(listing) < set(os.listdir(home)) or not listing, (home, listing)


@pytest.mark.parametrize("entries", [10, 1000])
def test_start_up_does_not_walk_the_home(repo: Path, tmp_path: Path, entries: int) -> None:
    """The policy costs the same with 10 or 1,000 entries in the home (one stat per allowlist entry)."""
    from sandbox.cli.isolation import resolve
    from sandbox.confine.policy import policy_for

    home = tmp_path / "userhome"
    make_home(home)
    for i in range(entries):
        (home / f"project{i}").mkdir()
        (home / f"project{i}" / "f").write_text("x")
    saved = dict(os.environ)
    os.environ.update(env_for(home))
    try:
        run_id = start(repo, env_for(home))
        iso = resolve(str(repo), "exec", None, None)
        from sandbox.store import layout

        common = str(repo / ".git")
        wt = layout.place_of(common, run_id).worktree
        began = time.perf_counter()
        for _ in range(20):
            policy_for(iso, common_dir=common, run_id=run_id, worktree=wt, user_workdir=str(repo))
        per_call = (time.perf_counter() - began) / 20
    finally:
        os.environ.clear()
        os.environ.update(saved)
    print(f"policy_for with {entries} entries in the home: {per_call * 1000:.2f} ms")
    assert per_call < 0.05


def test_no_agent_login_is_visible_to_exec(repo: Path, tmp_path: Path) -> None:
    """The run's agent homes hold each agent's login (seeded from yours at a session's start): a plain
    confined command (``exec``, ``compare --check``, MCP ``run_command``) sees none of them."""
    from sandbox.agent import agenthome
    from sandbox.store import layout

    home = tmp_path / "userhome"
    make_home(home)
    env = env_for(home)
    run_id = start(repo, env)
    run_dir = layout.run_dir(str(repo / ".git"), run_id)
    logins = {
        "claude": ".credentials.json",
        "gemini": ".gemini/oauth_creds.json",
        "codex": "auth.json",
    }
    paths = []
    for agent, rel in logins.items():
        path = Path(agenthome.home_of(run_dir, agent)) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{{"token": "{agent}-login"}}')
        paths.append(str(path))
    seen = probe(repo, run_id, env, *paths, os.path.join(run_dir, agenthome.STATE_DIR))
    leaked = {p: v for p, v in seen.items() if "-login" in str(v) or (isinstance(v, list) and v)}
    assert not leaked, f"agent logins visible to a confined exec: {leaked}"


def test_variables_git_config_and_unknown_sandbox_names_do_not_pass(repo: Path, tmp_path: Path) -> None:
    """``GIT_CONFIG_KEY_n``/``VALUE_n`` (an ``http.extraHeader`` token) and ``SANDBOX_*`` names the
    sandbox does not list stay outside; the listed ones pass."""
    home = tmp_path / "userhome"
    make_home(home)
    env = env_for(home)
    run_id = start(repo, env)
    given = {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": "Authorization: Bearer var-secret",
        "SANDBOX_DEPLOY_KEY": "sandbox-prefixed-secret",
        "SANDBOX_HOOK_AUTOSTART": "0",
    }
    proc = sandbox_cmd("exec", run_id, "--", "env", cwd=repo, env={**env, **given})
    inside = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    assert "var-secret" not in inside and "extraHeader" not in inside, inside
    # The one pair inside is the sandbox's own: the agent's git stores Git LFS contents in its git dir.
    pairs = sorted(line.partition("=")[0] for line in inside.splitlines() if line.startswith("GIT_CONFIG_"))
    assert [p for p in pairs if p[-1].isdigit() or p.endswith("COUNT")] == [
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_KEY_0",
        "GIT_CONFIG_VALUE_0",
    ], pairs
    assert "GIT_CONFIG_KEY_0=lfs.storage" in inside.splitlines(), inside
    assert "sandbox-prefixed-secret" not in inside and "SANDBOX_HOOK_AUTOSTART=0" in inside, inside


def test_gemini_gets_the_variables_it_reads_not_every_google_one(repo: Path) -> None:
    from sandbox.cli.isolation import resolve
    from sandbox.confine import envfilter

    iso = resolve(str(repo), "run", None, "on", agent=("gemini", "gemini"), argv=["gemini"])
    outside = {
        "GEMINI_API_KEY": "k",
        "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:1",
        "GOOGLE_CLOUD_PROJECT": "p",
        "GOOGLE_OAUTH_CLIENT_SECRET": "other-google-secret",
        "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1",
        "GEMINI_CLI_IDE_AUTH_TOKEN": "ide-token",
    }
    passed = envfilter.filter_env(outside, iso.env_allow)
    assert set(passed) == {"GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_CLOUD_PROJECT"}


def test_the_sandboxs_own_git_config_variables_are_renumbered_after_the_users_are_dropped() -> None:
    from sandbox.confine import envfilter

    env = envfilter.filter_env(
        {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader", "GIT_CONFIG_VALUE_0": "x"},
        envfilter.DEFAULT_ENV_ALLOW,
    )
    env.update({"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_1": "core.hooksPath", "GIT_CONFIG_VALUE_1": "/h"})
    envfilter.renumber_git_config(env)
    assert env == {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.hooksPath", "GIT_CONFIG_VALUE_0": "/h"}


def test_doctor_lists_the_allowlist_and_explains_one_path(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "userhome"
    make_home(home)
    env = env_for(home)
    run_id = start(repo, env)
    proc = sandbox_cmd("--json", "doctor", run_id, cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    allowed = {item["path"]: item["why"] for item in report["home_allowlist"]}
    real = home.resolve()
    for rel in (".cargo/bin", ".m2/repository", ".gitconfig"):
        assert str(real / rel) in allowed, allowed
    assert str(real / ".m2") not in allowed and str(real) in {h["path"] for h in report["hidden"]}
    for rel, visible in ((".m2/settings.xml", False), (".m2/repository/org/x/x.jar", True), ("work/other/.env", False)):
        one = sandbox_cmd("--json", "doctor", run_id, "--explain", str(home / rel), cwd=repo, env=env)
        verdict = json.loads(one.stdout)
        assert verdict["visible"] is visible, verdict
        assert (verdict["hint"] is None) is visible and (visible or "allow_read" in verdict["hint"])


def test_the_repositorys_worktree_and_submodule_configs_are_masked(repo: Path) -> None:
    """A token may sit in ``.git/config.worktree`` or a submodule's ``.git/modules/<name>/config`` as well
    as in ``.git/config`` (masked already): none is readable inside."""
    git_dir = repo / ".git"
    (git_dir / "config.worktree").write_text('[http]\n\textraHeader = "Authorization: Bearer wt-secret"\n')
    (git_dir / "modules" / "lib").mkdir(parents=True)
    (git_dir / "modules" / "lib" / "config").write_text("[remote]\n\turl = https://u:sub-secret@example.com/x\n")
    proc = sandbox_cmd("start", "--json", cwd=repo)
    run_id = json.loads(proc.stdout)["run"]
    paths = [str(git_dir / "config.worktree"), str(git_dir / "modules" / "lib" / "config")]
    seen = sandbox_cmd("exec", run_id, "--", "cat", *paths, cwd=repo)
    assert b"secret" not in seen.stdout, seen.stdout
