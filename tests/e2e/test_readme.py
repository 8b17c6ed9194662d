"""The README holds itself to its tests: every test it names exists, every promise names one, and every
command is in its commands table (so a promise cannot lose its test, nor a command its line, unnoticed)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sandbox.cli.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"\n## {title}")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]


def table_rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows[1:]  # the header


def test_every_test_the_readme_names_exists() -> None:
    named = set(re.findall(r"`(tests/[^`\s]+?)`", README))
    assert named, "the README names no test"
    for ref in sorted(named):
        path, _, name = ref.partition("::")
        assert (ROOT / path).exists(), f"README names {ref}, which does not exist"
        if name:
            defined = {
                node.name
                for node in ast.walk(ast.parse((ROOT / path).read_text(encoding="utf-8")))
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            }
            assert name.split("::")[0].split("[")[0] in defined, f"README names {ref}, which does not exist"


def test_every_promise_names_a_test() -> None:
    rows = table_rows(section("What it promises, and the tests that hold it to it"))
    assert len(rows) > 20
    for promise, *tests in rows:
        assert tests and re.search(r"`tests/", tests[-1]), f"this promise names no test: {promise[:80]}"


def test_every_command_is_in_the_commands_table() -> None:
    table = section("Commands")
    listed = set(re.findall(r"`([a-z][a-z-]*)(?=[ `/])", table))
    missing = sorted(name for name in COMMANDS if name not in listed)
    assert not missing, f"commands missing from the README's Commands table: {missing}"
