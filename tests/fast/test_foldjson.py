"""The fast path's typed JSON (sandbox.fast.foldjson) names only fields its models have (issue 24).

The fast path reads the fold as the JSON the pydantic models dump, typed by ``TypedDict``\\ s it
cannot check against the models at run time (it may not import them). These tests do: every field
a ``TypedDict`` names is a field of the model it mirrors, and a real run's dumped fold has every
field each ``TypedDict`` requires, at every level the fast path reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import models
from sandbox.cli import outputs
from sandbox.fast import agentgit, foldjson, views
from sandbox.run.run import Run
from sandbox.store.project import Project

MIRRORS = [
    (foldjson.RunInfoJson, models.RunInfo),
    (foldjson.FileChangeJson, models.FileChange),
    (foldjson.EntryJson, models.LedgerEntry),
    (foldjson.PartialJson, models.PartialApply),
    (foldjson.UserPathJson, models.UserPathRecord),
    (foldjson.UndoItemJson, models.UndoItem),
    (foldjson.FoldDataJson, models.FoldData),
    (foldjson.StateJson, models.LedgerState),
    (foldjson.FetchedJson, models.FetchedFrom),
    (foldjson.RefusalJson, outputs.runs.NetworkRefusalRow),
    (foldjson.RunRowJson, outputs.runs.StatusOutput),
    (foldjson.StatusHostJson, outputs.runs.StatusHost),
]


def keys(typed: type) -> set[str]:
    return set(typed.__required_keys__) | set(typed.__optional_keys__)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("typed", "model"), MIRRORS, ids=[t.__name__ for t, _ in MIRRORS])
def test_every_typed_field_is_a_field_of_its_model(typed: type, model: type[models.BaseModel]) -> None:
    assert keys(typed) <= set(model.model_fields), keys(typed) - set(model.model_fields)


def test_the_agents_git_json_is_its_activity() -> None:
    assert keys(foldjson.AgentGitJson) == set(agentgit.GitActivity._fields)
    assert keys(foldjson.CommitJson) == {"id", "subject"}


def test_a_real_fold_has_every_required_field(repo: Path) -> None:
    project, workdir, _ = Project.discover(str(repo))
    assert workdir is not None
    run = Run.start(project, workdir, label="typed")
    with run.tool_call("write_file", {"path": "src/app.py"}) as call:
        call.write("src/app.py", "print('agent')\n")
    state = foldjson.state_json(run.state().model_dump(mode="json"))
    assert set(foldjson.StateJson.__required_keys__) <= set(state)
    assert set(foldjson.RunInfoJson.__required_keys__) <= set(state["run"])
    assert set(foldjson.FoldDataJson.__required_keys__) <= set(state["data"])
    entry = views.entries(state)[0]
    assert set(foldjson.EntryJson.__required_keys__) <= set(entry)
    assert set(foldjson.FileChangeJson.__required_keys__) <= set(entry["files"][0])


def test_the_run_row_names_every_field_of_the_status_output() -> None:
    # list and status print these rows as their --json: a field the output has, the row types too.
    assert keys(foldjson.RunRowJson) == set(outputs.runs.StatusOutput.model_fields)
    assert keys(foldjson.StatusHostJson) == set(outputs.runs.StatusHost.model_fields)
