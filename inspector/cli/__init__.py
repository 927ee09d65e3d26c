"""Command-line front end: `ckpt-inspector [FILE]` opens the GUI, subcommands run headless.

Each subcommand lives in its own module under `inspector.cli` exposing
`add_arguments(parser)` and `run(args) -> int`; it is imported only when chosen, so
`ckpt-inspector scan` never pays for Qt or the other commands.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import io
import os
import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple, NoReturn, TextIO

from inspector import __version__

# The rest is imported where it is used: `scan` starts its worker (`_early_worker`) before
# anything heavier than this, so the worker's interpreter starts while this one imports.
if TYPE_CHECKING:
    import argparse


class Command(NamedTuple):
    """A subcommand: the module that implements it, its one-line help, whether it reads
    object-store URLs (`s3://…`) beside local paths (`cli.remote`), and whether its first job
    takes a worker started before its arguments are read (`launch.spare_worker`)."""

    module: str
    help: str
    urls: bool = False
    early_worker: bool = False


# Names map to modules explicitly, so a command's name need not be a Python identifier.
COMMANDS: dict[str, Command] = {
    "scan": Command("inspector.cli.scan_cmd",
                    "static scan for code in pickles (no code runs)", urls=True,
                    early_worker=True),
    "inspect": Command("inspector.cli.inspect_cmd",
                    "scan, hash and load in the jailed worker; tensor statistics", urls=True),
    "convert": Command("inspector.cli.convert.command",
                    "convert to safetensors inside the jailed worker, verified bit for bit"),
    "manifest": Command("inspector.cli.manifest_cmd",
                    "create a manifest (sha256sum, TSV or JSON with tensor hashes)"),
    "verify": Command("inspector.cli.verify_cmd",
                    "verify files and tensors against a manifest", urls=True),
    "diff": Command("inspector.cli.diff_cmd",
                    "compare two checkpoints tensor by tensor, with bit-flip forensics"),
    "sign": Command("inspector.cli.sign.command",
                    "sign a model folder (OpenSSF Model Signing) with a private key"),
    "watch": Command("inspector.cli.watch_cmd",
                    "re-verify a checkpoint folder periodically"),
    "telemetry": Command("inspector.cli.telemetry.command",
                    "sample NVML GPU telemetry or replay a recorded log"),
    "consistency": Command("inspector.cli.consistency_cmd",
                    "repeat-inference consistency test on GPU or CPU"),
    "report": Command("inspector.cli.report_cmd",
                    "run the pipeline headless and write a JSON / HTML / PDF report", urls=True),
    "merge": Command("inspector.cli.merge_cmd",
                    "one report from the results files of a batch's shards"),
    "run": Command("inspector.cli.run.command",
                    "a training run's ledgered checkpoints: the latest valid one, verify all"),
}

EXIT_USAGE = 64
EXIT_OPTION = 2  # what argparse gives a bad option; a mistyped command is one too
# 128 + SIGPIPE: what a shell reports for a tool that a closed pipe ended (`cat big | head -1`),
# so `set -o pipefail` scripts can tell it from the exit statuses this tool gives itself.
EXIT_BROKEN_PIPE = 141


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the parser: with a `command`, its subparser alone (its module imported), the
    others only where none is chosen (the top-level help lists them; building the thirteen
    with their epilogs was 10 ms of every `scan`). A command's epilog is written when its help
    is (`_parser_class`): the exit-code table and its dataclasses are no part of a run."""
    import argparse

    parser = _parser_class()(
        prog="ckpt-inspector",
        description="Open PyTorch checkpoints safely and prove their contents are intact. "
        "With no subcommand, opens the desktop app (on FILE if given).",
    )
    parser.add_argument("--version", action="version", version=f"ckpt-inspector {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        if command is not None and name != command:
            continue
        sp = sub.add_parser(name, help=cmd.help, description=cmd.help, epilog_of=name,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        if name == command:
            command_module(name).add_arguments(sp)
    return parser


def epilog(name: str) -> str:
    """Command `name`'s help epilog: its exit codes and examples (`cli.reference`)."""
    from inspector.cli.reference import epilog as written

    return written(name)


@functools.cache
def _parser_class() -> type[argparse.ArgumentParser]:
    """argparse's parser, with the epilog of command `epilog_of` written when its help is."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def __init__(self, *args, epilog_of: str | None = None, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._epilog_of = epilog_of

        def format_help(self) -> str:
            if self._epilog_of is not None:
                self.epilog, self._epilog_of = epilog(self._epilog_of), None
            return super().format_help()

    return Parser


def command_module(name: str) -> ModuleType:
    """The module of subcommand `name` (imported now, not before)."""
    return importlib.import_module(COMMANDS[name].module)


class _Jailed:
    """`scan.readings`' reader: the jailed dry run, imported when first needed from
    `sandbox.host.admission` (the whole client would import NumPy, 0.1 s of every `scan`)."""

    def __call__(self, request: dict) -> dict:
        """The dry run of a complete request."""
        from inspector.sandbox.host.admission import dry_run_reader

        return dry_run_reader(request)

    def gated(self, request: dict, gate) -> dict:
        """The dry run started before its readings are known (`readings.read_while`)."""
        from inspector.sandbox.host.admission import dry_run_reader

        return dry_run_reader.gated(request, gate)


_jailed = _Jailed()


def jailed_readings():
    """Every scan inside, in any thread (the app's too), also runs the loaders' own readings in
    the jail (`scan.readings`); the user's process still never unpickles. Restored after."""
    from inspector.scan import readings

    return readings.installed(_jailed)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `ckpt-inspector` and `python -m inspector`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in COMMANDS else None
    if command is None and argv and _looks_like_a_command(argv[0]):
        import difflib  # only for a mistyped command

        near = difflib.get_close_matches(argv[0], COMMANDS, n=1, cutoff=0.6)
        hint = f"did you mean '{near[0]}'?" if near else f"commands: {', '.join(COMMANDS)}"
        print(f"ckpt-inspector: '{argv[0]}' is not a command or a file; {hint} "
              "(ckpt-inspector --help lists them)", file=sys.stderr)
        return EXIT_OPTION
    with _early_worker(command, argv):
        return _with_output(command, argv)


def _with_output(command: str | None, argv: list[str]) -> int:
    """`main` once the early worker started: the readings installed, the output made safe."""
    from inspector.core.termtext import safe_output

    with jailed_readings(), safe_output(stdout="--json" not in argv):
        return _main(argv, command)


def entry() -> NoReturn:
    """Console entry (`ckpt-inspector`, `python -m inspector`): `main`, then the exit. A
    subcommand's process ends without the interpreter's teardown, once its threads, atexit
    handlers and output are done: freeing a thousand modules' objects costs about 17 ms, a
    tenth of a folder scan. The app keeps the full exit (Qt writes its settings then)."""
    argv = sys.argv[1:]
    code = main(argv)
    if not (argv and argv[0] in COMMANDS):
        sys.exit(code)
    for thread in threading.enumerate():  # as the interpreter would: wait for them
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # no public name; the interpreter's own exit calls the same
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        code = code or 120  # what the interpreter's exit gives when its last flush fails
    os._exit(code)


def _early_worker(command: str | None, argv: list[str]) -> contextlib.AbstractContextManager:
    """The worker of a command's first job, started before anything else is imported (its
    interpreter starts meanwhile); none for `--walker-only`, which runs no job. One nobody
    takes is killed at the end."""
    if command is None or not COMMANDS[command].early_worker or "--walker-only" in argv:
        return contextlib.nullcontext()
    from inspector.sandbox.host.launch import spare_worker

    return spare_worker()


def _main(argv: list[str], command: str | None) -> int:
    """`main` once the readings are installed: the GUI, or the chosen command."""
    if command is None and not any(a.startswith("-") and a != "--sample" for a in argv[:1]):
        from inspector.cli.gui_cmd import run_gui

        return run_gui(argv)
    if "--json" not in argv:
        return _run(command, argv)
    errors = JsonErrors(sys.stderr)
    try:
        with contextlib.redirect_stderr(errors):
            return _run(command, argv)
    finally:
        errors.flush()


def _sets_jail(required: str | None) -> bool:
    """Whether `--require-jail` must be passed on: not for the default while the client is
    not loaded yet (it starts at the default), so a command that loads nothing never imports
    the client (a third of verify's start-up)."""
    from inspector.core.vocabulary import DEFAULT_REQUIRED_JAIL

    return required is not None and (required != DEFAULT_REQUIRED_JAIL
                                      or "inspector.sandbox.host.client" in sys.modules)


def _run(command: str | None, argv: list[str]) -> int:
    """Parse the arguments of `command` and run it; its exit status."""
    if command is not None and not COMMANDS[command].urls and any("://" in a for a in argv):
        from inspector.cli.remote import url_refusal

        if refusal := url_refusal(command, argv, [n for n, c in COMMANDS.items() if c.urls]):
            print(refusal, file=sys.stderr)
            return EXIT_OPTION
    args = build_parser(command).parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return EXIT_USAGE
    if _sets_jail(getattr(args, "require_jail", None)):
        from inspector.sandbox.host.client import set_required_jail

        set_required_jail(args.require_jail)
    if hasattr(args, "idle_timeout"):  # also None: a later command in this process
        from inspector.sandbox.host.deadlines import set_idle_timeout

        set_idle_timeout(args.idle_timeout)
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


class JsonErrors(io.TextIOBase):
    """stderr under `--json`: each one-line error (`ckpt-inspector CMD: message`, argparse's
    `CMD: error: message` too) becomes a JSON object `{"error": {"command", "message"}}` on
    its own line, argparse's usage lines are left out, and anything else passes through."""

    _ERROR = r"^ckpt-inspector(?: (?P<command>[\w-]+(?: [\w-]+)*))?: (?:error: )?(?P<message>.*)$"

    def __init__(self, stream: TextIO) -> None:
        import re

        self._stream, self._pending, self._in_usage = stream, "", False
        self._error = re.compile(self._ERROR)

    def write(self, text: str) -> int:
        """Buffer `text` and pass on every whole line it completes."""
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._line(line)
        return len(text)

    def flush(self) -> None:
        """Pass on what is buffered, then flush the real stream."""
        if self._pending:
            self._line(self._pending)
            self._pending = ""
        self._stream.flush()

    def isatty(self) -> bool:
        """As the real stream (progress lines check it)."""
        return self._stream.isatty()

    def fileno(self) -> int:
        """As the real stream."""
        return self._stream.fileno()

    def _line(self, line: str) -> None:
        if line.startswith("usage: ") or (self._in_usage and line.startswith(" ")):
            self._in_usage = True
            return
        self._in_usage = False
        match = self._error.match(line)
        if match:
            import json

            line = json.dumps({"error": {"command": match["command"] or "",
                                         "message": match["message"]}})
        self._stream.write(line + "\n")


def _looks_like_a_command(word: str) -> bool:
    """A bare word that names no file (no path separator, no extension, nothing on disk): a
    mistyped subcommand, never a file to open in the GUI."""
    return (not word.startswith("-") and "/" not in word and os.sep not in word
            and "." not in word and not os.path.exists(word))


def _stdout_closed() -> bool:
    """Whether nothing reads stdout any more (a pipe whose reader left polls as an error)."""
    import select

    poller = select.poll()
    poller.register(sys.stdout.fileno(), 0)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit has nowhere to fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
