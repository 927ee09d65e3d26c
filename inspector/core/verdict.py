"""Verdict order and exit codes: safe < suspicious < dangerous < error; the worst one wins.

The order is `Verdict`'s declaration order. `skipped` is a folder's file that is not a
checkpoint in any format a loader reads (JSON, text, tokenizer files, images): it ranks as safe
and never fails a gate.
"""

from __future__ import annotations

from collections.abc import Iterable

from inspector.core.vocabulary import Verdict

ORDER = tuple(v for v in Verdict if v is not Verdict.SKIPPED)
_RANK = {v: i for i, v in enumerate(ORDER)}
EXIT_CODES = {Verdict.SAFE: 0, Verdict.SUSPICIOUS: 1, Verdict.DANGEROUS: 2, Verdict.ERROR: 3}


def rank(verdict: str) -> int:
    """Position of a verdict in the order (`info` and `skipped` rank as safe)."""
    return _RANK.get(verdict, 0)


def worst(verdicts: Iterable[str]) -> Verdict:
    """The worst of some verdicts (other severities such as `info` count as safe)."""
    return Verdict(max((v for v in verdicts if v in _RANK), key=rank, default=Verdict.SAFE))


def exit_code(verdict: str) -> int:
    """Process exit status for a verdict: 0 safe, 1 suspicious, 2 dangerous, 3 error."""
    return EXIT_CODES.get(verdict, 0)


def fails(verdict: str, fail_on: str) -> bool:
    """Whether a verdict fails a gate set at `fail_on` (that level or any worse one)."""
    return verdict in _RANK and rank(verdict) >= rank(fail_on)
