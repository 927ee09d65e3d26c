"""Command-line front end: `ckpt-inspector [FILE]` opens the GUI, subcommands run headless.

Each subcommand lives in its own module under `inspector.cli` exposing
`add_arguments(parser)` and `run(args) -> int`; it is imported only when chosen, so
`ckpt-inspector scan` never pays for Qt or the other commands.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from inspector import __version__

COMMANDS: dict[str, str] = {
    "scan": "static scan for code in pickles (no code runs)",
    "inspect": "scan, hash and load in the jailed worker; tensor statistics",
    "convert": "convert to safetensors inside the jailed worker, verified bit for bit",
    "manifest": "create a manifest (sha256sum, TSV or JSON with tensor hashes)",
    "verify": "verify files and tensors against a manifest",
    "diff": "compare two checkpoints tensor by tensor, with bit-flip forensics",
    "watch": "re-verify a checkpoint folder periodically",
    "telemetry": "sample NVML GPU telemetry or replay a recorded log",
    "consistency": "repeat-inference consistency test on GPU or CPU",
    "report": "run the pipeline headless and write a JSON / HTML / PDF report",
}

EXIT_USAGE = 64


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the parser; only the chosen subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="ckpt-inspector",
        description="Open PyTorch checkpoints safely and prove their contents are intact. "
        "With no subcommand, opens the desktop app (on FILE if given).",
    )
    parser.add_argument("--version", action="version", version=f"ckpt-inspector {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            _command_module(name).add_arguments(sp)
    return parser


def _command_module(name: str):
    return importlib.import_module(f"inspector.cli.{name}_cmd")


def main(argv: list[str] | None = None) -> int:
    """Entry point of `ckpt-inspector` and `python -m inspector`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in COMMANDS else None
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
        return int(_command_module(args.command).run(args))
    except KeyboardInterrupt:
        print("ckpt-inspector: interrupted", file=sys.stderr)
        return 130
