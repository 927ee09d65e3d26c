"""`ckpt-inspector convert FILE [-o OUT.safetensors] [--force]`: verified safetensors output.

A folder or a `*.index.json` is one sharded checkpoint, converted shard by shard into the files
transformers writes (see `convert_folder`). Runs inside the jailed worker
(weights_only=True); tensors are streamed to a temp file beside the output, reopened with
safetensors and compared bit for bit, then renamed into place.
Non-tensor values go to `<OUT stem>.sidecar.json`.

Exit codes: `inspector.cli.reference` (shown by --help and in docs/commands/).

`--key state_dict --strip-prefix model.` takes a training checkpoint's weights (a Lightning
checkpoint's `state_dict`) under the model's own names; see `checkpoint/extract.py`.

Quantized and sparse tensors are written as their parts under `KEY::suffix` names, with the
rebuild recipe in `__metadata__["ckpt-inspector.encoded"]` (see tensors/encoded.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from inspector.checkpoint.extract import extract_hint
from inspector.checkpoint.results import ConversionResult, jail_line
from inspector.cli.common import (
    add_jobs_argument,
    add_loader_arguments,
    error_exit,
    progress_events,
    stderr_progress,
)
from inspector.cli.convert.lines import skipped_lines
from inspector.core.termtext import escape
from inspector.formats import sniff

EXIT_NOT_TORCH = 3
EXIT_OUTPUT = 4
_LISTED_CLONES = 3
EXIT_VERIFY = 6
EXIT_UNSUPPORTED = 8
EXIT_SELECTION = 10
_EXITS = {"output_exists": EXIT_OUTPUT, "output_is_input": EXIT_OUTPUT,
          "output_unwritable": EXIT_OUTPUT, "verify_failed": EXIT_VERIFY,
          "claim_refuted": EXIT_VERIFY,
          "unsupported_tensors": EXIT_UNSUPPORTED, "key_not_found": EXIT_SELECTION,
          "not_tensor_mapping": EXIT_SELECTION, "key_collision": EXIT_SELECTION}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `convert`."""
    parser.add_argument("file", metavar="FILE",
                        help="the checkpoint to convert, or a model folder or *.index.json")
    parser.add_argument("-o", "--output", type=Path, metavar="OUT.safetensors",
                        help="output path (default: beside FILE, with the suffix .safetensors; "
                             "pytorch_model.bin becomes model.safetensors); for a folder or "
                             "index, the output folder")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output and sidecar")
    parser.add_argument("--json", action="store_true", help="print the conversion report as JSON")
    parser.add_argument("--skip-unsupported", action="store_true",
                        help="convert even when some tensors have no safetensors form; the "
                             "skipped keys are listed in the output and the sidecar")
    parser.add_argument("--key", metavar="PATH",
                        help="convert only the mapping of tensors at this dotted path of the "
                             "loaded checkpoint (state_dict, model, module.model)")
    parser.add_argument("--strip-prefix", action="append", default=[], metavar="PREFIX",
                        help="remove PREFIX from the keys that start with it (repeatable, "
                             "applied in order), e.g. model.")
    add_loader_arguments(parser)
    add_jobs_argument(parser)  # a folder's shards; a single file is one job


def _verified_line(report: ConversionResult) -> str:
    total = report.tensors_in_input
    skipped = len(report.tensors_skipped)
    if total is None:
        scope = "every tensor written"
    elif skipped:
        scope = f"{total - skipped} of the input's {total} tensors ({skipped} skipped, listed)"
    elif report.key:
        scope = f"all {total} tensors under {report.key}"
    else:
        scope = f"all {total} tensors of the input"
    why = report.unchecked_reason
    if why is None:
        return (f"verified  {scope}: the output read back here, each matches its source's "
                f"stored bytes bit for bit ({report.digest_algorithm})")
    return (f"matches   {scope}, as reported by the jailed loader; not checked here: "
            f"{escape(why)}")


def _values_unchecked(report: ConversionResult) -> str | None:
    """Why what the worker says beside the tensors (the sidecar's values, the values not kept,
    the cloned views) was not checked here: none of the answer was (`unchecked_reason`), or
    the tensors were and the input's other values could not be read (the claims' reason
    beside `checked`); None when it was."""
    claims = report.claims
    return report.unchecked_reason or (claims.reason if claims is not None else None)


def _human(report: ConversionResult) -> list[str]:
    lines = [
        f"wrote     {report.output} ({report.tensors_written} tensors, "
        f"{report.bytes_written:,} bytes of tensor data)",
        _verified_line(report),
        f"sha256    {report.sha256}",
        jail_line(report.sandbox),
    ]
    if report.key or report.strip_prefix:
        lines.append(f"extracted {report.key or 'the whole checkpoint'}"
                     + "".join(f", {p!r} stripped" for p in report.strip_prefix))
    for alias, kept in report.aliases.items():
        lines.append(f"alias     {alias} -> {kept} (shared storage, stored once)")
    values_unchecked = _values_unchecked(report)
    whose = "" if values_unchecked is None else ", as reported by the jailed loader"
    cloned = report.cloned_views
    if len(cloned) > _LISTED_CLONES:
        lines.append(f"cloned    {len(cloned)} tensors that were partial views of a shared "
                     f"storage ({', '.join(cloned[:2])}, …; every key in --json){whose}")
    else:
        lines.extend(f"cloned    {escape(key)} (partial view of a shared storage{whose})"
                     for key in cloned)
    lines.extend(f"encoded   {key} ({spec['kind']}, {spec['dtype']}) as {key}::* parts"
                 for key, spec in report.encoded.items())
    lines += skipped_lines(report)
    if report.sidecar:
        # the reason, once: the verified line gives it where none of the answer was checked
        why = ("" if values_unchecked is None or report.unchecked_reason is not None
               else f"; not checked here: {escape(values_unchecked)}")
        lines.append(f"sidecar   {report.sidecar} ({len(report.objects_moved)} values{whose}"
                     f"{why})")
    lines.extend(f"not kept  {escape(str(o['key']))} ({escape(str(o['type']))}{whose}): JSON "
                 f"cannot hold {escape(str(o['repr']))}" for o in report.not_serializable)
    hint = None if report.key else extract_hint(
        [*report.digests, *map(str, report.objects_moved)])
    if hint:
        lines.append(f"hint      a training checkpoint, converted whole (optimizer state too); "
                     f"for the model's weights alone: convert FILE {hint}")
    return lines


def already_safetensors(path: Path) -> bool:
    """Whether `path` is a single file in safetensors format (by its bytes, not its name)."""
    if not path.is_file():
        return False
    with open(path, "rb") as fh:
        head = fh.read(512)
    return sniff(head, path.stat().st_size) == "safetensors"


def exit_for(exc: Exception) -> int:
    """The exit status for a SandboxError from a conversion."""
    return _EXITS.get(exc.code) or error_exit(exc.to_json())


def run(args: argparse.Namespace) -> int:
    """Convert one checkpoint; see the module docstring for exit codes."""
    from inspector.cli.convert.folder import run_folder
    from inspector.sandbox.host.client import SandboxError, convert_file
    from inspector.shards.convert import default_output, is_folder_input

    def convert_one(source: str | Path, output: Path, overwrite: bool, on_event=None,
                    cancel=None) -> ConversionResult:
        return ConversionResult.from_json(convert_file(
            source, output, overwrite=overwrite, allow_globals=args.allow_global,
            override_dangerous=args.override_dangerous, timeout=args.timeout,
            skip_unsupported=args.skip_unsupported, on_event=on_event, cancel=cancel,
            key=args.key, strip_prefix=args.strip_prefix))

    if is_folder_input(Path(args.file)):
        if args.key or args.strip_prefix:
            print("ckpt-inspector convert: --key and --strip-prefix take one file, not a folder "
                  "of shards", file=sys.stderr)
            return 2
        return run_folder(args, convert_one, exit_for)
    if already_safetensors(Path(args.file)):
        message = (f"{args.file} is a safetensors file already: it holds no pickle, so there "
                   "is nothing to convert (verify it with `ckpt-inspector inspect`)")
        if args.json:
            print(json.dumps({"input": args.file,
                              "error": {"code": "already_safetensors", "message": message}}))
        print(f"ckpt-inspector convert: {message}", file=sys.stderr)
        return EXIT_NOT_TORCH
    output = args.output or default_output(Path(args.file))
    if output.is_symlink():  # a link in an HF snapshot leads into blobs/
        print(f"ckpt-inspector convert: {output} is a link; refusing to write through it",
              file=sys.stderr)
        return EXIT_OUTPUT
    try:
        with stderr_progress("converting", args.quiet) as show:
            report = convert_one(args.file, output, args.force, progress_events(show))
        report.input = os.path.abspath(args.file)  # the user's path, not a link's target
    except SandboxError as exc:
        if args.json:
            print(json.dumps({"input": args.file, "error": exc.to_json(), "sandbox": exc.sandbox}))
        print(f"ckpt-inspector convert: {escape(exc.message)}", file=sys.stderr)
        return exit_for(exc)
    except OSError as exc:
        print(f"ckpt-inspector convert: {exc.strerror or exc}: {exc.filename or args.file}",
              file=sys.stderr)
        return 3
    print(json.dumps(report.to_json()) if args.json else "\n".join(_human(report)))
    return 0
