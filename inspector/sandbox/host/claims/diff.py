"""A diff's reply, checked against both sides' bytes."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inspector.checkpoint.results import (
    ClaimCheck,
    DiffResult,
    DiffSide,
    FlipRecord,
    TensorDiffRow,
)
from inspector.checkpoint.tensor_pairs import object_changes
from inspector.core.termtext import escape
from inspector.core.vocabulary import TensorStatus
from inspector.formats.safetensors_header import recorded_aliases, recorded_specs, spec_bytes
from inspector.rawtensors.readers import NotReadable, Placed, RawTensor, open_raw
from inspector.sandbox.host.claims.changes import Changes, changes
from inspector.sandbox.host.claims.conversion import same_view
from inspector.sandbox.host.claims.objects import diff_objects
from inspector.sandbox.host.claims.records import same_dtype
from inspector.sandbox.host.claims.refusal import check_shape, refuted

if TYPE_CHECKING:
    from inspector.checkpoint.bitflip import FlipTally  # NumPy's import, on the comparing thread


class SideBySide:
    """Both sides of a diff located here (each side its files: one, or a shard set's) and the
    tensors they share compared element by element (`changes`), on a thread of its own while
    the worker runs; or why a side's tensors cannot all be located here."""

    def __init__(self, sides: list[list[Path]], names: list[list[str]]) -> None:
        self._stop, self._done = threading.Event(), threading.Event()
        self.names = names
        """Each side's files as the user names them (what a row's `shard_a`/`_b` says)."""
        self.reason: str | None = None
        self.sides: list[dict[str, RawTensor]] = [{}, {}]
        self.files: list[dict[str, int]] = [{}, {}]
        """Which of a side's files (its number) holds each key, a recorded alias's included."""
        self.stored: list[dict[str, int]] = [{}, {}]
        """Which of a side's files stores each tensor (what its index must say)."""
        self.objects: list[list[dict]] = [[], []]
        """Each side's plain values (`objects.diff_objects`), the first of a key its files
        repeat."""
        self.shards: list[list[tuple[str, int]]] = [[], []]
        """Each side's files' format and tensor count, as a diff's `a`/`b` record lists them."""
        self.found: dict[str, Changes] = {}
        threading.Thread(target=self._run, args=(sides,), name="claims-diff",
                         daemon=True).start()

    def _run(self, sides: list[list[Path]]) -> None:
        try:
            located = [_located(files) for files in sides]
            self.sides = [side.tensors for side in located]
            self.files = [side.files for side in located]
            self.stored = [side.stored for side in located]
            self.objects = [side.objects for side in located]
            self.shards = [side.shards for side in located]
            a, b = self.sides
            for key in sorted(a.keys() & b.keys()):
                if self._stop.is_set():
                    return
                if (a[key].dtype, a[key].shape) == (b[key].dtype, b[key].shape):
                    self.found[key] = changes(a[key], b[key])
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

    def tensors(self, key: str, tied: dict[int, str]) -> list[RawTensor | None]:
        """The tensor each side keeps `key` in; `tied`: the side (0, 1) on which the loader
        says the key, not stored there, is the stored tensor named."""
        return [side.get(key) or side.get(tied.get(n, "")) for n, side in enumerate(self.sides)]

    def same_bytes(self, n: int, key: str, twin: str) -> bool:
        """Whether side `n` keeps `key` and `twin` in the same bytes: one file, one view of one
        storage (`conversion.same_view`). What a tie must be before it is believed."""
        side, files = self.sides[n], self.files[n]
        return (key in side and twin in side and key != twin
                and files[key] == files[twin] and same_view(side[key], side[twin]))

    def places(self, key: str, tied: dict[int, str]) -> list[tuple[str | None, str | None]]:
        """Where each side keeps `key` (`tied` as in `tensors`): the file (its name), and the
        key whose bytes are read when that is not `key` itself (its twin, or the key a
        converted file records it as an alias of), as a row's `shard_*` and `stored_as_*`."""
        out = []
        for n, (side, files, names) in enumerate(zip(self.sides, self.files, self.names,
                                                     strict=True)):
            name = tied.get(n) or key
            number, tensor = files.get(name), side.get(name)
            stored = None if tensor is None or tensor.key == key else tensor.key
            out.append((None if number is None else names[number], stored))
        return out

    def status(self, key: str, tied: dict[int, str]) -> str:
        """The status a diff row must have for `key` (`tied` as in `tensors`)."""
        a, b = self.tensors(key, tied)
        if a is None or b is None:
            return TensorStatus.ONLY_IN_A if b is None else TensorStatus.ONLY_IN_B
        if (a.dtype, a.shape) != (b.dtype, b.shape):
            return TensorStatus.DTYPE_OR_SHAPE_CHANGED
        if tied or key not in self.found:
            self.found[key] = changes(a, b)
        return TensorStatus.IDENTICAL if self.found[key].same else TensorStatus.CHANGED


@dataclass
class _Side:
    """One side's files read here: its tensors by key, a converted file's recorded aliases
    too, the number of the file each key is in (`files`) and each stored tensor is in
    (`stored`), and its plain values, each key once (the first file's: shards repeat
    metadata, as the worker keeps it)."""

    tensors: dict[str, RawTensor] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    objects: list[dict] = field(default_factory=list)
    shards: list[tuple[str, int]] = field(default_factory=list)
    """Each file's format and its tensors as the worker's readers count them: the stored
    ones, a converted file's recorded aliases and its encoded tensors' `KEY::spec` parts."""


def _located(files: list[Path]) -> _Side:
    """One side's files, each read here (`_Side`)."""
    side = _Side()
    values: dict[str, dict] = {}
    for number, path in enumerate(files):
        raw = open_raw(path)
        mine = {t.key: t for t in raw.tensors}
        side.stored |= dict.fromkeys(mine, number)
        mine |= {removed: mine[kept] for removed, kept in recorded_aliases(raw.metadata).items()
                 if kept in mine and removed not in mine}
        mine |= _spec_parts(raw.metadata)
        side.shards.append((raw.format, len(mine)))
        side.tensors |= mine
        side.files |= dict.fromkeys(mine, number)
        for obj in diff_objects(str(path), raw):
            values.setdefault(obj["key"], obj)
    side.objects = list(values.values())
    return side


def _spec_parts(metadata: dict[str, str]) -> dict[str, RawTensor]:
    """A converted file's rebuild specs of its encoded tensors as the worker's readers list
    them (`KEY::spec`, its canonical JSON as bytes: `tensors.sources`), so two encoded tensors
    that rebuild differently differ; they lie in no place of the file (`view` None)."""
    parts = {}
    for key, spec in recorded_specs(metadata).items():
        data = spec_bytes(spec)
        parts[f"{key}::spec"] = RawTensor(
            f"{key}::spec", "uint8", (len(data),), lambda data=data: iter([memoryview(data)]),
            (None,), (0, 0), Placed((1,), 0, True))
    return parts


def check_diff(compared: SideBySide, result: dict[str, Any]) -> None:
    """Check a diff reply against both sides' bytes: every tensor of each side reported once,
    each row as `_row_problems` checks it (every field of it computed here: its status,
    dtypes, shapes, numbers, flips and sentence); the file each side keeps it in
    (`shard_a`/`_b`) and the key read for it there (`stored_as_a`/`_b`), and the `aliases`
    listing them, the ones found here; `identical` true exactly when every row is identical,
    `counts` and `summary` the rows'; each side's files' formats and tensor
    counts (`_sides_problems`); the plain values that differ (`objects`)
    the ones both sides' files differ in, read here; set `claims`, or SandboxError when a
    claim fails. A key a side does not store, which the loader says it ties to one it does
    (`stored_as_*`), is judged by that tensor's bytes, and only when the other side keeps
    both keys in the same bytes (`SideBySide.same_bytes`: the tie is seen here, not taken on
    the loader's word); the byte offsets in the files computed here (`_offset_problems`)."""
    check_shape("comparison", DiffResult, result)
    compared.wait()
    if compared.reason is not None:
        result["claims"] = ClaimCheck(reason=compared.reason).to_json()
        return
    problems: list[str] = []
    rows: dict[str, dict] = {}
    for rec in result["tensors"]:
        key = str(rec.get("key"))
        if key in rows:
            problems.append(f"{escape(key)} reported twice")
        rows[key] = rec
    tied = {key: {n: str(rec.get(f"stored_as_{letter}")) for n, letter in enumerate("ab")
                  if key not in compared.sides[n] and rec.get(f"stored_as_{letter}") is not None}
            for key, rec in rows.items()}
    problems += _unseen_ties(compared, tied)
    keys = set().union(*(side.keys() for side in compared.sides)) | {k for k, t in tied.items()
                                                                      if t}
    try:
        truths = {key: compared.status(key, tied.get(key, {})) for key in sorted(keys)}
    except Exception as exc:  # a tied tensor our reader cannot compare: nothing is checked
        result["claims"] = ClaimCheck(reason=f"a tensor could not be compared here "
                                             f"({type(exc).__name__}: {exc})").to_json()
        return
    problems += _total_problems(result)  # the worker's rows, before any is rewritten here
    for key, truth in truths.items():
        rec = rows.pop(key, None)
        if rec is None:
            problems.append(f"{escape(key)} is not reported")
        else:
            problems += _row_problems(compared, key, rec, truth, tied.get(key, {}))
    problems += [f"{escape(key)} is no tensor of either side" for key in rows]
    identical = all(t == TensorStatus.IDENTICAL for t in truths.values())
    if result.get("identical") is not identical:
        problems.append("the checkpoints were reported "
                        + ("different" if identical else "identical"))
    problems += _alias_problems(result, tied) + _sides_problems(compared, result)
    if result.get("objects") != object_changes(*compared.objects):
        problems.append("the plain values said to differ are not the ones the files' differ in")
    if problems:
        raise refuted("comparison", problems, result.get("sandbox"))
    # the rows' sentences, a bytewise row's written here (`_bytewise_row`)
    result["summary"] = [r["summary"] for r in result["tensors"] if r.get("summary")]
    result["claims"] = ClaimCheck(checked=True, tensors=len(truths)).to_json()


def _unseen_ties(compared: SideBySide, tied: dict[str, dict[int, str]]) -> list[str]:
    """The claimed ties the bytes do not show, each dropped from `tied`: a key side `n` does
    not store is read from its twin there only when the other side keeps the key and the twin
    in the same bytes (a tied weight, as `checkpoint.tensor_pairs` pairs them)."""
    problems = []
    for key, ties in tied.items():
        for n, twin in list(ties.items()):
            if not compared.same_bytes(1 - n, key, twin):
                problems.append(f"{escape(key)} is said to be {'AB'[n]}'s {escape(twin)}, tied "
                                f"weights, but {'BA'[n]} does not keep the two in the same "
                                "bytes")
                del ties[n]
    return problems


def _row_problems(compared: SideBySide, key: str, rec: dict, truth: str,
                  ties: dict[int, str]) -> list[str]:
    """How one row differs from the key's tensors located here: its status the one their
    dtype, shape and bytes give (`not_compared` too is refuted: both sides' bytes were
    compared here), its fields all known ones; its dtypes, shapes and places the ones read
    here; a row the worker's engine compares element by element (`_change_problems`,
    `_offset_problems`) or not at all (`_plain_problems`; a bytewise one then rewritten
    here, `_bytewise_row`)."""
    said = str(rec.get("status"))
    if said != truth:
        return [f"{escape(key)} is {truth}, reported as {escape(said)}"]
    sides = compared.tensors(key, ties)
    wrong = (_field_problems(key, rec) + _side_problems(key, rec, sides)
             + _place_problems(key, rec, compared.places(key, ties)))
    if wrong:
        return wrong
    found = compared.found.get(key) if truth in _COMPARED else None
    if found is None or found.bytewise:
        wrong = _plain_problems(key, rec, truth)
        if found is not None and not wrong:
            _bytewise_row(key, rec, found)
            return _offset_problems(key, rec, found.tally, sides)
        return wrong
    return (_change_problems(key, rec, found, sides[0])
            or _offset_problems(key, rec, found.tally, sides))


_COMPARED = (TensorStatus.CHANGED, TensorStatus.IDENTICAL)


def _contract(record: type) -> frozenset[str]:
    """The JSON fields of a record of the diff contract."""
    return frozenset(f.name for f in fields(record)) - {"extra", "absent"}


_ROW_FIELDS, _FLIP_FIELDS = _contract(TensorDiffRow), _contract(FlipRecord)
_ANSWER_FIELDS, _SIDE_FIELDS = _contract(DiffResult), _contract(DiffSide)
_UNCOMPARED: dict[str, object] = {
    "changed_elements": 0, "single_bit_flips": 0, "multi_bit_elements": 0,
    "nonfinite_changes": 0, "max_abs_diff": None, "max_rel_diff": None, "bitflips": [],
    "offset_a": None, "offset_b": None}
"""The numbers of a row whose elements the worker's engine does not compare: a key on one
side, a dtype or shape changed, a dtype with no bit layout (only its bytes' equality)."""


def _field_problems(key: str, rec: dict) -> list[str]:
    """A row, or one of its flips, with a field no diff row has (`_unknown`)."""
    flips = rec.get("bitflips") if isinstance(rec.get("bitflips"), list) else []
    wrong = _unknown(f"{escape(key)}'s row", rec, _ROW_FIELDS)
    for flip in flips:
        wrong += (_unknown(f"{escape(key)}'s flip", flip, _FLIP_FIELDS)
                  if isinstance(flip, dict) else [f"{escape(key)}'s flip is not a record"])
    return wrong[:1]


def _plain_problems(key: str, rec: dict, truth: str) -> list[str]:
    """A row whose elements the worker's engine does not compare must carry no number, flip
    or offset of them (`_UNCOMPARED`), and the sentence its checked status, dtypes and shapes
    give (`_sentence`): any other is the worker's free text."""
    wrong = [f"{escape(key)} is {truth}, whose elements are not compared, reported with "
             f"{name.replace('_', ' ')} {escape(str(rec.get(name)))}"
             for name, value in _UNCOMPARED.items()
             if rec.get(name) != value or type(rec.get(name)) is not type(value)]
    if rec.get("summary") != _sentence(key, truth, rec):
        wrong.append(f"{escape(key)}'s sentence says what its bytes do not")
    return wrong[:1]


def _sentence(key: str, truth: str, rec: dict) -> str:
    """The sentence of a row the worker's engine does not compare element by element, as it
    writes it, from the row's status, dtypes and shapes (checked here before)."""
    quoted = f"`{key}`"
    dtype_a, shape_a = rec.get("dtype_a"), rec.get("shape_a")
    return {
        TensorStatus.ONLY_IN_A: f"{quoted} is only in A",
        TensorStatus.ONLY_IN_B: f"{quoted} is only in B",
        TensorStatus.DTYPE_OR_SHAPE_CHANGED: f"{quoted} changed from {dtype_a}{shape_a} to "
                                             f"{rec.get('dtype_b')}{rec.get('shape_b')}",
        TensorStatus.CHANGED: f"{quoted} differs (no bit layout for {dtype_a}: only byte "
                              "equality compared)",
    }.get(truth, "")


def _bytewise_row(key: str, rec: dict, found: Changes) -> None:
    """A row of a dtype with no bit layout (GGUF's `bits8` blocks, F4 / F6), which the
    worker's engine only calls changed or identical, given the numbers its bytes compared
    here give: differing bytes (`changed_elements`, a byte a `bits8` element), the ones
    differing in one bit, and those bits (their meaning not known here)."""
    tally = found.tally
    rec.update(changed_elements=tally.changed, single_bit_flips=tally.single_bit,
               multi_bit_elements=tally.multi_bit,
               bitflips=[{"index": flip.index, "bit": flip.bit, "kind": flip.kind,
                          "before_bits": f"{flip.before or 0:02x}",
                          "after_bits": f"{flip.after or 0:02x}", "position": [flip.index]}
                         for flip in tally.flips])
    if tally.changed:
        noun = "byte" if tally.changed == 1 else "bytes"
        rec["summary"] = (f"`{key}` differs in {tally.changed} {noun}, {tally.single_bit} of "
                          f"them in a single bit ({rec.get('dtype_a')} has no bit layout here: "
                          "compared byte by byte)")


def _side_problems(key: str, rec: dict, sides: list[RawTensor | None]) -> list[str]:
    """How a row's dtype and shape on each side differ from the tensors located here (none on
    a side without the key)."""
    wrong = []
    for letter, t in zip("ab", sides, strict=True):
        dtype, shape = rec.get(f"dtype_{letter}"), rec.get(f"shape_{letter}")
        if (t is None and (dtype, shape) != (None, None)) or (t is not None and not (
                same_dtype(dtype, t.dtype) and shape == list(t.shape))):
            here = "absent" if t is None else f"{t.dtype} {list(t.shape)}"
            wrong.append(f"{escape(key)} is {here} in {letter}, reported as "
                         f"{escape(str(dtype))} {escape(str(shape))}")
    return wrong


def _place_problems(key: str, rec: dict,
                    places: list[tuple[str | None, str | None]]) -> list[str]:
    """How a row's file on each side (`shard_a`/`_b`), and the key read for it there
    (`stored_as_a`/`_b`), differ from the ones read here."""
    def where(shard: object, stored: object) -> str:
        return (f"read as {escape(str(stored))} " if stored is not None else "") + (
            f"in {escape(str(shard))}" if shard is not None else "absent")

    return [f"{escape(key)} is {where(*place)} in {letter}, reported as "
            f"{where(rec.get(f'shard_{letter}'), rec.get(f'stored_as_{letter}'))}"
            for letter, place in zip("ab", places, strict=True)
            if (rec.get(f"shard_{letter}"), rec.get(f"stored_as_{letter}")) != place]


def _alias_problems(result: dict[str, Any], tied: dict[str, dict[int, str]]) -> list[str]:
    """The reply's `aliases` (what the alias and tie lines print) must be its rows': each key
    a side reads under another name, and how (a tie seen here, or a converter's alias)."""
    rows = [r for r in result["tensors"] if isinstance(r, dict)]
    made = [{"key": r.get("key"), "side": letter, "stored_as": r[f"stored_as_{letter}"],
             "how": "tied" if n in tied.get(str(r.get("key")), {}) else "alias"}
            for r in rows for n, letter in enumerate("ab")
            if r.get(f"stored_as_{letter}") is not None]
    return [] if result.get("aliases") == made else ["the aliases are not the rows'"]


def _change_problems(key: str, rec: dict, found: Changes, tensor: RawTensor) -> list[str]:
    """How a compared row's numbers, flips and sentence differ from the ones counted here (an
    identical row's are zeros, no flip and no sentence; the largest differences None where
    neither side reads the dtype's values, packed float4)."""
    tally, drift = found.tally, found.drift
    counted: dict[str, object] = {"changed_elements": tally.changed,
                                  "single_bit_flips": tally.single_bit,
                                  "multi_bit_elements": tally.multi_bit,
                                  "nonfinite_changes": found.nonfinite,
                                  "max_abs_diff": None if drift is None else drift.max_abs,
                                  "max_rel_diff": None if drift is None else drift.max_rel}
    wrong = [f"{escape(key)} has {value} {name.replace('_', ' ')}, reported as "
             f"{escape(str(rec.get(name)))}"
             for name, value in counted.items() if rec.get(name) != value]
    if wrong:
        return wrong
    flips = [flip.to_json(tuple(tensor.shape)) for flip in tally.flips]
    told = rec.get("bitflips")
    said = [{k: r.get(k) for k in f} if isinstance(r, dict) else r
            for r, f in zip(told, flips, strict=True)
            ] if isinstance(told, list) and len(told) == len(flips) else None
    if said != flips:
        return [f"{escape(key)}'s bit flips are not the ones its bytes hold"]
    sentence = tally.summary(key, found.nonfinite or 0) if tally.changed else ""
    if rec.get("summary") != sentence:
        return [f"{escape(key)}'s sentence says what its bytes do not"]
    return []


def _offset_problems(key: str, rec: dict, tally: FlipTally,
                     sides: list[RawTensor | None]) -> list[str]:
    """A compared row's byte offsets in each side's file, which the report and the Integrity
    pane print as forensic positions, computed here: where a tensor stored in one run of
    bytes starts (`offset_a`/`_b`), and each flip's byte (that start + index x itemsize +
    the bit's byte), as the worker's diff engine places them. The worker's may be left out
    (it loads some formats, which then place nothing; a bytewise row it does not place) and
    is then filled in here; one that differs is refuted."""
    wrong = []
    flips = rec.get("bitflips")
    for letter, t in zip("ab", sides, strict=True):
        start = t.view[0] if t is not None and t.placed.contiguous else None
        places = [(f"offset_{letter}", rec, start)] + [
            (f"file_offset_{letter}", item, None if start is None else
             start + flip.index * tally.layout.itemsize + flip.bit // 8)
            for flip, item in zip(tally.flips, flips or (), strict=False)
            if isinstance(item, dict)]
        for name, record, at in places:
            told = record.get(name)
            if told is not None and told != at:
                wrong.append(f"{escape(key)}'s {name.replace('_', ' ')} is {at}, reported as "
                             f"{escape(str(told))}")
            if at is not None or record is rec:  # a flip without a place has no field
                record[name] = at
            else:
                record.pop(name, None)
    return wrong[:1]


def _sides_problems(compared: SideBySide, result: dict[str, Any]) -> list[str]:
    """Each side's record (the `A: path (format)` line and the files' counts) must be its
    files as read here: each file's format and tensor count, and the side's formats; neither
    it nor the answer has a field of its own."""
    wrong = []
    for letter, names, shards in zip("ab", compared.names, compared.shards, strict=True):
        side = result.get(letter) if isinstance(result.get(letter), dict) else {}
        made = {"format": "+".join(dict.fromkeys(fmt for fmt, _ in shards)),
                "shards": [{"file": name, "format": fmt, "tensors": count}
                           for name, (fmt, count) in zip(names, shards, strict=True)]}
        said = {"format": side.get("format"), "shards": side.get("shards")}
        if said != made:
            wrong.append(f"{letter.upper()} is {escape(str(made))}, reported as "
                         f"{escape(str(said))}")
        wrong += _unknown(f"{letter.upper()}'s record", side, _SIDE_FIELDS)
    return wrong + _unknown("the answer", result, _ANSWER_FIELDS)


def _unknown(what: str, record: dict, known: frozenset[str]) -> list[str]:
    """A record with a field its contract does not have, which would reach `--json` as the
    worker wrote it (`JsonRecord.extra`), checked by nothing."""
    unknown = sorted(map(str, set(record) - known))
    return [f"{what} has fields no diff has: {escape(str(unknown))}"] if unknown else []


def _total_problems(result: dict[str, Any]) -> list[str]:
    """The reply's totals must be its rows': the count of each status and the sentences."""
    rows = [r for r in result["tensors"] if isinstance(r, dict)]
    problems = []
    if result.get("counts") != dict(Counter(str(r.get("status")) for r in rows)):
        problems.append("the counts of each status are not the rows'")
    if result.get("summary") != [r.get("summary") for r in rows if r.get("summary")]:
        problems.append("the summary is not the rows' sentences")
    return problems
