"""What a diff says beside each key's status is a claim too: which file of a sharded side
holds each key (what the index is checked against, and what the rows print) and which plain
values differ (the `object ... changed` lines). Both are read here from the files' bytes
(`sandbox.host.claims.diff.SideBySide`): the shards' index warnings come from the files the
keys were found in here, and a row's shard or the changed values the worker reports must be
those (`claim_refuted` otherwise). Where the files cannot be read here, the lines made from
the worker's answer say they are its word.

Each lie runs as hostile code inside a real `diff` job (the jail's self-test hook).
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from safetensors.torch import save_file

from inspector.cli import main

FAILED = 2
"""`diff`'s exit code when it cannot answer (a refused answer included)."""
UNCHECKED = "(as reported by the jailed loader, not checked here)"

SHARD_LIE = """
    import inspector.sandbox.worker.diff as wd
    real = wd.diff_sides
    def lying(a, b, emit=None, cancel=None):
        out = real(a, b, emit, cancel)
        for r in out["tensors"]:
            if r["key"] == "w2":
                r["shard_a"] = "model-00002-of-00002.safetensors"
        return out
    wd.diff_sides = lying
"""

OBJECTS_LIE = """
    import inspector.sandbox.worker.diff as wd
    wd.object_changes = lambda a, b: [{"key": "epoch", "status": "changed", "a": "3", "b": "4"}]
"""


def _misplaced(tmp_path):
    """A two-shard folder whose index puts w2 in shard 2 while shard 1 holds it, and one file
    of the same tensors."""
    folder = tmp_path / "A"
    folder.mkdir()
    g = torch.Generator().manual_seed(0)
    t = {k: torch.randn(4, 4, generator=g) for k in ("w1", "w2", "w3")}
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    save_file({"w1": t["w1"], "w2": t["w2"]}, folder / first)
    save_file({"w3": t["w3"]}, folder / second)
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"w1": first, "w2": second, "w3": second}}))
    save_file(t, tmp_path / "B.safetensors")
    return folder, tmp_path / "B.safetensors"


def test_the_shard_each_key_is_in_is_read_here(tmp_path, hostile, capsys) -> None:
    a, b = _misplaced(tmp_path)
    warning = ("warning: w2: in model-00001-of-00002.safetensors, the index says "
               "model-00002-of-00002.safetensors")
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert warning in out and UNCHECKED not in out  # honest
    hostile(SHARD_LIE)
    assert main(["diff", str(a), str(b)]) == FAILED
    err = capsys.readouterr().err
    assert "comparison does not match the file's own bytes" in err
    assert ("w2 is in model-00001-of-00002.safetensors in a, reported as in "
            "model-00002-of-00002.safetensors") in err


def _trained(tmp_path, lr_b: float, extra: dict | None = None):
    w = {"w": torch.randn(8, 8, generator=torch.Generator().manual_seed(0))}
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"model": w, "epoch": 3, "lr": 0.0003, **(extra or {})}, a)
    torch.save({"model": w, "epoch": 3, "lr": lr_b, **(extra or {})}, b)
    return a, b


def test_the_plain_values_that_differ_are_read_here(tmp_path, hostile, capsys) -> None:
    a, b = _trained(tmp_path, 0.3)
    assert main(["diff", str(a), str(b)]) == 0  # the tensors are identical
    out = capsys.readouterr().out
    assert "object `lr` changed: 0.0003 -> 0.3" in out and UNCHECKED not in out  # honest
    hostile(OBJECTS_LIE)
    assert main(["diff", str(a), str(b)]) == FAILED
    err = capsys.readouterr().err
    assert "the plain values said to differ are not the ones the files' differ in" in err


def test_plain_values_not_read_here_are_the_loaders_word(tmp_path, capsys) -> None:
    a, b = _trained(tmp_path, 0.3, {"dtype": torch.float16})  # a torch.dtype: not read here
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "checked:  nothing here" in out
    assert f"object `lr` changed: 0.0003 -> 0.3 {UNCHECKED}" in out


SIDE_LIE = """
    import inspector.sandbox.worker.diff as wd
    real = wd.diff_sides
    def lying(a, b, emit=None, cancel=None):
        out = real(a, b, emit, cancel)
        for row in out["tensors"]:
            for name, value in ROW.items():
                if name in row:
                    row[name] = value
            for flip in row["bitflips"]:
                flip.update(FLIP)
        out["a"].update(SIDE)
        return out
    wd.diff_sides = lying
"""


def _flipped(tmp_path):
    """Two torch files, B's `w` one exponent bit away from A's at element 53."""
    w = torch.randn(8, 8, generator=torch.Generator().manual_seed(2))
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"w": w, "bias": torch.ones(4)}, a)
    w = w.clone()
    w.view(-1).view(torch.int32)[53] ^= 1 << 30
    torch.save({"w": w, "bias": torch.ones(4)}, b)
    return a, b


def _side_lie(hostile, row=None, flip=None, side=None) -> None:
    hostile(f"ROW = {row or {}!r}\nFLIP = {flip or {}!r}\nSIDE = {side or {}!r}\n"
            + textwrap.dedent(SIDE_LIE))


@pytest.mark.parametrize("lie, said", [
    ({"flip": {"file_offset_a": 100}}, "w's file offset a is {at}, reported as 100"),
    ({"row": {"offset_b": 64}}, "offset b is "),
    ({"side": {"format": "safetensors", "shards": [
        {"file": "a.pt", "format": "safetensors", "tensors": 7}]}},
     "A is {'format': 'pytorch-zip', 'shards': [{'file': 'a.pt', 'format': 'pytorch-zip', "
     "'tensors': 2}]}, reported as {'format': 'safetensors'"),
], ids=["flip-offset", "row-offset", "side-format"])
def test_byte_offsets_and_each_sides_files_are_read_here(tmp_path, hostile, capsys, lie,
                                                         said) -> None:
    """The report and the Integrity pane print a flip's byte in each file, and `diff` each
    side's format and tensor count: all computed here from the files."""
    a, b = _flipped(tmp_path)
    assert main(["diff", str(a), str(b), "--json"]) == 1
    honest = json.loads(capsys.readouterr().out)
    flip = next(r for r in honest["tensors"] if r["key"] == "w")["bitflips"][0]
    at = flip["file_offset_a"]
    data_a, data_b = a.read_bytes(), b.read_bytes()
    # the place is the flipped byte itself: the only byte of the tensor's that differs
    assert data_a[at] ^ data_b[at] == 1 << 6 and at == flip["file_offset_b"]
    _side_lie(hostile, **lie)
    assert main(["diff", str(a), str(b)]) == FAILED
    err = capsys.readouterr().err
    assert "comparison does not match the file's own bytes" in err
    assert said.replace("{at}", str(at)) in err


def test_each_sides_path_is_the_one_asked_about(tmp_path, hostile, capsys) -> None:
    a, b = _flipped(tmp_path)
    _side_lie(hostile, side={"path": "/srv/other/model.safetensors"})
    assert main(["diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert f"A: {a.resolve()} (pytorch-zip)" in out and "/srv/other" not in out


def test_converted_files_encoded_tensors_rebuild_specs_are_compared_here(tmp_path,
                                                                         capsys) -> None:
    """`convert` writes a quantized tensor as parts and records how to rebuild it; the worker
    lists that record as one more part, `KEY::spec`, which was no tensor of either side here,
    so every diff of such files was refused."""
    outs = []
    for axis in (0, 1):  # the same parts, quantized along another axis
        source, out = tmp_path / f"q{axis}.pt", tmp_path / f"q{axis}.safetensors"
        q = torch.quantize_per_channel(torch.ones(4, 4), torch.full((4,), 0.1),
                                       torch.zeros(4, dtype=torch.long), axis, torch.qint8)
        torch.save({"q": q, "w": torch.ones(4)}, source)
        assert main(["convert", str(source), "-o", str(out)]) == 0
        outs.append(out)
    capsys.readouterr()
    assert main(["diff", str(outs[0]), str(outs[0]), "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["claims"]["checked"] and "error" not in same
    assert "q::spec" in {r["key"] for r in same["tensors"]}
    assert main(["diff", *map(str, outs), "--json"]) == 1
    rows = {r["key"]: r["status"] for r in json.loads(capsys.readouterr().out)["tensors"]}
    assert rows["q::spec"] == "changed" and rows["q::int_repr"] == rows["w"] == "identical"
