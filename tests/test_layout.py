"""The package's layout: its layers import one way, and the core touches no system.

``dynagent.testing`` (local clouds) and ``dynagent.demo`` need moto and emulators that
the Lambda and Cloud Functions builds leave out; a stray import would fail there only.
``dynagent.core`` is the pure decision (docs/development.md): it may read only itself,
pydantic, YAML text and the standard library's pure modules.
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
    files = [p for p in files if module_name(p) != "dynagent.cli.main"]
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


# What each folder of the package may import of the others (docs/development.md, "The
# layers"). A folder always imports itself; the command line may import everything.
LAYERS: dict[str, set[str]] = {
    "core": set(),
    "files": {"core"},
    "run": {"core"},
    "report": {"core", "run"},
    "aws": {"core", "files", "run", "report"},
    "gcp": {"core", "files", "run", "report"},
    "bridge": {"core", "files", "aws", "gcp"},
    "simulate": {"core", "files", "run", "bridge"},
    "testing": {"core", "files"},
    "demo": {"core", "aws", "gcp", "testing"},
}
# The standard library's modules that reach outside the process or the clock, and the
# clouds' SDKs: none has a place in the pure core.
IMPURE = (
    "os", "sys", "time", "pathlib", "io", "shutil", "tempfile", "subprocess", "socket",
    "http", "urllib.request", "logging", "random", "threading", "asyncio", "importlib",
    "boto3", "botocore", "google", "googleapiclient", "functions_framework",
    "aws_lambda_powertools", "requests", "moto",
)  # fmt: skip


def folder_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else ""


def test_each_folder_imports_only_the_layers_below_it() -> None:
    folders = {folder_of(p) for p in PACKAGE.rglob("*.py")} - {""}
    assert folders == {*LAYERS, "cli"}  # a new folder says where it sits
    offenders: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        folder = folder_of(path)
        if folder in ("", "cli"):
            continue
        allowed = {folder, *LAYERS[folder]}
        wrong = sorted(
            name
            for name in imports(path)
            if name.startswith("dynagent.") and name.split(".")[1] not in allowed
        )
        if wrong:
            offenders[str(path.relative_to(ROOT))] = wrong
    assert offenders == {}


def test_the_core_touches_no_file_clock_environment_or_cloud() -> None:
    core = sorted((PACKAGE / "core").rglob("*.py"))
    assert len(core) > 25  # the walk found the core
    offenders: dict[str, list[str]] = {}
    for path in core:
        tree = ast.parse(path.read_text())
        wrong = sorted(
            name for name in imports(path) if within(name, IMPURE) or name == "datetime.now"
        )
        # open() and the clock are reached without an import.
        wrong += sorted(
            f"{node.func.id}()"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("open", "input", "print", "exec", "eval")
        )
        # The time is decide's argument: datetime.now() would make a plan unrepeatable.
        wrong += sorted(
            f"{node.value.id}.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("datetime", "date")
            and node.attr in ("now", "utcnow", "today")
        )
        if wrong:
            offenders[str(path.relative_to(ROOT))] = wrong
    assert offenders == {}


def test_the_top_of_the_package_shows_its_layers() -> None:
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name not in ("__pycache__", "py.typed"))
    assert entries == sorted([*LAYERS, "cli", "__init__.py"])


def test_no_module_is_too_long_to_read() -> None:
    """A module over about 800 lines holds several concerns: split it by them, as the
    doubles of Determined, Compute Engine and AWS are (docs/development.md)."""
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert {path: n for path, n in lengths.items() if n > 800} == {}
