"""checkpoint.results: the typed results read back every real worker output unchanged.

Each test runs the jailed worker through `sandbox.host.client` on a small checkpoint built here,
then checks `to_json(from_json(d)) == d` and the types of a few fields.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import factories
import torch

from inspector.checkpoint.health import Health, HealthFinding
from inspector.checkpoint.optimizer_map import OptimizerParams
from inspector.checkpoint.results import (
    ConversionResult,
    DiffResult,
    FlipRecord,
    FolderConversion,
    InspectResult,
    Jail,
    TensorStats,
    jail_line,
    plain,
)
from inspector.checkpoint.resume import ResumeChecklist
from inspector.cli import main
from inspector.cli.inspect_cmd import health_lines
from inspector.core.vocabulary import (
    HealthSeverity,
    HealthStatus,
    JailLevel,
    TensorStatus,
    Verdict,
)
from inspector.integrity.manifest import FileEntry, read_manifest, write_manifest
from inspector.integrity.verify import FileCheck, TensorCheck, VerifyResult, verify
from inspector.report import FileEvidence, SessionEvidence, build_report
from inspector.report.render_html import render_html
from inspector.sandbox.host.client import convert_file, diff_files, inspect_file, tensor_digests


def _round_trips(cls: type, data: dict) -> object:
    """The typed result, after checking it writes back exactly what it read (strict JSON)."""
    typed = cls.from_json(data)
    assert typed.to_json() == data
    json.dumps(typed.to_json(), allow_nan=False)
    return typed


def _flipped(src: dict[str, torch.Tensor], key: str, bit: int) -> dict[str, torch.Tensor]:
    """A copy of a state dict with one bit of the first element of `key` flipped."""
    out = {k: v.clone() for k, v in src.items()}
    out[key].view(torch.int32).view(-1)[0] ^= 1 << bit
    return out


def test_inspect_of_a_training_checkpoint_round_trips(tmp_path: Path) -> None:
    path = factories.save_training_checkpoint(tmp_path / "train.pt")
    data = inspect_file(path).contract
    assert data["error"] is None
    result = _round_trips(InspectResult, data)
    assert isinstance(result.sandbox, Jail)
    assert jail_line(result.sandbox).startswith(f"sandbox:  {result.sandbox.level} (")
    assert result.digest_algorithm == "sha256"
    assert all(isinstance(t, TensorStats) for t in result.tensors)
    first = result.tensors[0]
    assert (first.key, first.dtype, first.shape) == (
        data["tensors"][0]["key"], data["tensors"][0]["dtype"], data["tensors"][0]["shape"])
    assert isinstance(result.resume, ResumeChecklist)
    assert all(isinstance(p, OptimizerParams) for p in result.optimizer_params)
    assert [o.key for o in result.objects][:2] == ["epoch", "step"]
    assert result.loaded and result.index is None


def test_inspect_of_safetensors_with_a_nan_round_trips(tmp_path: Path) -> None:
    state = factories.small_state_dict()
    key = next(k for k, v in state.items() if v.dtype == torch.float32)
    state[key].view(-1)[0] = float("nan")
    data = inspect_file(factories.save_safetensors(tmp_path / "m.safetensors", state)).contract
    result = _round_trips(InspectResult, data)
    row = next(t for t in result.tensors if t.key == key)
    assert row.nan == 1
    assert result.format == "safetensors" and result.optimizer_params is None
    assert all(isinstance(t.absmax, float) for t in result.tensors)


def test_health_with_findings_round_trips(tmp_path: Path) -> None:
    state = factories.small_state_dict()
    nan_key, copied = [k for k, v in state.items() if v.dtype == torch.float32 and v.dim() == 2
                       and v.numel() >= 16][:2]
    state[nan_key].view(-1)[0] = float("nan")
    state["copy.weight"] = state[copied].clone()  # a duplicate that shares no storage
    data = inspect_file(factories.save_safetensors(tmp_path / "m.safetensors", state)).contract
    health = _round_trips(Health, data["health"])
    assert _round_trips(InspectResult, data).health == health
    assert health.status is HealthStatus.PROBLEM and health.weights_checked == len(state)
    assert all(isinstance(f, HealthFinding) for f in health.findings)
    by_code = {f.code: f for f in health.findings}
    nan = by_code["nonfinite-weights"]
    assert (nan.key, nan.severity, nan.extra) == (nan_key, HealthSeverity.PROBLEM,
                                                  {"nan": 1, "inf": 0, "first_index": 0})
    duplicate = by_code["duplicate-weights"]  # the later key names the first in file order
    assert {duplicate.key, *duplicate.extra.values()} == {copied, "copy.weight"}
    assert list(duplicate.extra) == ["duplicate_of"]
    assert health_lines(health)[0] == (f"health:   Weights corrupted ({health.weights_checked} "
                                       f"weight tensors judged, {len(health.findings)} "
                                       "findings)")


def test_diff_with_one_flipped_bit_round_trips(tmp_path: Path) -> None:
    state = factories.small_state_dict()
    key = next(k for k, v in state.items() if v.dtype == torch.float32 and v.dim() == 2)
    a = factories.save_state_dict(tmp_path / "a.pt", state)
    b = factories.save_state_dict(tmp_path / "b.pt", _flipped(state, key, 3))
    result = _round_trips(DiffResult, diff_files(a, b))
    assert not result.identical
    (row,) = result.differing
    assert (row.key, row.status, row.single_bit_flips) == (key, TensorStatus.CHANGED, 1)
    assert isinstance(row.status, TensorStatus) and isinstance(result.sandbox.level, JailLevel)
    (flip,) = row.bitflips
    assert isinstance(flip, FlipRecord) and (flip.bit, flip.kind, flip.position) == (
        3, "mantissa", [0, 0])
    assert row.plain_summary == plain(row.summary) and "`" not in row.plain_summary
    assert key in row.plain_summary
    assert result.a.path == str(a.resolve()) and result.a.problems == []
    # the report reads the typed result as it reads the dict, and its page shows plain text
    reports = [build_report(SessionEvidence([FileEvidence(str(a), diff=d)]))
               for d in (result.to_json(), result)]
    assert reports[0].files[0].comparison == reports[1].files[0].comparison
    page = render_html(reports[1])
    assert row.plain_summary in page and row.summary not in page


def test_convert_round_trips(tmp_path: Path) -> None:
    src = factories.save_state_dict(tmp_path / "m.pt")
    before = src.read_bytes()
    result = _round_trips(ConversionResult, convert_file(src, tmp_path / "m.safetensors"))
    assert result.verified and result.tensors_written == len(factories.small_state_dict())
    assert result.scan_verdict is Verdict.SAFE
    assert Path(result.output).is_file() and isinstance(result.sandbox, Jail)
    assert src.read_bytes() == before
    # the report reads the typed conversion as it reads the dict
    sections = [build_report(SessionEvidence([FileEvidence(str(src), conversion=c)]))
                .files[0].conversion for c in (result.to_json(), result)]
    assert sections[0] == sections[1] and sections[1].status == "pass"
    assert (sections[1].output, sections[1].details["tensors_written"]) == (
        result.output, result.tensors_written)


def test_folder_convert_round_trips(tmp_path: Path, capsys) -> None:
    state = factories.small_state_dict()
    folder = tmp_path / "model"
    folder.mkdir()
    names = {k: f"pytorch_model-0000{1 + i % 2}-of-00002.bin" for i, k in enumerate(state)}
    for name in set(names.values()):
        torch.save({k: v for k, v in state.items() if names[k] == name}, folder / name)
    total = sum(v.numel() * v.element_size() for v in state.values())
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": names}))
    assert main(["convert", str(folder), "--json", "-q"]) == 0
    result = _round_trips(FolderConversion, json.loads(capsys.readouterr().out))
    assert all(isinstance(s, ConversionResult) and s.verified for s in result.shards)
    assert sorted(Path(s.input).name for s in result.shards) == sorted(set(names.values()))
    assert (result.tensors_written, result.bytes_written) == (len(state), total)
    assert Path(result.output_index).name == "model.safetensors.index.json"


def test_verify_with_one_mismatch_round_trips(tmp_path: Path) -> None:
    state = factories.small_state_dict()
    key = next(k for k, v in state.items() if v.dtype == torch.float32)
    path = factories.save_safetensors(tmp_path / "m.safetensors", state)
    entries = tensor_digests(path)
    manifest = tmp_path / "m.json"
    write_manifest(manifest, [FileEntry(path=path.name, sha256="0" * 64,
                                        size=path.stat().st_size, tensors=entries)])
    factories.save_safetensors(path, _flipped(state, key, 30))
    data = verify(read_manifest(manifest), [path], tensor_digests=tensor_digests).to_json()
    result = _round_trips(VerifyResult, data)
    assert not result.ok
    assert [f.status for f in result.files] == ["mismatch"]
    assert all(isinstance(f, FileCheck) for f in result.files)
    assert [(t.key, t.status) for t in result.tensors if t.status != "ok"] == [(key, "mismatch")]
    assert all(isinstance(t, TensorCheck) for t in result.tensors)


def test_unknown_keys_survive_and_absent_keys_stay_absent() -> None:
    data = {"path": "/x.pt", "tensors": [{"key": "w", "dtype": "float32", "shape": [2],
                                           "min": "-inf", "future_stat": {"p99": 1.0}}],
            "sandbox": {"level": "full", "active": [], "new_layer": "on"},
            "future_key": [1, 2]}
    result = _round_trips(InspectResult, data)
    assert result.extra == {"future_key": [1, 2]}
    assert result.tensors[0].min == -math.inf and result.tensors[0].extra == {
        "future_stat": {"p99": 1.0}}
    assert result.sandbox.extra == {"new_layer": "on"}
    assert "sha256" not in result.to_json() and result.sha256 is None


def test_a_status_word_a_newer_worker_adds_stays_a_string() -> None:
    data = {"identical": False, "tensors": [{"key": "w", "status": "re_encoded"},
                                            {"key": "v", "status": "changed"}]}
    result = _round_trips(DiffResult, data)
    assert [r.status for r in result.tensors] == ["re_encoded", TensorStatus.CHANGED]
    assert not isinstance(result.tensors[0].status, TensorStatus)
    assert [r.key for r in result.differing] == ["w", "v"]
