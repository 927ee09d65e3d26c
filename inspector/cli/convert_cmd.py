"""`ckpt-inspector convert FILE [-o OUT.safetensors] [--force]`: verified safetensors output.

Runs inside the jailed worker (weights_only=True); tensors are streamed to a temp file beside
the output, reopened with safetensors and compared bit for bit, then renamed into place.
Non-tensor values go to `<OUT stem>.sidecar.json`.

Exit codes:
  0  converted and verified
  2  not loaded: the static scan says dangerous (see --override-dangerous)
  3  not loaded: not a format torch.load reads (or the scan failed)
  4  the output (or its sidecar) exists and --force was not given, it is the input, or its
     folder cannot be written
  5  the load failed: weights_only refused globals (listed), corrupt archive, a sandbox
     limit was hit, or the worker crashed or timed out
  6  the written file did not verify against the input (nothing was kept)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from inspector.cli.inspect_cmd import add_loader_arguments, error_exit, sandbox_line

EXIT_OUTPUT = 4
EXIT_VERIFY = 6
_EXITS = {"output_exists": EXIT_OUTPUT, "output_is_input": EXIT_OUTPUT,
          "output_unwritable": EXIT_OUTPUT, "verify_failed": EXIT_VERIFY}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `convert`."""
    parser.add_argument("file", metavar="FILE", help="the checkpoint to convert")
    parser.add_argument("-o", "--output", type=Path, metavar="OUT.safetensors",
                        help="output path (default: FILE with the suffix .safetensors)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output and sidecar")
    parser.add_argument("--json", action="store_true", help="print the conversion report as JSON")
    add_loader_arguments(parser)


def _human(report: dict) -> list[str]:
    lines = [
        f"wrote     {report['output']} ({report['tensors_written']} tensors, "
        f"{report['bytes_written']:,} bytes of tensor data)",
        f"verified  every tensor reopened with safetensors matches its source bit for bit "
        f"({report['digest_algorithm']})",
        f"sha256    {report['sha256']}",
        sandbox_line(report.get("sandbox")),
    ]
    for alias, kept in report["aliases"].items():
        lines.append(f"alias     {alias} -> {kept} (shared storage, stored once)")
    lines.extend(f"cloned    {key} (partial view of a shared storage)"
                 for key in report["cloned_views"])
    lines.extend(f"skipped   {s['key']}: {s['reason']}" for s in report["tensors_skipped"])
    if report.get("sidecar"):
        lines.append(f"sidecar   {report['sidecar']} ({len(report['objects_moved'])} values)")
    lines.extend(f"not kept  {o['key']} ({o['type']}): JSON cannot hold {o['repr']}"
                 for o in report["not_serializable"])
    return lines


def run(args: argparse.Namespace) -> int:
    """Convert one checkpoint; see the module docstring for exit codes."""
    from inspector.sandbox.client import SandboxError, convert_file

    try:
        report = convert_file(args.file, args.output, overwrite=args.force,
                              allow_globals=args.allow_global,
                              override_dangerous=args.override_dangerous, timeout=args.timeout)
    except SandboxError as exc:
        if args.json:
            print(json.dumps({"input": args.file, "error": exc.to_json(), "sandbox": exc.sandbox}))
        print(f"ckpt-inspector convert: {exc.message}", file=sys.stderr)
        return _EXITS.get(exc.code) or error_exit(exc.to_json())
    except OSError as exc:
        print(f"ckpt-inspector convert: {exc.strerror or exc}: {exc.filename or args.file}",
              file=sys.stderr)
        return 3
    print(json.dumps(report) if args.json else "\n".join(_human(report)))
    return 0
