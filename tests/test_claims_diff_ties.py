"""A diff's tied weights are believed only where the file's bytes show the tie.

A key one side does not store may be compared with a twin there (`stored_as_*`) only when the
other side keeps the key and the twin in the same bytes (`claims.diff.SideBySide.same_bytes`).
A jailed worker (through the self-test hook, as in `test_worker_lies.py`) that claims a tie the
bytes do not show is refused (`claim_refuted`), whatever the tie would make the answer.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from inspector.cli import main

EXIT_REFUTED = 2  # `diff`: claim_refuted is an error (not 0 identical, not 1 different)


CLAIM_A_TIE = """
    import inspector.sandbox.worker.diff as d
    from collections import Counter
    real = d.diff_sides
    def lying(a, b, emit=None, cancel=None):
        out = real(a, b, None, cancel)
        rows = {r["key"]: r for r in out["tensors"]}
        fake = dict(rows["emb"], key="head", stored_as_b="emb")
        out["tensors"] = [fake if r["key"] == "head" else r for r in out["tensors"]]
        out["aliases"].append({"key": "head", "side": "b", "stored_as": "emb", "how": "tied"})
        out["counts"] = dict(Counter(r["status"] for r in out["tensors"]))
        out["identical"] = all(r["status"] == "identical" for r in out["tensors"])
        out["summary"] = [r["summary"] for r in out["tensors"] if r["summary"]]
        return out
    d.diff_sides = lying
"""


def _emb() -> torch.Tensor:
    return torch.randn(8, 4, generator=torch.Generator().manual_seed(1))


def _sides(tmp_path, a_state: dict[str, torch.Tensor]):
    """A: a .pt holding `a_state`; B: a safetensors file holding `emb` alone, without
    `head`."""
    a, b = tmp_path / "a.pt", tmp_path / "b.safetensors"
    torch.save(a_state, a)
    save_file({"emb": _emb()}, b)
    return a, b


def _separate(emb: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"emb": emb.clone(), "head": emb.clone()}  # equal values, two storages


def _one_storage_apart(emb: torch.Tensor) -> dict[str, torch.Tensor]:
    both = torch.cat([emb, emb])  # equal values, one storage, at two offsets
    return {"emb": both[:8], "head": both[8:]}


@pytest.mark.parametrize("layout", [_separate, _one_storage_apart],
                         ids=["two-storages", "one-storage-two-offsets"])
def test_a_tie_the_bytes_do_not_show_is_refused(tmp_path, hostile, capsys, layout) -> None:
    a, b = _sides(tmp_path, layout(_emb()))
    assert main(["diff", str(a), str(b)]) == 1  # the honest worker: `head` is only in A
    out = capsys.readouterr().out
    assert "`head` is only in A" in out and "tied:" not in out
    hostile(CLAIM_A_TIE)
    code = main(["diff", str(a), str(b)])
    captured = capsys.readouterr()
    assert code == EXIT_REFUTED
    assert "IDENTICAL" not in captured.out and "checked:" not in captured.out
    err = captured.err.strip()
    assert len(err.splitlines()) == 1
    assert "comparison does not match the file's own bytes" in err
    assert "head is said to be B's emb, tied weights, but A does not keep the two in the " \
        "same bytes" in err


def test_a_tie_the_bytes_show_is_still_believed(tmp_path, capsys) -> None:
    emb = _emb()
    a, b = _sides(tmp_path, {"emb": emb, "head": emb})  # one tensor under two names
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "IDENTICAL: 2 tensors" in out
    assert "tied: `head` is not stored in B; compared with B's `emb`" in out
    assert "recomputed here from both files' bytes" in out
