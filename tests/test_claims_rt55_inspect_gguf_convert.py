"""A GGUF conversion's sidecar, its values not kept (each block-quantized tensor's `KEY::ggml`
record) and its tensors left out are checked against the file's header read here
(`claims.objects.gguf_leaves`), as an inspection's records are: a worker that adds a value or
re-describes a Q4_0 tensor as Q8_0 is refuted, where the CLI printed its word unmarked under a
claims check that said "checked". And where the tensors are checked but the input's other
values cannot be read here, the CLI marks those lines as the loader's word."""

from __future__ import annotations

import json

import factories
import pytest
import torch

from inspector.cli import main

EXIT_REFUTED = 6

SIDECAR_LIE = """
    import inspector.sandbox.worker.convert as c
    real = c.sidecar_document
    def lying(objects):
        doc, rejected = real(objects)
        doc["values"]["epoch"] = 7
        doc["types"]["epoch"] = "builtins.int"
        return doc, rejected
    c.sidecar_document = lying
"""
RETYPED = """
    import inspector.sandbox.worker.convert as c
    real = c.sidecar_document
    def lying(objects):
        doc, rejected = real(objects)
        for r in rejected:
            r["repr"] = r["repr"].replace("Q4_0", "Q8_0")
        return doc, rejected
    c.sidecar_document = lying
"""
REASON = """
    import inspector.sandbox.worker.convert as c
    real = c.plan_tensors
    def lying(tensors):
        plan = real(tensors)
        for s in plan.skipped:
            s["reason"] = "the tensor is corrupt"
        return plan
    c.plan_tensors = lying
"""


def _convert(path, out, *more: str) -> int:
    return main(["convert", str(path), "-o", str(out), "--force", "--skip-unsupported", *more])


@pytest.fixture
def gguf_file(tmp_path):
    pytest.importorskip("gguf", reason="gguf is in the dev extra")
    return factories.save_gguf_q4(tmp_path / "d.gguf")


def test_an_honest_gguf_sidecar_is_checked(gguf_file, tmp_path, capsys) -> None:
    out = tmp_path / "d.safetensors"
    assert _convert(gguf_file, out, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["claims"] == {"checked": True, "tensors": 2, "reason": None}
    sidecar = json.loads((tmp_path / "d.sidecar.json").read_text())
    assert "unchecked" not in sidecar
    assert [o["key"] for o in sidecar["not_serializable"]] == ["q::ggml"]
    assert "Q4_0" in sidecar["not_serializable"][0]["repr"]


@pytest.mark.parametrize("lie", [SIDECAR_LIE, RETYPED, REASON])
def test_a_gguf_sidecar_lie_is_refuted(gguf_file, tmp_path, hostile, capsys, lie) -> None:
    out = tmp_path / "d.safetensors"
    hostile(lie)
    assert _convert(gguf_file, out) == EXIT_REFUTED
    assert "none of its answer is trusted" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "d.sidecar.json").exists()


def test_values_not_read_here_are_marked_though_the_tensors_are_checked(tmp_path,
                                                                       capsys) -> None:
    torch.manual_seed(0)
    source = tmp_path / "ts.pt"
    module = torch.nn.Linear(4, 4)
    module.register_buffer("z", torch.ones(2, dtype=torch.complex128))
    torch.jit.script(module).save(str(source))
    assert _convert(source, tmp_path / "ts.safetensors") == 0
    text = capsys.readouterr().out
    assert "bit for bit" in text  # its tensors: located here by the static parser
    sidecar = next(line for line in text.splitlines() if line.startswith("sidecar"))
    assert "as reported by the jailed loader; not checked here" in sidecar
