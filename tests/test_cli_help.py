"""``dynagent`` help: plain text, a version, a description per command, defaults shown."""

from __future__ import annotations

import re
from importlib.metadata import version

import pytest

from dynagent.cli import main as cli


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_is_plain_text_naming_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = help_of(["--help"], capsys)
    assert "`" not in text
    for name in cli.subcommands():
        assert re.search(rf"^    {name}\b", text, re.MULTILINE), name


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert help_of(["--version"], capsys) == f"dynagent {version('dynagent')}\n"


@pytest.mark.parametrize("name", cli.subcommands())
def test_each_command_says_what_it_does_and_what_its_options_are(name: str) -> None:
    parser = cli.subcommands()[name]
    assert parser.description, f"{name} has no description"
    text = parser.format_help()
    assert "`" not in text
    for action in parser._actions:
        assert action.help, f"{name} {action.option_strings or action.dest}: no help"


def test_defaults_are_shown_once() -> None:
    commands = cli.subcommands()
    # A default from the environment says which variable, never only its name.
    bridge = " ".join(commands["bridge"].format_help().split())
    assert (
        "--master MASTER the master's URL (default: the DET_MASTER environment variable" in bridge
    )
    assert "seconds between refreshes (default: 5.0)" in commands["status"].format_help()
    demo = " ".join(commands["demo"].format_help().split())
    assert "Pub/Sub emulator (default: aws)" in demo
    # simulate says its defaults in its own words: not twice.
    simulate = " ".join(commands["simulate"].format_help().split())
    assert "an instance shows running (60s) --registered-after" in simulate
    assert "every boot alike) --seed" in simulate
