"""Every command's exit codes and examples, defined once.

`--help` epilogs are built from here (`epilog`), and the reference pages under
`docs/commands/` carry a block generated from here and from the parsers (`reference_block`,
written by `scripts/gen_reference.py`); `tests/test_docs_reference.py` fails when a page, an
epilog or a command's `EXIT_*` constant drifts from this table.
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Exit:
    """One exit status of a command and what it means."""

    code: int
    meaning: str


@dataclass(frozen=True)
class Example:
    """One example command line and what it does."""

    line: str
    what: str


_JAIL = Exit(9, "not loaded: the jail is weaker than --require-jail allows (default partial), "
                "or the worker broke the protocol and was killed")

EXITS: dict[str, tuple[Exit, ...]] = {
    "scan": (
        Exit(0, "safe (files that are not checkpoints are `skipped` and count as safe)"),
        Exit(1, "suspicious, or damaged: the file's own checksums or sizes do not hold"),
        Exit(2, "dangerous"),
        Exit(3, "error: a file could not be scanned (a cut-short zip is shown as damaged)"),
        Exit(4, "the SARIF file was not written"),
    ),
    "inspect": (
        Exit(0, "loaded; the static scan says safe"),
        Exit(1, "loaded; the static scan says suspicious (globals you allowed) or damaged"),
        Exit(2, "not loaded: the static scan says dangerous (--override-dangerous loads it "
                "anyway, still with weights_only=True inside the jail)"),
        Exit(3, "not loaded: not a format torch.load reads, or damaged beyond reading"),
        Exit(5, "the load failed: weights_only refused globals (listed), corrupt archive, a "
                "sandbox limit was hit, or the worker crashed or timed out"),
        Exit(7, "loaded and safe code, but weights health is `problem` (NaN or Inf, or a "
                "flipped-exponent outlier)"),
        Exit(8, "a sharded checkpoint's shards do not match their index (listed; a missing "
                "shard loads nothing; a wrong `total_size` alone is a warning)"),
        _JAIL,
    ),
    "convert": (
        Exit(0, "converted and verified"),
        Exit(2, "not loaded: the static scan says dangerous"),
        Exit(3, "not loaded: not a format torch.load reads, or safetensors already "
                "(`already_safetensors`, a file or a folder)"),
        Exit(4, "the output or its sidecar exists (no --force), is the input, or its folder "
                "cannot be written"),
        Exit(5, "the load failed (weights_only refused, corrupt, a limit hit, worker crashed "
                "or timed out)"),
        Exit(6, "the written file did not verify against the input (nothing kept)"),
        Exit(7, "a folder's shards do not match their index (listed, nothing kept)"),
        Exit(8, "some tensors have no safetensors form (listed, nothing written; "
                "--skip-unsupported converts the rest)"),
        _JAIL,
        Exit(10, "--key names nothing or no mapping of tensors, or two values get one name "
                 "(--strip-prefix); nothing written"),
    ),
    "manifest": (
        Exit(0, "written"),
        Exit(2, "nothing to record, or the output's extension names no format"),
        Exit(3, "tensors could not be digested"),
        Exit(4, "the manifest was not written (exists without --force, or unwritable)"),
    ),
    "verify": (
        Exit(0, "every file (and tensor) checked is ok"),
        Exit(1, "something differs, or a signature is invalid (wrong key, changed after "
                "signing, untrusted certificate)"),
        Exit(2, "the manifest, signature or key is unreadable or unsupported, or none was "
                "given where one is needed"),
        Exit(3, "nothing differs but something could not be checked, including nothing "
                "checked at all (the manifest's files were not found where they were looked "
                "for) and a Sigstore keyless signature, which needs a trust root offline "
                "checks do not have"),
    ),
    "sign": (
        Exit(0, "the signature was written"),
        Exit(2, "the folder, key or certificate cannot be used (nothing written)"),
        Exit(4, "the signature exists (pass --force to replace it)"),
        Exit(5, "with --tensors: a checkpoint's tensors could not be read (nothing written)"),
    ),
    "diff": (
        Exit(0, "identical"),
        Exit(1, "different"),
        Exit(2, "a file could not be read or was refused (dangerous), a shard is missing, "
                "orphaned or listed twice in its index, or the jailed loader's comparison "
                "does not match the files' own bytes"),
        _JAIL,
    ),
    "watch": (
        Exit(0, "the last pass was all ok"),
        Exit(1, "the last pass was not"),
        Exit(2, "the manifest is unreadable"),
    ),
    "telemetry": (
        Exit(0, "no alerts"),
        Exit(1, "alerts raised"),
        Exit(3, "no NVIDIA GPU or driver"),
        Exit(4, "the log cannot be read"),
        Exit(5, "the output was not written"),
        Exit(6, "the driver was lost mid-run"),
    ),
    "consistency": (
        Exit(0, "consistent"),
        Exit(1, "inconsistent: runs differ, or the result is off the float64 reference"),
        Exit(3, "the checkpoint was not loaded"),
        Exit(4, "the device is unavailable"),
        Exit(5, "bad model or request"),
        Exit(6, "the worker failed, or its answer does not match the file's own bytes"),
        Exit(7, "not judged: the weights hold NaN/Inf (named), so the device cannot be "
                "judged on them"),
        _JAIL,
    ),
    "report": (
        Exit(0, "all safe and every check passed"),
        Exit(1, "suspicious or damaged, or a check failed (bad weights, manifest mismatch…)"),
        Exit(2, "dangerous"),
        Exit(3, "a file could not be scanned"),
        Exit(4, "the report was not written"),
        Exit(5, "the manifest is unreadable"),
    ),
    "merge": (
        Exit(0, "all safe and every check passed"),
        Exit(1, "suspicious or damaged, or a check failed"),
        Exit(2, "dangerous, or a results line is edited, forged, deleted or unreadable "
                "(nothing was written)"),
        Exit(3, "a file could not be scanned, or the results hold no finished file"),
        Exit(4, "the report was not written"),
        Exit(5, "a results file cannot be read (nothing was written)"),
    ),
    "run": (
        Exit(0, "latest: a valid checkpoint was found; verify: every ledgered checkpoint is "
                "intact; order-diff: the same samples in the same order"),
        Exit(1, "latest: no checkpoint on record is still valid; verify: a checkpoint "
                "changed or is missing, or ledger lines were cut, edited or deleted; "
                "order-diff: the order differs"),
        Exit(2, "no journal in RUN_DIR or it cannot be read; latest: the path cannot be "
                "printed exactly (--json gives it); order-diff: a ledger could not be found "
                "or read, or breaks its rolling hash"),
    ),
}

EVERY_COMMAND: tuple[Exit, ...] = (
    Exit(2, "an option error (argparse) or a mistyped command (did you mean …?)"),
    Exit(130, "interrupted (Ctrl-C)"),
    Exit(141, "stdout was closed (`… | head`)"),
)
"""Statuses any command can end with, besides its own."""

EXAMPLES: dict[str, tuple[Example, ...]] = {
    "scan": (
        Example("ckpt-inspector scan model.pt", "is it safe to load? (no code from it runs)"),
        Example("ckpt-inspector scan --json --fail-on suspicious models/ > scan.jsonl",
                "a CI gate over a folder"),
    ),
    "inspect": (
        Example("ckpt-inspector inspect model.pt", "load it in the jail: statistics, health"),
        Example("ckpt-inspector inspect --allow numpy old.ckpt",
                "allow NumPy objects for this one load"),
    ),
    "convert": (
        Example("ckpt-inspector convert model.pt", "write model.safetensors beside it, verified"),
        Example("ckpt-inspector convert run.ckpt --key state_dict --strip-prefix model.",
                "only a training checkpoint's model weights"),
    ),
    "manifest": (
        Example("ckpt-inspector manifest create models/ -o SHA256SUMS", "sha256sum format"),
        Example("ckpt-inspector manifest create model.pt -o model.manifest.json",
                "with a digest per tensor"),
    ),
    "verify": (
        Example("ckpt-inspector verify -m SHA256SUMS", "the files the manifest lists"),
        Example("ckpt-inspector verify --tensors-only -m model.manifest.json "
                "model.safetensors", "a conversion against the original's tensors"),
    ),
    "sign": (
        Example("ckpt-inspector sign model/ --private-key key.pem", "writes model/model.sig"),
        Example("ckpt-inspector sign model/ --private-key key.pem --certificate cert.pem "
                "--certificate-chain ca.pem --tensors", "certificate mode, with per-tensor "
                "digests"),
    ),
    "diff": (
        Example("ckpt-inspector diff good.pt suspect.pt", "which tensors and bits changed"),
        Example("ckpt-inspector diff --json model.bin model.safetensors", "across formats"),
    ),
    "watch": (
        Example("ckpt-inspector watch ckpts/ -m SHA256SUMS --interval 600",
                "re-verify every ten minutes"),
        Example("ckpt-inspector watch ckpts/ -m SHA256SUMS --passes 1 --json", "one pass"),
    ),
    "telemetry": (
        Example("ckpt-inspector telemetry --duration 60 --csv gpu.csv", "record a minute"),
        Example("ckpt-inspector telemetry --replay nvidia-smi.log", "alerts from a log"),
    ),
    "consistency": (
        Example("ckpt-inspector consistency model.pt --device cuda:0", "the weights probe"),
        Example("ckpt-inspector consistency model.pt --device cpu --repeats 20 --json",
                "on the CPU, as JSON"),
    ),
    "report": (
        Example("ckpt-inspector report model.pt -o report.html", "one self-contained page"),
        Example("ckpt-inspector report models/ -o report.pdf --manifest models/SHA256SUMS",
                "the form a CI job keeps"),
    ),
    "merge": (
        Example("ckpt-inspector merge r0.jsonl r1.jsonl r2.jsonl r3.jsonl -o fleet.html",
                "one report from the results of four shards (`report --shard I/4 --results "
                "rI.jsonl`)"),
        Example("ckpt-inspector merge results-*.jsonl -o fleet.json --force",
                "the same as JSON, replacing an earlier merge"),
    ),
    "run": (
        Example("ckpt-inspector run latest runs/exp1", "the checkpoint a resume should load"),
        Example("ckpt-inspector run verify runs/exp1 --json",
                "re-check every ledgered checkpoint and the ledger's chain"),
    ),
}


def epilog(name: str) -> str:
    """The `--help` epilog of command `name`: its exit statuses, then two examples."""
    lines = ["exit status:"]
    lines += [textwrap.fill(e.meaning, 96, initial_indent=f"  {e.code:>3}  ",
                            subsequent_indent=" " * 7) for e in EXITS[name]]
    lines.append(textwrap.fill("; ".join(f"{e.code} {e.meaning.split(' (')[0]}"
                                         for e in EVERY_COMMAND), 96, initial_indent="  ",
                               subsequent_indent="  "))
    lines += ["", "examples:"]
    lines += [f"  {x.line}\n      {x.what}" for x in EXAMPLES[name]]
    return "\n".join(lines)


BEGIN = "<!-- BEGIN generated from inspector/cli/reference.py by scripts/gen_reference.py -->"
END = "<!-- END generated -->"


def reference_block(name: str, parser: argparse.ArgumentParser) -> str:
    """The generated part of `docs/commands/NAME.md`: synopsis, options, examples, exits."""
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, "")
    parts = [BEGIN, "", "## Synopsis", "", "```", formatter.format_help().strip(), "```", ""]
    parts += ["## Options", "", "| option | what it does |", "| --- | --- |"]
    parts += [f"| {_option_name(a)} | {_cell(a.help or '')}{_choices(a)} |"
              for a in parser._actions if a.help != argparse.SUPPRESS]
    for sub in _subparsers(parser):
        parts += ["", f"### {sub.prog}", "", "| option | what it does |", "| --- | --- |"]
        parts += [f"| {_option_name(a)} | {_cell(a.help or '')}{_choices(a)} |"
                  for a in sub._actions if a.help != argparse.SUPPRESS]
    parts += ["", "## Examples", ""]
    parts += [f"    {x.line}\n\n{x.what[0].upper()}{x.what[1:]}.\n" for x in EXAMPLES[name]]
    parts += ["## Exit codes", "", "| code | meaning |", "| --- | --- |"]
    parts += [f"| {e.code} | {_cell(e.meaning)} |" for e in EXITS[name]]
    parts += [f"| {e.code} | {_cell(e.meaning)} (every command) |" for e in EVERY_COMMAND]
    parts += ["", END]
    return "\n".join(parts)


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    return [p for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for p in a.choices.values()]


def _option_name(action: argparse.Action) -> str:
    if isinstance(action, argparse._SubParsersAction):
        return "`" + "`, `".join(action.choices) + "`"
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    takes = action.nargs != 0
    value = f" {action.metavar or action.dest.upper()}" if takes else ""
    return ", ".join(f"`{o}{value}`" for o in action.option_strings)


def _choices(action: argparse.Action) -> str:
    if not action.choices or isinstance(action, argparse._SubParsersAction):
        return ""
    return " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def command_parser(name: str) -> argparse.ArgumentParser:
    """The full parser of subcommand `name`, as `ckpt-inspector NAME --help` shows it."""
    from inspector.cli import build_parser

    parser = build_parser(name)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def page_with_block(name: str, text: str | None) -> str:
    """`docs/commands/NAME.md` with its generated block brought up to date (a new page gets
    a title and the command's one-line help above the block)."""
    from inspector.cli import COMMANDS

    block = reference_block(name, command_parser(name))
    if text is None or BEGIN not in text:
        head = text or f"# `ckpt-inspector {name}`\n\n{COMMANDS[name].help[0].upper()}" \
                       f"{COMMANDS[name].help[1:]}.\n"
        return f"{head.rstrip()}\n\n{block}\n"
    before, _, rest = text.partition(BEGIN)
    _, _, after = rest.partition(END)
    return f"{before}{block}{after}"
