"""What a subcommand's start-up builds: its own parser, not the other twelve (their epilogs'
text wrapping and subparsers were 10 ms of every `scan`), and no epilog until a help is written
(the exit-code table's module and its dataclasses); the top-level parser, which no command
chose, still lists every command."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import inspector.cli as cli


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_a_chosen_command_builds_its_own_parser_alone(monkeypatch) -> None:
    written: list[str] = []
    real = cli.epilog
    monkeypatch.setattr(cli, "epilog", lambda name: written.append(name) or real(name))
    parser = cli.build_parser("scan")
    assert list(_subcommands(parser)) == ["scan"]
    args = parser.parse_args(["scan", "--walker-only", "model.pt"])
    assert args.command == "scan" and args.walker_only and args.paths == ["model.pt"]
    assert written == []  # a run writes no epilog
    assert "exit status:" in _subcommands(parser)["scan"].format_help()
    assert written == ["scan"]  # its help does, once
    assert _subcommands(parser)["scan"].format_help().count("exit status:") == 1
    assert written == ["scan"]


def test_a_run_imports_no_epilog_table() -> None:
    code = ("import sys; from inspector.cli import build_parser; "
            "build_parser('scan').parse_args(['scan', 'model.pt']); "
            "print('inspector.cli.reference' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "False"


def test_no_command_builds_every_command(monkeypatch) -> None:
    written: list[str] = []
    real = cli.epilog
    monkeypatch.setattr(cli, "epilog", lambda name: written.append(name) or real(name))
    parser = cli.build_parser()
    assert list(_subcommands(parser)) == list(cli.COMMANDS)
    text = parser.format_help()
    assert all(name in text for name in cli.COMMANDS)
    for name, sub in _subcommands(parser).items():
        assert real(name) in sub.format_help()
    assert written == list(cli.COMMANDS)


def test_a_chosen_command_still_refuses_an_unknown_option(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        cli.build_parser("scan").parse_args(["scan", "--no-such-option", "model.pt"])
    assert stop.value.code == cli.EXIT_OPTION
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err
