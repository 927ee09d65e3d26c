"""Benign files torch, safetensors and NumPy write, and benign archives with structural oddities:
exact format, verdict and weights_only answer for each."""

from __future__ import annotations

import zipfile

import pytest
from factories import BENIGN_BUILDERS, ODD_BUILDERS, _rewrite_zip, call, corpus_fixture, touch_cmd

from inspector.scan.engine import scan_file

# name -> (format, verdict, weights_only_ok)
BENIGN_EXPECTED = {
    "state_dict": ("pytorch-zip", "safe", True),
    "training_checkpoint": ("pytorch-zip", "safe", True),
    "every_dtype": ("pytorch-zip", "safe", True),
    "nested": ("pytorch-zip", "safe", True),
    "legacy": ("pytorch-legacy", "safe", True),
    "torchscript": ("torchscript", "suspicious", False),
    "safetensors": ("safetensors", "safe", False),
    "npy": ("npy", "safe", False),
    "npz": ("npz", "safe", False),
    "npy_object": ("npy", "suspicious", False),
    "namespace_args": ("pytorch-zip", "suspicious", False),
}
# name -> (verdict, weights_only_ok); what torch 2.13 does was measured (see test_scan_weights_only)
ODD_EXPECTED = {
    "protocol4": ("safe", False),
    "legacy_protocol4": ("safe", False),
    "zip_bad_crc": ("suspicious", True),
    "zip_flag_0x1": ("suspicious", False),
    "zip_flag_0x20": ("suspicious", False),
    "zip_flag_0x40": ("suspicious", False),
    "zip_name_mismatch": ("suspicious", True),
    "zip_unreferenced_record": ("suspicious", True),
    "zip_duplicate_name": ("suspicious", True),
    "zip_traversal_name": ("dangerous", False),  # ../../etc/evil.txt writes outside when unpacked
    "zip_missing_record": ("suspicious", False),
    "zip_short_record": ("dangerous", False),
    "setitem_on_list": ("dangerous", False),
    "zip_setitem_on_list": ("dangerous", False),
    "zip_compressed_data_pkl": ("suspicious", True),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    corpus, canary = corpus_fixture(tmp_path_factory, ("benign", "odd"))
    yield corpus
    assert not canary.exists()


def test_tables_cover_every_builder():
    assert set(BENIGN_EXPECTED) == set(BENIGN_BUILDERS)
    assert set(ODD_EXPECTED) == set(ODD_BUILDERS)


@pytest.mark.parametrize("name", sorted(BENIGN_BUILDERS))
def test_benign_sample(built, name):
    res = scan_file(built["benign"][name])
    fmt, verdict, wo_ok = BENIGN_EXPECTED[name]
    assert (res.format, res.verdict, res.weights_only_ok) == (fmt, verdict, wo_ok), res.to_json()
    assert res.error is None
    assert not [g for g in res.globals if g.severity == "dangerous"]
    if wo_ok:
        assert res.weights_only_blockers == []
        assert all(g.severity == "safe" for g in res.globals)


@pytest.mark.parametrize("name", sorted(ODD_BUILDERS))
def test_odd_archive(built, name):
    res = scan_file(built["odd"][name])
    verdict, wo_ok = ODD_EXPECTED[name]
    assert (res.verdict, res.weights_only_ok) == (verdict, wo_ok), res.to_json()
    code = ODD_BUILDERS[name][1]
    if code:
        assert code in {f.code for f in res.findings}
    if not wo_ok:
        assert res.weights_only_blockers, "a refusal must say why"


def test_every_dtype_storage_sizes_match(built):
    res = scan_file(built["benign"]["every_dtype"])
    assert not [f for f in res.findings if f.code.startswith("storage")]
    assert {g.name for g in res.globals} >= {"BFloat16Storage", "ComplexDoubleStorage",
                                             "QInt8Storage", "float8_e4m3fn", "_rebuild_qtensor"}


def test_torchscript_is_flagged_not_trusted(built):
    res = scan_file(built["benign"]["torchscript"])
    assert "torchscript" in {f.code for f in res.findings}
    # the code/ sources are text, not pickles, even though they start with "c"
    assert all(g.module.replace(".", "").replace("_", "").isalnum() for g in res.globals)


def test_protocol4_refusal_names_the_opcodes(built):
    res = scan_file(built["odd"]["protocol4"])
    assert any("FRAME" in b or "MEMOIZE" in b for b in res.weights_only_blockers)


def test_pickle_pane_rows_for_each_walked_pickle(built):
    from inspector.scan.engine import pickle_source
    from inspector.scan.pickles.walker import disassemble

    path = built["benign"]["legacy"]
    res = scan_file(path)
    rows = [disassemble(pickle_source(path, p["member"]), 50, p["offset"]) for p in res.pickles]
    assert len(rows) == 5 and all(r[0].opcode == "PROTO" for r in rows)
    assert rows[1][0].offset == res.pickles[1]["offset"]
    zipped = scan_file(built["benign"]["state_dict"])
    entry = zipped.pickles[0]
    assert entry["member"].endswith("/data.pkl")
    rows = disassemble(pickle_source(built["benign"]["state_dict"], entry["member"]), 10_000)
    assert any(r.opcode == "GLOBAL" and "_rebuild_tensor_v2" in r.argument for r in rows)
    assert all(r.severity is None for r in rows)
    assert rows[-1].opcode == "STOP"


def test_custom_objects_are_suspicious_not_dangerous(built):
    # argparse.Namespace needs weights_only=False; its logged command line is data, not a call
    res = scan_file(built["benign"]["namespace_args"])
    assert {(g.module, g.name, g.severity) for g in res.globals if g.severity != "safe"} == {
        ("argparse", "Namespace", "suspicious")}
    assert any("argparse.Namespace" in b for b in res.weights_only_blockers)


@pytest.mark.parametrize("head", [b".", b").", b"N.", b"}.", b"(lp0\n."])
def test_tensor_bytes_that_happen_to_read_as_a_pickle_are_data(tmp_path, head):
    """One record in 256 starts with 0x2e (STOP) and short complete import-free pickles turn
    up in big models: torch never unpickles a record, and nothing without an import can run."""
    import torch

    raw = bytearray(head + bytes(16 - len(head)))
    path = tmp_path / "model.pt"
    torch.save({"w": torch.frombuffer(raw, dtype=torch.uint8).clone(), "b": torch.ones(3)}, path)
    result = scan_file(path)
    assert result.verdict == "safe", [f.code for f in result.findings]


def test_a_tensor_record_that_imports_is_still_scanned(tmp_path, canary):
    import torch

    src = tmp_path / "src.pt"
    torch.save({"w": torch.zeros(64, dtype=torch.uint8)}, src)
    payload = call("os", "system", touch_cmd(canary))
    prefix = zipfile.ZipFile(src).namelist()[0].split("/")[0]
    path = tmp_path / "model.pt"
    path.write_bytes(_rewrite_zip(src.read_bytes(), {f"{prefix}/data/0": payload.ljust(64, b"\0")}))
    result = scan_file(path)
    assert result.verdict == "dangerous"
    assert any(f.member == f"{prefix}/data/0" for f in result.findings)
