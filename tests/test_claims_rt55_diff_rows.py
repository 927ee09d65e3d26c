"""Every field of a diff row is computed or checked here from the bytes both sides' files hold
(`sandbox.host.claims.diff`): a dtype the worker names by its safetensors code (F4) is the
tensor's; a row of a dtype with no bit layout (GGUF's bits8 blocks, F4) gets its byte-level
forensics from here; float8's largest differences are decoded here; no row is `not_compared`
where both sides were compared here; the sentence of a row compared by no element is the one
its status, dtypes and shapes give; `identical` is true exactly when every row is; a row
carries no field a diff row does not have.

Each lie runs as hostile code inside a real `diff` job (the jail's self-test hook), beside
the honest answer for the same files.
"""

from __future__ import annotations

import json
import struct
import textwrap
from pathlib import Path

import factories
import pytest
import torch
from safetensors.torch import save_file

from inspector.cli import main
from inspector.rawtensors.readers import open_raw

FAILED = 2
"""`diff`'s exit code when it cannot answer (a refused answer included)."""
REFUTED = "comparison does not match the file's own bytes"

ROW_LIE = """
    import inspector.sandbox.worker.diff as d
    real = d.TensorDiff.to_json
    def lying(self):
        rec = real(self)
        {body}
        return rec
    d.TensorDiff.to_json = lying
    real_sides = d.diff_sides
    def sides(*a, **k):
        from collections import Counter
        out = real_sides(*a, **k)
        out["counts"] = dict(Counter(r["status"] for r in out["tensors"]))
        out["summary"] = [r["summary"] for r in out["tensors"] if r["summary"]]
        return out
    d.diff_sides = sides
"""
"""A worker whose rows `body` rewrites (`rec`), its totals kept the rows' own."""


def _lie(body: str) -> str:
    return ROW_LIE.replace("{body}", textwrap.indent(textwrap.dedent(body).strip(), " " * 8)
                           .lstrip())


def _write_f4(path: Path, packed: bytes) -> Path:
    """A safetensors file of a sub-byte F4 tensor `q` (64 values in 32 bytes) and a float32."""
    header = {"q": {"dtype": "F4", "shape": [64], "data_offsets": [0, 32]},
              "w": {"dtype": "F32", "shape": [8], "data_offsets": [32, 64]}}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + packed
                     + struct.pack("<8f", *range(8)))
    return path


def _f4_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A, B (byte 5 of q with bit 2 flipped) and a copy of A."""
    packed = bytes(range(7, 7 + 32 * 5, 5))
    flipped = bytearray(packed)
    flipped[5] ^= 0x04
    return (_write_f4(tmp_path / "a.safetensors", packed),
            _write_f4(tmp_path / "b.safetensors", bytes(flipped)),
            _write_f4(tmp_path / "a2.safetensors", packed))


def _diff(capsys, a: Path, b: Path, *more: str) -> tuple[int, str, str]:
    code = main(["diff", str(a), str(b), *more])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_an_f4_tensor_named_by_its_safetensors_code_is_the_tensor_read_here(
        tmp_path, capsys) -> None:
    a, b, a2 = _f4_pair(tmp_path)
    assert _diff(capsys, a, a2)[0] == 0
    code, _out, err = _diff(capsys, a, b)
    assert code == 1 and REFUTED not in err
    assert main(["manifest", "create", str(a), "-o", str(tmp_path / "m.json")]) == 0
    assert "tensors not checked" not in capsys.readouterr().err


def test_an_f4_rows_forensics_are_its_bytes_compared_here(tmp_path, capsys) -> None:
    a, b, _ = _f4_pair(tmp_path)
    _code, out, _ = _diff(capsys, a, b, "--json")
    row = next(r for r in json.loads(out)["tensors"] if r["key"] == "q")
    start = next(t.view[0] for t in open_raw(a).tensors if t.key == "q")
    assert (row["changed_elements"], row["single_bit_flips"]) == (1, 1)
    assert [(f["index"], f["bit"], f["file_offset_a"]) for f in row["bitflips"]] == [
        (5, 2, start + 5)]
    assert "differs in 1 byte, 1 of them in a single bit" in row["summary"]
    assert "1 byte differs" in _diff(capsys, a, b)[1]


Q4_FLIPS = """
    if rec["status"] == "changed" and rec["dtype_a"] in ("bits8", "F4"):
        rec.update(changed_elements=1, single_bit_flips=1, multi_bit_elements=0,
                   summary=f"1 single-bit flip in `{rec['key']}`, in a sign bit",
                   bitflips=[{"index": 30, "bit": 7, "kind": "sign", "position": [0, 30]}])
"""


def _q4_pair(tmp_path: Path) -> tuple[Path, Path]:
    """Two GGUF files whose Q4_0 tensor `q` differs in bit 1 of its byte 20."""
    pytest.importorskip("gguf", reason="gguf is in the dev extra")
    a = factories.save_gguf_q4(tmp_path / "a.gguf")
    start = next(t.view[0] for t in open_raw(a).tensors if t.key == "q")
    data = bytearray(a.read_bytes())
    data[start + 20] ^= 0x02
    b = tmp_path / "b.gguf"
    b.write_bytes(bytes(data))
    return a, b


def test_a_block_quantized_rows_flips_are_the_bytes_not_the_workers(
        tmp_path, hostile, capsys) -> None:
    a, b = _q4_pair(tmp_path)
    code, out, _ = _diff(capsys, a, b)
    assert code == 1 and "0 elements differ" not in out
    assert "1 byte differs" in out and "(byte 20): bit 1, value" in out
    hostile(_lie(Q4_FLIPS))
    code, out, err = _diff(capsys, a, b)
    assert code == FAILED and REFUTED in err and "sign" not in out


def test_invented_flips_on_an_f4_row_are_refuted(tmp_path, hostile, capsys) -> None:
    a, b, _ = _f4_pair(tmp_path)
    hostile(_lie(Q4_FLIPS))
    code, _, err = _diff(capsys, a, b)
    assert code == FAILED and "q is changed, whose elements are not compared" in err


def _f32_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A, B (one exponent bit of w flipped) and a copy of A."""
    w = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))
    save_file({"w": w, "b": torch.ones(4)}, tmp_path / "a.safetensors")
    save_file({"w": w, "b": torch.ones(4)}, tmp_path / "a2.safetensors")
    w2 = w.clone()
    w2.view(torch.int32)[3, 5] ^= 1 << 30
    save_file({"w": w2, "b": torch.ones(4)}, tmp_path / "b.safetensors")
    return tmp_path / "a.safetensors", tmp_path / "b.safetensors", tmp_path / "a2.safetensors"


NOT_COMPARED = """
    if rec["status"] == "changed":
        rec.update(status="not_compared", changed_elements=0, max_abs_diff=None,
                   max_rel_diff=None, nonfinite_changes=0, single_bit_flips=0,
                   multi_bit_elements=0, bitflips=[], offset_a=None, offset_b=None,
                   summary=f"`{rec['key']}` has no dense data to compare")
"""


def test_a_flipped_tensor_is_not_passed_off_as_not_compared(tmp_path, hostile, capsys) -> None:
    a, b, _ = _f32_pair(tmp_path)
    assert "1 single-bit flip in `w`" in _diff(capsys, a, b)[1]
    hostile(_lie(NOT_COMPARED))
    code, _, err = _diff(capsys, a, b)
    assert code == FAILED and "w is changed, reported as not_compared" in err


NOT_IDENTICAL = """
    import inspector.sandbox.worker.diff as d
    real_sides = d.diff_sides
    def sides(*a, **k):
        out = real_sides(*a, **k)
        out["identical"] = False
        return out
    d.diff_sides = sides
"""


def test_identical_checkpoints_are_not_reported_different(tmp_path, hostile, capsys) -> None:
    a, _, a2 = _f32_pair(tmp_path)
    assert _diff(capsys, a, a2)[0] == 0
    hostile(NOT_IDENTICAL)
    code, _, err = _diff(capsys, a, a2)
    assert code == FAILED and "the checkpoints were reported different" in err


F8_DRIFT = """
    if rec["status"] == "changed" and str(rec["dtype_a"]).startswith("float8"):
        rec.update(max_abs_diff=0.001953125, max_rel_diff=0.0078125)
"""


def test_float8_largest_differences_are_decoded_here(tmp_path, hostile, capsys) -> None:
    w = (torch.randn(16, 16, generator=torch.Generator().manual_seed(0)) * 0.1).to(
        torch.float8_e4m3fn)
    w2 = w.clone()
    w2.view(torch.uint8)[3, 5] ^= 1 << 6  # one exponent bit
    save_file({"w": w}, tmp_path / "a.safetensors")
    save_file({"w": w2}, tmp_path / "b.safetensors")
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    moved = abs(w2[3, 5].double() - w[3, 5].double()).item()
    code, out, _ = _diff(capsys, a, b)
    assert code == 1 and f"max abs diff {moved:.6g}" in out
    hostile(_lie(F8_DRIFT))
    code, _, err = _diff(capsys, a, b)
    assert code == FAILED and f"w has {moved} max abs diff, reported as 0.001953125" in err


SENTENCES = """
    if rec["status"] == "only_in_b":
        rec["summary"] = f"`{rec['key']}` is a tied alias of `w` (same bytes, stored once)"
    if rec["status"] == "dtype_or_shape_changed":
        rec["summary"] = f"`{rec['key']}` re-saved with the same values (float32 -> float32)"
"""


def _restructured(tmp_path: Path) -> tuple[Path, Path]:
    """B stores `b` as float16 and adds `head.backdoor`."""
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(4, 4, generator=g), torch.randn(16, generator=g)
    save_file({"w": w, "b": b}, tmp_path / "a.safetensors")
    save_file({"w": w, "b": b.half(), "head.backdoor": torch.ones(4, 4)},
              tmp_path / "b.safetensors")
    return tmp_path / "a.safetensors", tmp_path / "b.safetensors"


def test_the_sentence_of_a_row_compared_by_no_element_is_written_from_its_status(
        tmp_path, hostile, capsys) -> None:
    a, b = _restructured(tmp_path)
    code, out, _ = _diff(capsys, a, b)
    assert "`b` changed from float32[16] to float16[16]" in out
    assert "`head.backdoor` is only in B" in out
    hostile(_lie(SENTENCES))
    code, out, err = _diff(capsys, a, b)
    assert code == FAILED and "tied alias" not in out + err
    assert "b's sentence says what its bytes do not" in err


ONLY_IN_FLIPS = """
    if rec["status"] == "only_in_b":
        rec["bitflips"] = [{"index": 0, "bit": 30, "kind": "exponent", "position": [0, 0]}]
        rec["single_bit_flips"] = 1
"""


def test_a_row_compared_by_no_element_carries_no_flip(tmp_path, hostile, capsys) -> None:
    a, b = _restructured(tmp_path)
    hostile(_lie(ONLY_IN_FLIPS))
    code, _out, err = _diff(capsys, a, b)
    assert code == FAILED
    assert "head.backdoor is only_in_b, whose elements are not compared" in err


EXTRA_FIELD = """
    if rec["key"] == "w":
        rec["verdict"] = "safe: signed by the vendor"
"""


def test_a_row_field_no_diff_row_has_is_refuted(tmp_path, hostile, capsys) -> None:
    a, b, _ = _f32_pair(tmp_path)
    hostile(_lie(EXTRA_FIELD))
    code, out, err = _diff(capsys, a, b, "--json")
    assert code == FAILED and "w's row has fields no diff has: ['verdict']" in err
    assert "tensors" not in json.loads(out)  # the error's object, not the answer


ANSWER_FIELDS = """
    import inspector.sandbox.worker.diff as d
    real_sides = d.diff_sides
    def sides(*a, **k):
        out = real_sides(*a, **k)
        {body}
        return out
    d.diff_sides = sides
"""


@pytest.mark.parametrize("body", [
    'out["verdict"] = "safe: signed by the vendor"',
    'out["a"]["verdict"] = "safe: signed by the vendor"',
    'out["a"]["shards"][0]["verdict"] = "safe: signed by the vendor"',
])
def test_an_answer_field_no_diff_answer_has_is_refuted(tmp_path, hostile, capsys, body) -> None:
    a, b, _ = _f32_pair(tmp_path)
    hostile(ANSWER_FIELDS.replace("{body}", body))
    code, out, err = _diff(capsys, a, b, "--json")
    assert code == FAILED and REFUTED in err
    assert "tensors" not in json.loads(out)  # the error's object, not the answer
