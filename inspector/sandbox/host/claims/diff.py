"""A diff's reply, checked against both sides' bytes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from inspector.checkpoint.results import ClaimCheck
from inspector.core.termtext import escape
from inspector.core.vocabulary import TensorStatus
from inspector.formats.safetensors_header import recorded_aliases
from inspector.rawtensors.readers import NotReadable, RawTensor, open_raw
from inspector.sandbox.host.claims.bytes_equal import same_bytes
from inspector.sandbox.host.claims.refusal import refuted


class SideBySide:
    """Both sides of a diff located here (each side its files: one, or a shard set's) and the
    tensors they share compared byte for byte, on a thread of its own while the worker runs;
    or why a side's tensors cannot all be located here."""

    def __init__(self, sides: list[list[Path]]) -> None:
        self._stop, self._done = threading.Event(), threading.Event()
        self.reason: str | None = None
        self.sides: list[dict[str, RawTensor]] = [{}, {}]
        self.same: dict[str, bool] = {}
        threading.Thread(target=self._run, args=(sides,), name="claims-diff",
                         daemon=True).start()

    def _run(self, sides: list[list[Path]]) -> None:
        try:
            self.sides = [_located(files) for files in sides]
            a, b = self.sides
            for key in sorted(a.keys() & b.keys()):
                if self._stop.is_set():
                    return
                self.same[key] = same_bytes(a[key], b[key])
        except NotReadable as exc:
            self.reason = str(exc)
        except Exception as exc:  # a crafted file our reader fails on: then nothing is checked
            self.reason = f"a file could not be read here ({type(exc).__name__}: {exc})"
        finally:
            self._done.set()

    def wait(self) -> None:
        """Until both sides are located and their shared tensors compared."""
        self._done.wait()

    def stop(self) -> None:
        """The job ended without a reply to check: stop comparing."""
        self._stop.set()

    def status(self, key: str, tied: dict[int, str]) -> str:
        """The status a diff row must have for `key`; `tied`: the side (0, 1) on which the
        loader says the key, not stored there, is the stored tensor named."""
        a, b = (side.get(key) or side.get(tied.get(n, "")) for n, side in enumerate(self.sides))
        if a is None or b is None:
            return TensorStatus.ONLY_IN_A if b is None else TensorStatus.ONLY_IN_B
        if (a.dtype, a.shape) != (b.dtype, b.shape):
            return TensorStatus.DTYPE_OR_SHAPE_CHANGED
        same = self.same.get(key) if not tied else None
        if same is None:
            same = same_bytes(a, b)
        return TensorStatus.IDENTICAL if same else TensorStatus.CHANGED


def _located(files: list[Path]) -> dict[str, RawTensor]:
    """Every tensor of one side's files by key, a converted file's recorded aliases too."""
    out: dict[str, RawTensor] = {}
    for path in files:
        raw = open_raw(path)
        mine = {t.key: t for t in raw.tensors}
        mine |= {removed: mine[kept] for removed, kept in recorded_aliases(raw.metadata).items()
                 if kept in mine and removed not in mine}
        out |= mine
    return out


def check_diff(compared: SideBySide, result: dict[str, Any]) -> None:
    """Check a diff reply against both sides' bytes: every tensor of each side reported once,
    each row's status the one its dtype, shape and bytes give (`not_compared` may stand for
    any but identical: it claims less), and `identical` only when every row is; set `claims`,
    or SandboxError when a claim fails. A key a side does not store, which the loader says it
    ties to one it does (`stored_as_*`), is judged by that tensor's bytes: the tie itself is
    the loader's word, as are the rows' element counts and bit flips."""
    compared.wait()
    if compared.reason is not None:
        result["claims"] = ClaimCheck(reason=compared.reason).to_json()
        return
    problems: list[str] = []
    rows: dict[str, tuple[str, dict[int, str]]] = {}
    for rec in result["tensors"]:
        key = str(rec.get("key"))
        if key in rows:
            problems.append(f"{escape(key)} reported twice")
        tied = {n: str(rec.get(f"stored_as_{letter}")) for n, letter in enumerate("ab")
                if key not in compared.sides[n] and rec.get(f"stored_as_{letter}") is not None}
        rows[key] = (str(rec.get("status")), tied)
    keys = set().union(*(side.keys() for side in compared.sides)) | {
        k for k, (_s, tied) in rows.items() if tied}
    try:
        truths = {key: compared.status(key, rows.get(key, ("", {}))[1]) for key in sorted(keys)}
    except Exception as exc:  # a tied tensor our reader cannot compare: nothing is checked
        result["claims"] = ClaimCheck(reason=f"a tensor could not be compared here "
                                             f"({type(exc).__name__}: {exc})").to_json()
        return
    for key, truth in truths.items():
        said = rows.pop(key, (None, {}))[0]
        if said is None:
            problems.append(f"{escape(key)} is not reported")
        elif said != truth and not (said == TensorStatus.NOT_COMPARED
                                    and truth != TensorStatus.IDENTICAL):
            problems.append(f"{escape(key)} is {truth}, reported as {escape(said)}")
    problems += [f"{escape(key)} is no tensor of either side" for key in rows]
    if result.get("identical") and any(t != TensorStatus.IDENTICAL for t in truths.values()):
        problems.append("the checkpoints were reported identical")
    if problems:
        raise refuted("comparison", problems, result.get("sandbox"))
    result["claims"] = ClaimCheck(checked=True, tensors=len(truths)).to_json()
