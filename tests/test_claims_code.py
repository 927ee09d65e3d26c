"""A TorchScript archive's code files (the `code:` lines: what loading it would run, and what
in it is flagged) are read here from the zip (`layout.torchscript`, which runs nothing), never
taken from the jailed worker: a worker that reports fewer files, or none flagged, changes
nothing the CLI prints."""

from __future__ import annotations

import json

import torch

from inspector.cli import main

HIDE_CODE = """
    import inspector.sandbox.worker.inspect_op as op
    real = op._with_torch
    def lying(request, emit, cancel):
        result = real(request, emit, cancel)
        result.update(code=[], code_archive={"kind": "torchscript", "constants": 0, "flags": 0})
        return result
    op._with_torch = lying
"""


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.relu(x))


def test_the_code_files_are_read_here(tmp_path, hostile, capsys) -> None:
    path = tmp_path / "m.pt"
    torch.jit.script(_Net()).save(str(path))
    main(["inspect", str(path), "--json"])
    honest = json.loads(capsys.readouterr().out)
    names = [c["name"] for c in honest["code"]]
    assert names and honest["code_archive"]["kind"] == "torchscript"
    hostile(HIDE_CODE)
    main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["error"] is None
    assert report["code"] == honest["code"] and report["code_archive"] == honest["code_archive"]
    main(["inspect", str(path)])
    assert f"code:     {len(names)} file" in capsys.readouterr().out
