"""What a person reads in a report's tables: each result field's label and its value in words.

The JSON report keeps the engine's keys and values (`verified: true`); the HTML and PDF show
`LABELS[key]` and `words(value)` instead (`Verified by the jailed loader: yes`), so no raw
key, Python value or repr reaches a page. A key with no label is shown as words made from the
key, never left out. Fields a person would not read (every tensor's digest, timings) are counted or
skipped (`HIDDEN`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LABELS: dict[str, str] = {
    # the worker's own word; "bit for bit" is only said of the check made here (`claims`)
    "verified": "Verified by the jailed loader",
    "mismatches": "Tensors that differ",
    "digest_algorithm": "Tensor digests",
    "tensors_written": "Tensors written",
    "tensors_in_input": "Tensors in the input",
    "bytes_written": "Tensor data written",
    "digests": "Tensor digests recorded",
    "aliases": "Tied weights stored once",
    "cloned_views": "Views copied out of a larger storage",
    "made_contiguous": "Strided tensors made contiguous",
    "tensors_skipped": "Tensors left out (no safetensors type)",
    "encoded": "Tensors encoded (sparse, quantized)",
    "objects_moved": "Non-tensor values moved to the sidecar",
    "not_serializable": "Values JSON cannot hold (not kept)",
    "key": "Part converted",
    "strip_prefix": "Prefixes removed from keys",
    "sandbox": "Jail",
    "sidecar": "Sidecar file",
    "input": "Input",
    "scan_verdict": "Input's code safety (static scan)",
    "claims": "Checked in this process against the input's bytes",
    "index": "Input's index",
    "description": "Jail",
    "platform": "Platform",
    "active": "Isolation layers in force",
    "missing": "Isolation layers missing",
    "notes": "Notes from the index checks",
}

PATHS = frozenset({LABELS["input"], LABELS["index"], LABELS["sidecar"]})
"""Labels whose values are paths: they wrap at separators, never mid-word."""

HIDDEN = frozenset({"timing"})
"""Fields a report table leaves out: how long it took is no fact about the file."""

DIGEST_NAMES = {"sha256": "SHA-256 of each tensor's bytes"}


def label(key: str) -> str:
    """The label of a result field: its registered words, else the key in words."""
    return LABELS.get(key) or key.replace("_", " ").capitalize()


def words(key: str, value: Any) -> str:
    """A field's value as a person reads it: yes / no, counts with the first few names,
    sizes in bytes, a jail as its level, a nested record as its own labelled parts."""
    if key == "digest_algorithm" and isinstance(value, str):
        return DIGEST_NAMES.get(value, value)
    if key == "bytes_written" and isinstance(value, int):
        return f"{value:,} bytes"
    if key == "sandbox" and isinstance(value, Mapping):
        return str(value.get("level") or value.get("description") or "unknown")
    if key == "claims" and isinstance(value, Mapping):
        checked = "yes" if value.get("checked") else "no"
        reason = value.get("reason")
        return checked + (f" ({reason})" if reason else "")
    if key == "active" and isinstance(value, list | tuple):  # a jail's layers, every one
        return "; ".join(map(str, value)) or "none"
    if key == "missing" and isinstance(value, Mapping):
        return "; ".join(f"{layer}: {why}" for layer, why in value.items()) or "none"
    if key == "digests" and isinstance(value, Mapping):
        return f"{len(value):,}"
    if key == "aliases" and isinstance(value, Mapping):
        pairs = [f"{a} → {k}" for a, k in value.items()]
        return _counted(pairs)
    return plain(value)


RECORD_KINDS = {"ledger.save": "checkpoint saves", "ledger.rotate": "rotations",
                "guard.alarm": "guard alarms", "guard.metrics": "guard metrics files",
                "order.ledger": "data-order logs", "audit.start": "audit starts",
                "audit.end": "audit ends"}
"""A run journal's record kinds in words (`run.checkpoints.SAVE_KIND` and the others)."""


def record_kind(kind: str) -> str:
    """A journal record's kind as a person reads it; an unknown one as its words."""
    return RECORD_KINDS.get(kind) or kind.replace(".", " ").replace("_", " ")


def shard_verified(shard: Mapping[str, Any]) -> str:
    """One converted shard's verification in words: checked here against its input's own
    bytes, or only as the jailed loader reported, or not verified."""
    if not shard.get("verified"):
        return "no: the output does not match the input"
    return "yes, checked here" if shard.get("checked_here") else "as the jailed loader reported"


def plain(value: Any) -> str:
    """Any value in words: None as a dash, booleans as yes / no, lists counted."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, list | tuple):
        return _counted([plain(v) if not isinstance(v, Mapping) else _record(v) for v in value])
    if isinstance(value, Mapping):
        return _record(value) or "none"
    return str(value)


def rows(details: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, words) for every field of a result a person would read, in its order."""
    return [(label(k), words(k, v)) for k, v in details.items() if k not in HIDDEN]


def _record(value: Mapping[str, Any]) -> str:
    return "; ".join(f"{label(k).lower()}: {words(k, v)}" for k, v in value.items())


def _counted(items: list[str], shown: int = 5) -> str:
    """'none', or 'N: a, b, c …'."""
    if not items:
        return "none"
    more = " …" if len(items) > shown else ""
    return f"{len(items):,}: " + ", ".join(items[:shown]) + more
