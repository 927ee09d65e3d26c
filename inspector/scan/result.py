"""What the static scan reports for one file: each import (`GlobalUse`), each other finding
(`Finding`) and the whole result (`ScanResult`, the `scan` contract)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from inspector.core.json_record import OMIT_NONE, TRANSIENT, JsonRecord, records, typed_list
from inspector.core.vocabulary import Verdict
from inspector.scan.pickles.policy import real_name

KEPT_MEMBERS = 8  # a global's `members`: where to look first, not every place
KEPT_CALLS = 4  # and its `calls`

HANDED_TO_CODE = "own code may unpickle it when this file loads"
"""What a `nested-pickle` finding says of a pickle handed to a class (`scan.context`), which
`reading_apply` looks for: that class's code may unpickle it."""


@dataclass
class GlobalUse:
    """One imported `module.name`, how often the file imports it, and what it means."""

    module: str
    name: str
    count: int
    severity: str
    reason: str
    members: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # pseudo-Python, e.g. `os.system("id")`
    # where each of `calls` is made: {member, offset} of its opcode (offset None in decoded bytes)
    call_sites: list[dict] = field(default_factory=list)

    @property
    def import_name(self) -> str:
        """The import as a user writes it (`os.system` for a pickle's `posix.system`)."""
        return real_name(self.module, self.name)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GlobalUse:
        """The import back from its contract form (`import` is derived, not stored)."""
        return _from_fields(cls, data)

    def to_json(self) -> dict:
        """Contract form: module, name, count, severity (+ reason, members, import, calls,
        call_sites)."""
        return {"module": self.module, "name": self.name, "count": self.count,
                "severity": self.severity, "reason": self.reason, "members": self.members,
                "import": self.import_name, "calls": self.calls, "call_sites": self.call_sites}


@dataclass
class Finding:
    """A problem other than an import: structure, anomalies, code in arguments."""

    severity: str
    code: str
    message: str
    member: str | None = None
    offset: int | None = None
    call: str | None = None  # the call it concerns, as pseudo-Python

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        """The finding back from its contract form."""
        return _from_fields(cls, data)

    def to_json(self) -> dict:
        """Contract form (+ call)."""
        return {"severity": self.severity, "code": self.code, "message": self.message,
                "member": self.member, "offset": self.offset, "call": self.call}


def _milliseconds(value: float) -> float:
    return round(value, 3)


def _scans(items: list[dict[str, Any]]) -> list[ScanResult]:
    return [ScanResult.from_json(i) for i in items]


@dataclass
class ScanResult(JsonRecord):
    """Everything the static scan learned about one file: the `scan` contract (README), plus
    blockers, pickles walked, size and timing; typed wherever it crosses a layer."""

    path: str
    format: str = "unknown"
    verdict: str = Verdict.SAFE
    weights_only_ok: bool = False
    globals: list[GlobalUse] = field(default_factory=list, metadata=typed_list(GlobalUse))
    findings: list[Finding] = field(default_factory=list, metadata=typed_list(Finding))
    error: str | None = None
    weights_only_blockers: list[str] = field(default_factory=list)
    weights_only_source: str = ""
    pickles: list[dict] = field(default_factory=list)
    size: int = 0
    elapsed_ms: float = field(default=0.0, metadata={"dump": _milliseconds})
    files: list[ScanResult] | None = field(
        default=None, metadata={**OMIT_NONE, "load": _scans, "dump": records})
    """A folder's or a sharded set's scan: each file's own (`scan.dcp_folder.sum_scans`)."""
    # what the loaders' own readers still have to read (`scan.readings`); never serialised
    _blobs: list = field(default_factory=list, repr=False, compare=False, metadata=TRANSIENT)


def _from_fields(cls: type, data: dict):
    """A dataclass from a contract dict, ignoring keys that are derived, not stored."""
    return cls(**{k: v for k, v in data.items() if k in {f.name for f in fields(cls)}})
