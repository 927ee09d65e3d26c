"""What a subcommand's start-up builds: its own parser and epilog, not the other twelve (their
epilogs' text wrapping and subparsers were 10 ms of every `scan`); the top-level parser, which
no command chose, still lists every command."""

from __future__ import annotations

import argparse

import pytest

import inspector.cli as cli


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_a_chosen_command_builds_its_own_parser_and_epilog_alone(monkeypatch) -> None:
    written: list[str] = []
    real = cli.epilog
    monkeypatch.setattr(cli, "epilog", lambda name: written.append(name) or real(name))
    parser = cli.build_parser("scan")
    assert written == ["scan"]
    assert list(_subcommands(parser)) == ["scan"]
    args = parser.parse_args(["scan", "--walker-only", "model.pt"])
    assert args.command == "scan" and args.walker_only and args.paths == ["model.pt"]
    assert "exit status:" in _subcommands(parser)["scan"].format_help()


def test_no_command_builds_every_command(monkeypatch) -> None:
    written: list[str] = []
    real = cli.epilog
    monkeypatch.setattr(cli, "epilog", lambda name: written.append(name) or real(name))
    parser = cli.build_parser()
    assert written == list(cli.COMMANDS)
    assert list(_subcommands(parser)) == list(cli.COMMANDS)
    text = parser.format_help()
    assert all(name in text for name in cli.COMMANDS)


def test_a_chosen_command_still_refuses_an_unknown_option(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.build_parser("scan").parse_args(["scan", "--no-such-option", "model.pt"])
    assert stop.value.code == cli.EXIT_OPTION
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err
