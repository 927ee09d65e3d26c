"""A signature's verdict on a ledgered checkpoint held to the save record its run's journal keeps
(`run.record_check.RecordCheck`, read by its attributes: this package imports nothing of `run`).

A signature that holds says only that its signer signed these bytes; the record says which
bytes this run saved at that path, every file of a folder save included. So where a journal
above the path records it, the verdict `verify PATH --public-key`, `report` and the app's
badge give is the worse of the signature's and the record's: the bytes now against the record
(a file added to a folder save, another run's save copied in with its `NAME.sig`, a folder's
`model.sig` that appeared inside a save), and the ledger's own `NAME.sig` against the record's
digests and place (`save_signature`: its run's chain, its journal line), each reason named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from inspector.core.vocabulary import CheckpointState, SignatureState
from inspector.signing.statement import beside

if TYPE_CHECKING:  # the app weighs states on its UI thread: the checks load in its job
    from inspector.signing.check import SignatureVerdict

SEVERITY = (SignatureState.INTACT, SignatureState.UNVERIFIED, SignatureState.UNSIGNED,
            SignatureState.CHANGED, SignatureState.INVALID)
"""Verdict states, least to most severe: of two verdicts on one checkpoint the later wins (a
change the record proves outweighs a signature that could not be checked here)."""


class Held(Protocol):
    """What `run.record_check.RecordCheck` holds, as read here."""

    ledger: Any
    check: Any
    error: str | None
    around: tuple[Any, ...]


def held_to_record(verdict: SignatureVerdict, record: Held | None,
                   public_key: Path | None = None,
                   certificates: Sequence[Path] = ()) -> SignatureVerdict:
    """`verdict` (the signature covering a path) combined with what the path's save record
    says (None: no journal above it records it): the worse state, every reason named."""
    problems = [] if record is None else \
        record_problems(record, public_key, certificates, Path(verdict.signature))
    return combined(verdict, problems)


def combined(verdict: SignatureVerdict,
             problems: Sequence[tuple[SignatureState, str]]) -> SignatureVerdict:
    """`verdict` with the record's `problems` (`record_problems`): the worse state, every
    reason named; `verdict` itself when there are none."""
    if not problems:
        return verdict
    worst = max((verdict.state, *(state for state, _ in problems)), key=SEVERITY.index)
    reasons = [why for why in (verdict.reason, *(why for _, why in problems)) if why]
    return dataclasses.replace(verdict, state=worst, reason="; ".join(reasons))


def record_problems(record: Held, public_key: Path | None = None,
                    certificates: Sequence[Path] = (), signature: Path | None = None
                    ) -> list[tuple[SignatureState, str]]:
    """Why the save record fails the checkpoint (its bytes or listing now, or the ledger's own
    signature against it), or, with no record, why the journals above it fail `signature`
    (a ledger's, naming a save they lost or another run's: `lost_save`); each with the verdict
    state it stands for; empty when nothing fails."""
    from inspector.signing.saves import save_signature

    if record.error is not None:
        return [(SignatureState.CHANGED, f"no save record above it can be trusted: "
                 f"{record.error}")]
    if record.check is None:
        return _unrecorded(record, public_key, certificates, signature)
    ledger, check = record.ledger, record.check
    where = f"its save record {ledger.path}:{check.record.line} ({check.record.label})"
    problems = []
    if check.state != CheckpointState.INTACT:
        problems.append((SignatureState.CHANGED,
                         f"{where}: {check.state}" + (f": {check.detail}" if check.detail
                                                      else "")))
    own = beside(ledger.resolve(check.record))
    # the ledger's signature, where the save has one and there is a key to check it with
    if (public_key or certificates) and own.is_file():
        signed = save_signature(ledger, check, public_key, certificates)
        if signed is not None and signed.state != SignatureState.INTACT:
            problems.append((SignatureState(signed.state),
                             f"{own} against {where}: {signed.state}"
                             + (f": {signed.reason}" if signed.reason else "")))
    return problems


def _unrecorded(record: Held, public_key: Path | None, certificates: Sequence[Path],
                signature: Path | None) -> list[tuple[SignatureState, str]]:
    """A path no journal above it records: its ledger signature judged by each of those
    journals whose run folder holds it, as `run verify` judges a signature beside no record."""
    from inspector.signing.saves import lost_save

    if signature is None or not (public_key or certificates) or not signature.is_file():
        return []
    problems = []
    for ledger in record.around:
        if not signature.resolve().is_relative_to(ledger.run_dir.resolve()):
            continue
        why = lost_save(ledger, signature, public_key, certificates)
        if why is not None:
            problems.append((SignatureState.CHANGED, f"{signature} {why} ({ledger.path})"))
    return problems
