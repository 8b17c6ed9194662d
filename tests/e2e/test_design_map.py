"""The map in docs/design.md holds itself to the tree (issue 24): it names every module of the library
exactly once, names none that is gone, and lists the packages in the order of the layers contract."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Map: where each concept lives, and which way imports point"
#: A package heading (``sandbox/run/  a run and ...``) or a line of module names (``  run.py  ...``,
#: or ``  apply.py, approve.py, ...`` for modules that share one description).
PACKAGE = re.compile(r"^(sandbox/(?:[a-z_]+/)*)(?:\s|$)")
NAMES = re.compile(r"^\s+((?:[a-z_]+\.py,?\s*)+)")


def map_block(design: str) -> list[str]:
    """The lines of the code block right under the map's heading."""
    after = design.split(HEADING + "\n", 1)[1]
    start = after.index("```\n") + len("```\n")
    return after[start : after.index("\n```", start)].splitlines()


def named_modules(lines: list[str]) -> list[str]:
    """Every module the map names, as a path from the repository root, in the map's order."""
    package, named = None, []
    for line in lines:
        if heading := PACKAGE.match(line):
            package = heading.group(1)
        elif names := NAMES.match(line):
            assert package is not None, f"module names before any package: {line!r}"
            named += [package + name for name in re.findall(r"[a-z_]+\.py", names.group(1))]
    return named


def library_modules(root: Path) -> set[str]:
    """Every module of the library: each ``.py`` file, and a package's ``__init__.py`` when it holds code."""
    found = set()
    for path in (root / "sandbox").rglob("*.py"):
        if path.name == "__init__.py":
            body = ast.parse(path.read_text(encoding="utf-8")).body
            if all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body):
                continue  # only a docstring: the package's heading line says it
        found.add(path.relative_to(root).as_posix())
    return found


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The index of the layer a module belongs to (its longest dotted prefix named there), if any."""
    dotted = module.removesuffix(".py").replace("/", ".")
    best = None
    for index, layer in enumerate(layers):
        for package in layer:
            if (dotted == package or dotted.startswith(package + ".")) and (
                best is None or len(package) > len(best[1])
            ):
                best = (index, package)
    return None if best is None else best[0]


def contract_layers() -> list[list[str]]:
    """The layers of the import-linter contract in pyproject.toml, top first."""
    # Read with a pattern, not tomllib: that is Python 3.11+, and the project runs on 3.10.
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (block,) = re.findall(r'^type = "layers"\nlayers = \[\n(.*?)^\]', pyproject, re.M | re.S)
    return [[p.strip() for p in re.split(r"[|:]", layer)] for layer in re.findall(r'"([^"]+)"', block)]


def test_the_map_names_every_module_of_the_library_once_and_nothing_else() -> None:
    named = named_modules(map_block((ROOT / "docs" / "design.md").read_text(encoding="utf-8")))
    twice = sorted({m for m in named if named.count(m) > 1})
    assert not twice, f"docs/design.md's map names these modules more than once: {twice}"
    missing = sorted(library_modules(ROOT) - set(named))
    assert not missing, f"docs/design.md's map does not name these modules (add a line each): {missing}"
    gone = sorted(set(named) - library_modules(ROOT))
    assert not gone, f"docs/design.md's map names modules that do not exist (or hold only a docstring): {gone}"


def test_the_map_lists_the_packages_in_layer_order() -> None:
    layers = contract_layers()
    named = named_modules(map_block((ROOT / "docs" / "design.md").read_text(encoding="utf-8")))
    placed = [(m, i) for m in named if (i := layer_of(m, layers)) is not None]
    assert len(placed) > 100  # the root's __init__ and __main__ stand above every layer
    for (above, upper), (below, lower) in zip(placed, placed[1:], strict=False):
        assert upper <= lower, f"docs/design.md's map lists {below} (layer {lower}) after {above} (layer {upper})"


def test_the_checks_see_a_module_left_out_a_module_gone_and_a_layer_out_of_order(tmp_path: Path) -> None:
    for rel, text in {
        "sandbox/__init__.py": "import sys\n",
        "sandbox/run/__init__.py": '"""Only a docstring."""\n',
        "sandbox/run/run.py": "",
        "sandbox/store/new.py": "",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    design = f"{HEADING}\n\n```\nsandbox/store/   s\n  gone.py   g\nsandbox/run/   r\n  run.py, __init__.py\n```\n"
    named = named_modules(map_block(design))
    assert named == ["sandbox/store/gone.py", "sandbox/run/run.py", "sandbox/run/__init__.py"]
    assert library_modules(tmp_path) == {"sandbox/__init__.py", "sandbox/run/run.py", "sandbox/store/new.py"}
    layers = contract_layers()
    assert layer_of("sandbox/store/gone.py", layers) > layer_of("sandbox/run/run.py", layers)  # type: ignore[operator]
    assert layer_of("sandbox/agent/adapters/codex.py", layers) == layer_of("sandbox/agent/host.py", layers)
    assert layer_of("sandbox/__main__.py", layers) is None
