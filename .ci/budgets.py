"""The house's size budgets (issue 24), checked by ``make lint``.

Counted over the library (``sandbox/``) with the standard library only:

- no module over ``MODULE_LINES`` lines;
- at most ``LONG_FUNCTIONS`` functions (or methods) over ``FUNCTION_LINES`` lines, nested
  functions counted inside the one that holds them;
- at most ``LOOSE_DICTS`` ``dict[str, Any]`` annotations.

Import circles are import-linter's ``acyclic_siblings`` contract (pyproject.toml), with type-only
imports counted. A budget the tree does not meet yet is held where it stands by ``RATCHET``: the
number may go down, never up, and the names listed may only leave the list. Run
``python .ci/budgets.py`` for the figures; it exits 1 with one line per breach.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MODULE_LINES = 600
FUNCTION_LINES = 80
LONG_FUNCTIONS = 4
# The issue set 50; held at 25, near where the tree stands (18), so the typing done is kept.
LOOSE_DICTS = 25

# Where the tree stands today against budgets it does not meet yet: modules still over the line
# limit, and the ceilings for long functions and loose dicts. Lower these as the work lands.
RATCHET_MODULES: frozenset[str] = frozenset()
RATCHET_LONG_FUNCTIONS: int | None = None
RATCHET_LOOSE_DICTS: int | None = None


def module_lines(root: Path) -> dict[str, int]:
    """Lines per library module, by path relative to the repository."""
    return {
        str(p.relative_to(root.parent)): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(root.rglob("*.py"))
    }


def long_functions(root: Path) -> list[tuple[str, int]]:
    """``module:qualname`` and length of every function over ``FUNCTION_LINES`` lines."""
    out: list[tuple[str, int]] = []
    for p in sorted(root.rglob("*.py")):
        tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
        rel = str(p.relative_to(root.parent))
        _walk(tree, rel, "", out)
    return out


def _walk(node: ast.AST, rel: str, prefix: str, out: list[tuple[str, int]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (child.end_lineno or child.lineno) - child.lineno + 1
            if length > FUNCTION_LINES:
                out.append((f"{rel}:{prefix}{child.name}", length))
            # A nested function is part of its holder's length; not counted twice.
        elif isinstance(child, ast.ClassDef):
            _walk(child, rel, f"{prefix}{child.name}.", out)
        else:
            _walk(child, rel, prefix, out)


def loose_dicts(root: Path) -> dict[str, int]:
    """``dict[str, Any]`` occurrences per module (only modules that have some)."""
    counts = {
        str(p.relative_to(root.parent)): p.read_text(encoding="utf-8").count("dict[str, Any]")
        for p in sorted(root.rglob("*.py"))
    }
    return {k: v for k, v in counts.items() if v}


def breaches(root: Path) -> tuple[list[str], list[str]]:
    """(breaches, figures): one whole sentence per breach, and the figures as lines."""
    lines = module_lines(root)
    big = {m: n for m, n in lines.items() if n > MODULE_LINES}
    longs = long_functions(root)
    dicts = loose_dicts(root)
    total_dicts = sum(dicts.values())
    figures = [
        f"modules: {len(lines)}, lines: {sum(lines.values())}",
        f"modules over {MODULE_LINES} lines: {len(big)}"
        + "".join(f"\n  {m} {n}" for m, n in sorted(big.items(), key=lambda kv: -kv[1])),
        f"functions over {FUNCTION_LINES} lines: {len(longs)} (budget {LONG_FUNCTIONS})"
        + "".join(f"\n  {name} {n}" for name, n in sorted(longs, key=lambda kv: -kv[1])),
        f"dict[str, Any]: {total_dicts} (budget {LOOSE_DICTS})",
    ]
    out: list[str] = []
    for m, n in sorted(big.items()):
        if m not in RATCHET_MODULES:
            out.append(f"{m} has {n} lines; the budget is {MODULE_LINES}: split it along its seams.")
    for m in sorted(RATCHET_MODULES):
        if lines.get(m, 0) <= MODULE_LINES:
            out.append(f"{m} is within the budget now (or gone): take it off RATCHET_MODULES in .ci/budgets.py.")
    ceiling = max(LONG_FUNCTIONS, RATCHET_LONG_FUNCTIONS or 0)
    if len(longs) > ceiling:
        out.append(
            f"{len(longs)} functions are over {FUNCTION_LINES} lines; at most {ceiling} may be: split the new ones."
        )
    ceiling = max(LOOSE_DICTS, RATCHET_LOOSE_DICTS or 0)
    if total_dicts > ceiling:
        out.append(
            f"The library has {total_dicts} dict[str, Any]; at most {ceiling} may be: give the new ones real types."
        )
    return out, figures


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "sandbox").resolve()
    problems, figures = breaches(root)
    if "-v" in argv:
        print("\n".join(figures))
    for line in problems:
        print(f"budgets: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
