"""SARIF 2.1.0 output of scan results, for code-scanning pipelines (GitHub, GitLab, Azure)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from inspector import __version__
from inspector.core.vocabulary import Severity, SignatureState, Verdict
from inspector.fleet.urls import is_url
from inspector.scan.engine import ScanResult

if TYPE_CHECKING:
    from inspector.signing.check import SignatureVerdict

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.DANGEROUS: "error", Severity.SUSPICIOUS: "warning", Verdict.ERROR: "error",
          Severity.INFO: "note"}


def _uri(path: str) -> str:
    if is_url(path):  # an object in a store is already a URI
        return path
    p = Path(path)
    return p.resolve().as_uri() if p.is_absolute() else p.as_posix()


def _result(rule_id: str, level: str, text: str, path: str, props: dict) -> dict:
    return {
        "ruleId": rule_id,
        "level": level,
        "message": {"text": text},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(path)}}}],
        "properties": props,
    }


def sarif_log(results: Iterable[ScanResult],
              signatures: Iterable[SignatureVerdict] = ()) -> dict:
    """One SARIF run: a result per non-safe import, finding and scan error, and per signature
    that is not intact; every signature's verdict in the run's properties."""
    rules: dict[str, dict] = {}
    out = []

    def rule(rule_id: str, text: str) -> None:
        rules.setdefault(rule_id, {"id": rule_id, "shortDescription": {"text": text}})

    for res in results:
        common = {"format": res.format, "verdict": res.verdict,
                  "weights_only_ok": res.weights_only_ok}
        for g in res.globals:
            if g.severity == Severity.SAFE:
                continue
            rule_id = f"pickle-import/{g.severity}"
            rule(rule_id, f"pickle imports a {g.severity} global")
            out.append(_result(rule_id, _LEVEL[g.severity],
                               f"imports {g.module}.{g.name} ({g.count}x): {g.reason}", res.path,
                               {**common, "module": g.module, "name": g.name,
                                "import": g.import_name, "calls": g.calls,
                                "members": g.members}))
        for f in res.findings:
            if f.severity == Severity.INFO:
                continue
            rule(f.code, f.code.replace("-", " "))
            where = f" [{f.member}]" if f.member else ""
            out.append(_result(f.code, _LEVEL.get(f.severity, "warning"), f.message + where,
                               res.path, {**common, "member": f.member, "offset": f.offset,
                                          "call": f.call}))
        if res.error and res.verdict != Verdict.SKIPPED:  # skipped: not a checkpoint, no finding
            rule("scan-error", "file could not be scanned")
            out.append(_result("scan-error", "error", res.error, res.path, common))
    signatures = list(signatures)
    for verdict in signatures:
        if verdict.state == SignatureState.INTACT:
            continue
        rule_id = f"signature/{verdict.state}"
        rule(rule_id, f"OpenSSF Model Signing signature {verdict.state}")
        level = "note" if verdict.state == SignatureState.UNVERIFIED else "error"
        out.append(_result(rule_id, level, verdict.reason or f"signed by {verdict.signer}, "
                           "but a signed file changed", verdict.signature, verdict.to_json()))
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "ckpt-inspector", "version": __version__,
                                "rules": sorted(rules.values(), key=lambda r: r["id"])}},
            "results": out,
            "properties": {"signatures": [v.to_json() for v in signatures]},
        }],
    }
