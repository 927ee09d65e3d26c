"""What several commands share: loader options, exit codes of a load, the jail line, progress
on stderr, tensor digests from the worker, a verification printed for a person, and a batch's
shard and results file.

Commands import from here, never from each other.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inspector.core.badges import GREY, LOOKS, STATUS_LOOKS, shout, status_look
from inspector.core.progress import ProgressFn
from inspector.core.termtext import counted, escape
from inspector.core.vocabulary import (
    DAMAGED,
    DEFAULT_REQUIRED_JAIL,
    FileStatus,
    JailRequirement,
    Severity,
    TensorCheckStatus,
)
from inspector.scan.pickles.presets import PRESETS, preset_help

if TYPE_CHECKING:  # types only: importing verify (manifests, shards) costs every command
    from inspector.fleet.jobs import JobSlice, ResultsLog
    from inspector.integrity.manifest import Manifest
    from inspector.integrity.verify import TensorDigestFn, VerifyResult
    from inspector.run.checkpoints import RunLedger
    from inspector.scan.result import GlobalUse, ScanResult
    from inspector.signing.check import SignatureVerdict
    from inspector.signing.keyless import KeylessTrust

EXIT_LOAD_FAILED = 5
EXIT_MANIFEST = 2  # verify and watch: the manifest cannot be read
EXIT_JAIL = 9
JAIL_ERRORS = ("jail_refused", "protocol_violation")
_REFUSAL_EXITS = {"refused_dangerous": 2, "refused_global": 2, "unsupported_format": 3,
                  **dict.fromkeys(JAIL_ERRORS, EXIT_JAIL)}


class _AllowPreset(argparse.Action):
    """`--allow NAME`: add every global of that preset to `allow_global`."""

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        getattr(namespace, self.dest).extend(PRESETS[value][1])


def add_allow_arguments(parser: argparse.ArgumentParser) -> None:
    """`--allow-global` and `--allow PRESET`: what weights_only may rebuild, for one load."""
    parser.add_argument("--allow-global", action="append", default=[], metavar="MODULE.NAME",
                        help="allow this global for this one load (repeatable); only what the "
                             "weights_only error names, and only if you trust the file")
    parser.add_argument("--allow", action=_AllowPreset, dest="allow_global", choices=PRESETS,
                        metavar="PRESET", help="allow a named set of benign globals "
                        f"(repeatable): {preset_help()}")


def add_loader_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that loads a checkpoint in the worker."""
    add_allow_arguments(parser)
    add_quiet_argument(parser)
    parser.add_argument("--override-dangerous", action="store_true",
                        help="load even when the static scan says dangerous (still "
                             "weights_only=True, inside the jail)")
    add_timeout_arguments(parser)
    add_require_jail_argument(parser)


def add_timeout_arguments(parser: argparse.ArgumentParser) -> None:
    """`--timeout` and `--idle-timeout`: every jailed job ends (`sandbox.host.deadlines`)."""
    parser.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                        help="kill a worker job after this long (default: 300 s plus 120 s "
                             "per GiB of its input, or CKPT_INSPECTOR_TIMEOUT; 0: no limit)")
    parser.add_argument("--idle-timeout", type=_seconds, default=None, metavar="SECONDS",
                        help="kill a worker job that reports nothing for this long (default "
                             "300, or CKPT_INSPECTOR_IDLE_TIMEOUT; 0: no limit)")


def add_require_jail_argument(parser: argparse.ArgumentParser) -> None:
    """`--require-jail`: the weakest jail level a command that loads accepts."""
    # plain strings: argparse shows choices with repr()
    parser.add_argument("--require-jail", choices=[r.value for r in JailRequirement],
                        default=DEFAULT_REQUIRED_JAIL.value,
                        help="refuse to load unless the jail reaches this level (default "
                             "partial: namespaces, Landlock or seccomp active, and Landlock or "
                             "a fresh root with its own /proc keeping your files and this "
                             "process's environment out of reach; any also accepts the rest, "
                             "down to process-only, a worker with resource limits alone)")


def add_jobs_argument(parser: argparse.ArgumentParser) -> None:
    """`--jobs N`: how many jailed workers run at once (default: one per core)."""
    from inspector.sandbox.host.parallel import default_jobs

    parser.add_argument("--jobs", "-j", type=_positive, default=default_jobs(), metavar="N",
                        help="jailed workers at once (default: the number of cores this "
                             "process may use); N workers hold up to N times one worker's "
                             "memory, so --jobs 1 runs one file at a time")


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError("must be a number of seconds, 0 or more")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def warm_workers(jobs: int, cold: bool = False) -> contextlib.AbstractContextManager:
    """With several jailed jobs ahead, one warm fork server imports torch once and forks a
    freshly jailed worker per job instead of each job paying a cold start."""
    if (jobs <= 1 or cold) and "inspector.sandbox.host.client" not in sys.modules:
        return contextlib.nullcontext()  # no server wanted, and none can run yet
    from inspector.sandbox.host.client import fork_server

    return fork_server(enabled=jobs > 1 and not cold)


def error_exit(error: dict) -> int:
    """The exit code for a worker or refusal error."""
    return _REFUSAL_EXITS.get(error.get("code", ""), EXIT_LOAD_FAILED)


_ANSI = {"#1e8e3e": "32", "#b86e00": "33", "#c5221f": "31", "#c2185b": "31", "#7b1fa2": "35",
         GREY: "90"}
"""The terminal's colour nearest each state's own (`core.badges`): green, amber, red, purple
(damaged bytes), grey (not judged)."""
_COLOURS = {look.word.lower(): _ANSI[look.colour]
            for look in (*LOOKS.values(), *STATUS_LOOKS.values()) if look.colour in _ANSI}
"""ANSI colour of each state's word, as the app colours it."""


def use_colour(stream=None) -> bool:
    """Colour only on a terminal, never when piped, with NO_COLOR set (no-color.org) or on a
    dumb terminal."""
    stream = sys.stdout if stream is None else stream
    return (stream.isatty() and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM") != "dumb")


def paint(text: str, word: str, colour: bool) -> str:
    """`text` in the colour of verdict `word` (case-insensitive) when `colour` is on."""
    code = _COLOURS.get(word.lower())
    return f"\x1b[{code}m{text}\x1b[0m" if colour and code else text


def flagged_lines(scan: ScanResult | None) -> list[str]:
    """A scan's flagged imports with the calls they would make, and its findings, indented;
    what comes from the file is escaped. A finding that means damaged data reads `damaged`."""
    from inspector.scan.advice import INTEGRITY_CODES

    if scan is None:
        return []
    lines = []
    own = _own_module_classes(scan)
    if own:
        names = ", ".join(g.name for g in own[:3]) + (", …" if len(own) > 3 else "")
        lines.append(f"    {Severity.SUSPICIOUS:<10} {len(own)} module class(es) of the "
                     f"archive's own code ({escape(names)}): torch.jit.load builds them by "
                     "running that code; each is listed with --json")
    for g in scan.globals:
        if g.severity != Severity.SAFE and g not in own:
            key = f"{g.module}.{g.name}"
            imported = g.import_name
            name = imported if imported == key else f"{imported} (as {key})"
            lines.append(f"    {g.severity:<10} {escape(name)} x{g.count}: {escape(g.reason)}")
            lines.extend(f"{'':<15}{escape(c)}" for c in g.calls)
    for f in scan.findings:
        if f.severity != Severity.INFO:
            where = f" [{escape(f.member)}]" if f.member else ""
            severity = DAMAGED if f.code in INTEGRITY_CODES else f.severity
            lines.append(f"    {severity:<10} {f.code}: {escape(f.message)}{where}")
            if f.call:
                lines.append(f"{'':<15}{escape(f.call)}")
    return lines


def _own_module_classes(scan: ScanResult) -> list[GlobalUse]:
    """A TorchScript or torch.export archive's `__torch__.…` classes: its own code's modules,
    shown as one line (there can be one per module of the model)."""
    from inspector.layout.torchscript import CODE_ARCHIVES

    if scan.format not in CODE_ARCHIVES:
        return []
    return [g for g in scan.globals
            if g.severity != Severity.SAFE and g.module.startswith("__torch__")]


def print_verify_result(result: VerifyResult) -> None:
    """One line per file that is not ok (unrelated extras folded into one), tensors that are
    not ok under it, each file's tensors followed by the note of those whose verdicts rest on
    the jailed loader's word (why they could not be checked here), then totals."""
    extras = [f for f in result.files if f.status == FileStatus.EXTRA and not f.note]
    for f in result.files:
        if f in extras:
            continue
        if f.status == FileStatus.SIZE_MISMATCH:
            detail = f"  size {f.actual_size}, expected {f.expected_size}"
        elif f.status == FileStatus.MISMATCH:
            detail = f"  {f.algorithm} {f.actual}, expected {f.expected}"
        else:
            detail = ""
        if f.note:
            detail += f"  ({f.note})"
        print(escape(f"{shout(status_look(f.status).word):<14} {f.path}{detail}"))
    noted = Counter((t.file, t.note) for t in result.tensors if t.note)
    for i, t in enumerate(result.tensors):
        if t.status != TensorCheckStatus.OK:
            if t.status == TensorCheckStatus.DTYPE_OR_SHAPE_CHANGED:
                got, want = (t.actual_dtype, t.actual_shape), (t.expected_dtype, t.expected_shape)
                detail = f"  {got[0]}{got[1]}, expected {want[0]}{want[1]}"
            else:
                detail = ""
            print(escape(f"  tensor {shout(status_look(t.status).word):<22} {t.key} ({t.file})"
                         f"{detail}"))
        if t.file != (result.tensors[i + 1].file if i + 1 < len(result.tensors) else None):
            _say_notes(t.file, noted)
    if extras:
        names = ", ".join(Path(f.path).name for f in extras[:3])
        more = f" and {len(extras) - 3} more" if len(extras) > 3 else ""
        extra = shout(status_look(FileStatus.EXTRA).word)
        fails = "they fail with --strict)" if not result.strict else "--strict: they fail)"
        print(escape(f"{extra:<14} {counted(len(extras), 'file')} ({names}{more}; {fails}"))
    for error in result.errors:
        print(escape(f"ERROR          {error}"))
    totals = [_totals("file", result.files)]
    if result.tensors:
        totals.append(_totals("tensor", result.tensors))
    print("; ".join(totals))


def _say_notes(file: str, noted: Counter) -> None:
    """Under a file's tensor lines: how many of its verdicts rest on the jailed loader's word,
    and why (`TensorCheck.note`), so the reason reads beside the verdicts, not after the
    totals."""
    for (where, note), n in list(noted.items()):
        if where == file:
            print(escape(f"  {counted(n, 'tensor verdict')} of {file}: {note}"))
            del noted[where, note]  # said once, even were a file's tensors not together


def _totals(noun: str, records: list) -> str:
    counts = Counter(r.status for r in records)
    parts = ", ".join(f"{n} {status_look(status).word.lower()}"
                      for status, n in sorted(counts.items()))
    return f"{len(records)} {noun}{'' if len(records) == 1 else 's'}" + (
        f": {parts}" if parts else ""
    )


def worker_digests(args: argparse.Namespace | None = None) -> TensorDigestFn:
    """Tensor digests computed by the jailed worker, with the command's loader options."""
    from functools import partial

    # imported only when tensors are checked: the client pulls in the sandbox machinery
    from inspector.sandbox.host.client import tensor_digests

    if args is None:
        return tensor_digests
    return partial(
        tensor_digests,
        allow_globals=args.allow_global,
        override_dangerous=args.override_dangerous,
        timeout=args.timeout,
    )


def add_quiet_argument(parser: argparse.ArgumentParser) -> None:
    """`--quiet`: no progress line on stderr."""
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress on stderr (shown only on a terminal anyway)")


@contextlib.contextmanager
def stderr_progress(label: str, quiet: bool = False) -> Iterator[ProgressFn | None]:
    """A one-line percentage on stderr while a long job runs: on a terminal, unless `quiet`."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    width = 0

    def show(done: int, total: int, stage: str = "") -> None:
        nonlocal width
        if total:
            text = f"{label} {stage + ' ' if stage else ''}{100 * done // total:3d}%"
            width = max(width, len(text))
            print(f"\r{text}", end="", file=sys.stderr, flush=True)

    try:
        yield show
    finally:
        print("\r" + " " * width + "\r", end="", file=sys.stderr, flush=True)


def progress_events(show: ProgressFn | None,
                    stage: str | None = None) -> Callable[[dict], None] | None:
    """The worker's progress events (of one `stage`, or all) fed to `show`; None when hidden."""
    if show is None:
        return None

    def on_event(event: dict) -> None:
        if event.get("type") == "progress" and stage in (None, event.get("stage")):
            show(event["done"], event["total"], "" if stage else str(event.get("stage", "")))

    return on_event


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    """`--shard I/N` and `--results FILE.jsonl`: one process's share of a batch, resumable."""

    def shard(text: str):
        from inspector.fleet.jobs import parse_job_slice  # only when the flag is given

        try:
            return parse_job_slice(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parser.add_argument("--shard", type=shard, default=None, metavar="I/N",
                        help="only this process's share of the files: those whose path "
                             "hashes to I of N (0-based; e.g. $JOB_COMPLETION_INDEX/4)")
    def results(text: str) -> Path:
        import stat

        from inspector.integrity.regular_file import kind_of

        try:
            mode = os.stat(text).st_mode
        except OSError:
            return Path(text)  # created by the run; one that cannot be is said then
        if not stat.S_ISREG(mode):
            raise argparse.ArgumentTypeError(f"{text} must be a regular file (it is created "
                                             f"when missing), not {kind_of(mode)}")
        return Path(text)

    parser.add_argument("--results", type=results, default=None, metavar="FILE.jsonl",
                        help="append each file's result as it finishes and skip files already "
                             "there, so a preempted job resumes; `merge` joins shards' files")


@dataclasses.dataclass
class Batch:
    """The share of the files a command runs, and where finished ones are kept."""

    shard: JobSlice | None  # None: every file (no --shard, no --results)
    log: ResultsLog | None

    def owns(self, key: str) -> bool:
        """Whether this process runs the file named `key`."""
        return self.shard is None or self.shard.owns(key)

    def begin(self, environment: Mapping[str, Any] | None = None) -> None:
        """Note this run, with its job's command, in the results file (nothing without
        --results)."""
        if self.log is not None:
            self.log.begin({"command": self.log.job.command, "shard": self.shard.label,
                            "environment": environment})

    def finished(self, key: str, path: Path) -> Mapping[str, Any] | None:
        """The result an earlier run recorded for `key`, unless the file changed since."""
        return self.log.finished(key, path) if self.log is not None else None

    def record(self, key: str, path: Path, result: Mapping[str, Any]) -> None:
        """Keep one finished file's result (nothing without --results)."""
        if self.log is not None:
            self.log.record(key, path, result)

    def end(self, errors: list[str] | tuple[str, ...] = ()) -> None:
        """Note in the results file that this run did its whole share (its completion line,
        with the `errors` of that share as a whole, which a merge reports; nothing without
        --results): without it a merge calls the shard unfinished."""
        if self.log is not None:
            self.log.end(errors)


def open_batch(args: argparse.Namespace, kind: str, command: str,
               manifest: Manifest | None = None, options: Mapping[str, Any] | None = None
               ) -> Batch:
    """The batch a command's --shard and --results describe, for the job `command` runs
    against `manifest` with the `options` that change a result (`fleet.jobs.Job`); damaged
    result lines, and results kept for another job, are named."""
    if args.results is None:  # the batch modules load only for a batch
        return Batch(args.shard, None)
    from inspector.fleet.jobs import Job, JobSlice, open_results

    shard = args.shard or JobSlice()
    log = open_results(args.results, Job(kind, command, manifest_digest(manifest),
                                         dict(options or {})))
    for problem in log.problems:
        print(escape(f"{args.results}: line {problem.line} {problem.kind}: {problem.detail}; "
                     "its file is done again"), file=sys.stderr)
    if log.other_jobs:
        print(escape(f"{args.results}: the results of {counted(log.other_jobs, 'file')} "
                     "were made for another manifest or other options, by another version of "
                     "ckpt-inspector, or by one that recorded none of these: not reused, each "
                     "is done again (start a new results file for a new manifest: a merge "
                     "refuses one holding two jobs)"),
              file=sys.stderr)
    if log.done:
        print(escape(f"{args.results}: {counted(len(log.done), 'result')} kept from earlier runs; "
                     "files written since are done again (corruption below the file system "
                     "is not: use a new results file to check everything again)"),
              file=sys.stderr)
    return Batch(shard, log)


def manifest_digest(manifest: Manifest | None) -> str | None:
    """The SHA-256 of a manifest's content as it was read (its dialect and every entry, with
    their tensors): what a kept result was checked against."""
    if manifest is None:
        return None
    from inspector.integrity.manifest import format_json

    text = f"{manifest.dialect}\n{format_json(manifest.files)}"
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def say_unauthenticated(command: str, ledger: RunLedger, keyed: bool) -> None:
    """One line on stderr when a run's journal was read without a seal key and no key checks
    the saves' signatures: its records are then the word of anyone who can write the folder."""
    from inspector.run.journal import unauthenticated

    if not ledger.journal.authenticated and not keyed:
        print(f"ckpt-inspector {command}: {unauthenticated('the journal is')}, or sign the "
              "saves and give --public-key", file=sys.stderr)


def add_signature_arguments(parser: argparse.ArgumentParser, effect: str) -> None:
    """`--public-key`, `--certificate`, `--signature`: each folder given is checked against its
    OpenSSF Model Signing signature (`report`, `scan --sarif`); `effect` says where it shows."""
    parser.add_argument("--public-key", type=Path, metavar="KEY.pub",
                        help="check each folder given against its OpenSSF Model Signing "
                        f"signature (DIR/model.sig, or --signature) with this key; {effect}")
    parser.add_argument("--certificate", type=Path, action="append", metavar="CHAIN.pem",
                        help="as --public-key, for certificate signatures (repeatable)")
    parser.add_argument("--signature", type=Path, metavar="SIG",
                        help="the signature of the one folder given (default: DIR/model.sig)")
    add_keyless_arguments(parser)


def add_keyless_arguments(parser: argparse.ArgumentParser) -> None:
    """`--trust-root`, `--identity`, `--identity-provider`: a Sigstore keyless signature checked
    offline (`verify`, `report`, `scan --sarif`)."""
    parser.add_argument("--trust-root", type=Path, metavar="TRUSTED_ROOT.json",
                        help="a Sigstore trusted root (or client trust config) to check a "
                        "keyless signature against, offline; `sigstore`: the public-good "
                        "instance's, as the installed sigstore package ships it")
    parser.add_argument("--identity", metavar="ID",
                        help="the keyless signer trusted: the e-mail or URI its certificate "
                        "names")
    parser.add_argument("--identity-provider", metavar="URL",
                        help="the OIDC issuer that vouched for --identity")


def keyless_trust(args: argparse.Namespace) -> KeylessTrust | None:
    """The keyless trust `add_keyless_arguments` gave, if a trust root was named."""
    from inspector.signing.keyless import KeylessTrust

    if args.trust_root is None:
        return None
    return KeylessTrust(args.trust_root, args.identity, args.identity_provider)


def signature_verdicts(args: argparse.Namespace) -> list[SignatureVerdict]:
    """Each local checkpoint given that a signature covers (`--signature`, else the one the
    app and `verify` find: `signing.locate`, held to its save record), checked file by file;
    with a key or chain given, one that no signature covers is named unsigned. A signature
    judged alike for several checkpoints is listed once."""
    from inspector.run.record_check import check_record
    from inspector.signing.ledger_binding import held_to_record
    from inspector.signing.locate import path_verdict

    keyed = bool(args.public_key or args.certificate or args.trust_root)
    verdicts: list[SignatureVerdict] = []
    made: dict[tuple[Path, Path], Any] = {}  # signing.locate.Checks
    for path in (Path(raw) for raw in args.paths):
        if not path.exists():
            continue
        record = check_record(path)
        verdict = held_to_record(_given_signature(args, path), record, args.public_key,
                                 args.certificate or ()) if args.signature else \
            path_verdict(path, args.public_key, args.certificate or (), record=record,
                         keyless=keyless_trust(args), made=made)
        if verdict is None and keyed:
            verdict = _unsigned(path)
        if verdict is not None and verdict not in verdicts:
            verdicts.append(verdict)
    return verdicts


def _given_signature(args: argparse.Namespace, path: Path) -> SignatureVerdict:
    """`path` (a folder or a file signed alone) against the signature `--signature` names."""
    from inspector.core.vocabulary import SignatureState
    from inspector.signing.check import SignatureVerdict
    from inspector.signing.folder import check_folder, check_signed_file

    if not args.signature.exists():
        return SignatureVerdict(state=SignatureState.UNSIGNED, signature=str(args.signature),
                                reason=f"no signature at {args.signature}")
    check = check_folder if path.is_dir() else check_signed_file
    return check(path, args.signature, args.public_key, args.certificate or (),
                 keyless=keyless_trust(args)).verdict


def _unsigned(path: Path) -> SignatureVerdict:
    """The verdict for a checkpoint no signature covers (with a key given, that is told)."""
    from inspector.core.vocabulary import SignatureState
    from inspector.signing.bundle import DEFAULT_NAME
    from inspector.signing.check import SignatureVerdict
    from inspector.signing.statement import beside

    place = path / DEFAULT_NAME if path.is_dir() else beside(path)
    return SignatureVerdict(state=SignatureState.UNSIGNED, signature=str(place),
                            reason=f"no signature at {place}")
