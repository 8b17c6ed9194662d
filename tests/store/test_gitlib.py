"""pygit2 loaded by the commands without the CA bundle: the environment is the user's again afterwards."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import sandbox_cmd


@pytest.mark.parametrize("users", ["/nowhere/my-cas.pem", None])
def test_what_a_command_runs_sees_ssl_cert_file_as_you_set_it(repo: Path, users: str | None) -> None:
    """The command's children get the variable as it was: `exec --tool` (a form only the click command serves,
    which loads pygit2 this way), unconfined so that the user's environment reaches the command whole."""
    run = json.loads(sandbox_cmd("start", "--json", cwd=repo).stdout)["run"]
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    if users is not None:
        env["SSL_CERT_FILE"] = users
    res = subprocess.run(
        [str(Path(sys.executable).parent / "sandbox"), "exec", run, "--tool", "t", "--isolate", "off", "--"]
        + ["sh", "-c", 'echo "ssl=${SSL_CERT_FILE-unset}"'],
        cwd=repo,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert f"ssl={users or 'unset'}" in res.stdout.decode().splitlines()


@pytest.mark.parametrize("threads", [1, 2])
def test_pygit2_so_loaded_trusts_no_ca_and_still_reads_the_repository(repo: Path, tmp_path: Path, threads: int) -> None:
    """One thread: pygit2 parses no CA file. Two (a child started meanwhile would inherit the variable):
    pygit2 loads as it always does. Either way the variable is the user's afterwards and git reads."""
    code = (
        "import os, sys, threading\n"
        "from sandbox.store.gitlib import install\n"
        "install()\n"
        "stop = threading.Event()\n"
        "if sys.argv[2] == '2': threading.Thread(target=stop.wait, daemon=True).start()\n"
        "import pygit2\n"
        "stop.set()\n"
        "print(os.environ.get('SSL_CERT_FILE'), pygit2.settings.ssl_cert_file in (None, os.devnull),"
        " pygit2.Repository(sys.argv[1]).head.target is not None, type(pygit2.__loader__).__name__)\n"
    )
    system = ssl.get_default_verify_paths().openssl_cafile
    if not os.path.isfile(system):
        pytest.skip("no CA bundle on this machine")
    users = tmp_path / "user.pem"  # the user's own choice of CA file (a copy of the system's)
    shutil.copyfile(system, users)
    env = {**os.environ, "SSL_CERT_FILE": str(users)}
    res = subprocess.run(
        [sys.executable, "-c", code, str(repo), str(threads)], env=env, capture_output=True, text=True, check=True
    )
    skipped = "True" if threads == 1 else "False"
    assert res.stdout.split() == [str(users), skipped, "True", "SourceFileLoader"]
