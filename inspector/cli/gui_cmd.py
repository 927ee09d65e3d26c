"""`ckpt-inspector [FILE…] [--sample]`: the desktop app; headless inspection without a display."""

from __future__ import annotations

import argparse
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the GUI entry point."""
    parser = argparse.ArgumentParser(
        prog="ckpt-inspector",
        usage="ckpt-inspector [FILE ...] [--sample] | ckpt-inspector COMMAND ...",
        description="Opens the desktop app, on FILEs (files or folders of shards) if given. "
        "Run `ckpt-inspector --help` for the headless commands.",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="checkpoints or folders to open")
    parser.add_argument("--sample", action="store_true",
                        help="open the built-in samples when no FILE is given")
    return parser


def display_available() -> bool:
    """False on Linux/BSD when no display server is reachable and no Qt platform is forced."""
    if sys.platform in ("win32", "darwin") or os.environ.get("QT_QPA_PLATFORM"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def run_gui(argv: list[str]) -> int:
    """Open the window; without a display, inspect the file (or the sample) headless instead."""
    args = build_parser().parse_args(argv)
    if not display_available():
        return _headless(args)
    from inspector.gui.platform_check import EXIT_MISSING_LIBRARIES, startup_problem

    if (problem := startup_problem()) is not None:  # before Qt aborts with a misleading line
        print(problem, file=sys.stderr)
        return EXIT_MISSING_LIBRARIES
    from inspector.gui.app import create_application
    from inspector.gui.main_window import MainWindow

    app = create_application([sys.argv[0]])
    window = MainWindow(warm_worker=True)
    window.show()
    if args.files:
        window.open_paths(args.files)
    elif args.sample:
        window.open_samples()
    return app.exec()


def _headless(args: argparse.Namespace) -> int:
    """The same engine as `ckpt-inspector inspect`, on the files given or the benign sample."""
    from inspector.cli import main as cli_main

    print(
        "ckpt-inspector: the desktop app needs a display (no DISPLAY or WAYLAND_DISPLAY is set, "
        "and QT_QPA_PLATFORM is not); running the headless inspection instead.",
        file=sys.stderr,
    )
    targets = list(args.files)
    if not targets:
        from inspector.core.samples import write_samples

        targets = [str(write_samples().benign)]
        print(f"ckpt-inspector: inspecting the built-in sample {targets[0]}", file=sys.stderr)
    return cli_main(["inspect", *targets])  # several files: the highest status, as inspect


def main() -> None:
    """Entry point of the `ckpt-inspector-gui` script: the app's scans run the loaders' jailed
    readings, as under `ckpt-inspector` (`cli.main`)."""
    from inspector.cli import jailed_readings

    with jailed_readings():
        status = run_gui(sys.argv[1:])
    sys.exit(status)
