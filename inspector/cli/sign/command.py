"""`ckpt-inspector sign DIR --private-key KEY.pem [--certificate CERT.pem [--certificate-chain
CHAIN.pem]] [--signature SIG] [--tensors] [--force]`: an OpenSSF Model Signing signature over
every file of a folder, which the reference tool's `model_signing verify key` (or, with a
certificate, `verify certificate`) accepts; with --tensors the statement also carries each
checkpoint's per-tensor digests (read in the jailed worker), so a later `verify` names the
tensor that changed."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from inspector.cli.common import add_loader_arguments, warm_workers, worker_digests
from inspector.core.atomic import OutputExistsError
from inspector.core.termtext import counted, escape
from inspector.integrity.manifest import Manifest, ManifestError, TensorEntry, read_manifest

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_EXISTS = 4
EXIT_TENSORS = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `sign`."""
    parser.add_argument("folder", type=Path, metavar="DIR", help="the model folder to sign")
    parser.add_argument("--private-key", type=Path, required=True, metavar="KEY.pem",
                        help="the signing key (PEM, unencrypted, ECDSA P-256/384/521)")
    parser.add_argument("--certificate", type=Path, metavar="CERT.pem",
                        help="sign in certificate mode: the certificate naming the key's public "
                        "half (PEM); verifiers trust it through its chain")
    parser.add_argument("--certificate-chain", type=Path, action="append", default=[],
                        metavar="CHAIN.pem",
                        help="certificates above --certificate, carried in the signature "
                        "(PEM; repeatable)")
    parser.add_argument("--signature", type=Path, metavar="SIG",
                        help="where to write the signature (default: DIR/model.sig)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing signature")
    parser.add_argument("--manifest", "-m", type=Path, metavar="MANIFEST",
                        help="sign only if every file is the one this manifest records "
                        "(sha256sum, TSV or JSON; a JSON manifest's tensors are signed too)")
    parser.add_argument("--tensors", action="store_true",
                        help="also sign each checkpoint's per-tensor digests (read in the "
                        "jailed worker)")
    add_loader_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Sign the folder; nothing is written on any failure."""
    from inspector.signing.errors import SignatureError
    from inspector.signing.make import SigningKey, check_inputs, sign_folder, signature_path

    folder = args.folder
    key = SigningKey(args.private_key, args.certificate, tuple(args.certificate_chain))
    try:
        check_inputs(folder, key, signature_path(folder, args.signature), args.force)
        expected = read_manifest(args.manifest) if args.manifest else None
        tensors = _tensors(args) if args.tensors else recorded_tensors(expected, folder)
        signed = sign_folder(folder, key, args.signature, overwrite=args.force,
                             tensors=tensors, expected=expected)
    except ManifestError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except SignatureError as exc:
        return _fail(exc.message, EXIT_EXISTS if exc.code == "exists" else EXIT_USAGE)
    except OutputExistsError as exc:
        return _fail(f"{exc}; pass --force to replace it", EXIT_EXISTS)
    except _TensorsFailed as exc:
        return _fail(f"{exc}; sign without --tensors to sign the files alone", EXIT_TENSORS)
    detail = f" and {counted(signed.tensors, 'tensor')}" if signed.tensors else ""
    print(escape(f"signed {counted(signed.files, 'file')}{detail} of {folder} with "
                 f"{signed.signer}: {signed.signature}"))
    return EXIT_OK


class _TensorsFailed(Exception):
    """A checkpoint whose tensors the worker could not read."""


def _tensors(args: argparse.Namespace) -> dict[str, list[TensorEntry]]:
    """Per-tensor digests of the folder's checkpoints, keyed by their names in the statement
    (files of other formats carry none); formats come from the static scan, no code runs."""
    from inspector import formats
    from inspector.core.vocabulary import Format
    from inspector.integrity.folder_walk import list_files
    from inspector.scan.engine import scan_file

    loadable = set(formats.loadable()) - {Format.DCP}  # a DCP data file is part of a folder
    files = [p for p in list_files(args.folder) if scan_file(p).format in loadable]
    digests = worker_digests(args)
    out: dict[str, list[TensorEntry]] = {}
    with warm_workers(len(files)):
        for path in files:
            try:
                out[path.relative_to(args.folder).as_posix()] = digests(path)
            except Exception as exc:  # the worker's refusal names the file, no traceback
                raise _TensorsFailed(f"{path}: tensors not read: {exc}") from exc
    return out


def recorded_tensors(expected: Manifest | None, folder: Path
                     ) -> dict[str, list[TensorEntry]] | None:
    """The tensors a JSON manifest records, keyed by their names in the statement (checked
    against the files only as far as the file hashes are: `sign_folder` compares those)."""
    if expected is None or not expected.has_tensors:
        return None
    return {Path(os.path.relpath(expected.resolve(e), folder)).as_posix(): e.tensors
            for e in expected.files if e.tensors is not None}


def _fail(message: str, code: int) -> int:
    print(escape(f"ckpt-inspector sign: {message}"), file=sys.stderr)
    return code
