"""A consistency reply echoes what was asked (mode, device, repeats, seed, the fault to inject)
and counts what was probed; the user's process holds each against the request it sent and the
file's located tensors (`sandbox.host.claims.consistency`), never taking the reply's word.

Each lie runs as hostile code inside a real `consistency` job (the jail's self-test hook): it
edits the operation's answer. Each test first shows the lie under the real worker (the job's
own reply), then that the CLI refuses it (`claim_refuted`, exit 6).
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from inspector.cli import main
from inspector.report.checklist import _check_deterministic
from inspector.report.sections import consistency_info
from inspector.sandbox.host.consistency_job import ConsistencyRequest
from inspector.sandbox.host.jobs import run_job

REFUTED = 6
"""`consistency`'s exit code for a refused answer."""

EDIT = """
    import inspector.sandbox.worker.consistency.op as op
    real = op.json_safe
    def lying(value):
        value = real(value)
        if isinstance(value, dict) and "injected" in value:  # the operation's answer
            value.update(FIELDS)
            if FAIL:
                value["consistent"] = False
                for row in value["tensors"]:
                    if "repeats" in row:
                        row["status"] = "fail"
        return value
    op.json_safe = lying
"""


def _lie(hostile, fail: bool = False, **fields) -> None:
    """Every worker from here on answers with `fields` replaced (`fail`: every probed row
    failed, the run inconsistent)."""
    hostile(f"FIELDS = {fields!r}\nFAIL = {fail!r}\n" + textwrap.dedent(EDIT))


def _file(tmp_path):
    """One 16x16 weight matrix (1 KiB) and a bias."""
    g = torch.Generator().manual_seed(1)
    path = tmp_path / "m.pt"
    torch.save({"w": torch.randn(16, 16, generator=g), "b": torch.randn(16, generator=g)}, path)
    return path


def _refused(path, capsys) -> str:
    """Run `consistency` on the CPU, 3 repeats: refused; the refusal's message."""
    assert main(["consistency", str(path), "--device", "cpu", "--repeats", "3"]) == REFUTED
    captured = capsys.readouterr()
    assert "CONSISTENT" not in captured.out
    return captured.err


def test_a_fault_nobody_asked_for_is_refused(tmp_path, hostile, capsys) -> None:
    """A failed run with a forged `injected` read as a self-test whose detector worked: the
    report's check passed ("Fault-injection self-test ... detected")."""
    path = _file(tmp_path)
    fault = {"key": "w", "index": 0, "bit": 30, "iteration": 2}
    _lie(hostile, fail=True, injected=fault)
    reply = run_job(ConsistencyRequest(str(path), device="cpu", repeats=3).to_request(),
                    timeout=300)
    assert reply["injected"] == fault and not reply["consistent"]  # the lie, unchecked
    assert consistency_info(reply).status == "pass"  # ... is what the report made of it
    err = _refused(path, capsys)
    assert "injected is None as asked, reported as {'key': 'w'" in err


@pytest.mark.parametrize("fields, said", [
    ({"repeats": 1000}, "repeats is 3 as asked, reported as 1000"),
    ({"seed": 7}, "seed is 0 as asked, reported as 7"),
    ({"device": "cuda:0", "device_label": "cuda:0 (NVIDIA H100)"},
     "the run was asked on cpu, reported on cuda:0"),
    ({"device_label": "cuda:0 (NVIDIA H100)"}, "the cpu run is labelled cuda:0 (NVIDIA H100)"),
    ({"probed_tensors": 40}, "probed_tensors is 1, reported as 40"),
    ({"probed_bytes": 512_000_000}, "probed_bytes is 1024, reported as 512000000"),
], ids=["repeats", "seed", "device", "label", "probed-tensors", "probed-bytes"])
def test_an_echo_the_request_or_the_file_does_not_give_is_refused(tmp_path, hostile, capsys,
                                                                  fields, said) -> None:
    path = _file(tmp_path)
    assert main(["consistency", str(path), "--device", "cpu", "--repeats", "3"]) == 0
    assert "probed 1 weight matrices (0.0 MB)" in capsys.readouterr().out  # honest
    _lie(hostile, **fields)
    reply = run_job(ConsistencyRequest(str(path), device="cpu", repeats=3).to_request(),
                    timeout=300)
    assert reply["consistent"] and all(reply[k] == v for k, v in fields.items())
    assert said in _refused(path, capsys)


def test_an_asked_fault_passes_and_a_pass_says_whose_word_it_is(tmp_path, capsys) -> None:
    path = _file(tmp_path)
    args = ["consistency", str(path), "--device", "cpu", "--repeats", "3", "--json"]
    assert main([*args, "--inject", "w:5:30@2"]) == 1  # the detector saw the asked flip
    capsys.readouterr()
    request = ConsistencyRequest(str(path), device="cpu", repeats=3)
    from inspector.sandbox.host.consistency_job import run_consistency

    item = _check_deterministic(consistency_info(run_consistency(request)))
    assert item.status == "pass"
    # the repeats' outputs exist only in the jailed worker: the pass is its word
    assert item.detail == ("identical every repeat on CPU, as reported by the jailed worker "
                           "(the weights it was given checked here)")
