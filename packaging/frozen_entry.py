"""Entry point of the PyInstaller build.

The app starts helper processes as `sys.executable -I -m MODULE …` (the jailed sandbox worker,
the consistency runner) and `sys.executable -I -c CODE` (the environment probe). In a frozen
build `sys.executable` is this program, not a Python interpreter, so it accepts exactly those
two interpreter forms; every other command line goes to `ckpt-inspector` as usual.
"""

from __future__ import annotations

import runpy
import sys

INTERPRETER_FLAGS = {"-I", "-E", "-s", "-S", "-B", "-u", "-O"}


def main(argv: list[str]) -> int:
    """Run a module or code string like `python` would, else the ckpt-inspector CLI."""
    i = 0
    while i < len(argv) and argv[i] in INTERPRETER_FLAGS:
        i += 1
    mode = argv[i] if i < len(argv) else None
    if mode in ("-m", "-c") and i + 1 < len(argv):
        target, rest = argv[i + 1], argv[i + 2:]
        if mode == "-m":
            sys.argv = [target, *rest]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *rest]
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
        return 0
    from inspector.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    import multiprocessing

    multiprocessing.freeze_support()
    sys.exit(main(sys.argv[1:]))
