"""What a guard learned, journaled so a resumed session starts where the run stood, not blind.

A fresh `Guard` on a resumed run used to start every rule with no history: Megatron's and the
EMA rule in their 100-value warm-up, the median rule following a steady climb, the weights'
largest |w| learning each alarm-free step, so a five-orders-of-magnitude loss climb after the
resume went unnamed and its checkpoint was sealed. Now each guard journals its rules' learned
numbers (`guard.baseline`: the rank, the step, the loss and gradient-norm rules' states, and per
model the weights' largest |w|, a running variance's lowest value and each tensor's median update
size per unit of learning rate) at every ledger save's health check and at `close`; a guard
started on the run folder loads the newest sound record of its rank before its first step.

Only plain numbers are read back (each finite; a record that is not wholly so is not used),
and nothing of the record is run. Left out on purpose: each tensor's last norm (the next
reading is the base: a resume from an earlier checkpoint than the record's step has
other norms) and the update windows beyond their median (the record stays one number per
tensor and rule).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inspector.core.errors import CodedError
from inspector.run import journal

KIND = "guard.baseline"
UPDATE_RULE = "update-size"
EARLY = 3
"""How many copies of a tensor's median update size a loaded window holds: the update rule's
`early`, so the median judges from the first step."""


@dataclass(frozen=True)
class Baseline:
    """One journaled `guard.baseline`: the step it was taken at and the rules' state."""

    step: int
    rules: dict


def record(run_dir: Any, rank: int, step: int, rules: dict) -> None:
    """Journal the rules' learned numbers (`Guard._rules_state()`), compacted."""
    journal.append(journal.journal_path(run_dir), KIND,
                   {"rank": rank, "step": step, "rules": _compact(rules)})


def _compact(rules: dict) -> dict:
    """The state without the update rule's last norms, its windows as their medians."""
    out = dict(rules)
    for key in ("weights", "weights_more"):
        if key in out:
            models = out[key] if key == "weights_more" else [out[key]]
            packed = [_compact_model(m) for m in models]
            out[key] = packed if key == "weights_more" else packed[0]
    return out


def _compact_model(state: dict) -> dict:
    update = state.get(UPDATE_RULE)
    if not isinstance(update, dict):
        return state
    medians = {name: [statistics.median(sizes)] * EARLY
               for name, sizes in update.get("per_rate", {}).items() if sizes}
    return {**state, UPDATE_RULE: {"per_rate": medians}}


def latest(read: journal.Journal | None, rank: int) -> Baseline | None:
    """The newest sound `guard.baseline` of `rank` whose numbers are all finite, or None."""
    if read is None:
        return None
    for entry in reversed(read.of_kind(KIND)):
        fields = entry.record
        step, rules = fields.get("step"), fields.get("rules")
        if fields.get("rank") == rank and isinstance(step, int) and isinstance(rules, dict) \
                and _plain(rules):
            return Baseline(step, rules)
    return None


def _plain(value: Any, depth: int = 0) -> bool:
    """Only dicts with string keys, lists and finite numbers, a few levels deep."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    if depth > 6:
        return False
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    return False


def read_journal(path: Path) -> journal.Journal | None:
    """Refuse to append to a run journal whose chain is broken (CodedError, nothing written);
    a line cut short by a crash is kept as evidence and the chain goes on after it, as the
    ledger and `run latest` do. The journal read (None: there is none yet)."""
    if not path.exists():
        return None
    try:
        read = journal.read(path)
    except OSError as exc:
        raise CodedError("journal-unreadable", f"{path} cannot be read ({exc})") from None
    if broken := [p for p in read.problems if p.kind != "truncated"]:
        p = broken[0]
        raise CodedError("journal-damaged", f"{path} line {p.line} is {p.kind} ({p.detail}); "
                         "keep it as evidence and start the run in a new RUN_DIR")
    return read
