"""A jailed worker that lies is caught by the user's process (`sandbox.host.claims`).

Each payload is hostile code that runs inside a real `convert` or `inspect` job, through the
jail's self-test hook (`protocol.PAYLOAD_ENV`, unpickled by `selftest.run_prelude` once the
worker is jailed): it changes what the worker writes or reports. Each test first shows the lie
under the real worker (the job's own reply, without the client's checks, says `verified` or
health `ok` while the bytes say otherwise), then that the CLI refuses it and says so.
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch
from safetensors.torch import load_file

from inspector.checkpoint.health import Health, assess
from inspector.checkpoint.tensor_stats import TensorStats
from inspector.cli import main
from inspector.sandbox.host import operations
from inspector.sandbox.host.jobs import run_job
from inspector.sandbox.host.operations import inspect_reply
from inspector.sandbox.protocol import Limits


def _assess(rows) -> Health:
    """The health of the contract's tensor records (dicts, as the worker writes them)."""
    return assess(map(TensorStats.from_json, rows))


ALTER_OUTPUT = """
    import inspector.sandbox.worker.convert as convert
    real = convert.byte_chunks
    def altered(t, release=None):
        for n, piece in enumerate(real(t, release)):
            if n == 0:
                changed = bytearray(piece)
                changed[0] ^= 0x40
                piece = memoryview(bytes(changed))
            yield piece
    convert.byte_chunks = altered
"""

FAKE_ALIAS = """
    import inspector.sandbox.worker.convert as convert
    real = convert.plan_tensors
    def lying(tensors):
        plan = real(tensors)
        plan.entries = [(k, t) for k, t in plan.entries if k != "b"]
        plan.aliases["b"] = "a"
        return plan
    convert.plan_tensors = lying
"""


SKIPPED_AS_UNSUPPORTED = """
    import inspector.sandbox.worker.convert as convert
    real_plan, real_load = convert.plan_tensors, convert.load_request
    def lying(tensors):
        plan = real_plan(tensors)
        plan.entries = [(k, t) for k, t in plan.entries if k != "b"]
        plan.skipped.append({"key": "b", "dtype": "float32", "reason": "no safetensors form"})
        return plan
    def loading(request):
        request["skip_unsupported"] = True  # what the client asked is not the worker's to say
        return real_load(request)
    convert.plan_tensors = lying
    convert.load_request = loading
"""


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"a": torch.randn(16, 16, generator=g), "b": torch.randn(16, 16, generator=g)}


def _worker_convert(source, out) -> dict:
    """The convert job alone, as the client starts it, without the client's checks."""
    with open(out, "wb") as fh:
        size = os.path.getsize(source)
        return run_job({"op": "convert", "path": str(source), "paths": [], "allow_globals": [],
                        "limits": Limits.for_input(size).to_json(), "skip_unsupported": False,
                        "key": None, "strip_prefix": [], "output_bytes": 4 * size + (1 << 20),
                        "output_fd": fh.fileno()}, pass_fds=(fh.fileno(),), timeout=300)


@pytest.mark.parametrize("lie", [ALTER_OUTPUT, FAKE_ALIAS, SKIPPED_AS_UNSUPPORTED],
                         ids=["altered-bytes", "fake-alias", "skipped-as-unsupported"])
def test_a_worker_that_alters_the_conversion_is_caught(tmp_path, hostile, capsys, lie) -> None:
    source = tmp_path / "m.pt"
    state = _state()
    torch.save(state, source)
    hostile(lie)
    # the lie under the real worker: it says verified, the bytes it wrote say otherwise
    raw = tmp_path / "worker.safetensors"
    reply = _worker_convert(source, raw)
    assert reply["verified"] and not reply["mismatches"]
    written = load_file(raw)
    assert any(k not in written or not torch.equal(written[k], v) for k, v in state.items())
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(source), "-o", str(out)]) == 6
    err = capsys.readouterr().err
    assert "does not match the file's own bytes" in err and "bit for bit" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


def test_a_conversion_that_cannot_be_checked_here_says_whose_word_it_is(tmp_path, hostile,
                                                                        capsys) -> None:
    source = tmp_path / "train.pt"
    quantized = torch.quantize_per_tensor(torch.linspace(-1, 1, 16), 0.1, 3, torch.qint8)
    torch.save({**_state(), "q": quantized}, source)  # a quantized storage: loaded only
    hostile(ALTER_OUTPUT)
    out = tmp_path / "train.safetensors"
    assert main(["convert", str(source), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "as reported by the jailed loader" in text and "bit for bit" not in text
    assert main(["convert", str(source), "-o", str(out), "--force", "--json"]) == 0
    claims = json.loads(capsys.readouterr().out)["claims"]
    assert claims["checked"] is False and "_rebuild_qtensor" in claims["reason"]


def test_an_honest_conversion_is_verified_here(tmp_path, capsys) -> None:
    source = tmp_path / "m.pt"
    state = _state()
    torch.save({**state, "tied": state["a"], "epoch": 3}, source)  # plain leaves are read too
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(source), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["claims"] == {"checked": True, "tensors": 3, "reason": None}  # tied too
    assert report["aliases"] == {"tied": "a"}
    assert main(["convert", str(source), "-o", str(out), "--force"]) == 0
    assert "read back here, each matches its source's stored bytes bit for bit" in (
        capsys.readouterr().out)


CLEAN_STATS = """
    import inspector.tensors.describe as op
    from inspector.checkpoint.health import assess
    real = op.describe_tensors
    def clean(tensors, on_tensor, **options):
        records = real(tensors, lambda event: None, **options)
        for rec in records:
            rec.update(nan=0, inf=0, first_nonfinite=None)
            on_tensor({"type": "tensor", **rec})
        return records
    op.describe_tensors = clean
"""

FORGED_DIGEST = """
    import inspector.tensors.describe as op
    real = op.describe_tensors
    def forged(tensors, on_tensor, **options):
        last = tensors[-1][0]
        return real(tensors, lambda event: on_tensor(
            {**event, "digest": "0" * 64} if event["key"] == last else event), **options)
    op.describe_tensors = forged
"""

HIDDEN_TENSOR = """
    import inspector.tensors.describe as op
    real = op.describe_tensors
    def hiding(tensors, on_tensor, **options):
        return real(tensors, lambda event: event["key"] == "b" or on_tensor(event), **options)
    op.describe_tensors = hiding
"""


FORGED_WITHOUT_TORCH = """
    import inspector.sandbox.worker.inspect_op as op
    real = op.describe_file
    def forged(path, fmt):
        found = real(path, fmt)
        assert found is not None, "the torch-free reader left this file to torch"
        found.records[-1]["digest"] = "0" * 64
        return found
    op.describe_file = forged
"""


def test_a_worker_that_lies_without_torch_is_caught(tmp_path, hostile, capsys) -> None:
    from safetensors.torch import save_file

    state = _state()
    path = tmp_path / "m.safetensors"
    save_file(state, path)  # small tensors, all finite: read without torch
    hostile(FORGED_WITHOUT_TORCH)
    reply = _worker_inspect(path, "safetensors")
    assert reply["tensors"][-1]["digest"] == "0" * 64
    assert main(["inspect", str(path), "--json"]) != 0
    report = json.loads(capsys.readouterr().out)
    assert report["error"]["code"] == "claim_refuted" and report["health"] is None


def _worker_inspect(path, fmt: str = "") -> dict:
    """The inspect job alone, without the client's checks (`fmt`: what the scan would send)."""
    return inspect_reply({"op": "inspect", "path": str(path), "paths": [], "allow_globals": [],
                          "limits": Limits.for_input(os.path.getsize(path)).to_json(),
                          "format": fmt}, timeout=300)


@pytest.mark.parametrize("suffix", [".pt", ".legacy.pt", ".safetensors"])
@pytest.mark.parametrize("lie", [CLEAN_STATS, FORGED_DIGEST, HIDDEN_TENSOR],
                         ids=["clean-stats", "forged-digest", "hidden-tensor"])
def test_a_worker_that_lies_about_the_tensors_is_caught(tmp_path, hostile, capsys, lie,
                                                         suffix) -> None:
    from safetensors.torch import save_file

    state = _state()
    state["b"][3, 4] = float("nan")
    state["b"][5, 6] = float("inf")
    path = tmp_path / f"m{suffix}"
    if suffix == ".safetensors":
        save_file(state, path)
    else:
        torch.save({**state, "epoch": 3}, path,
                   _use_new_zipfile_serialization=suffix == ".pt")
    hostile(lie)
    reply = _worker_inspect(path)
    told = {r["key"]: r for r in reply["tensors"]}
    if lie is CLEAN_STATS:  # the lie under the real worker: NaN in the file, health ok
        assert torch.isnan(state["b"]).sum() == 1
        assert told["b"]["nan"] == 0 and _assess(reply["tensors"]).status == "ok"
    elif lie is FORGED_DIGEST:
        assert told[list(state)[-1]]["digest"] == "0" * 64
    else:
        assert "b" not in told
    assert main(["inspect", str(path), "--json"]) != 0
    report = json.loads(capsys.readouterr().out)
    assert report["error"]["code"] == "claim_refuted"
    assert report["health"] is None
    assert main(["inspect", str(path)]) != 0
    captured = capsys.readouterr()
    assert "does not match the file's own bytes" in captured.out + captured.err
    assert "health:   Weights not judged" in captured.out


NO_OUTLIER = """
    import inspector.tensors.describe as op
    real = op.describe_tensors
    def hiding(tensors, on_tensor, **options):
        def told(event):
            event.pop("exponents", None)  # what health judges a flipped exponent bit from
            if SMALLER:
                event.update(absmax=1.0, max=1.0)
            on_tensor(event)
        return real(tensors, told, **options)
    op.describe_tensors = hiding
"""


@pytest.mark.parametrize("smaller", [False, True], ids=["orders-dropped", "absmax-too"])
def test_a_worker_that_hides_a_flipped_exponent_is_caught(tmp_path, hostile, capsys,
                                                          smaller) -> None:
    state = _state()
    state["b"][5, 6] = 3.0e37  # one exponent bit away from a weight's order
    path = tmp_path / "m.pt"
    torch.save(state, path)
    assert main(["inspect", str(path), "--json"]) == 7  # the honest worker: a problem
    health = json.loads(capsys.readouterr().out)["health"]
    assert [f["code"] for f in health["findings"]] == ["magnitude-outlier"]
    hostile(f"SMALLER = {smaller}\n" + textwrap.dedent(NO_OUTLIER))
    # the lie under the real worker: no orders to judge, health ok
    reply = _worker_inspect(path)
    assert all("exponents" not in r for r in reply["tensors"])
    assert _assess(reply["tensors"]).status == "ok"
    code = main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    if smaller:  # a largest value the bytes do not hold: none of the answer is trusted
        assert report["error"]["code"] == "claim_refuted" and report["health"] is None
        assert "b has max 3.000000106909804e+37, reported as 1.0" in report["error"]["message"]
    else:  # the orders counted here judge it
        assert code == 7 and report["health"]["status"] == "problem"
        assert [f["code"] for f in report["health"]["findings"]] == ["magnitude-outlier"]


NOT_WIPED = """
    import inspector.sandbox.worker.inspect_op as plain
    import inspector.tensors.describe as op
    def live(record):
        if record.get("key") == "b":  # a wiped weight reported as a live one
            record.update(min=-0.5, max=0.5, absmax=0.5, zeros=0)
    real = op.describe_tensors
    def hiding(tensors, on_tensor, **options):
        def told(event):
            live(event)
            on_tensor(event)
        return real(tensors, told, **options)
    op.describe_tensors = hiding
    read = plain.describe_file
    def hiding_without_torch(path, fmt):
        found = read(path, fmt)
        for record in found.records if found is not None else ():
            live(record)
        return found
    plain.describe_file = hiding_without_torch
"""


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_a_worker_that_hides_a_wiped_weight_is_caught(tmp_path, hostile, capsys,
                                                      suffix) -> None:
    from safetensors.torch import save_file

    state = _state()
    state["b"].zero_()  # a layer wiped to zero: finite, and wrong
    path = tmp_path / f"m{suffix}"
    (torch.save if suffix == ".pt" else save_file)(state, path)
    assert main(["inspect", str(path), "--json"]) == 0  # the honest worker: a warning
    health = json.loads(capsys.readouterr().out)["health"]
    assert [f["code"] for f in health["findings"]] == ["zero-weights"]
    hostile(NOT_WIPED)
    reply = _worker_inspect(path, suffix[1:] if suffix == ".safetensors" else "")
    assert _assess(reply["tensors"]).status == "ok"  # the lie under the real worker
    main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["error"]["code"] == "claim_refuted" and report["health"] is None
    assert "b has min 0.0, reported as -0.5" in report["error"]["message"]


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_an_honest_inspection_of_every_real_dtype_is_checked_here(tmp_path, capsys,
                                                                  suffix) -> None:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(5)
    state = {}
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                  torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool):
        t = (torch.randn(40, 40, generator=g) * 50).to(dtype)
        t.view(-1)[7] = 0
        if t.is_floating_point():
            t.view(-1)[900], t.view(-1)[30] = float("nan"), float("-inf")
        state[str(dtype).removeprefix("torch.")] = t
    path = tmp_path / f"m{suffix}"
    (torch.save if suffix == ".pt" else save_file)(state, path)
    main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["claims"] == {"checked": True, "tensors": len(state), "reason": None}
    rows = {r["key"]: r for r in report["tensors"]}
    assert rows["float32"]["first_nonfinite"] == 30 and rows["int8"]["zeros"] >= 1
    assert rows["bool"]["max"] == 1 and rows["bfloat16"]["min"] < 0


MALFORMED_RECORDS = """
    import inspector.tensors.describe as op
    def malformed(tensors, on_tensor, **options):
        on_tensor._emit({"type": "tensors", "records": [1, "a"]})
        return []
    op.describe_tensors = malformed
"""


def test_a_worker_that_sends_records_that_are_not_objects_is_stopped(tmp_path, hostile,
                                                                       capsys) -> None:
    path = tmp_path / "m.pt"
    torch.save(_state(), path)
    hostile(MALFORMED_RECORDS)
    assert main(["inspect", str(path), "--json"]) != 0
    report = json.loads(capsys.readouterr().out)
    assert report["error"]["code"] == "protocol_violation"
    assert "records are not JSON objects" in report["error"]["message"]


def test_an_honest_inspection_counts_nan_here(tmp_path, capsys) -> None:
    state = _state()
    state["b"][0, 0] = float("nan")
    path = tmp_path / "m.pt"
    torch.save(state, path)
    assert main(["inspect", str(path), "--json"]) == 7  # health: problem
    report = json.loads(capsys.readouterr().out)
    assert report["claims"] == {"checked": True, "tensors": 2, "reason": None}
    assert {t["key"]: t["nan"] for t in report["tensors"]} == {"a": 0, "b": 1}
    assert report["health"]["status"] == "problem"


def test_a_worker_that_forges_digests_for_verify_is_caught(tmp_path, hostile, capsys) -> None:
    from inspector.rawtensors.readers import open_raw
    from inspector.rawtensors.values import measure

    source = tmp_path / "m.pt"
    torch.save(_state(), source)
    manifest = tmp_path / "m.json"
    assert main(["manifest", "create", str(source), "-o", str(manifest)]) == 0
    honest = {t.key: measure(t).digest for t in open_raw(source).tensors}
    data = bytearray(source.read_bytes())  # a flipped bit in a's storage, found by offset
    first = next(t for t in open_raw(source).tensors if t.key == "a")
    data[first.view[0] + 5] ^= 0x10
    source.write_bytes(bytes(data))
    hostile(f"""
        import inspector.tensors.sources as sources
        honest = {honest!r}
        sources.digest = lambda source, cancel=None: honest[source.key]
    """)
    # the lie under the real worker: the flipped file's digests are the manifest's
    reply = run_job({"op": "digests", "path": str(source), "allow_globals": [],
                     "limits": Limits.for_input(os.path.getsize(source)).to_json()},
                    timeout=300)
    assert {r["key"]: r["digest"] for r in reply["tensors"]} == honest
    capsys.readouterr()
    code = main(["verify", str(source), "--manifest", str(manifest), "--tensors-only"])
    captured = capsys.readouterr()
    assert code != 0
    assert "does not match the file's own bytes" in captured.out + captured.err


CALL_IT_IDENTICAL = """
    import inspector.sandbox.worker.diff as diff
    real = diff.diff_sides
    def lying(a, b, emit=None, cancel=None):
        result = real(a, b, None, cancel)
        for record in result["tensors"]:
            record["status"], record["summary"] = "identical", ""
        result.update(identical=True, counts={"identical": len(result["tensors"])}, summary=[])
        return result
    diff.diff_sides = lying
"""


def _write(path, tensors: dict[str, torch.Tensor], kind: str) -> None:
    """One checkpoint: a .pt, a .safetensors, or a folder of two safetensors shards with its
    index."""
    from safetensors.torch import save_file

    if kind == ".pt":
        torch.save(tensors, path)
    elif kind == ".safetensors":
        save_file(tensors, path)
    else:
        path.mkdir()
        names = {key: f"model-0000{i}-of-00002.safetensors" for i, key in enumerate(tensors, 1)}
        for key, name in names.items():
            save_file({key: tensors[key]}, path / name)
        (path / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": names}))


@pytest.mark.parametrize("kind", [".pt", ".safetensors", "-shards"])
def test_a_worker_that_calls_changed_files_identical_is_caught(tmp_path, hostile, capsys,
                                                              monkeypatch, kind) -> None:
    a, b = tmp_path / f"a{kind}", tmp_path / f"b{kind}"
    state = _state()
    changed = {**state, "a": state["a"].clone()}
    changed["a"].view(-1).view(torch.int32)[5] ^= 1 << 4  # one bit of one element
    _write(a, state, kind)
    _write(b, changed, kind)
    assert main(["diff", str(a), str(b)]) == 1  # the honest worker: they differ
    assert "checked:  each of the 2 keys' status, changed elements, NaN / Inf, bit flips and " \
        "largest differences recomputed here" in capsys.readouterr().out
    hostile(CALL_IT_IDENTICAL)
    # the lie under the real worker: the job's own reply calls the files identical
    # the lie under the real worker: the client's own job, its check left out, says identical
    with monkeypatch.context() as patch:
        patch.setattr(operations, "check_diff", lambda sides, result: None)
        reply = operations.diff_files(a, b)
    assert reply["identical"] and {r["status"] for r in reply["tensors"]} == {"identical"}
    code = main(["diff", str(a), str(b)])
    captured = capsys.readouterr()
    assert code not in (0, 1)
    assert "comparison does not match the file's own bytes" in captured.err
    assert "a is changed, reported as identical" in captured.err


_REWRITE_ROW = """
    import inspector.sandbox.worker.diff as diff
    real = diff.diff_sides
    def lying(a, b, emit=None, cancel=None):
        result = real(a, b, None, cancel)
        row = next(r for r in result["tensors"] if r["key"] == "a")
        rewrite(row, result)
        return result
    diff.diff_sides = lying
"""
CALL_DRIFT_ONE_FLIP = """
    def rewrite(row, result):
        row.update(changed_elements=1, single_bit_flips=1, multi_bit_elements=0,
                   nonfinite_changes=0, bitflips=row["bitflips"][:1])
        row["summary"] = "1 single-bit flip in `a`, in a mantissa bit"
        result["summary"] = [r["summary"] for r in result["tensors"] if r["summary"]]
"""
HIDE_CHANGED_NAN = """
    def rewrite(row, result):
        row["nonfinite_changes"] = 0
"""
MOVE_THE_FLIP = """
    def rewrite(row, result):
        row["bitflips"][0].update(bit=3, kind="mantissa", index=row["bitflips"][0]["index"] + 1)
"""
CALL_IT_MANTISSA = """
    def rewrite(row, result):
        row["summary"] = row["summary"].replace("exponent", "mantissa")
        result["summary"] = [r["summary"] for r in result["tensors"] if r["summary"]]
"""
MISCOUNT_TOTALS = """
    def rewrite(row, result):
        result["counts"] = {"identical": len(result["tensors"])}
"""
SMALLER_DRIFT = """
    def rewrite(row, result):
        row.update(max_abs_diff=1e-9, max_rel_diff=1e-9)
"""
NUMBERS_ON_AN_IDENTICAL_ROW = """
    def rewrite(row, result):
        same = next(r for r in result["tensors"] if r["status"] == "identical")
        same.update(changed_elements=3, multi_bit_elements=3)
"""
OTHER_SHAPE = """
    def rewrite(row, result):
        row["shape_b"] = [256]
"""


def _changed_pair(tmp_path, kind: str):
    """Two checkpoints whose `a` differs: one exponent-bit flip, a NaN, and drift."""
    state = _state()
    changed = {**state, "a": state["a"].clone()}
    bits = changed["a"].view(-1).view(torch.int32)
    bits[5] ^= 1 << 27
    changed["a"].view(-1)[7] = float("nan")
    changed["a"].view(-1)[100:140] += 0.5
    a, b = tmp_path / f"a{kind}", tmp_path / f"b{kind}"
    _write(a, state, kind)
    _write(b, changed, kind)
    return a, b


@pytest.mark.parametrize("lie", [CALL_DRIFT_ONE_FLIP, HIDE_CHANGED_NAN, MOVE_THE_FLIP,
                                 CALL_IT_MANTISSA, MISCOUNT_TOTALS, SMALLER_DRIFT,
                                 NUMBERS_ON_AN_IDENTICAL_ROW, OTHER_SHAPE],
                         ids=["drift-as-one-flip", "hidden-nan", "moved-flip", "mantissa",
                              "totals", "smaller-drift", "identical-row", "shape"])
@pytest.mark.parametrize("kind", [".pt", "-shards"])
def test_a_worker_that_lies_about_what_changed_is_caught(tmp_path, hostile, capsys,
                                                         monkeypatch, lie, kind) -> None:
    a, b = _changed_pair(tmp_path, kind)
    assert main(["diff", str(a), str(b)]) == 1  # the honest worker's answer passes the check
    honest = capsys.readouterr().out
    assert "single-bit flips in `a`" in honest and "NaN or Inf" in honest

    def unchecked() -> dict:
        """The client's own job with its check left out: what the worker says."""
        with monkeypatch.context() as patch:
            patch.setattr(operations, "check_diff", lambda sides, result: None)
            reply = operations.diff_files(a, b)
        return {k: reply[k] for k in ("identical", "counts", "summary", "tensors")}

    told = unchecked()
    hostile(lie + _REWRITE_ROW)
    lied = unchecked()  # the lie under the real worker: still "changed", other numbers
    assert lied != told and lied["identical"] is False
    assert [r["status"] for r in lied["tensors"]] == [r["status"] for r in told["tensors"]]
    code = main(["diff", str(a), str(b)])
    captured = capsys.readouterr()
    assert code not in (0, 1)
    assert "comparison does not match the file's own bytes" in captured.err


@pytest.mark.parametrize("kind", [".pt", ".safetensors"])
def test_an_honest_diff_of_every_dtype_is_checked_here(tmp_path, capsys, kind) -> None:
    g = torch.Generator().manual_seed(3)
    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
              torch.uint8, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2,
              torch.complex64]
    state = {str(d).removeprefix("torch."): (torch.randn(32, 8, generator=g) * 4).to(d)
             for d in dtypes}
    changed = {k: v.clone() for k, v in state.items()}
    for t in changed.values():
        raw = t.view(-1).view(torch.uint8)
        raw[3] ^= 0x40  # a single-bit flip
        raw[40:52] ^= 0xFF  # drift
        if t.is_floating_point() or t.is_complex():
            t.view(-1)[60] = float("nan")
    a, b = tmp_path / f"a{kind}", tmp_path / f"b{kind}"
    _write(a, state, kind)
    _write(b, changed, kind)
    assert main(["diff", str(a), str(b), "--json"]) == 1
    reply = json.loads(capsys.readouterr().out)
    assert reply["claims"] == {"checked": True, "tensors": len(dtypes), "reason": None}
    rows = {r["key"]: r for r in reply["tensors"]}
    assert {k: r["single_bit_flips"] >= 1 for k, r in rows.items()} == dict.fromkeys(rows, True)
    assert rows["float32"]["nonfinite_changes"] == 1 and rows["int8"]["nonfinite_changes"] == 0


HIDE_NAN = """
    import inspector.sandbox.worker.consistency.op as op
    real = op.weights_probe
    def lying(*args, **kwargs):
        result = real(*args, **kwargs)
        for row in result["tensors"]:
            row.pop("nonfinite", None)
            row.pop("first_nonfinite", None)
        result["nonfinite_weights"] = []
        return result
    op.weights_probe = lying
"""

OTHER_WEIGHTS = """
    import inspector.tensors.load as load
    real = load.load_checkpoint
    def swapped(*args, **kwargs):
        loaded = real(*args, **kwargs)
        loaded["b"].zero_()
        return loaded
    load.load_checkpoint = swapped
"""

NOTHING_PROBED = """
    import inspector.sandbox.worker.consistency.weights_probe as probe
    probe._probeable = lambda t: False
"""

CONSISTENT_ANYWAY = """
    import inspector.sandbox.worker.consistency.op as op
    real = op.weights_probe
    def lying(*args, **kwargs):
        return {**real(*args, **kwargs), "consistent": True}
    op.weights_probe = lying
"""


@pytest.mark.parametrize(("lie", "refuted"), [
    (HIDE_NAN, "b holds 1 NaN/Inf, reported as 0"),
    (OTHER_WEIGHTS, "b's digest differs"),
    (NOTHING_PROBED, "a was not probed"),
    (CONSISTENT_ANYWAY, "consistent is True with 1 failed rows"),
], ids=["hidden-nan", "other-weights", "nothing-probed", "consistent-anyway"])
def test_a_worker_that_lies_about_the_consistency_probe_is_caught(tmp_path, hostile, capsys,
                                                                  lie, refuted) -> None:
    from inspector.sandbox.host.consistency_job import ConsistencyRequest

    state = _state()
    inject = lie is CONSISTENT_ANYWAY  # a flip the detector sees: the rows fail
    if not inject:
        state["b"][3, 4] = float("nan")
    path = tmp_path / "m.pt"
    torch.save(state, path)
    args = ["--inject", "a:5:30@2"] if inject else []
    hostile(lie)
    spec = ConsistencyRequest(str(path), device="cpu", repeats=2,
                              inject={"key": "a", "index": 5, "bit": 30, "iteration": 2}
                              if inject else None)
    # the lie under the real worker: a device judged consistent on weights it says are clean
    reply = run_job(spec.to_request(), timeout=300)
    assert reply["consistent"] and not reply["nonfinite_weights"]
    assert main(["consistency", str(path), "--device", "cpu", "--repeats", "2", *args]) == 6
    captured = capsys.readouterr()
    assert "does not match the file's own bytes" in captured.err and refuted in captured.err
    assert "CONSISTENT" not in captured.out


def test_an_honest_probe_is_checked_here_and_nan_leaves_the_device_unjudged(tmp_path,
                                                                            capsys) -> None:
    state = _state()
    state["b"][3, 4] = float("nan")
    path = tmp_path / "m.pt"
    torch.save(state, path)
    assert main(["consistency", str(path), "--device", "cpu", "--repeats", "2", "--json"]) == 7
    result = json.loads(capsys.readouterr().out)
    assert result["claims"] == {"checked": True, "tensors": 2, "reason": None}
    assert result["nonfinite_weights"] == ["b"]
    assert {t["key"]: t.get("nonfinite") for t in result["tensors"]} == {"a": None, "b": 1}
    assert main(["consistency", str(path), "--device", "cpu", "--repeats", "2"]) == 7
    out = capsys.readouterr().out
    assert "\nNOT JUDGED on CPU (2 runs, probe)\n" in out
    assert "checked: the 2 tensors the device was given are the file's bytes" in out


class _Chunks:
    """A tensor whose reader yields the given chunks (the readers of two formats cut one
    tensor's bytes at different places, and may yield empty pieces)."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def read(self):
        return iter(self.chunks)


@pytest.mark.parametrize(("a", "b", "same"), [
    ((b"abcd", b"", b"efgh"), (b"ab", b"", b"cdef", b"", b"gh", b""), True),
    ((b"abc",), (b"abcd",), False),
    ((b"abcd",), (b"abc",), False),
    ((b"",), (), True),
    ((b"abcd" * 1000,), (b"abcd" * 999 + b"abce",), False),
])
def test_bytes_are_compared_in_step_whatever_the_chunks(a, b, same) -> None:
    from inspector.sandbox.host.claims.bytes_equal import same_bytes

    assert same_bytes(_Chunks(*a), _Chunks(*b)) is same
    assert same_bytes(_Chunks(*b), _Chunks(*a)) is same
