"""The audit record around a run, and shadow re-inference for batch jobs."""

from __future__ import annotations

import hashlib
import subprocess

import pytest
import torch
from guard_support import alarms, tiny_model

from inspector.core.errors import CodedError
from inspector.guard.audit import audit, git_state
from inspector.guard.guard import Guard, GuardConfig, GuardHalt
from inspector.guard.scene import batch_hash
from inspector.guard.shadow import Shadow, compare
from inspector.run import journal


def _records(run_dir, kind):
    read = journal.read(journal.journal_path(run_dir))
    assert read.intact
    return [dict(e.record) for e in read.of_kind(kind)]


def test_audit_records_versions_inputs_and_outputs(tmp_path):
    data = tmp_path / "train.bin"
    data.write_bytes(b"tokens" * 100)
    out = tmp_path / "model.pt"
    with audit(tmp_path / "run", inputs=[data], outputs=[out, tmp_path / "never.pt"]):
        torch.save({"w": torch.ones(2)}, out)
    [start] = _records(tmp_path / "run", "audit.start")
    [end] = _records(tmp_path / "run", "audit.end")
    assert start["torch"] == torch.__version__ and start["python"]
    assert {"cuda_runtime", "cudnn", "driver", "gpus", "host", "argv", "git_commit",
            "git_dirty"} <= start.keys()
    assert start["inputs"] == [{"path": str(data), "size": 600,
                                "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}]
    assert end["exit_status"] == 0 and end["time"] >= start["time"]
    assert end["outputs"][0]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert end["outputs"][1] == {"path": str(tmp_path / "never.pt"), "sha256": None,
                                 "size": None}


def test_audit_end_carries_a_guard_halts_exit_status(tmp_path):
    model = tiny_model()
    with pytest.raises(GuardHalt), audit(tmp_path):
        guard = Guard(tmp_path, GuardConfig(action="halt"))
        loss = model(torch.full((1, 4), float("nan"))).sum()
        loss.backward()
        guard.step(loss, model)
    [end] = _records(tmp_path, "audit.end")
    assert end["exit_status"] == 17
    kinds = [e.kind for e in journal.read(journal.journal_path(tmp_path)).entries]
    assert kinds == ["audit.start", "guard.metrics", "guard.alarm", "audit.end"]


def test_a_missing_input_is_named_before_anything_is_written(tmp_path):
    with pytest.raises(CodedError, match="is not a file"), audit(tmp_path, inputs=["nope.bin"]):
        pass
    assert not journal.journal_path(tmp_path).exists()


def test_git_state_reads_commit_and_dirty_flag(tmp_path):
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True,  # noqa: E731
                                    capture_output=True)
    run("init", "-q")
    (tmp_path / "f.txt").write_text("a")
    run("add", "f.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    clean = git_state(tmp_path)
    assert len(clean["git_commit"]) == 40 and clean["git_dirty"] is False
    (tmp_path / "f.txt").write_text("b")
    assert git_state(tmp_path)["git_dirty"] is True


def test_shadow_reruns_a_fraction_and_alarms_on_a_mismatch(tmp_path):
    model = tiny_model().eval()
    calls = {"n": 0}

    def flaky(x):
        calls["n"] += 1
        out = model(x)
        if calls["n"] == 6:  # the first run of batch 4 computes one element wrong
            out = out.clone()
            out[2, 0] += 1e-3
        return out

    shadow = Shadow(flaky, tmp_path, fraction=0.25)
    xs = [torch.randn(8, 4, generator=torch.Generator().manual_seed(i)) for i in range(8)]
    outs = [shadow(x) for x in xs]
    assert shadow.checked == 2 and calls["n"] == 10
    [m] = shadow.mismatches
    assert m.batch == 4 and "element 2" in m.detail
    [record] = alarms(tmp_path)
    assert record["rule"] == "shadow-mismatch" and record["step"] == 4
    assert record["batch_hash"] == batch_hash(xs[4])
    assert torch.equal(outs[0], model(xs[0]).detach())


def test_compare_bit_for_bit_and_within_tolerance():
    a = torch.tensor([1.0, float("nan")])
    assert compare(a, a.clone()) is None
    b = torch.tensor([1.0 + 1e-7, float("nan")])
    assert compare(a, b) is not None
    assert compare(a, b, atol=1e-6) is None
    assert compare(a, torch.tensor([1.0, 0.0]), atol=1.0)[0] == float("inf")
    assert compare([a], [a, a])[1] == "1 output tensors, then 2"


@pytest.mark.parametrize("wrapped", [False, True])
def test_shadow_compares_the_weights_with_the_ledger_record_at_start_and_end(tmp_path, wrapped):
    from inspector.ledger import save

    model = tiny_model()
    state = {"model": model.state_dict()} if wrapped else model.state_dict()
    save(state, tmp_path / "ckpt.pt", step=3)
    shadow = Shadow(model, tmp_path, fraction=0.5, model=model, checkpoint=tmp_path / "ckpt.pt")
    assert shadow.weights_differ == []  # loaded as saved: nothing at the start
    for i in range(4):
        shadow(torch.full((2, 4), float(i)))
    with torch.no_grad():
        model[0].weight.view(-1).view(torch.int32)[5] ^= 1 << 3  # a low mantissa bit, in memory
    shadow(torch.ones(2, 4))
    shadow.close()
    assert shadow.mismatches == []  # a re-run on the same weights agrees with itself
    assert shadow.weights_differ == ["0.weight"]
    [record] = [a for a in alarms(tmp_path) if a["rule"] == "shadow-weights-differ"]
    assert record["params"] == ["0.weight"] and record["when"] == "end"
    assert record["batch_hash"] == batch_hash(torch.ones(2, 4))


def test_shadow_refuses_a_checkpoint_without_a_ledger_record(tmp_path):
    model = tiny_model()
    torch.save(model.state_dict(), tmp_path / "plain.pt")
    with pytest.raises(CodedError) as refused:
        Shadow(model, tmp_path, model=model, checkpoint=tmp_path / "plain.pt")
    assert refused.value.code == "no-record"
