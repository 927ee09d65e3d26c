"""The report as one self-contained HTML file: inline CSS, charts as PNG data URIs.

`report_body` is shared with the PDF renderer, which hands Qt's rich-text engine the same
markup with its images registered as document resources instead of data URIs.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import replace

from inspector.checkpoint.results import TensorDiffRow
from inspector.core.atomic import write_text_atomic
from inspector.core.badges import LOOKS, Badge, alert_look
from inspector.core.termtext import counted
from inspector.core.termtext import html_escape as escape  # marks control characters visibly
from inspector.core.vocabulary import (
    AlertSeverity,
    LoadStatus,
    ReportStatus,
    StepStatus,
    Verdict,
)
from inspector.report import charts, labels
from inspector.report import html_cells as cells
from inspector.report.advice import bad_data, code_safety, file_advice, weights_health
from inspector.report.model import FileReport, Report, TelemetrySummary
from inspector.report.sections import self_test_words
from inspector.scan.advice import DAMAGED, INTEGRITY_CODES

ImageSrc = Callable[[str, bytes], str]
"""(name, png bytes) -> the value of an <img src=...> for this output."""

"""Longer tables are cut here in HTML/PDF; the JSON report always has every row."""

HEADLINES = {
    Verdict.SAFE: ("SAFE TO OPEN", "No code-running imports were found by the static scan."),
    Verdict.SUSPICIOUS: ("SUSPICIOUS", "Imports outside torch's weights_only allowlist; it will "
                         "not load with weights_only=True unless exactly those globals are "
                         "allowed."),
    Verdict.DANGEROUS: ("DANGEROUS — DO NOT LOAD", "The file imports functions that run code or "
                        "touch the system when it is unpickled. It was not loaded."),
    Verdict.ERROR: ("COULD NOT BE CHECKED", "At least one file could not be scanned; see below."),
}
VERDICT_COLORS = {Verdict.SAFE: LOOKS[Badge.SAFE].colour,
                  Verdict.SUSPICIOUS: LOOKS[Badge.SUSPICIOUS].colour,
                  Verdict.DANGEROUS: LOOKS[Badge.DANGEROUS].colour,
                  Verdict.ERROR: LOOKS[Badge.UNREADABLE].colour}
"""The headline's colour per verdict: the app's badge colours."""
BAD_DATA_COLOR = "#b00020"
PAGE_BREAK = " style=\"page-break-before: always\""
APPENDIX_TITLE = "Appendix: each file in detail, GPU telemetry and environment"
"""Each file after the first starts a printed page, so its table never straddles two files."""

STYLE = """
body { font-family: 'DejaVu Sans', Arial, sans-serif; font-size: 10pt; color: #111;
       max-width: 60em; margin: 1.5em auto; padding: 0 1em; }
h1 { font-size: 17pt; margin-bottom: 0.1em; }
h2 { font-size: 14pt; margin-top: 1.6em; border-bottom: 2px solid #333; }
h3 { font-size: 11.5pt; margin-top: 1.2em; margin-bottom: 0.3em; }
table { border-collapse: collapse; margin: 0.3em 0; }
th, td { border: 1px solid #bbb; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background-color: #eee; }
.mono { font-family: 'DejaVu Sans Mono', monospace; font-size: 9pt; }
.hash { font-family: 'DejaVu Sans Mono', monospace; font-size: 9pt; word-break: break-all; }
.muted { color: #666; }
.banner { width: 100%; border: none; margin: 0.8em 0; }
.banner td { border: none; color: #fff; padding: 10px 14px; }
.headline { font-size: 20pt; font-weight: bold; }
.pass { color: #1b7f3b; font-weight: bold; }
.fail { color: #b00020; font-weight: bold; }
.not_checked { color: #666; }
.sev-dangerous { color: #b00020; font-weight: bold; }
.sev-suspicious { color: #b35c00; font-weight: bold; }
.sev-damaged { color: #b00020; font-weight: bold; }
.sev-problem { color: #b00020; font-weight: bold; }
.sev-warning { color: #b35c00; font-weight: bold; }
.sev-ok { color: #1b7f3b; font-weight: bold; }
img.chart { max-width: 100%; }
@media print {
  body { margin: 0; max-width: none; font-size: 9.5pt; }
  .banner td { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  section { break-inside: avoid-page; }
  h2 { break-after: avoid-page; }
}
"""


def render_html(report: Report) -> str:
    """The whole self-contained HTML document."""
    title = escape(f"Verification report — {', '.join(f.file.name for f in report.files)}")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{title}</title><style>{STYLE}</style></head>\n<body>\n"
        f"{report_body(report, data_uri)}</body></html>\n"
    )


def write_html(report: Report, path: str | os.PathLike[str], overwrite: bool = False) -> None:
    """Render and write atomically."""
    write_text_atomic(path, render_html(report), overwrite=overwrite)


def data_uri(_name: str, png: bytes) -> str:
    """Embed a PNG in the document itself."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def report_body(report: Report, image_src: ImageSrc) -> str:
    """Every section of the report as HTML body markup."""
    parts = [
        "<h1>Checkpoint verification report</h1>",
        f"<p class=\"muted\">{escape(report.tool.name)} {escape(report.tool.version)} · "
        f"generated {escape(report.tool.generated_at)} UTC"
        + (f" · <span class=\"mono\">{escape(report.tool.command)}</span>"
           if report.tool.command else "") + "</p>",
        _summary(report),
        # The first page is the summary; every per-file table follows in the appendix, one
        # file after another (a page per file made 14 pages of 4 small files).
        f"<h1 id=\"appendix\"{PAGE_BREAK}>{APPENDIX_TITLE}</h1>",
    ]
    parts += [_run(run, n) for n, run in enumerate(report.runs, 1)]
    for n, file_report in enumerate(report.files, 1):
        parts.append(_file_sections(file_report, n, image_src))
    parts.append(_telemetry(report, image_src))
    parts.append(_environment(report))
    return "\n".join(parts) + "\n"


def headline(report: Report) -> tuple[str, str]:
    """The banner's headline and explanation for the report's verdict, worded for one file or
    counting the files it is true of ("2 of 12 files import …")."""
    headline, explanation = HEADLINES[report.verdict]
    total = len(report.files)
    if total <= 1:
        return headline, explanation
    hit = sum(f.verdict == report.verdict for f in report.files)
    plural = {
        Verdict.SAFE: f"No code-running imports were found in any of the {total} files by the "
                      "static scan.",
        Verdict.SUSPICIOUS: f"{hit} of {total} files import outside torch's weights_only "
                            "allowlist; they will not load with weights_only=True unless "
                            "exactly those globals are allowed.",
        Verdict.DANGEROUS: f"{hit} of {total} files import functions that run code or touch "
                           "the system when unpickled. They were not loaded.",
        Verdict.ERROR: f"{hit} of {total} files could not be scanned; see below.",
    }
    return headline, plural.get(report.verdict, explanation)


def _summary(report: Report) -> str:
    headline_text, explanation = headline(report)
    color = VERDICT_COLORS[report.verdict]
    # bad data outranks a clean scan: a damaged file or corrupted weights never read as fine
    worse = bad_data(report)
    if worse:
        headline_text, explanation, color = worse.headline.upper(), worse.action, BAD_DATA_COLOR
    status = ("All checks that ran passed." if report.status == ReportStatus.PASSED
              else f"{counted(len(report.problems), 'problem')} found.")
    if report.unchecked:
        n = len(report.unchecked)
        status += (f" {counted(n, 'verdict')} {'rests' if n == 1 else 'rest'} on the jailed "
                   "loader's word, not checked here (see below).")
    problems = "".join(f"<li>{escape(p)}</li>" for p in report.problems)
    unchecked = "".join(f"<li>{escape(u)}</li>" for u in report.unchecked)
    return (
        "<section id=\"summary\" data-section=\"summary\">"
        f"<table class=\"banner\" width=\"100%\" cellpadding=\"10\"><tr>"
        f"<td bgcolor=\"{color}\" style=\"background-color: {color}; color: #ffffff;\">"
        f"<span class=\"headline\" data-verdict=\"{report.verdict}\">{escape(headline_text)}"
        "</span><br>"
        f"{escape(explanation)}<br><b>{escape(status)}</b></td></tr></table>"
        + _signatures(report)
        + (f"<ul>{problems}</ul>" if problems else "")
        + (f"<p data-unchecked=\"{len(report.unchecked)}\"><b>Not checked here</b> (the "
           "jailed loader's word; the file's bytes could not confirm it):</p>"
           f"<ul>{unchecked}</ul>" if unchecked else "")
        + cells.table(["File", "Code safety", "Weights health", "Problems", "Detail"], [
            [cells.breakable(f.file.name), _word_cell(f), _health_cell(f),
             escape(str(len(f.problems))), f"<a href=\"#file-{n}\">appendix {n}</a>"]
            for n, f in enumerate(report.files, 1)])
        + "</section>"
    )


def _signatures(report: Report) -> str:
    """Each signed folder's state and signer, before anything else of the summary."""
    if not report.signatures:
        return ""
    return cells.table(["Signature", "State", "Signed by", "Why"], [
        [cells.mono(v["signature"]), f"<b>{escape(v['state'])}</b>", escape(v.get("signer") or "—"),
         escape(v.get("reason") or "")] for v in report.signatures])


def _file_sections(f: FileReport, n: int, image_src: ImageSrc) -> str:
    anchor = f"file-{n}"
    return "\n".join([
        f"<h2 id=\"{anchor}\">{n}. {cells.breakable(f.file.name)}</h2>",
        cells.section("file", anchor, "File", cells.kv([
            ("Path", cells.path(f.file.path)),
            ("Size", escape(cells.size(f.file.size))),
            ("Modified", escape(f.file.mtime or "unknown")),
            ("Format", escape(f.file.format or "unknown")),
            ("SHA-256", cells.digest(f.file.sha256 or ("one per shard (see Shards)" if f.shards
                                               else "not computed"))),
            ("Code safety", _word_cell(f)),
            ("Weights health", _health_cell(f)),
            *([("Checked here", escape(f.claims.words))] if f.claims else []),
            ("What to do", escape(file_advice(f).action)),
        ])),
        *([cells.section("shards", anchor, "Shards", _shards(f))] if f.shards else []),
        cells.section("checklist", anchor, "Prevention checklist", cells.table(
            ["Practice", "Result", "Detail"],
            [[escape(c.title), f"<span class=\"{c.status}\">{cells.CHECK_LABELS[c.status]}</span>",
              escape(c.detail)] for c in f.checklist])),
        cells.section("scan", anchor, "Static scan (no code ran)", _scan(f)),
        cells.section("load", anchor, "Jailed weights_only load", _load(f)),
        cells.section("health", anchor, "Weights health", _health(f)),
        cells.section("model", anchor, "Model and training state", _model(f)),
        *([cells.section("code", anchor, "Code carried by the archive", _code(f))] if f.code
          else []),
        cells.section("tensors", anchor, "Tensors", _tensors(f, anchor, image_src)),
        cells.section("verification", anchor, "Manifest verification", _verification(f)),
        cells.section("comparison", anchor, "Comparison with another copy", _comparison(f)),
        cells.section("conversion", anchor, "Conversion to safetensors", _conversion(f)),
        cells.section("consistency", anchor, "Repeat-inference consistency",
                 _consistency(f, anchor, image_src)),
    ])


def _shards(f: FileReport) -> str:
    """Each shard with its own SHA-256 (the checkpoint has none), then coverage problems."""
    s = f.shards
    table = cells.table(["Shard", "Format", "Tensors", "Size", "SHA-256"], [
        [cells.path(r.get("file")), escape(r.get("format") or "unknown"),
         escape(cells.na(r.get("tensors"))), escape(cells.size(r.get("bytes"))),
         cells.digest(r.get("sha256") or "not loaded")] for r in s.files])
    problems = cells.table(["Coverage problem", "Message"], [
        [cells.mono(p.get("code")), escape(str(p.get("message")))] for p in s.problems]
    ) if s.problems else ("<p>Every key is in exactly one shard, as the index says.</p>"
                          if f.load.status == LoadStatus.LOADED
                          else cells.not_run("The shards were not loaded, so their keys were not "
                                        "checked against the index."))
    return cells.kv([("Index", cells.mono(s.index))]) + table + problems


def _model(f: FileReport) -> str:
    m = f.model
    if m is None:
        return cells.not_run("Nothing was loaded, so the model was not read.")
    rows = cells.whose_rows([("Architecture", m.architecture or "not recognised"), (
        "Training state", m.training or "weights only (no training state)"),
        *([("Resume", m.resume)] if m.resume else [])], m.unchecked)
    table = cells.table(["Needed to resume", "Status", "Detail"],
                   [[escape(r["item"]), escape(r["status"]), escape(r["detail"])]
                    for r in m.resume_items]) if m.resume_items else ""
    return cells.kv(rows) + table


def _code(f: FileReport) -> str:
    """What loading the archive with torch would run: each code file and its flags."""
    c = f.code
    verdict = (f"{counted(c.flags, 'flag')}: read the flagged files before "
               "anyone loads this archive with torch" if c.flags
               else "no flags: nothing beyond tensor maths was found")
    intro = ("<p>torch.jit.load (or torch.export.load) would compile and run this code; "
             "here it was only read. The weights were read from their records.</p>")
    rows = [[cells.mono(r.get("name")), escape(cells.size(r.get("size"))),
             escape("; ".join(r.get("flags") or []) or "none")
             + (" (text truncated)" if r.get("truncated") else "")] for r in c.files]
    return (intro + cells.kv([("Kind", escape(c.kind)), ("Constants", escape(f"{c.constants:,}")),
                         ("Flags", escape(verdict))])
            + cells.table(["Code file", "Size", "Flags"], rows))


def _scan(f: FileReport) -> str:
    s = f.scan
    if s.status == StepStatus.NOT_RUN:
        return cells.not_run("The static scan did not run.")
    ok = {True: "yes", False: "no", None: "undecided"}[s.weights_only_ok]
    parts = [cells.kv([
        ("Verdict", _word_cell(f)),
        ("weights_only=True accepts it", escape(ok)),
        ("Globals imported", escape(str(len(s.globals)))),
        ("Findings", escape(str(len(s.findings)))),
    ] + ([("Error", escape(s.error))] if s.error else []))]
    if s.globals:
        parts.append("<h3>Globals</h3>" + cells.table(
            ["Module", "Name", "Count", "Severity"],
            [[cells.mono(g.get("module")), cells.mono(g.get("name")),
              escape(str(g.get("count", ""))), cells.severity(g.get("severity"))]
             for g in s.globals]))
    if s.findings:
        parts.append("<h3>Findings</h3>" + cells.table(
            ["Severity", "Code", "Message", "Where"],
            [[cells.severity(DAMAGED if x.get("code") in INTEGRITY_CODES else x.get("severity")),
              cells.mono(x.get("code")), escape(str(x.get("message"))), cells.mono(cells.where(x))]
             for x in s.findings]))
    return "".join(parts)


def _load(f: FileReport) -> str:
    load = f.load
    if load.status == LoadStatus.NOT_RUN:
        reason = ("It was not loaded because the static scan called it dangerous."
                  if f.verdict == Verdict.DANGEROUS else "No load was run in this session.")
        return cells.not_run(reason)
    if load.status == LoadStatus.REFUSED:
        reason = load.error or ""
        return cells.not_run(reason[:1].upper() + reason[1:] if reason.startswith("not loaded")
                        else f"Not loaded: {reason}")
    rows = [("Result", escape(load.status)),
            ("Sandbox level", escape(load.sandbox_level or "unknown"))]
    jail = {k: v for k, v in load.sandbox.items()
            if k != "level" and not (k == "description" and v == load.sandbox_level)}
    rows += [(escape(name), escape(text)) for name, text in labels.rows(jail)]
    if load.error:
        rows.append(("Error", escape(load.error)))
    return cells.kv(rows)


def _tensors(f: FileReport, anchor: str, image_src: ImageSrc) -> str:
    t = f.tensors
    if t is None:
        return cells.not_run("No tensors were read (the file was not loaded).")
    parts = [cells.kv([
        ("Tensors", escape(f"{t.count:,}")),
        ("Parameters (all elements)", escape(f"{t.parameters:,}")),
        ("Tensor bytes", escape(cells.size(t.bytes))),
    ] + ([("Unique storage (tied weights once)",
           escape(f"{t.unique_parameters:,} elements, {cells.size(t.unique_bytes)}"
                  + (f" ({t.unique_unchecked})" if t.unique_unchecked else "")))]
         if t.unique_parameters is not None else []) + [
        ("Other objects", escape(f"{t.objects:,}")),
        ("Content digest", escape(t.digest_algorithm or "n/a")),
    ])]
    if t.dtypes:
        png = charts.bar_chart("Bytes by dtype", [(d.dtype, d.bytes) for d in t.dtypes], "B")
        parts.append(_img(image_src, f"{anchor}-dtypes", png, "Bytes by dtype"))
        parts.append(cells.table(["dtype", "Tensors", "Elements", "Bytes"], [
            [cells.mono(d.dtype), escape(f"{d.tensors:,}"), escape(f"{d.elements:,}"),
             escape(cells.size(d.bytes))] for d in t.dtypes]))
    parts.append("<h3>Tensors with NaN or Inf</h3>")
    parts.append(cells.table(["Key", "NaN", "Inf"], [
        [cells.mono(r.key), escape(f"{r.nan:,}"), escape(f"{r.inf:,}")] for r in t.nonfinite])
        if t.nonfinite else "<p class=\"pass\">None: every value is finite.</p>")
    if t.largest_abs:
        parts.append("<h3>Largest magnitudes</h3>" + cells.table(["Key", "dtype", "max |x|"], [
            [cells.mono(r.key), cells.mono(r.dtype), escape(f"{r.abs_max:.6g}")]
            for r in t.largest_abs]))
    return "".join(parts)


_NOT_LOADED = {LoadStatus.NOT_RUN: "not loaded in this session",
               LoadStatus.FAILED: "the load failed", LoadStatus.REFUSED: "not loaded"}
"""Why weights were not judged, where the load left no message of its own."""


def _health_cell(f: FileReport) -> str:
    """A file's weights-health badge in the app's word and colour, with why it was not judged
    in its first clause (the load's section gives the whole of it)."""
    badge, load = weights_health(f), f.load
    if badge != Badge.WEIGHTS_NOT_JUDGED:
        # judged from values the file's bytes could not confirm: whose word it is, first
        why = "as reported by the jailed loader" if f.health and f.health.unchecked else ""
    elif load.error:
        why = load.error
    elif load.status == LoadStatus.NOT_RUN and f.verdict == Verdict.DANGEROUS:
        why = "not loaded: the static scan called it dangerous"
    else:
        why = _NOT_LOADED.get(load.status) or str(load.status).replace("_", " ")
    return cells.badge_cell(badge, why.split("; ", 1)[0].split(". ", 1)[0])


def _health(f: FileReport) -> str:
    h = f.health
    if h is None:
        return cells.not_run("The weights were not loaded, so their values were not judged.")
    parts = [cells.kv([
        ("Status", _health_cell(f)),
        *([("Judged from", escape(h.unchecked))] if h.unchecked else []),
        ("Weight tensors judged", escape(f"{h.weights_checked:,}")),
        ("Training-state tensors (shown, not judged)", escape(f"{h.state_tensors:,}")),
    ])]
    if h.findings:
        parts.append(cells.table(["Severity", "Code", "Key", "Finding"], [
            [cells.severity(x.get("severity")), cells.mono(x.get("code")), cells.mono(x.get("key")),
             escape(str(x.get("message")))] for x in h.findings]))
    else:
        parts.append("<p class=\"pass\">No NaN or Inf, no outliers, no negative running "
                     "variance, no constant or duplicate weights.</p>")
    return "".join(parts)


def _verification(f: FileReport) -> str:
    v = f.verification
    if v is None:
        return cells.not_run("No manifest was given.")
    parts = [cells.outcome(v.status, "Manifest", v.manifest, v.counts)]
    if v.files:
        parts.append(cells.digest_table("Files", "path", v.files))
    if v.tensors:
        parts.append(cells.digest_table("Tensors that are not ok", "key", v.tensors))
    if v.errors:
        parts.append("<h3>Not checked</h3><ul>"
                     + "".join(f"<li>{escape(e)}</li>" for e in v.errors) + "</ul>")
    return "".join(parts)


def _comparison(f: FileReport) -> str:
    c = f.comparison
    if c is None:
        return cells.not_run("Not compared with another copy in this session.")
    parts = [cells.outcome(c.status, "Other copy", c.other, c.counts,
                           ("Single-bit flips", escape(str(c.single_bit_flips))),
                           ("Checked here", escape(c.checked)))]
    for t in map(TensorDiffRow.from_json, c.tensors):
        parts.append(f"<h3>{cells.mono(t.key)}</h3><p>{escape(t.plain_summary)}</p>")
        if t.bitflips:
            parts.append(cells.table(
                ["Element", "Bit", "Before", "After", "Byte in A", "Byte in B"],
                [[cells.mono(str(fl.position or fl.index)),
                  escape(f"{fl.bit} ({fl.kind})"),
                  cells.mono(f"{fl.before_value} 0x{fl.before_bits}" if fl.before_bits else ""),
                  cells.mono(f"{fl.after_value} 0x{fl.after_bits}" if fl.after_bits else ""),
                  cells.mono("" if fl.file_offset_a is None else fl.file_offset_a),
                  cells.mono("" if fl.file_offset_b is None else fl.file_offset_b)]
                 for fl in t.bitflips]))
    return "".join(parts)


def _conversion(f: FileReport) -> str:
    c = f.conversion
    if c is None:
        return cells.not_run("No conversion was run in this session.")
    shards = c.details.get("shards")
    if shards is None:
        rows = [("Result", cells.status(c.status)), ("Output", cells.path(c.output or "none")),
                ("Output SHA-256", cells.digest(c.sha256 or "n/a"))]
    else:  # a sharded folder: the index written, then each shard's own line
        rows = [("Result", cells.status(c.status)), ("Index written", cells.path(c.output or
                                                                                 "none"))]
    details = {k: v for k, v in c.details.items() if k != "shards"}
    rows += [(escape(name), cells.breakable(text) if name in labels.PATHS else escape(text))
             for name, text in labels.rows(details)]
    if not shards:
        return cells.kv(rows)
    return cells.kv(rows) + cells.table(
        ["Shard written", "From", "Tensors", "Verified", "SHA-256"],
        [[cells.path(s["output"] or "none"), cells.path(s["input"] or "none"),
          escape(f"{s['tensors_written']:,}"), escape(labels.shard_verified(s)),
          cells.digest(s["sha256"] or "n/a")] for s in shards])


def _consistency(f: FileReport, anchor: str, image_src: ImageSrc) -> str:
    c = f.consistency
    if c is None:
        return cells.not_run("No consistency run in this session.")
    test = ([("Self-test", escape(f"{self_test_words(c.self_test)}; the run passes when the "
                                  "results differ"))] if c.self_test else [])
    parts = [cells.kv(test + [("Result", cells.status(c.status)),
                              ("Device", escape(c.device or "unknown")),
                              ("Repeats", escape("unknown" if c.repeats is None
                                                 else str(c.repeats)))]
                 + ([("Error", escape(c.error))] if c.error else [])
                 + [(escape(k), escape(cells.short(v))) for k, v in c.details.items()])]
    if c.series:  # the worker's runs, but for a checked probe's all-zero ones (its rows')
        png = charts.line_chart("Max abs difference per iteration" + (
            "" if c.weights_checked and not any(c.series) else " (as reported by the jailed "
            "worker)"), [("max |Δ|", list(enumerate(c.series, 1)))], "iteration", "max |Δ|")
        parts.append(_img(image_src, f"{anchor}-consistency", png, "Consistency per iteration"))
    if c.failures:
        keys = sorted({k for r in c.failures for k in r})
        parts.append("<h3>Differing results</h3>" + cells.table(
            [escape(k) for k in keys],
            [[escape(cells.short(r.get(k))) for k in keys] for r in c.failures]))
    return "".join(parts)


def _run(run: dict, n: int) -> str:
    """A training run's checkpoint ledger: what was saved, what is intact now, the chain."""
    latest = run["latest_valid"]
    step = f" (step {latest['step']:,})" if latest and latest["step"] is not None else ""
    rows = [
        ("Ledger", cells.mono(run["journal"])),
        ("Checkpoints saved", escape(f"{run['saves']} ({run['verified_at_save']} verified "
                                     "against memory when saved)")),
        ("Now", escape(f"{run['intact']} intact, {run['changed']} changed, "
                       f"{run['missing']} missing, {run['removed']} removed by rotation, "
                       f"{run['replaced']} written over by a later save")),
        ("Latest valid", cells.mono(latest["path"]) + escape(step) if latest else "none"),
        ("Chain", escape(("intact" + (" (sealed with the key)" if run.get("sealed") else
                                      " (no seal key: it finds damage, not a forger)"))
                         if run["chain_intact"] else "broken: " + "; ".join(run["problems"]))),
        ("Journal records", escape(", ".join(f"{labels.record_kind(k)}: {n}"
                                             for k, n in sorted(run["records"].items())))),
    ]
    return "<h2>Training run ledger</h2>" + cells.section_tag("run", f"run-{n}",
                                                         cells.kv(rows) + _alarms(run))


def _alarms(run: dict) -> str:
    """The training guard's alarms: the rule at each step, the action, what it was blamed on."""
    alarms = run.get("alarms") or []
    if not alarms:
        return "<h3>Guard alarms</h3><p class=\"muted\">The training guard raised no alarm.</p>"
    rows = []
    for a in alarms:
        rank = f" (rank {a['rank']})" if a["rank"] not in (None, 0) else ""
        details = [("first non-finite", cells.short(a["params"])) if a["params"] else None,
                   ("scene", a["scene"]) if a["scene"] else None,
                   ("GPU", a["device_text"]) if a["device"] is not None else None]
        rows.append([escape(f"{cells.short(a['step'])}{rank}"), escape(a["rule"]),
                     escape(f"{cells.short(a['value'])} / {cells.short(a['threshold'])}"),
                     escape(f"{a['action']}, {cells.short(a['attribution'])}"),
                     "; ".join(f"{k}: {escape(str(v))}" for k, v in filter(None, details))
                     or "—"])
    gpu = ("" if any(a["device"] is not None for a in alarms)
           else f"<p class=\"muted\">{escape(alarms[0]['device_text'])}.</p>")
    return "<h3>Guard alarms</h3>" + cells.table(
        ["Step", "Rule", "Value / threshold", "Action, attribution",
         "First non-finite parameters, scene, GPU state"], rows) + gpu


def _telemetry(report: Report, image_src: ImageSrc) -> str:
    t = report.telemetry
    if t is None:
        body = cells.not_run("No GPU telemetry was recorded in this session.")
    else:
        duration = f"{t.duration_s:.0f} s" if t.duration_s is not None else "unknown"
        body = cells.kv([("Source", escape(t.source)), ("Samples", escape(f"{t.samples:,}")),
                    ("Duration", escape(duration))])
        body += cells.table(
            # headers break between words and the ECC counts share a column: on a printed
            # page eight columns of long words broke mid-word
            ["GPU", "Temp °C<br>min–max", "ECC errors Δ", "Retired<br>pages Δ",
             "Remapped<br>rows Δ", "XIDs", "Driver asks"],
            [[escape(f"{g.index}: {g.name.removeprefix('NVIDIA ')}"),
              escape(f"{cells.na(g.temperature_min, '.1f')}–"
                     f"{cells.na(g.temperature_max, '.1f')}"),
              escape(f"{cells.na(g.ecc_corrected_delta)} corrected, "
                     f"{cells.na(g.ecc_uncorrected_delta)} uncorrected"),
              escape(cells.na(g.retired_pages_delta)), escape(cells.na(g.remapped_rows_delta)),
              escape(", ".join(map(str, g.xids)) or "none"), _recovery_cell(g.recovery_action)]
             for g in t.gpus])
        body += _telemetry_events(t)
        series = [(f"GPU {g.index}", [(x, y) for x, y in g.temperature_series])
                  for g in t.gpus if g.temperature_series]
        if series:
            png = charts.line_chart("GPU temperature", series, "seconds", "°C")
            body += _img(image_src, "telemetry", png, "GPU temperature")
    return "<h2>GPU telemetry</h2>" + cells.section_tag("telemetry", "telemetry", body)


def _recovery_cell(wanted: str | None) -> str:
    """The driver's recovery action: its words in the critical alert's colour when it asks for
    one (the alert the CLI and the GPU pane raise for it is critical)."""
    if wanted is None or wanted == "none":
        return escape(wanted or "n/a")
    return cells.look_cell(replace(alert_look(AlertSeverity.CRITICAL), word=wanted))


def _telemetry_events(t: TelemetrySummary) -> str:
    """Every alert and throttle onset, oldest first, each severity in the registry's word."""
    if not t.events:
        return "<h3>Events</h3>" + cells.not_run("No alert and no throttling in these samples.")
    return "<h3>Events</h3>" + cells.table(
        ["At", "GPU", "Severity", "What happened"],
        [[escape(f"{e.at_s:.0f} s"), escape("" if e.gpu is None else str(e.gpu)),
          cells.look_cell(alert_look(e.severity)), escape(e.message)] for e in t.events])


def _environment(report: Report) -> str:
    env = report.environment
    if not env:
        body = cells.not_run("The environment was not collected.")
    else:
        rows = [("OS", env.get("os")), ("Python", env.get("python"))]
        rows += list((env.get("packages") or {}).items())
        rows += [("CUDA runtime (torch)", env.get("torch_cuda_runtime")),
                 ("cuDNN", env.get("cudnn")), ("NVIDIA driver", env.get("driver")),
                 ("CUDA driver API", env.get("cuda_driver")), ("NVML", env.get("nvml"))]
        rows += [(f"GPU {g['index']}", f"{g['name']}, ECC {g['ecc_mode']}")
                 for g in env.get("gpus") or []] or [("GPUs", "none found")]
        body = cells.kv([(escape(str(k)), escape(str(v))) for k, v in rows])
    return "<h2>Environment</h2>" + cells.section_tag("environment", "environment", body)


def _img(image_src: ImageSrc, name: str, png: bytes, alt: str) -> str:
    src = image_src(name, png)
    return f"<p><img class=\"chart\" width=\"540\" src=\"{src}\" alt=\"{escape(alt)}\"></p>"


def _word_cell(f: FileReport) -> str:
    """A file's code-safety badge in the app's word and colour (`core.badges.LOOKS`)."""
    return cells.badge_cell(code_safety(f))
