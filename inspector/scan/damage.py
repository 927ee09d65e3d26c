"""Which static-scan findings mean damaged data (integrity) rather than code.

A CRC mismatch, a record the pickle needs but the archive lacks, a record shorter than its
storage, tensor data beyond the end of a safetensors file, or a zip cut
short before its end record is corruption: every output
names it as such (with the member and, for a CRC, both checksums in the message) and never
turns it into a question about which globals to allow.
"""

from __future__ import annotations

from inspector.scan.result import Finding, ScanResult

INTEGRITY_CODES = frozenset({
    "zip-crc-mismatch", "zip-missing-record", "zip-member-unreadable", "storage-size-mismatch",
    "storage-record-larger", "safetensors-bounds", "zip-truncated",
})


def integrity_findings(scan: ScanResult | None) -> list[Finding]:
    """The scan's findings that mean damaged data, in the scan's order."""
    return [f for f in (scan.findings if scan else ()) if f.code in INTEGRITY_CODES]


def describe(finding: Finding) -> str:
    """One line: the finding's message and the member it concerns."""
    where = f" [{finding.member}]" if finding.member else ""
    return f"{finding.code}: {finding.message}{where}"
