"""docs/design.md's module table ("The pieces") must match the package: every module and subpackage under
oneiro_hf/ is listed exactly once, nothing is listed that does not exist, and a package's row names each of its
modules, so a module added, renamed or removed without its row fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "oneiro_hf"
DESIGN = ROOT / "docs" / "design.md"


def module_table() -> list[tuple[list[str], str]]:
    """The rows of the table under "## The pieces": (the names in its first column, the row's second column)."""
    text = DESIGN.read_text(encoding="utf-8")
    section = text.split("## The pieces", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue  # the header, its rule and any prose around the table
        rows.append((re.findall(r"`([^`]+)`", cells[0]), "|".join(cells[1:])))
    return rows


def package_entries() -> set[str]:
    """Top-level modules by file name (`hub.py`) and subpackages by folder name with a slash (`tree/`)."""
    modules = {path.name for path in PACKAGE.glob("*.py")}
    packages = {f"{path.parent.name}/" for path in PACKAGE.glob("*/__init__.py")}
    return modules | packages


def submodule_names(package: Path) -> set[str]:
    """What a package's row must name: each module's stem (`__init__` aside) anywhere below it, and each nested
    package as `name/`."""
    names = {path.stem for path in package.rglob("*.py") if path.name != "__init__.py"}
    names |= {f"{path.parent.name}/" for path in package.rglob("*/__init__.py")}
    return names


def test_the_table_is_found() -> None:
    assert len(module_table()) > 15


def test_every_module_is_listed_once_and_nothing_else() -> None:
    listed = [name for names, _ in module_table() for name in names]
    repeated = sorted({name for name in listed if listed.count(name) > 1})
    assert not repeated, f"listed more than once in docs/design.md's module table: {repeated}"
    actual = package_entries()
    missing, extra = sorted(actual - set(listed)), sorted(set(listed) - actual)
    assert not missing, f"modules under oneiro_hf/ missing from docs/design.md's module table: {missing}"
    assert not extra, f"docs/design.md's module table lists what oneiro_hf/ does not have: {extra}"


def test_each_package_row_names_its_modules() -> None:
    for names, concept in module_table():
        for name in names:
            if not name.endswith("/"):
                continue
            named = set(re.findall(r"`([^`]+)`", concept))
            unnamed = sorted(submodule_names(PACKAGE / name.rstrip("/")) - named)
            assert not unnamed, f"docs/design.md's `{name}` row does not name its modules {unnamed}"
