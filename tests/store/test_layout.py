"""sandbox.store.layout: the data root, the repository key, and finding a run from a directory."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox.run.run import Run
from sandbox.store import layout
from sandbox.store.project import Project
from tests.conftest import examples, git, make_repo


def test_user_data_root_follows_xdg_and_ignores_a_relative_value() -> None:
    assert layout.user_data_root({"XDG_DATA_HOME": "/x/data"}, "/home/u") == "/x/data/sandbox"
    assert layout.user_data_root({"XDG_DATA_HOME": "rel"}, "/home/u") == "/home/u/.local/share/sandbox"
    assert layout.user_data_root({}, "/home/u") == "/home/u/.local/share/sandbox"


@settings(max_examples=examples(500), deadline=None)
@given(st.text(alphabet=st.sampled_from("aZ09_.-\n \u00e9/"), max_size=70) | st.text(max_size=70))
def test_valid_run_id_is_the_pattern_as_re_reads_it(text: str) -> None:
    # Checked without re on the hook's fast path; re's "$" also matches before one final newline.
    assert layout.valid_run_id(text) == bool(re.match(layout.RUN_ID_PATTERN, text))
    for edge in ("a" * 64, "a" * 65, "a" * 64 + "\n", "a\n\n", "\n", "", "-a", "a-", "A.b_c-9"):
        assert layout.valid_run_id(edge) == bool(re.match(layout.RUN_ID_PATTERN, edge)), edge


def test_repo_key_is_readable_and_differs_per_path(tmp_path: Path) -> None:
    a = layout.repo_key(str(tmp_path / "my repo" / ".git"))
    b = layout.repo_key(str(tmp_path / "other" / "my repo" / ".git"))
    assert a.startswith("my_repo-") and b.startswith("my_repo-") and a != b


def test_locate_needs_the_repository_to_name_the_home_back(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    project, workdir, _ = Project.discover(str(repo), str(tmp_path / "data"))
    assert workdir is not None
    run = Run.start(project, workdir)
    assert layout.locate(run.worktree) is not None
    # A copy of the home elsewhere (same origin file) is not the run: the repository names the original.
    assert run.place.home is not None
    copy = tmp_path / "copy" / run.run_id
    shutil.copytree(run.place.home, copy, symlinks=True)
    assert layout.locate(str(copy / "worktree")) is None
    # An origin pointing at a repository that does not know the run: not a run either.
    (copy / "origin").write_text(str(tmp_path / "elsewhere" / ".git") + "\n")
    assert layout.locate(str(copy / "worktree")) is None
    # The user's own tree, and a repository nested in the run's worktree, are no run.
    assert layout.locate(str(repo)) is None
    nested = Path(run.worktree) / "vendor" / "lib"
    make_repo(nested)
    assert layout.locate(str(nested)) is None
    assert layout.locate(str(Path(run.worktree) / "vendor")) is not None
    assert layout.common_dir_of(str(nested)) == os.path.join(str(nested), ".git")
    assert git(run.worktree, "rev-parse", "--show-toplevel").strip() == run.worktree
