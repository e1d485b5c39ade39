"""Size limits on the library's code: no module under oneiro_hf/ over 800 lines, no function over 120.

A module past the limit holds more than one concept and a function past it more than one step; split them
(CONTRIBUTING.md) rather than raise the limits. A function's length runs from its `def` line to its last line,
nested functions included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "oneiro_hf"
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _function_lengths(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length in lines) of every function and method in `path`."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "")
    return found


def test_the_package_has_modules() -> None:
    assert len(_modules()) > 20, PACKAGE


def test_no_module_is_over_the_line_limit() -> None:
    too_long = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in _modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"


def test_no_function_is_over_the_line_limit() -> None:
    too_long = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {name} ({length} lines)"
        for path in _modules()
        for name, line, length in _function_lengths(path)
        if length > MAX_FUNCTION_LINES
    ]
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"


def test_the_function_count_sees_methods_and_nested_functions(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("class A:\n    def f(self):\n        def g():\n            pass\n        return g\n", encoding="utf-8")
    assert _function_lengths(probe) == [("A.f", 2, 4), ("A.f.g", 3, 2)]
