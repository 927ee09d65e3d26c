"""HTML cells and blocks of the report's pages: tables, key-value rows, badges, statuses and
the text forms of names, digests, sizes and values. Everything from a file is escaped here."""

from __future__ import annotations

from inspector.core.badges import LOOKS, Badge, Look
from inspector.core.termtext import html_escape as escape  # marks control characters visibly
from inspector.report import charts
from inspector.report.model import FAIL, NOT_CHECKED, PASS

MAX_ROWS = 200
"""Rows a table shows; the JSON report holds them all."""
CHECK_LABELS = {PASS: "✔ pass", FAIL: "✘ fail", NOT_CHECKED: "– not checked"}


def section(kind: str, anchor: str, title: str, body: str) -> str:
    return section_tag(kind, f"{anchor}-{kind}", f"<h3>{escape(title)}</h3>{body}")


def section_tag(kind: str, anchor: str, body: str) -> str:
    return f"<section id=\"{anchor}\" data-section=\"{kind}\">{body}</section>"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Cells are already-escaped markup; rows past MAX_ROWS are summarised."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
                   for row in rows[:MAX_ROWS])
    more = (f"<p class=\"muted\">… and {len(rows) - MAX_ROWS:,} more rows in the JSON report.</p>"
            if len(rows) > MAX_ROWS else "")
    # <thead>: Qt keeps the column names with the first row under them (never alone at a
    # page's foot) and repeats them on each page the table runs onto
    return (f"<table cellspacing=\"0\" cellpadding=\"3\"><thead><tr>{head}</tr></thead>{body}"
            f"</table>{more}")


def kv(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table cellspacing=\"0\" cellpadding=\"3\">{body}</table>"


def badge_cell(badge: Badge, why: str = "") -> str:
    return look_cell(LOOKS[badge], why)


def look_cell(look: Look, why: str = "") -> str:
    """A state's word in its colour (`core.badges`), with its reason after it."""
    return (f"<b style=\"color: {look.colour}\">{escape(look.word)}</b>"
            + (f" <span class=\"muted\">({escape(why)})</span>" if why else ""))


def severity(severity) -> str:
    return f"<span class=\"sev-{escape(str(severity))}\">{escape(str(severity))}</span>"


def status(status: str) -> str:
    return f"<span class=\"{status}\">{CHECK_LABELS[status]}</span>"


def not_run(text: str) -> str:
    return f"<p class=\"not_checked\">{escape(text)}</p>"


def mono(value) -> str:
    return f"<span class=\"mono\">{escape(str(value))}</span>"


def path(value) -> str:
    """A file name or path in monospace, wrapping at its separators."""
    return f"<span class=\"mono\">{breakable(value)}</span>"


def digest(value) -> str:
    """A digest: one unbroken word, so it may wrap anywhere."""
    return f"<span class=\"hash\">{escape(str(value))}</span>"


WBR = "<wbr>"
SEPARATORS = "/\\_-.:"
"""A long name or path may wrap after these (a zero-width space), never inside a word."""


def breakable(value) -> str:
    """`value` escaped, with a line-break opportunity (`<wbr>`, which copies as nothing) after
    each separator, so a long file name or path wraps at `model-00001-of-00010` /
    `.safetensors` boundaries; the PDF writer reads it as a zero-width space (`render_pdf`)."""
    return "".join(c + WBR if c in SEPARATORS else c for c in escape(str(value)))


def where(finding: dict) -> str:
    parts = [str(finding[k]) for k in ("member", "offset") if finding.get(k) not in (None, "")]
    return " @ ".join(parts)


def short(value, limit: int = 160) -> str:
    """A value as a person reads it: lists joined, mappings as `key: value`, cut at `limit`."""
    if value is None:
        text = "—"
    elif isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, list | tuple):
        text = ", ".join(short(v, limit) for v in value) or "none"
    elif isinstance(value, dict):
        text = "; ".join(f"{k}: {short(v, limit)}" for k, v in value.items()) or "none"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def na(value, spec: str = "") -> str:
    return "n/a" if value is None else format(value, spec)


def size(n: int | None) -> str:
    return "unknown" if n is None else f"{charts.human_bytes(n)} ({n:,} bytes)"


def outcome(result: str, label: str, other: str | None, counts: dict[str, int],
            *more: tuple[str, str]) -> str:
    """The head of a check's section: its result, what it was checked against (`label`:
    `other`), its counts."""
    return kv([
        ("Result", status(result)),
        (label, mono(other or "unknown")),
        ("Counts", escape(", ".join(f"{n} {k}" for k, n in sorted(counts.items())))),
        *more,
    ])


def digest_table(title: str, name: str, records: list[dict]) -> str:
    """Expected against actual digest, one row per file or tensor record (named by `name`)."""
    return f"<h3>{title}</h3>" + table(
        [name.capitalize(), "Status", "Expected", "Actual"],
        [[mono(r.get(name)), escape(str(r.get("status"))),
          mono(short(r.get("expected"))), mono(short(r.get("actual")))]
         for r in records])


def whose_rows(rows: list[tuple[str, str]], unchecked: str | None) -> list[tuple[str, str]]:
    """Key-value rows read from the jailed worker's records, escaped: where its answer was
    not checked here (`unchecked`, why), each value says whose word it is and a last row
    gives why."""
    if not unchecked:
        return [(name, escape(value)) for name, value in rows]
    return [(name, escape(f"{value} (as reported by the jailed loader)")) for name, value in rows
            ] + [("Read from", escape(unchecked))]
