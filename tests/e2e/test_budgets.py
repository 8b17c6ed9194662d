"""The size budgets of ``make lint`` (.ci/budgets.py, issue 24) catch what they say they catch."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

BUDGETS: dict[str, Any] = runpy.run_path(str(Path(__file__).resolve().parents[2] / ".ci" / "budgets.py"))


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "sandbox"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_library_is_within_its_budgets() -> None:
    problems, _ = BUDGETS["breaches"](Path(__file__).resolve().parents[2] / "sandbox")
    assert problems == []


def test_a_long_module_a_long_function_and_a_loose_dict_are_counted(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(90))
    root = _tree(
        tmp_path,
        {
            "big.py": "\n".join(f"a{i} = {i}" for i in range(700)),
            "long.py": f"class C:\n  def m(self) -> None:\n{body}\n",
            "loose.py": "from typing import Any\nx: dict[str, Any] = {}\ny: dict[str, Any] = {}\n",
        },
    )
    assert BUDGETS["module_lines"](root)["sandbox/big.py"] == 700
    assert [name for name, _ in BUDGETS["long_functions"](root)] == ["sandbox/long.py:C.m"]
    assert BUDGETS["loose_dicts"](root) == {"sandbox/loose.py": 2}
    problems, _ = BUDGETS["breaches"](root)
    assert any("sandbox/big.py has 700 lines" in p for p in problems)
