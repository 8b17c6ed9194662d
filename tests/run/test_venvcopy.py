"""A virtualenv brought into a run (``include``) runs the run's copy, never the user's (issue #31 item 9).

A real ``python3 -m venv`` with the project installed editable (``pip install -e . --no-build-isolation
--no-index``), copied by ``.worktreeinclude``: its scripts, ``activate`` and the editable install's
path point at the copy and the run's worktree. Inside a real ``sandbox exec`` (bubblewrap) the
copy's ``pip`` runs (the user's tree is not there), and outside it, the copy's ``pip install``
leaves the user's virtualenv as it was.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_repo, sandbox_cmd, tree_digest
from tests.hook_fixtures import start_run

PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "mypkg"
version = "0.1"

[tool.setuptools]
packages = ["mypkg"]
"""


def make_project(tmp_path: Path) -> Path:
    root = make_repo(
        tmp_path / "proj",
        {
            ".gitignore": ".venv/\n*.egg-info/\nbuild/\n",
            ".worktreeinclude": ".venv/\n",
            "pyproject.toml": PYPROJECT,
            "mypkg/__init__.py": "WHERE = __file__\n",
        },
    )
    venv = root / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # setuptools from this interpreter's own environment: no index is ever asked.
    setuptools_dir = Path(__import__("setuptools").__file__).parent.parent
    subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation", "-e", str(root)],
        check=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(setuptools_dir), "HOME": str(tmp_path)},
        capture_output=True,
    )
    return root


def test_the_copied_virtualenv_points_at_itself_and_the_runs_files(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    mine = tree_digest(root / ".venv")
    run = start_run(root)
    wt = Path(run.worktree)
    assert run.include_report.copied == [".venv"]
    pip = (wt / ".venv/bin/pip").read_text()
    assert pip.startswith(f"#!{wt}/.venv/bin/python") and f"{root}/.venv" not in pip
    assert f"{wt}/.venv" in (wt / ".venv/bin/activate").read_text()
    assert f"'{root}/.venv" not in (wt / ".venv/bin/activate").read_text()
    # The editable install imports the run's files, not yours.
    proc = subprocess.run(
        [str(wt / ".venv/bin/python"), "-c", "import mypkg; print(mypkg.WHERE)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == f"{wt}/mypkg/__init__.py"
    # The copy's pip, run unconfined, changes the copy only.
    subprocess.run([str(wt / ".venv/bin/pip"), "uninstall", "-q", "-y", "mypkg"], check=True, capture_output=True)
    assert tree_digest(root / ".venv") == mine


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_copied_virtualenv_runs_inside_the_sandbox(tmp_path: Path) -> None:
    root = make_project(tmp_path)
    run = start_run(root)
    script = ".venv/bin/pip --version && .venv/bin/python -c 'import mypkg; print(mypkg.WHERE)'"
    proc = sandbox_cmd("exec", run.run_id, "--", "sh", "-c", script, cwd=root)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    assert f"from {run.worktree}/.venv/" in out and f"{run.worktree}/mypkg/__init__.py" in out
