"""The package's layout: what runs in the cloud never imports what only runs here.

``dynagent.testing`` (local clouds) and ``dynagent.demo`` need moto and emulators that
the Lambda and Cloud Functions builds leave out; a stray import would fail there only.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shared" / "dynagent"
LOCAL_ONLY = ("dynagent.testing", "dynagent.demo", "dynagent.simulate")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT / "shared").with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def cloud_files() -> list[Path]:
    files = [p for p in PACKAGE.rglob("*.py") if not within(module_name(p), LOCAL_ONLY)]
    files = [p for p in files if module_name(p) != "dynagent.cli"]
    return files + sorted((ROOT / "functions").rglob("*.py"))


def test_code_that_runs_in_the_cloud_imports_no_local_cloud_or_demo() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(n for n in imports(path) if within(n, LOCAL_ONLY))
        for path in cloud_files()
    }
    assert len(cloud_files()) > 20  # the walk found the package
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_package_has_no_import_cycle() -> None:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {
        name: {m for m in imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }
    cycles: list[list[str]] = []

    def visit(name: str, trail: list[str], done: set[str]) -> None:
        if name in trail:
            cycles.append([*trail[trail.index(name) :], name])
            return
        if name in done:
            return
        done.add(name)
        for nxt in sorted(graph[name]):
            visit(nxt, [*trail, name], done)

    done: set[str] = set()
    for name in sorted(graph):
        visit(name, [], done)
    assert cycles == []
