"""Command-line front end: `ckpt-inspector [FILE]` opens the GUI, subcommands run headless.

Each subcommand lives in its own module under `inspector.cli` exposing
`add_arguments(parser)` and `run(args) -> int`; it is imported only when chosen, so
`ckpt-inspector scan` never pays for Qt or the other commands.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
from types import ModuleType
from typing import NamedTuple

from inspector import __version__


class Command(NamedTuple):
    """A subcommand: the module that implements it and its one-line help."""

    module: str
    help: str


# Names map to modules explicitly, so a command's name need not be a Python identifier.
COMMANDS: dict[str, Command] = {
    "scan": Command("inspector.cli.scan_cmd",
                    "static scan for code in pickles (no code runs)"),
    "inspect": Command("inspector.cli.inspect_cmd",
                    "scan, hash and load in the jailed worker; tensor statistics"),
    "convert": Command("inspector.cli.convert_cmd",
                    "convert to safetensors inside the jailed worker, verified bit for bit"),
    "manifest": Command("inspector.cli.manifest_cmd",
                    "create a manifest (sha256sum, TSV or JSON with tensor hashes)"),
    "verify": Command("inspector.cli.verify_cmd",
                    "verify files and tensors against a manifest"),
    "diff": Command("inspector.cli.diff_cmd",
                    "compare two checkpoints tensor by tensor, with bit-flip forensics"),
    "watch": Command("inspector.cli.watch_cmd",
                    "re-verify a checkpoint folder periodically"),
    "telemetry": Command("inspector.cli.telemetry_cmd",
                    "sample NVML GPU telemetry or replay a recorded log"),
    "consistency": Command("inspector.cli.consistency_cmd",
                    "repeat-inference consistency test on GPU or CPU"),
    "report": Command("inspector.cli.report_cmd",
                    "run the pipeline headless and write a JSON / HTML / PDF report"),
}

EXIT_USAGE = 64
# 128 + SIGPIPE: what a shell reports for a tool that a closed pipe ended (`cat big | head -1`),
# so `set -o pipefail` scripts can tell it from the exit statuses this tool gives itself.
EXIT_BROKEN_PIPE = 141


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the parser; only the chosen subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="ckpt-inspector",
        description="Open PyTorch checkpoints safely and prove their contents are intact. "
        "With no subcommand, opens the desktop app (on FILE if given).",
    )
    parser.add_argument("--version", action="version", version=f"ckpt-inspector {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        sp = sub.add_parser(name, help=cmd.help, description=cmd.help)
        if name == command:
            command_module(name).add_arguments(sp)
    return parser


def command_module(name: str) -> ModuleType:
    """The module of subcommand `name` (imported now, not before)."""
    return importlib.import_module(COMMANDS[name].module)


def _jailed(request: dict) -> dict:
    """`core.readings`' reader: the jailed dry run (its client imported when first needed)."""
    from inspector.sandbox.client import dry_run_reader

    return dry_run_reader(request)


def _jailed_readings():
    """Every scan of the command also runs the loaders' own readings in the jail
    (`core.readings`); the user's process still never unpickles. Restored when it returns."""
    from inspector.core import readings

    return readings.using(_jailed)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `ckpt-inspector` and `python -m inspector`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in COMMANDS else None
    with _jailed_readings():
        return _main(argv, command)


def _main(argv: list[str], command: str | None) -> int:
    """`main` once the readings are installed: the GUI, or the chosen command."""
    if command is None and not any(a.startswith("-") and a != "--sample" for a in argv[:1]):
        from inspector.cli.gui_cmd import run_gui

        return run_gui(argv)
    args = build_parser(command).parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return EXIT_USAGE
    if getattr(args, "require_jail", None):
        from inspector.sandbox.client import set_required_jail

        set_required_jail(args.require_jail)
    try:
        code = int(command_module(args.command).run(args))
        sys.stdout.flush()  # output that fit in the buffer meets a closed pipe only here
        return code
    except KeyboardInterrupt:
        print("ckpt-inspector: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # The command's `with` blocks have already stopped its workers while this unwound.
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _stdout_closed() -> bool:
    """Whether nothing reads stdout any more (a pipe whose reader left polls as an error)."""
    poller = select.poll()
    poller.register(sys.stdout.fileno(), 0)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
