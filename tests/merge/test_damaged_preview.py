"""A preview never shows a damaged object as if it were what the agent wrote.

``sandbox diff`` prints through ``git diff``, which reads packed objects without checking their
hashes: a garbled blob of the run was printed as the agent's file, with exit 0. Every changed file's
blobs are now read verified first (:func:`sandbox.merge.preview.diff_text`), and a damaged object
that no command turned into its own refusal is one sentence and exit 1 at the CLI's edge, not an
"unexpected error".
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import replace_stored_object, sandbox_cmd


def _run_with_a_recorded_file(repo: Path) -> tuple[str, str]:
    started = sandbox_cmd("start", "--json", cwd=repo)
    run_id = json.loads(started.stdout)["run"]
    done = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", "echo agent-wrote-this > b.txt", cwd=repo)
    assert done.returncode == 0, done.stderr
    blob = (
        subprocess.run(["git", "hash-object", "--stdin"], input=b"agent-wrote-this\n", capture_output=True, check=True)
        .stdout.decode()
        .strip()
    )
    sandbox_cmd("serve", "--stop", cwd=repo)
    return run_id, blob


@pytest.mark.parametrize("how", [[], ["--stat"], ["--json"], ["--call", "1"]])
def test_a_garbled_recorded_blob_is_reported_in_one_line_not_shown(repo: Path, how: list[str]) -> None:
    run_id, blob = _run_with_a_recorded_file(repo)
    replace_stored_object(repo, blob, b"not what the agent wrote\n")
    shown = sandbox_cmd("diff", run_id, *how, cwd=repo)
    err = shown.stderr.decode()
    assert shown.returncode == 1, (shown.stdout, err)
    assert b"not what the agent wrote" not in shown.stdout
    assert blob in err and "git fsck" in err and "unexpected" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_an_intact_run_still_diffs(repo: Path) -> None:
    run_id, _blob = _run_with_a_recorded_file(repo)
    shown = sandbox_cmd("diff", run_id, cwd=repo)
    assert shown.returncode == 0 and b"+agent-wrote-this" in shown.stdout, shown.stderr


def test_the_mcp_server_says_a_garbled_recorded_blob_in_the_same_sentence(repo: Path) -> None:
    """The MCP server's show_diff tool and diff resource: the CLI's sentence as the tool's error, no garbage."""
    import anyio

    from tests.mcp.test_mcp import connect, text

    run_id, blob = _run_with_a_recorded_file(repo)
    replace_stored_object(repo, blob, b"not what the agent wrote\n")

    async def main() -> tuple[bool, str, str]:
        async with connect(repo, "--run", run_id) as session:
            tool = await session.call_tool("show_diff", {})
            try:
                resource = await session.read_resource("sandbox://run/diff")  # type: ignore[arg-type]
                said = "".join(getattr(c, "text", "") for c in resource.contents)
            except Exception as exc:  # noqa: BLE001 - the SDK raises the server's error as McpError
                said = f"error: {exc}"
            return bool(tool.is_error), text(tool), said

    is_error, tool_said, resource_said = anyio.run(main)
    assert is_error, tool_said
    for said in (tool_said, resource_said):
        assert blob in said and "git fsck" in said and "not what the agent wrote" not in said, said
        assert "unexpected" not in said.lower() and "Traceback" not in said, said


@pytest.mark.parametrize("how", [[], ["--json"]])
def test_a_selection_reads_only_its_own_blobs(repo: Path, how: list[str]) -> None:
    """Verification costs what is shown (O(selected paths)): a garbled blob outside ``-- PATH`` neither blocks
    the review of the other files nor is read; the selection holding it is still refused."""
    run_id, blob = _run_with_a_recorded_file(repo)
    done = sandbox_cmd("exec", run_id, "--isolate", "off", "--", "sh", "-c", "echo intact > c.txt", cwd=repo)
    assert done.returncode == 0, done.stderr
    replace_stored_object(repo, blob, b"not what the agent wrote\n")
    other = sandbox_cmd("diff", run_id, *how, "--", "c.txt", cwd=repo)
    assert other.returncode == 0 and b"intact" in other.stdout, other.stderr
    assert b"not what the agent wrote" not in other.stdout
    refused = sandbox_cmd("diff", run_id, *how, "--", "b.txt", cwd=repo)
    assert refused.returncode == 1 and blob in refused.stderr.decode(), refused.stderr
