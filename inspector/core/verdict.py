"""Verdict order and exit codes: safe < suspicious < dangerous < error; the worst one wins."""

from __future__ import annotations

from collections.abc import Iterable

SAFE, SUSPICIOUS, DANGEROUS, ERROR = "safe", "suspicious", "dangerous", "error"
ORDER = (SAFE, SUSPICIOUS, DANGEROUS, ERROR)
_RANK = {v: i for i, v in enumerate(ORDER)}
EXIT_CODES = {SAFE: 0, SUSPICIOUS: 1, DANGEROUS: 2, ERROR: 3}


def rank(verdict: str) -> int:
    """Position of a verdict in the order (a finding's `info` severity ranks as safe)."""
    return _RANK.get(verdict, 0)


def worst(verdicts: Iterable[str]) -> str:
    """The worst of some verdicts (other severities such as `info` count as safe)."""
    return max((v for v in verdicts if v in _RANK), key=rank, default=SAFE)


def exit_code(verdict: str) -> int:
    """Process exit status for a verdict: 0 safe, 1 suspicious, 2 dangerous, 3 error."""
    return EXIT_CODES.get(verdict, 0)
