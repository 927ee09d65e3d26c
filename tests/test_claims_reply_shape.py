"""A jailed worker's reply is held to the shape of its contract's record before any check or view
reads it (`json_record.shape_problems`, `claims.refusal.check_shape`): a row that is no object, a
dtype that is a number, a flip index that is true. Before, such a reply reached the checks and views
as it came: `diff` died with a traceback and exit 1 (its "different"), `inspect` printed a
traceback from its table.

Each lie runs as hostile code inside a real job (the jail's self-test hook); the honest answer
for the same file passes beside it.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from safetensors.torch import save_file

from inspector.checkpoint.results import DiffResult, TensorStats
from inspector.cli import main
from inspector.core.json_record import shape_problems

MISSHAPEN = "is not shaped as its contract says"

DIFF_ROWS = """
    import inspector.sandbox.worker.diff as d
    real_sides = d.diff_sides
    def sides(*a, **k):
        out = real_sides(*a, **k)
        out["tensors"] = ROWS
        return out
    d.diff_sides = sides
"""

CONSISTENCY = """
    import inspector.sandbox.worker.consistency.op as op
    real = op.json_safe
    def lying(value):
        value = real(value)
        if isinstance(value, dict) and "injected" in value:  # the operation's answer
            value["tensors"] = [7]
            value["consistent"] = "yes"
        return value
    op.json_safe = lying
"""


def _pair(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    w = torch.arange(16, dtype=torch.float32)
    save_file({"w": w}, a)
    w[3] = -w[3]
    save_file({"w": w}, b)
    return a, b


@pytest.mark.parametrize("rows", [
    [1, "x"],
    [{"key": 3, "status": "changed"}],
    [{"key": "w", "status": "changed", "bitflips": [{"index": True, "bit": 31, "kind": "s"}]}],
], ids=["rows-not-objects", "key-a-number", "flip-index-a-bool"])
def test_a_diff_reply_not_shaped_as_its_contract_is_refused(tmp_path, hostile, capsys,
                                                             rows) -> None:
    a, b = _pair(tmp_path)
    assert main(["diff", str(a), str(b)]) == 1  # the honest answer: they differ
    capsys.readouterr()
    hostile(f"ROWS = {rows!r}\n" + textwrap.dedent(DIFF_ROWS))
    assert main(["diff", str(a), str(b)]) == 2
    captured = capsys.readouterr()
    assert MISSHAPEN in captured.err and "Traceback" not in captured.err
    assert "CHANGED" not in captured.out and "IDENTICAL" not in captured.out


def test_a_consistency_reply_not_shaped_as_its_contract_is_refused(tmp_path, hostile,
                                                                    capsys) -> None:
    path = tmp_path / "m.pt"
    torch.save({"w": torch.randn(16, 16, generator=torch.Generator().manual_seed(1))}, path)
    args = ["consistency", str(path), "--device", "cpu", "--repeats", "3"]
    assert main(args) == 0
    capsys.readouterr()
    hostile(CONSISTENCY)
    assert main(args) == 6
    captured = capsys.readouterr()
    assert MISSHAPEN in captured.err and "Traceback" not in captured.err
    assert "CONSISTENT" not in captured.out


def test_the_shape_is_read_from_the_records_annotations() -> None:
    """Nested records, lists, unions with null and non-finite numbers as the contract writes
    them: each departure named where it is, a conforming record passes."""
    row = {"key": "w", "status": "changed", "max_abs_diff": "nan", "shape_a": [4],
           "bitflips": [{"index": 1, "bit": 31, "kind": "sign"}]}
    assert shape_problems(DiffResult, {"tensors": [row], "identical": False}) == []
    bad = {"tensors": [{**row, "shape_a": [4.5], "max_abs_diff": "huge"}], "identical": 0}
    assert shape_problems(DiffResult, bad) == [
        "identical is a whole number, not true or false",
        "tensors[0].shape_a[0] is a number, not a whole number",
        "tensors[0].max_abs_diff is a string, not a number"]
    assert shape_problems(TensorStats, {}) != []  # a record's required fields must be there


INSPECT = """
    import inspector.tensors.describe as d
    real = d.describe_tensors
    def lying(tensors, on_tensor, **options):
        def told(ev):
            ev["dtype"] = 5
            on_tensor(ev)
        return real(tensors, told, **options)
    d.describe_tensors = lying
"""

DIGESTS = """
    import inspector.tensors.sources as s
    s.digest = lambda source, cancel: 5
"""

CONVERT = """
    import inspector.sandbox.worker.convert as c
    c.verify_output = lambda *a, **k: 5
"""


def _torch_file(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}, path)
    return path


def test_an_inspect_reply_not_shaped_as_its_contract_is_refused(tmp_path, hostile,
                                                                capsys) -> None:
    path = _torch_file(tmp_path)
    assert main(["inspect", str(path)]) == 0
    capsys.readouterr()
    hostile(INSPECT)
    assert main(["inspect", str(path)]) == 5
    captured = capsys.readouterr()
    assert MISSHAPEN in captured.out + captured.err and "Traceback" not in captured.err


def test_a_digests_reply_not_shaped_as_its_contract_is_refused(tmp_path, hostile,
                                                               capsys) -> None:
    path = _torch_file(tmp_path)
    manifest = tmp_path / "m.json"
    assert main(["manifest", "create", str(path), "-o", str(manifest)]) == 0
    capsys.readouterr()
    hostile(DIGESTS)
    assert main(["verify", "-m", str(manifest), str(tmp_path)]) != 0
    captured = capsys.readouterr()
    assert MISSHAPEN in captured.out + captured.err and "Traceback" not in captured.err


def test_a_convert_reply_not_shaped_as_its_contract_is_refused(tmp_path, hostile,
                                                               capsys) -> None:
    path = _torch_file(tmp_path)
    assert main(["convert", str(path), "-o", str(tmp_path / "honest.safetensors")]) == 0
    capsys.readouterr()
    hostile(CONVERT)
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(path), "-o", str(out)]) == 6
    captured = capsys.readouterr()
    assert MISSHAPEN in captured.err and "Traceback" not in captured.err
    assert not out.exists()
