"""A jailed worker's tensor records say more than dtype, shape, digest and counts: how many
elements and bytes a tensor has, whether it is quantized, and which tensors share its storage.
Health, resume and the contents judge and print from them, so for a file whose tensors were
located here (`sandbox.host.claims.records`) each must be the one the checked dtype, shape and
place in the file give.

Each lie runs as hostile code inside a real `inspect` job (the jail's self-test hook): it
changes one field of one record as the worker sends it. The honest run's verdict is shown
first, then that the CLI refuses the lie (`claim_refuted`, exit 5) instead of the verdict the
lie was made for.
"""

from __future__ import annotations

import json
import textwrap

import factories
import pytest
import torch
from safetensors.torch import save_file

from inspector.checkpoint.health import assess
from inspector.checkpoint.tensor_stats import TensorStats
from inspector.cli import main
from inspector.tensors.load import load_safetensors

REFUSED = 5
"""`inspect`'s exit code for a refused answer (`claim_refuted`)."""
CORRUPT = 7
"""`inspect`'s exit code for weights health `problem`."""

LIE = """
    import inspector.sandbox.worker.inspect_op as op
    real = op._Sender.__call__
    def lying(self, event):
        if event.get("key") == KEY:
            event.update(FIELDS)
        return real(self, event)
    op._Sender.__call__ = lying
"""


def _lie(hostile, key: str, **fields) -> None:
    """Every worker from here on reports `key`'s record with `fields` replaced."""
    hostile(f"KEY = {key!r}\nFIELDS = {fields!r}\n" + textwrap.dedent(LIE))


def _refused(path, capsys) -> str:
    """Inspect `path`: the answer is refused; the refusal's message."""
    code = main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == REFUSED, report.get("health")
    assert report["error"]["code"] == "claim_refuted" and report["health"] is None
    return report["error"]["message"]


def _nan_weight(tmp_path):
    w = torch.randn(16, 16)
    w[3, 5], w[0, 0] = float("nan"), float("inf")
    path = tmp_path / "nan.safetensors"
    save_file({"layer.weight": w, "layer.bias": torch.randn(16)}, path)
    return path


def test_a_quantization_record_on_a_float_weight_is_refused(tmp_path, hostile, capsys) -> None:
    path = _nan_weight(tmp_path)
    assert main(["inspect", str(path)]) == CORRUPT  # honest: NaN and Inf in the weight
    assert "1 NaN and 1 Inf" in capsys.readouterr().out
    _lie(hostile, "layer.weight", quantization={})
    assert "layer.weight is float32, reported as quantized" in _refused(path, capsys)


def test_health_judges_a_float_weight_by_its_values_whatever_its_quantization_record() -> None:
    rec = TensorStats.from_json({"key": "w", "dtype": "float32", "shape": [4, 4], "numel": 16,
                                 "nan": 1, "inf": 0, "quantization": {}})
    health = assess([rec])
    assert health.status == "problem" and health.findings[0].code == "nonfinite-weights"


def _sparse_flip(tmp_path):
    """An 8x8 weight of four non-zero values, one with a flipped exponent bit."""
    w = torch.zeros(8, 8)
    w[0, :4] = torch.tensor([0.01, -0.02, 0.03, 0.5])
    w.view(torch.int32)[0, 3] ^= 1 << 30
    path = tmp_path / "sparse.safetensors"
    save_file({"proj.weight": w}, path)
    return path


@pytest.mark.parametrize("fields, said", [
    ({"numel": 1_000_000}, "proj.weight has numel 64, reported as 1000000"),
    ({"nbytes": 4}, "proj.weight has nbytes 256, reported as 4"),
    ({"flags": ["meta"]}, "proj.weight has flags [], reported as ['meta']"),
], ids=["numel", "nbytes", "flags"])
def test_a_size_the_shape_does_not_give_is_refused(tmp_path, hostile, capsys, fields,
                                                   said) -> None:
    path = _sparse_flip(tmp_path)
    assert "magnitude-outlier" in json.dumps(_health(path, capsys))  # honest: the flip is seen
    _lie(hostile, "proj.weight", **fields)
    assert said in _refused(path, capsys)


def _health(path, capsys) -> dict:
    """Inspect `path`: the weights health of the answer."""
    main(["inspect", str(path), "--json"])
    return json.loads(capsys.readouterr().out)["health"]


def test_an_optimizer_state_of_another_size_is_refused(tmp_path, hostile, capsys) -> None:
    model = torch.nn.Linear(8, 4, bias=False)
    moment = torch.zeros(4, 4) + 0.1  # a 4x8 weight's state saved for another model
    torch.save({"model": model.state_dict(), "epoch": 3,
                "optimizer": {"state": {0: {"step": torch.tensor(10.0), "exp_avg": moment,
                                            "exp_avg_sq": moment.clone()}},
                              "param_groups": [{"lr": 0.001, "params": [0]}]}},
               tmp_path / "train.pt")
    path = tmp_path / "train.pt"
    main(["inspect", str(path)])
    assert "Not ready to resume" in capsys.readouterr().out  # honest
    _lie(hostile, "optimizer.state.0.exp_avg", numel=32)
    assert "optimizer.state.0.exp_avg has numel 16, reported as 32" in _refused(path, capsys)


def test_storage_the_bytes_do_not_share_is_refused(tmp_path, hostile, capsys) -> None:
    w = torch.randn(8, 8)
    path = tmp_path / "twins.pt"
    torch.save({"a.weight": w, "b.weight": w.clone()}, path)  # equal bytes, stored twice
    assert "duplicate-weights" in json.dumps(_health(path, capsys))  # honest
    _lie(hostile, "b.weight", shared_with=["a.weight"])
    assert ("b.weight shares its bytes with [], reported as ['a.weight']"
            in _refused(path, capsys))


def test_a_sharing_left_out_is_refused(tmp_path, hostile, capsys) -> None:
    """Tied weights the loader says nothing of sharing were a duplicate-weights warning: the
    host sees the two keys over the same bytes of the file."""
    w = torch.randn(32, 16)
    path = tmp_path / "tied.pt"
    torch.save({"embed.weight": w, "lm_head.weight": w}, path)
    assert _health(path, capsys)["status"] == "ok"  # honest: one tensor, tied
    _lie(hostile, "lm_head.weight", shared_with=None)
    assert ("lm_head.weight shares its bytes with ['embed.weight'], reported as []"
            in _refused(path, capsys))


def _views(tmp_path):
    """A transposed view (stride [1, 8]) and a row of its storage (offset 16) in a torch file,
    and a safetensors tensor (a view of the mapped file, offset in elements from its start)."""
    base = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    torch.save({"t": base.t(), "row": base[2]}, tmp_path / "views.pt")
    save_file({"a": torch.ones(4), "b": torch.zeros(2, 3)}, tmp_path / "flat.safetensors")
    return tmp_path


@pytest.mark.parametrize("name, key, fields, said", [
    ("views.pt", "t", {"stride": [8, 1]}, "t has stride [1, 8], reported as [8, 1]"),
    ("views.pt", "t", {"contiguous": True}, "t has contiguous False, reported as True"),
    ("views.pt", "row", {"storage_offset": 0}, "row has storage_offset 16, reported as 0"),
    ("views.pt", "row", {"device": "cuda"}, "row has device cpu, reported as cuda"),
    ("flat.safetensors", "b", {"storage_offset": 0}, "b has storage_offset "),
], ids=["stride", "contiguous", "offset", "device", "safetensors-offset"])
def test_a_place_the_file_does_not_give_is_refused(tmp_path, hostile, capsys, name, key,
                                                   fields, said) -> None:
    """A tensor's stride, storage offset and contiguity are the loader's view of the file's
    layout, read here (`RawTensor.placed`); the worker moves no tensor off the CPU."""
    path = _views(tmp_path) / name
    main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None and report["claims"]["checked"]  # honest: all as torch has
    loaded = (torch.load(path, weights_only=True) if name.endswith(".pt")
              else load_safetensors(str(path)))
    for rec in report["tensors"]:
        t = loaded[rec["key"]]
        assert (rec["stride"], rec["storage_offset"], rec["contiguous"], rec["device"]) == (
            list(t.stride()), t.storage_offset(), t.is_contiguous(), "cpu")
    _lie(hostile, key, **fields)
    assert said in _refused(path, capsys)


def test_tied_weights_the_bytes_share_pass(tmp_path, capsys) -> None:
    w = torch.randn(8, 8)
    path = tmp_path / "tied.pt"
    torch.save({"embed.weight": w, "head.weight": w, "head.row": w[1]}, path)
    main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None and report["claims"]["checked"]
    shared = {t["key"]: sorted(t.get("shared_with") or ()) for t in report["tensors"]}
    assert shared["head.row"] == ["embed.weight", "head.weight"]
    assert report["health"]["status"] == "ok"
    main(["inspect", str(path)])
    # how many storages the loader made is its word: nothing here knows a torch file's
    assert ("bytes (shared storage counted once; as reported by the jailed loader, not checked "
            "here)") in capsys.readouterr().out


def test_statistics_of_a_dtype_no_loader_summarises_are_refused(tmp_path, hostile,
                                                                capsys) -> None:
    """A GGUF block-quantized tensor is read as its raw `bits8` blocks by both sides: an honest
    worker states none of its values, so NaN counts and a range it states are invented (and
    health would judge them)."""
    pytest.importorskip("gguf", reason="gguf is in the dev extra")
    path = factories.save_gguf_q4(tmp_path / "m.gguf")
    assert main(["inspect", str(path), "--json"]) == 0
    honest = {t["key"]: t for t in json.loads(capsys.readouterr().out)["tensors"]}
    assert honest["q"]["dtype"] == "bits8" and honest["q"]["stats_on"] is None
    _lie(hostile, "q", stats_on="values", nan=3, inf=0, min=-1.0, max=1.0, absmax=1.0,
         zeros=0, mean=0.0, std=0.5)
    message = _refused(path, capsys)
    assert "q is bits8, whose values no loader summarises, reported with statistics" in message


@pytest.mark.parametrize("fields, said", [
    ({"std": 3.0e30}, "layers.2.weight has std 3e+30, outside [0, "),
    ({"std_sample": -1.0}, "layers.2.weight has std_sample -1.0, outside [0, "),
    ({"mean": 5.0}, "layers.2.weight has mean 5.0, outside ["),
], ids=["std-past-range", "negative-std", "mean-past-range"])
def test_statistics_the_checked_range_cannot_hold_are_refused(tmp_path, hostile, capsys,
                                                              fields, said) -> None:
    """The mean and std are the loader's (the radar's std view colours by them), yet a mean
    outside [min, max] or a std past max - min is impossible for the checked range: a forged
    std of 3e30 made a healthy layer the radar's brightest cell."""
    g = torch.Generator().manual_seed(6)
    path = tmp_path / "layers.pt"
    torch.save({f"layers.{i}.weight": torch.randn(16, 16, generator=g) * 0.02
                for i in range(4)}, path)
    assert _health(path, capsys)["status"] == "ok"  # honest
    _lie(hostile, "layers.2.weight", **fields)
    assert said in _refused(path, capsys)
