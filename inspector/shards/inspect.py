"""`inspect` of a sharded checkpoint (a model folder or a `*.index.json`) as one result.

Each shard is inspected on its own (one jailed worker per shard, so a worker holds one shard);
this module joins their `inspect` results without torch: records in the index's shard order,
each naming its `shard`; health judged over all of them (a duplicate across shards is found
too; the model facts are the client's, `checkpoint.results.add_model_facts`); unique storage
summed (a storage never spans files); coverage checked against the index with
`integrity.shard_index` (a missing shard stops the load, other problems are listed); and a key
kept as another key's view of the same bytes (a tied weight, which `convert` stores once)
listed in `aliases`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inspector.checkpoint.health import assess
from inspector.checkpoint.results import ClaimCheck, InspectResult
from inspector.checkpoint.tensor_stats import TensorStats
from inspector.integrity.hashing import DIGEST_ALGORITHM
from inspector.integrity.shard_index import (
    Problem,
    ShardError,
    ShardIndex,
    check_contents,
    is_index,
)
from inspector.scan.dcp_folder import is_dcp_folder, sum_scans
from inspector.scan.engine import scan_file
from inspector.scan.result import ScanResult
from inspector.shards.shard_set import ShardSet, resolve
from inspector.shards.tie_rule import kept_name

ALIAS = "alias"
_VIEW = ("dtype", "shape", "stride", "storage_offset")


@dataclass
class ShardResult:
    """One shard: its name in the index, the path the user reaches it by, its inspect result."""

    name: str
    path: Path
    report: dict


def is_sharded_input(path: Path) -> bool:
    """True for a folder (not a torch.distributed.checkpoint one) or an index: `inspect` reads
    it as the one checkpoint its index names (`shards.shard_set.resolve`)."""
    return (path.is_dir() and not is_dcp_folder(path)) or is_index(path)


def sharded_set(path: Path) -> ShardSet | None:
    """The shards a folder or index names; None for anything else (a file, a folder with one
    checkpoint file and no index, or one whose index cannot be told)."""
    if not is_sharded_input(path):
        return None
    try:
        shards = resolve(path, strict=False)
    except (ShardError, OSError):
        return None
    return shards if shards.index is not None else None


def scan_set(shards: ShardSet, made: ScanResult | None = None
             ) -> tuple[dict[str, ScanResult], ScanResult]:
    """Every shard present scanned (nothing executed): each scan by shard name, and their sum
    as the checkpoint's one scan. `made`: the set's scan made before (this function's second
    value), whose shard scans are taken instead of a second scan when it holds them all."""
    files = zip(shards.index.shards(), shards.files, strict=True) if shards.index else ()
    present = {name: file for name, file in files if file.is_file()}
    earlier = {Path(s.path): s for s in ((made.files or []) if made is not None else [])}
    if made is not None and all(file in earlier for file in present.values()):
        return {name: earlier[file] for name, file in present.items()}, made
    scans = {name: scan_file(file) for name, file in present.items()}
    return scans, scan_shards(shards.path, list(scans.values()))


def coverage_text(result: InspectResult | None) -> str | None:
    """One line for a person: how many shards, and whether they cover their index."""
    if result is None or not result.index:
        return None
    problems = result.problems or []
    count = len(result.shards or [])
    text = f"{count} shard{'s' if count != 1 else ''} ({Path(result.index).name}): "
    if not problems:
        return text + "every key in exactly one shard, as the index says"
    return text + "; ".join(f"{p['code']}: {p['message']}" for p in problems[:5]) + (
        f"; {len(problems) - 5} more" if len(problems) > 5 else "")


def new_report(path: Path, index: ShardIndex | None, allow_globals: list[str]) -> dict:
    """The `inspect` contract of a sharded checkpoint before anything is read."""
    return {"path": str(path), "size": 0, "sha256": None, "format": None, "scan": None,
            "sandbox": None, "digest_algorithm": DIGEST_ALGORITHM, "tensors": [],
            "objects": [], "error": None, "allowed_globals": allow_globals, "health": None,
            "unique_storage": None, "architecture": None, "resume": None,
            "index": str(index.path) if index is not None else None, "shards": [],
            "problems": [], "aliases": []}


def scan_shards(path: Path, scans: list[ScanResult]) -> ScanResult:
    """Every shard's scan summed as one (worst verdict, every global and finding)."""
    formats = sorted({s.format for s in scans})
    fmt = formats[0] if len(formats) == 1 else "mixed"
    return sum_scans(path, scans, fmt, all(s.weights_only_ok for s in scans))


def shard_summary(scans: dict[str, ScanResult], results: list[ShardResult]) -> list[dict]:
    """The `shards` records: file, format, tensors, bytes (of the file) and sha256 of each."""
    loaded = {r.name: r.report for r in results}
    return [{"file": name, "format": scan.format,
             "tensors": len(loaded[name]["tensors"]) if name in loaded else None,
             "bytes": scan.size,
             "sha256": loaded[name]["sha256"] if name in loaded else None}
            for name, scan in scans.items()]


def aliases(records: list[dict]) -> list[dict]:
    """Keys whose tensor is the same view of the same storage as another key's in its shard:
    the key `tie_rule.kept_name` picks is kept, as `convert` keeps it, and the others listed."""
    by_key = {(r.get("shard"), r["key"]): r for r in records}
    out = []
    for rec in records:
        twins = [by_key.get((rec.get("shard"), k)) for k in rec.get("shared_with") or ()]
        same = [t["key"] for t in twins if t is not None and _same_view(t, rec)]
        kept = kept_name([rec["key"], *same])
        if kept != rec["key"]:
            out.append({"key": rec["key"], "stored_as": kept, "shard": rec.get("shard"),
                        "how": ALIAS})
    return out


def _same_view(a: dict, b: dict) -> bool:
    return all(a.get(f) is not None and a.get(f) == b.get(f) for f in _VIEW)


def _claims(results: list[ShardResult]) -> dict:
    """The shards' checks of the worker's answers as one: checked only when every shard's was
    (`sandbox.host.claims`), else the first unchecked shard and why."""
    checks = [ClaimCheck.from_json(r.report["claims"]) if r.report.get("claims")
              else ClaimCheck(reason="no check was made") for r in results]
    unchecked = next(((r.name, c.reason) for r, c in zip(results, checks, strict=True)
                      if not c.checked), None)
    return ClaimCheck(checked=unchecked is None, tensors=sum(c.tensors for c in checks),
                      reason=None if unchecked is None else
                      f"{unchecked[0]}: {unchecked[1]}").to_json()


def merge(report: dict, results: list[ShardResult], index: ShardIndex) -> list[Problem]:
    """Fill `report` from every shard's result; the coverage problems their keys show."""
    tensors = [{**t, "shard": r.name} for r in results for t in r.report["tensors"]]
    objects = [{**o, "shard": r.name} for r in results for o in r.report["objects"]]
    tied = aliases(tensors)
    found: dict[str, list[str]] = {r.name: [] for r in results}
    for rec in tensors:
        found[rec["shard"]].append(rec["key"])
    aliased = {(a["shard"], a["key"]) for a in tied}
    data_bytes = sum(t.get("nbytes") or 0 for t in tensors
                     if (t["shard"], t["key"]) not in aliased)
    storage = [r.report.get("unique_storage") or {} for r in results]
    report.update(
        tensors=tensors, objects=objects, aliases=tied,
        sandbox=results[-1].report["sandbox"],
        health=assess(map(TensorStats.from_json, tensors)).to_json(),
        unique_storage={k: sum(s.get(k, 0) for s in storage)
                        for k in ("storages", "numel", "nbytes")},
        timing=_timing([r.report.get("timing") or {} for r in results]),
        claims=_claims(results),
    )
    return check_contents(index, found, data_bytes)


def _timing(timings: list[dict]) -> dict:
    """The first worker's start-up, every worker's time summed, the largest peak RSS."""
    peaks = [t["worker_peak_rss_kb"] for t in timings if t.get("worker_peak_rss_kb")]
    return {"startup_s": timings[0].get("startup_s"),
            "total_s": sum(t.get("total_s") or 0 for t in timings),
            "worker_peak_rss_kb": max(peaks, default=None),
            "worker": timings[-1].get("worker"), "workers": len(timings)}
