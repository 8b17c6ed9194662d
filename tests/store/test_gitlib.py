"""pygit2 loaded by the commands without the CA bundle: the environment is the user's again afterwards."""

from __future__ import annotations

import json
import os
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


def test_pygit2_so_loaded_trusts_no_ca_and_still_reads_the_repository(repo: Path, tmp_path: Path) -> None:
    code = (
        "import os, sys\n"
        "from sandbox.store.gitlib import load_without_ca_bundle\n"
        "load_without_ca_bundle()\n"
        "import pygit2\n"
        "print(os.environ.get('SSL_CERT_FILE'), pygit2.settings.ssl_cert_file in (None, os.devnull),"
        " pygit2.Repository(sys.argv[1]).head.target is not None)\n"
    )
    env = {**os.environ, "SSL_CERT_FILE": str(tmp_path / "user.pem")}
    res = subprocess.run([sys.executable, "-c", code, str(repo)], env=env, capture_output=True, text=True, check=True)
    assert res.stdout.split() == [str(tmp_path / "user.pem"), "True", "True"]
