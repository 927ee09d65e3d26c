"""`ckpt-inspector inspect FILE|DIR|X.index.json [--json] [--allow-global MODULE.NAME …]`.

Static scan, file SHA-256, load with weights_only=True in the jailed worker, statistics and a
content digest for every tensor. Human table by default; `--json` prints the `inspect`
contract (README, "JSON contracts"). A model folder or `*.index.json` is one sharded
checkpoint: every shard scanned first, then loaded `--jobs` at a time (default: one per
core), records merged in shard order with their `shard`, coverage against the index listed
(`sandbox.host.inspect_shards`).

TorchScript and torch.export archives are never loaded: their weights are read from their
records (`tensors.torchscript`), and the code files loading them would run are listed, with
what in them is flagged (the scan stays suspicious).

Exit codes: `inspector.cli.reference` (shown by --help and in docs/commands/).

`--json` is strict JSON: non-finite numbers are the strings "nan", "inf" and "-inf". `std` is
the population standard deviation, `std_sample` the sample one (what `torch.std()` gives);
the table shows the sample one.
"""

from __future__ import annotations

import argparse
import sys

from inspector.checkpoint.contents import summarize, training_summary
from inspector.checkpoint.health import Health
from inspector.checkpoint.hyper_params import hyper_parameters_line
from inspector.checkpoint.results import InspectResult, LoadError, jail_line
from inspector.checkpoint.resume import resume_text
from inspector.cli.common import (
    add_jobs_argument,
    add_loader_arguments,
    error_exit,
    flagged_lines,
    paint,
    progress_events,
    stderr_progress,
    use_colour,
)
from inspector.core import strict_json
from inspector.core.badges import LOOKS, Badge, weights_badge
from inspector.core.termtext import counted, escape
from inspector.core.verdict import exit_code
from inspector.core.vocabulary import HealthStatus, Verdict
from inspector.scan.advice import DAMAGED, advise, code_safety_badge, display_word

EXIT_HEALTH_PROBLEM = 7
EXIT_COVERAGE = 8
_SHARD_EXITS = {"missing_shard": EXIT_COVERAGE, "bad_shards": exit_code("error")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `inspect`."""
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="the checkpoint(s): a file, a model folder or index of shards, a "
                             "torch.distributed.checkpoint folder, or an s3://… object or "
                             "prefix; several are inspected in turn (with --json, one object "
                             "per line), the highest status wins")
    parser.add_argument("--json", action="store_true", help="print the inspect contract as JSON")
    add_loader_arguments(parser)
    add_jobs_argument(parser)  # a sharded checkpoint's shards; a single file is one job


def _num(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, int | str):
        return str(value)
    return f"{value:.4g}"


def health_lines(health: Health | None, why: str = "the weights were not read") -> list[str]:
    """The weights-health badge (the app's word, `core.badges`) and its findings, one line
    each; `why` none was judged."""
    if health is None:
        return [f"health:   {LOOKS[Badge.WEIGHTS_NOT_JUDGED].word} ({why})"]
    lines = [f"health:   {LOOKS[weights_badge(health.status, False)].word} "
             f"({health.weights_checked} weight tensors judged, "
             f"{counted(len(health.findings), 'finding')})"]
    lines.extend(f"  {f.severity:<8} {f.key}: {f.message}" for f in health.findings[:50])
    return lines


def _human(report: InspectResult) -> list[str]:
    scan = report.scan
    health = report.health.status if report.health is not None else None
    word = display_word(scan) if scan else "not run"
    badge = LOOKS[code_safety_badge(scan, health)].word if scan else word
    fmt = report.format if report.format not in (None, "unknown") else None
    lines = [
        f"file:     {report.path} ({report.size or 0:,} bytes, "
        f"{fmt or ('unreadable' if word == DAMAGED else 'format unknown')})",
        f"sha256:   {report.sha256 or '-'}",
        f"scan:     {badge}"
        + ("; weights_only loads it" if scan and scan.weights_only_ok else "")
        + ("; the file's data is corrupted (not a question of code)" if word == DAMAGED
           else ""),
        *flagged_lines(scan),
        f"advice:   {advise(scan, health).action}",
        jail_line(report.sandbox),
    ]
    if report.index:
        lines.extend(shard_lines(report))
    lines.extend(health_lines(report.health, "the weights were not read" if report.loaded
                              else "no answer of the jailed loader stands"))
    if report.loaded:
        lines.append(f"checked:  {escape(report.checked_words)}")
    lines.extend(code_lines(report))
    if report.error is not None:
        # a refused (or cut short) answer: none of its records is shown, as in the report
        return lines + _error_lines(report.error)
    tensors = report.tensors
    if tensors:
        width = min(48, max(len(t.key) for t in tensors))
        lines.append("")
        lines.append(f"{'key':<{width}}  {'dtype':<14} {'shape':<18} {'min':>10} {'max':>10} "
                     f"{'mean':>10} {'std(n-1)':>10} {'nan':>6} {'inf':>6}  "
                     f"{report.digest_algorithm}")
        for t in tensors:
            std = t.std if "std_sample" in t.absent else t.std_sample  # an older worker's
            lines.append(
                f"{escape(t.key)[:width]:<{width}}  {escape(t.dtype):<14} {tuple(t.shape)!s:<18} "
                f"{_num(t.min):>10} {_num(t.max):>10} {_num(t.mean):>10} {_num(std):>10} "
                f"{_num(t.nan):>6} {_num(t.inf):>6}  "
                f"{(t.digest or ','.join(t.flags) or '-')[:16]}")
    objects = report.objects
    if objects:
        lines.append("")
        lines.append(f"{counted(len(objects), 'non-tensor value')}{_unchecked(report)}:")
        lines.extend(f"  {escape(str(o.key))}: {escape(str(o.type))} = {escape(str(o.repr))}"
                     for o in objects[:50])
    unique = report.unique_storage
    contents = summarize(tensors, objects, unique)
    lines.append("")
    lines += _marked(report, [f"{contents.tensors} tensors, {contents.parameters:,} elements, "
                              f"{contents.bytes:,} bytes of tensor data"])
    if unique:
        # the loader's count of its storages: nothing here knows a torch file's storages
        lines.append(f"unique storage: {unique['storages']} storages, {unique['numel']:,} "
                     f"elements, {unique['nbytes']:,} bytes (shared storage counted once; "
                     "as reported by the jailed loader, not checked here)")
    return lines + _marked(report, _facts_lines(report, contents)) + _resume_rows(report)


def _error_lines(error: LoadError) -> list[str]:
    """Why the load gave no answer that stands, and how to load a refused file anyway."""
    lines = ["", f"error:    {escape(error.message)}"]
    if error.code == "refused_dangerous":
        lines.append("          to load it anyway (weights_only=True, inside the jail): "
                     "--override-dangerous")
    return lines


def standing_contract(report: InspectResult) -> dict:
    """The contract `--json` prints: as it came, except that an answer with an error (refused
    by the check here, or cut short) lists none of the jailed loader's records: its tensors,
    objects, storage count and shards' counts of tensors are the loader's word that did not
    stand (a shard's `tensors` is then null, as a shard's not loaded)."""
    contract = dict(report.contract or report.to_json())
    if report.error is not None:
        contract.update(tensors=[], objects=[], unique_storage=None)
        if isinstance(contract.get("shards"), list):
            contract["shards"] = [{**s, "tensors": None} for s in contract["shards"]]
    return contract


def _facts_lines(report: InspectResult, contents) -> list[str]:
    """What the file is, read from the worker's records: its training state, hyper-parameters,
    optimizer ids, architecture and the resume checklist's headline."""
    lines = []
    training = training_summary(contents)
    if training:
        lines.append(f"training state: {training}")
    hyper = hyper_parameters_line(report.objects)
    if hyper:
        lines.append(f"hyper-parameters: {hyper}")
    lines.extend(f"optimizer ids: {escape(o.summary())}" for o in report.optimizer_params or ())
    if report.architecture is not None:
        lines.append(f"architecture: {escape(report.architecture.summary())}")
    if report.resume is not None:
        lines.append(f"resume:   {resume_text(report.resume).splitlines()[0]}")
    return lines


def _resume_rows(report: InspectResult) -> list[str]:
    """The resume checklist's rows under its headline (`_facts_lines`)."""
    if report.resume is None:
        return []
    return [f"  {row}" for row in resume_text(report.resume).splitlines()[1:]]


def _marked(report: InspectResult, lines: list[str]) -> list[str]:
    """The one rule for every line read from the worker's answer: each says it is the jailed
    loader's word where the answer was not checked here (`_unchecked`)."""
    return [line + _unchecked(report) for line in lines]


def _unchecked(report: InspectResult) -> str:
    """What a line read from the worker's `objects` (the plain values: epoch, step, learning
    rates) adds where they were not held against the file's own bytes here (`claims` not
    checked: a file the host's readers cannot read, as the `checked:` line says); nothing
    where they were (`sandbox.host.claims.objects`: a disagreement refuses the answer, and an
    answer refused says so in its `error:` line)."""
    claims = report.claims
    return "" if not report.loaded or (claims is not None and claims.checked) else (
        " (as reported by the jailed loader, not checked here)")


def shard_lines(report: InspectResult) -> list[str]:
    """A sharded checkpoint: its index, each shard, tied keys and the coverage problems."""
    shards = report.shards or []
    lines = [f"shards:   {len(shards)} in {report.index}"]
    # a shard's count of tensors is its loader's records: none of a set whose answer fell
    lines.extend(f"  {s.file}  {s.format}  {_num(s.tensors if report.loaded else None)} "
                 f"tensors  {s.bytes or 0:,} bytes  sha256 {s.sha256 or '-'}" for s in shards)
    lines.extend(f"  alias {a['key']} -> {a['stored_as']} (shared storage in {a['shard']})"
                 for a in report.aliases or ())
    problems = report.problems or []
    lines.append("coverage: " + (counted(len(problems), "problem") if problems else
                                 "every key in exactly one shard, as the index says"))
    lines.extend(f"  {p['code']}: {p['message']}" for p in problems)
    return lines


def code_lines(report: InspectResult) -> list[str]:
    """A TorchScript or torch.export archive's code files: what loading it would run."""
    code = report.code
    if not code:
        return []
    flagged = sum(bool(c["flags"]) for c in code)
    lines = [f"code:     {counted(len(code), 'file')} that loading the archive would run "
             "(never run here; weights read from their records; texts in --json); "
             f"{flagged} flagged"]
    for c in code:
        lines.append(f"  {c['name']}  {c['size']:,} bytes")
        lines.extend(f"    FLAG: {flag}" for flag in c["flags"])
    return lines


def _painted(line: str, colour: bool) -> str:
    """The verdict word of a `scan:` or `health:` line in its colour (after escaping the line,
    so the file's own text can never carry a colour)."""
    label, _, rest = line.partition(":")
    if label not in ("scan", "health") or not colour:
        return line
    word = rest.split(";")[0].split("(")[0].strip()
    return line.replace(word, paint(word, word, colour), 1)


def run(args: argparse.Namespace) -> int:
    """Inspect each checkpoint in turn; the highest exit status of them (see the registry)."""
    from inspector.cli.remote import has_url, run_localized

    if has_url(args.files):
        return run_localized(args, "files", run, "inspect")
    codes = []
    for n, path in enumerate(args.files):
        if n and not args.json:
            print()
        codes.append(inspect_one(args, path))
    return max(codes)


def inspect_one(args: argparse.Namespace, path: str) -> int:
    """Inspect one checkpoint and print it; its exit status."""
    from inspector.sandbox.host.client import inspect_file

    try:
        with stderr_progress("inspecting", args.quiet) as show:
            report = inspect_file(path, allow_globals=args.allow_global,
                                  override_dangerous=args.override_dangerous,
                                  timeout=args.timeout, on_event=progress_events(show),
                                  jobs=args.jobs)
    except OSError as exc:
        print(f"ckpt-inspector inspect: {exc.strerror or exc}: {path}", file=sys.stderr)
        return exit_code("error")
    if args.json:
        print(strict_json.dumps(standing_contract(report)))
    else:
        colour = use_colour()
        print("\n".join(_painted(escape(line), colour) for line in _human(report)))
    if report.error is not None:
        return _SHARD_EXITS.get(report.error.code) or error_exit(report.error.to_json())
    if any(p["fatal"] for p in report.problems or ()):
        return EXIT_COVERAGE
    code = exit_code(report.scan.verdict if report.scan else Verdict.SAFE)
    if code == 0 and report.health is not None and report.health.status == HealthStatus.PROBLEM:
        return EXIT_HEALTH_PROBLEM
    return code
