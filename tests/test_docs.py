"""The README is the door and docs/ the house: the README stays a landing page, every
link in it leads somewhere, and every `dynagent` command the README and the docs show
is one the CLI accepts. (Links inside docs/ are checked by `mkdocs build --strict`.)"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynagent.cli.main import _parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
# The "at most about 250 lines" for a landing page.
MAX_README_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")
# A command line of ours: a prompt, environment assignments, then `dynagent`.
COMMAND = re.compile(r"(\$ )?([A-Z_]+=\S* )*dynagent ")


def anchors(page: Path) -> set[str]:
    """The ids MkDocs (and GitHub) give the page's headings."""
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        heading = re.match(r"#{1,6} (.*)", line)
        if heading and not fenced:
            text = heading.group(1).replace("`", "").strip().lower()
            found.add(re.sub(r" +", "-", re.sub(r"[^\w\- ]", "", text)))
    return found


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", t)]


def test_the_readme_is_a_landing_page() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES
    text = README.read_text()
    for must in ("make demo", "make test", "dynagent doctor", "NVIDIA container toolkit"):
        assert must in text


def test_every_link_in_the_readme_leads_to_a_file_and_heading_that_exist() -> None:
    links = relative_links(README)
    assert len(links) > 10  # the pattern found them
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else README
        if not target.exists() or (anchor and anchor not in anchors(target)):
            broken.append(link)
    assert broken == []


def test_every_docs_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    assert len(PAGES) > 10
    assert [p.name for p in PAGES if f": {p.name}" not in nav] == []


def shown_commands(page: Path) -> list[str]:
    """Each `dynagent ...` command line in the page's code blocks, continuations joined,
    environment assignments and a `$ ` prompt dropped."""
    commands = []
    fenced = False
    pending = ""
    indent = 0
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            indent = len(line) - len(line.lstrip())  # a block inside a list item
            continue
        if not fenced:
            continue
        line = line[indent:]
        if not pending and not COMMAND.match(line):
            continue  # output, or another tool's command
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        words = shlex.split(line.removeprefix("$ "), comments=True)
        while re.match(r"[A-Z_]+=", words[0]):
            words = words[1:]
        commands.append(shlex.join(words))
    return commands


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_command_shown_is_one_the_cli_accepts(page: Path) -> None:
    for command in shown_commands(page):
        try:
            _parser().parse_args(shlex.split(command)[1:])
        except SystemExit:
            pytest.fail(f"{page.name}: the CLI refuses `{command}`")


def test_the_readme_shows_the_fifteen_minute_path() -> None:
    shown = " ".join(shown_commands(README))
    for step in ("validate", "simulate", "doctor", "master-config", "bridge", "status"):
        assert f"dynagent {step}" in shown or f"`dynagent {step}" in README.read_text()


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_the_readmes_trace_and_example_pool_are_in_a_clone(cloud: str) -> None:
    """Step 3 replays bench/traces/itp/cluster05.csv on the example config's pool `gpu`,
    and step 8 runs a command in it: with either cloud's example."""
    from dynagent.files.config import load_config
    from dynagent.simulate.trace import load_trace

    (simulate,) = [c for c in shown_commands(README) if c.startswith("dynagent simulate")]
    args = _parser().parse_args(shlex.split(simulate)[1:])
    trace = load_trace(ROOT / args.trace)
    assert len(trace.jobs) > 1000
    example = load_config(ROOT / "infra" / cloud / "dynagent.example.yaml")
    assert args.pool in example.pools
    (pool,) = re.findall(r"resources\.resource_pool=(\S+)", README.read_text())
    assert pool in example.pools


def _docs_build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`make docs`' own command line (the Makefile's recipe), run on the tree at ``root``."""
    (recipe,) = re.findall(r"^docs:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.M)
    words = shlex.split(recipe.replace("$(BIN)/", "").replace("$(VENV)/site", str(site)))
    environment = dict(os.environ)
    while "=" in words[0]:  # leading VAR=value words
        name, _, value = words.pop(0).partition("=")
        environment[name] = value
    binary = Path(sys.executable).parent / words[0]
    return subprocess.run(
        [str(binary), *words[1:]], cwd=root, env=environment, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def test_the_docs_build_fails_on_a_broken_anchor(tmp_path: Path) -> None:
    """mkdocs drops warnings before strict mode counts them when told --quiet: the build
    `make test` runs must fail on a link to a heading that does not exist."""
    tree = tmp_path / "tree"
    # The site's sources: its pages, and the infra READMEs they include.
    shutil.copytree(ROOT / "docs", tree / "docs")
    shutil.copytree(ROOT / "infra", tree / "infra", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", tree / "mkdocs.yml")
    good = _docs_build(tree, tmp_path / "site")
    assert good.returncode == 0, good.stderr
    page = tree / "docs" / "offerings.md"
    page.write_text(page.read_text() + "\nSee [the caps](performance.md#no-such-heading).\n")
    broken = _docs_build(tree, tmp_path / "site")
    assert broken.returncode != 0
    assert "no-such-heading" in broken.stderr


def test_reference_tables_keep_field_names_whole(tmp_path: Path) -> None:
    """The theme breaks code anywhere; the site's own stylesheet keeps a table's first
    column (field names) on one line, on every page that has such a table."""
    built = _docs_build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    page = (tmp_path / "site" / "configuration" / "index.html").read_text()
    (link,) = re.findall(r'<link rel="stylesheet" href="(\.\./stylesheets/extra\.css)"', page)
    css = (tmp_path / "site" / "configuration" / link).resolve().read_text()
    (rule,) = re.findall(r"\.md-typeset td:first-child code \{([^}]*)\}", css)
    assert "white-space: nowrap" in rule and "word-break: normal" in rule
    assert re.search(r"<td><code>max_idle_agent_period</code></td>", page)


def test_every_metric_of_the_catalog_has_a_row_in_the_metrics_page() -> None:
    from dynagent.report.metrics import CATALOG

    rows = re.findall(
        r"^\| `(\w+)` \| (\w+) \| ([^|]+) \|", (ROOT / "docs/metrics.md").read_text(), re.M
    )
    documented = {name: (unit, dimensions) for name, unit, dimensions in rows}
    for spec in CATALOG:
        assert spec.name in documented, f"docs/metrics.md has no row for {spec.name}"
        unit, dimensions = documented[spec.name]
        assert unit == spec.unit, spec.name
        # The dimensions column names each dimension, in the catalog's order.
        named = re.findall(r"(?:^|, )(\w+)", dimensions)
        assert tuple(named) == spec.dimensions, spec.name
        for value in spec.values:
            assert f"`{value}`" in dimensions, f"{spec.name}: {value} not documented"
    assert set(documented) == {spec.name for spec in CATALOG}
