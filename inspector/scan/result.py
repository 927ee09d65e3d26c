"""What the static scan reports for one file: each import (`GlobalUse`), each other finding
(`Finding`) and the whole result (`ScanResult`, the `scan` contract)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from inspector.core.vocabulary import Verdict
from inspector.scan.pickles.policy import real_name


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

    def to_json(self) -> dict:
        """Contract form (+ call)."""
        return {"severity": self.severity, "code": self.code, "message": self.message,
                "member": self.member, "offset": self.offset, "call": self.call}


@dataclass
class ScanResult:
    """Everything the static scan learned about one file."""

    path: str
    format: str = "unknown"
    verdict: str = Verdict.SAFE
    weights_only_ok: bool = False
    globals: list[GlobalUse] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    weights_only_blockers: list[str] = field(default_factory=list)
    weights_only_source: str = ""
    pickles: list[dict] = field(default_factory=list)
    size: int = 0
    elapsed_ms: float = 0.0
    # what the loaders' own readers still have to read (`scan.readings`); never serialised
    _blobs: list = field(default_factory=list, repr=False, compare=False)

    def to_json(self) -> dict:
        """The `scan` contract (README), plus blockers, pickles walked, size and timing."""
        return {
            "path": self.path,
            "format": self.format,
            "verdict": self.verdict,
            "weights_only_ok": self.weights_only_ok,
            "globals": [g.to_json() for g in self.globals],
            "findings": [f.to_json() for f in self.findings],
            "error": self.error,
            "weights_only_blockers": self.weights_only_blockers,
            "weights_only_source": self.weights_only_source,
            "pickles": self.pickles,
            "size": self.size,
            "elapsed_ms": round(self.elapsed_ms, 3),
        }

    @classmethod
    def from_json(cls, data: dict) -> ScanResult:
        """The result back from its contract form (a batch's results file)."""
        known = {f.name for f in fields(cls)} - {"globals", "findings"}
        return cls(**{k: v for k, v in data.items() if k in known},
                   globals=[_from_fields(GlobalUse, g) for g in data.get("globals", ())],
                   findings=[_from_fields(Finding, f) for f in data.get("findings", ())])


def _from_fields(cls: type, data: dict):
    """A dataclass from a contract dict, ignoring keys that are derived, not stored."""
    return cls(**{k: v for k, v in data.items() if k in {f.name for f in fields(cls)}})
