"""Typed results that cross the process boundary: inspect, diff, convert.

The worker and `sandbox.host.client` speak JSON (the contracts in the README); everything that reads
a result (the CLI, the report, the GUI) reads these dataclasses instead of picking the dicts
apart again. Each is a `core.json_record.JsonRecord`: `to_json(from_json(d)) == d`, a key
this version does not know is kept in `extra` and written back, and a known key the result
did not carry (an older worker, or a key only some results have) stays absent, so a newer
worker's output survives a trip through an older reader. Non-finite numbers are floats here and
their strict strings ("nan", "inf", "-inf") in JSON. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspector.checkpoint.architecture import Architecture
from inspector.checkpoint.health import Health
from inspector.checkpoint.optimizer_map import OptimizerParams
from inspector.checkpoint.resume import ResumeChecklist, model_facts
from inspector.checkpoint.tensor_stats import ObjectLeaf, TensorStats
from inspector.core.json_record import NUMBER, TRANSIENT, JsonRecord, typed, typed_list, word
from inspector.core.vocabulary import JailLevel, TensorStatus, Verdict
from inspector.scan.result import ScanResult

# --- inspect ---------------------------------------------------------------------------


@dataclass
class Jail(JsonRecord):
    """The worker's jail handshake: the level it reached and what is active or missing."""

    level: JailLevel | str | None = field(default=None, metadata=word(JailLevel))
    description: str | None = None
    platform: str | None = None
    active: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)


def jail_line(jail: Jail | None) -> str:
    """One line naming the jail level, what is active and what is missing (or that no worker
    started), as the CLI prints it."""
    if jail is None:
        return "sandbox:  not started"
    line = f"sandbox:  {jail.level} ({', '.join(jail.active or ()) or 'none'})"
    if jail.missing:
        line += "; missing: " + "; ".join(f"{k}: {v}" for k, v in jail.missing.items())
    return line


@dataclass
class LoadError(JsonRecord):
    """Why the worker did not load the file (`code` is stable, `message` for a person)."""

    code: str
    message: str = ""
    globals: list[str] = field(default_factory=list)


@dataclass
class ClaimCheck(JsonRecord):
    """What the user's process checked of the jailed worker's answer from the file's own bytes
    (`sandbox.host.claims`): `checked` with the number of tensors whose digests (and NaN / Inf
    counts) it recomputed, or why it could not (then the answer is the jailed loader's)."""

    checked: bool = False
    tensors: int = 0
    reason: str | None = None


def checked_words(claims: ClaimCheck | None, checked: Callable[[int], str], whose: str) -> str:
    """What of a worker's answer was checked here, in one sentence for every view: `checked`
    (given the number of tensors checked) when the claims were, else why not and `whose` word
    the answer is."""
    if claims is not None and claims.checked:
        return checked(claims.tensors)
    why = claims.reason if claims is not None and claims.reason else "no check was made"
    return f"nothing here ({why}): {whose}"


@dataclass
class ShardFile(JsonRecord):
    """One file of a sharded checkpoint's inspection: its format, tensors, size and hash."""

    file: str
    format: str | None = None
    tensors: int | None = None
    bytes: int | None = None
    sha256: str | None = None


@dataclass
class InspectResult(JsonRecord):
    """The inspect contract: the scan, the jail, every tensor and object, and what they say."""

    path: str
    size: int | None = None
    sha256: str | None = None
    format: str | None = None
    scan: ScanResult | None = field(default=None, metadata=typed(ScanResult))
    sandbox: Jail | None = field(default=None, metadata=typed(Jail))
    digest_algorithm: str | None = None
    tensors: list[TensorStats] = field(default_factory=list, metadata=typed_list(TensorStats))
    objects: list[ObjectLeaf] = field(default_factory=list, metadata=typed_list(ObjectLeaf))
    error: LoadError | None = field(default=None, metadata=typed(LoadError))
    allowed_globals: list[str] = field(default_factory=list)
    health: Health | None = field(default=None, metadata=typed(Health))
    unique_storage: dict[str, int] | None = None
    architecture: Architecture | None = field(default=None, metadata=typed(Architecture))
    resume: ResumeChecklist | None = field(default=None, metadata=typed(ResumeChecklist))
    optimizer_params: list[OptimizerParams] | None = field(
        default=None, metadata=typed_list(OptimizerParams))
    timing: dict[str, Any] | None = None
    code: list[dict[str, Any]] | None = None
    code_archive: dict[str, Any] | None = None
    index: str | None = None
    """A sharded checkpoint's index file (None for one file)."""
    shards: list[ShardFile] | None = field(default=None, metadata=typed_list(ShardFile))
    problems: list[dict[str, Any]] | None = None
    aliases: list[dict[str, Any]] | None = None
    claims: ClaimCheck | None = field(default=None, metadata=typed(ClaimCheck))
    """What the user's process checked of the worker's answer (None: nothing loaded)."""
    contract: dict[str, Any] | None = field(default=None, repr=False, compare=False,
                                            metadata=TRANSIENT)
    """The contract this result was read from, as it came (`of_contract`): what `--json`
    prints, its keys in the order the worker and the host wrote them."""

    @property
    def checked_words(self) -> str:
        """What of the jailed loader's answer was checked here, in one sentence for every
        view."""
        return checked_words(
            self.claims, lambda n: f"{n} tensors' digests, NaN/Inf counts, ranges, zeros and "
            "binary orders recomputed here from the file's bytes, health judged from them; "
            "mean, std and histograms as reported by the jailed loader",
            "statistics, digests and health as reported by the jailed loader")

    @classmethod
    def of_contract(cls, contract: dict[str, Any]) -> InspectResult:
        """The result of an inspect contract, which it keeps as `contract`."""
        result = cls.from_json(contract)
        result.contract = contract
        return result

    @property
    def loaded(self) -> bool:
        """The worker loaded the file (no error)."""
        return self.error is None


def add_model_facts(result: InspectResult) -> None:
    """Judge a load that passed its checks from its typed records (`resume.model_facts`), and
    add what that says to the result and to its contract (where `optimizer_params` is the
    last key)."""
    if not result.loaded:
        return
    facts = model_facts(result.tensors, result.objects)
    result.architecture, result.resume = facts.architecture, facts.resume
    result.optimizer_params = facts.optimizer_params
    result.absent -= {"architecture", "resume", "optimizer_params"}
    if result.contract is not None:
        result.contract.update(facts.to_json())


# --- consistency -----------------------------------------------------------------------


@dataclass
class ConsistencyResult(JsonRecord):
    """The consistency contract: whether repeated runs on a device agreed, per weight matrix
    (`probe`) or per model output (`model`), with the fault injected on purpose, if any."""

    mode: str = "probe"
    consistent: bool = False
    device: str | None = None
    device_label: str | None = None
    repeats: int | None = None
    tensors: list[dict[str, Any]] = field(default_factory=list)
    """`probe`: each weight matrix's checks (status, mismatches, reference, round trip)."""
    outputs: list[dict[str, Any]] = field(default_factory=list)
    """`model`: each output's checks."""
    iterations: list[dict[str, Any]] = field(default_factory=list)
    resident_mismatches: list[dict[str, Any]] = field(default_factory=list)
    nonfinite_weights: list[str] = field(default_factory=list)
    injected: dict[str, Any] | None = None
    error: str | None = None
    scan_verdict: Verdict | str | None = field(default=None, metadata=word(Verdict))
    probed_tensors: int | None = None
    probed_bytes: int | None = None
    weights_gb_per_s: float | None = field(default=None, metadata=NUMBER)
    factory: str | None = None
    missing_keys: list[str] = field(default_factory=list)
    unexpected_keys: list[str] = field(default_factory=list)
    reload: dict[str, Any] | None = None
    claims: ClaimCheck | None = field(default=None, metadata=typed(ClaimCheck))
    """What the user's process checked of the probe against the file's own bytes."""

    @property
    def checked_words(self) -> str:
        """What of the worker's answer was checked here, in one sentence for every view."""
        return checked_words(
            self.claims, lambda n: f"the {n} tensors the device was given are the file's bytes "
            "(SHA-256 recomputed here), NaN/Inf recounted here; the runs' outputs as reported "
            "by the jailed worker", "the whole answer as reported by the jailed worker")

    @property
    def word(self) -> str:
        """The outcome in one word for every view: NaN/Inf weights leave the device unjudged."""
        if self.consistent:
            return "NOT JUDGED" if self.nonfinite_rows else "CONSISTENT"
        return "INCONSISTENT"

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The checked rows of its mode: weight matrices, or model outputs."""
        return self.tensors if self.mode == "probe" else self.outputs

    @property
    def nonfinite_rows(self) -> list[dict[str, Any]]:
        """Weight matrices holding NaN/Inf, on which no device can be judged."""
        return [row for row in self.tensors if row.get("nonfinite")]


# --- diff ------------------------------------------------------------------------------


def plain(sentence: str) -> str:
    """A sentence of the diff engine without its backticks around keys, for a page or a pane
    that shows keys as plain text."""
    return sentence.replace("`", "")


@dataclass
class FlipRecord(JsonRecord):
    """One element that differs in exactly one bit, as the diff contract lists it
    (`checkpoint.bitflip.BitFlip` is the worker's accumulator; this is what reaches a reader)."""

    index: int
    bit: int
    kind: str
    part: str | None = None
    before_bits: str | None = None
    after_bits: str | None = None
    before_value: str | None = None
    after_value: str | None = None
    position: list[int] = field(default_factory=list)
    file_offset_a: int | None = None
    file_offset_b: int | None = None

    @property
    def label(self) -> str:
        """Kind with its part, e.g. 'exponent' or 'imag exponent'."""
        return f"{self.part} {self.kind}" if self.part else self.kind


@dataclass
class TensorDiffRow(JsonRecord):
    """One key of a diff: its status, its numbers and its bit flips."""

    key: str
    status: TensorStatus | str = field(metadata=word(TensorStatus))
    dtype_a: str | None = None
    dtype_b: str | None = None
    shape_a: list[int] | None = None
    shape_b: list[int] | None = None
    changed_elements: int = 0
    max_abs_diff: float | None = field(default=None, metadata=NUMBER)
    max_rel_diff: float | None = field(default=None, metadata=NUMBER)
    nonfinite_changes: int = 0
    offset_a: int | None = None
    offset_b: int | None = None
    single_bit_flips: int = 0
    multi_bit_elements: int = 0
    bitflips: list[FlipRecord] = field(default_factory=list, metadata=typed_list(FlipRecord))
    summary: str = ""
    """One sentence, keys in backticks (Markdown); `plain_summary` is the same without them."""
    shard_a: str | None = None
    stored_as_a: str | None = None
    shard_b: str | None = None
    stored_as_b: str | None = None

    @property
    def plain_summary(self) -> str:
        """The summary as plain text, or the status when there is none."""
        return plain(self.summary) if self.summary else self.status


@dataclass
class DiffSide(JsonRecord):
    """One side of a diff: its path, format(s), files and index problems."""

    path: str
    format: str | None = None
    shards: list[dict[str, Any]] = field(default_factory=list)
    index: str | None = None
    problems: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class DiffResult(JsonRecord):
    """The diff contract: both sides, a row per key, aliases and changed objects."""

    a: DiffSide | None = field(default=None, metadata=typed(DiffSide))
    b: DiffSide | None = field(default=None, metadata=typed(DiffSide))
    identical: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    tensors: list[TensorDiffRow] = field(default_factory=list,
                                         metadata=typed_list(TensorDiffRow))
    aliases: list[dict[str, Any]] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    sandbox: Jail | None = field(default=None, metadata=typed(Jail))
    timing: dict[str, Any] | None = None
    claims: ClaimCheck | None = field(default=None, metadata=typed(ClaimCheck))
    """What the user's process checked of the rows' statuses against both files' bytes."""

    @property
    def checked_words(self) -> str:
        """What of the jailed loader's comparison was checked here, in one sentence for every
        view."""
        return checked_words(
            self.claims, lambda n: f"each of the {n} keys' status, changed elements, NaN / Inf, "
            "bit flips and largest differences recomputed here from both files' bytes",
            "the jailed loader's comparison")

    @property
    def differing(self) -> list[TensorDiffRow]:
        """The rows that are not identical, worst first, as every view leads with them: NaN or
        Inf, then single-bit flips, then drift, then the rest (a key on one side only, a dtype
        or shape changed), each kind in the engine's order."""
        rows = [r for r in self.tensors if r.status != TensorStatus.IDENTICAL]
        return sorted(rows, key=lambda r: (not r.nonfinite_changes, not r.single_bit_flips,
                                           not r.multi_bit_elements))


# --- digests ---------------------------------------------------------------------------


@dataclass
class TensorDigest(JsonRecord):
    """One tensor of the `digests` reply: its key, dtype, shape and content digest."""

    key: str
    dtype: str
    shape: list[int]
    digest: str
    digest_algorithm: str | None = None


@dataclass
class DigestsResult(JsonRecord):
    """The `digests` reply (what `verify` compares with a manifest): every tensor's digest."""

    format: str | None = None
    digest_algorithm: str | None = None
    tensors: list[TensorDigest] = field(default_factory=list, metadata=typed_list(TensorDigest))
    sandbox: Jail | None = field(default=None, metadata=typed(Jail))
    timing: dict[str, Any] | None = None


# --- convert ---------------------------------------------------------------------------


@dataclass
class ConversionResult(JsonRecord):
    """The conversion report: what was written where, verified against the input."""

    verified: bool = False
    mismatches: list[str] = field(default_factory=list)
    sha256: str | None = None
    digest_algorithm: str | None = None
    tensors_written: int = 0
    bytes_written: int = 0
    digests: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    cloned_views: list[str] = field(default_factory=list)
    made_contiguous: list[str] = field(default_factory=list)
    tensors_skipped: list[Any] = field(default_factory=list)
    tensors_in_input: int | None = None
    """None from a worker that did not count them."""
    encoded: dict[str, Any] = field(default_factory=dict)
    objects_moved: list[Any] = field(default_factory=list)
    not_serializable: list[Any] = field(default_factory=list)
    key: str | None = None
    strip_prefix: list[str] = field(default_factory=list)
    sandbox: Jail | None = field(default=None, metadata=typed(Jail))
    timing: dict[str, Any] | None = None
    sidecar: str | None = None
    input: str | None = None
    output: str | None = None
    scan_verdict: Verdict | str | None = field(default=None, metadata=word(Verdict))
    claims: ClaimCheck | None = field(default=None, metadata=typed(ClaimCheck))
    """What the user's process checked of the output against the input's own bytes."""

    @property
    def unchecked_reason(self) -> str | None:
        """Why the output was not checked against the input here (None: it was), so that
        "bit for bit" is only ever said of a check the worker could not forge."""
        if self.claims is not None and self.claims.checked:
            return None
        return (self.claims.reason if self.claims is not None else None) or "no check was made"


@dataclass
class FolderConversion(JsonRecord):
    """A model folder or index converted shard by shard (`convert DIR`): each shard's
    conversion, the index written beside them and what its checks found."""

    input: str
    index: str | None = None
    output_index: str | None = None
    outputs: list[str] = field(default_factory=list)
    tensors_written: int = 0
    bytes_written: int = 0
    problems: list[dict[str, Any]] = field(default_factory=list)
    shards: list[ConversionResult] = field(default_factory=list,
                                           metadata=typed_list(ConversionResult))

    @property
    def unchecked_reason(self) -> str | None:
        """The first shard not checked here against its input, and why (None: all were)."""
        return next((f"{Path(str(s.input)).name}: {s.unchecked_reason}" for s in self.shards
                     if s.unchecked_reason is not None), None)
