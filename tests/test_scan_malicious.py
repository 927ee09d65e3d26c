"""Every known scanner-bypass trick, built in tmp: each must be called dangerous,
for the right reason, and no payload may ever run (the canary never appears)."""

from __future__ import annotations

import pytest
from factories import MALICIOUS_BUILDERS, corpus_fixture

from inspector.scan.engine import scan_file

# sample -> evidence the verdict must rest on: a global the file imports, or a finding code
EVIDENCE = {
    "os_system": "os.system",
    "posix_system": "posix.system",
    "builtins_exec": "builtins.exec",
    "eval_proto0": "builtins.eval",
    "subprocess_call": "subprocess.call",
    "stack_global_memo": "os.system",
    "stack_global_get_memoize": "builtins.exec",
    "stack_global_dotted": "pathlib.os.system",
    "obj_pop": "os.system",
    "inst": "os.system",
    "corrupt_tail": "os.system",
    "frame_mismatch": "os.system",
    "ext_code": "unresolved-import",
    "reduce_on_result": "indirect-call",
    "getattr_import": "builtins.getattr",
    "timeit": "timeit.timeit",
    "collect_env_run": "torch.utils.collect_env.run",
    "io_fileio": "_io.FileIO",
    "logging_filehandler": "logging.FileHandler",
    "pip_main": "pip.main",
    "runstring": "numpy.testing._private.utils.runstring",
    "osx_support": "_osx_support._read_output",
    "uuid_command": "uuid._get_command_stdout",
    "pickle_loads_nested": "nested-pickle",
    "marshal_code": "marshal.loads",
    "methodcaller": "operator.methodcaller",
    "build_exec": "builtins.exec",
    "zip_data_pkl": "os.system",
    "zip_flag_0x1": "zip-flag-bits",
    "zip_flag_0x20": "zip-flag-bits",
    "zip_flag_0x40": "zip-flag-bits",
    "zip_bad_crc": "zip-crc-mismatch",
    "zip_name_mismatch": "zip-name-mismatch",
    "zip_hidden_member": "zip-extra-pickle",
    "zip_compressed_pkl": "zip-compressed-pickle",
    "legacy_magic_eval": "builtins.eval",
    "legacy_late_payload": "os.system",
    "npy_object": "npy-object-array",
    "gzip_pickle": "compressed-pickle",
}
# torch.load reads only data.pkl, so it accepts this archive; the hidden payload waits for a
# loader that unpickles the other member (the scan still calls the file dangerous).
TORCH_ACCEPTS = {"zip_hidden_member"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    corpus, canary = corpus_fixture(tmp_path_factory, ("malicious",))
    yield corpus["malicious"]
    assert not canary.exists(), "a payload ran while the corpus was built or scanned"


def test_every_builder_has_expected_evidence():
    assert set(EVIDENCE) == set(MALICIOUS_BUILDERS)


@pytest.mark.parametrize("name", sorted(MALICIOUS_BUILDERS))
def test_malicious_sample_is_dangerous(built, name):
    res = scan_file(built[name])
    evidence = {f"{g.module}.{g.name}" for g in res.globals}
    evidence |= {f.code for f in res.findings}
    assert res.verdict == "dangerous", res.to_json()
    assert res.weights_only_ok == (name in TORCH_ACCEPTS)
    assert EVIDENCE[name] in evidence, (name, sorted(evidence))
    dangerous = [g for g in res.globals if g.severity == "dangerous"]
    dangerous += [f for f in res.findings if f.severity == "dangerous"]
    assert dangerous, "the verdict must come from a dangerous global or finding"
    assert res.error is None


def test_payload_never_runs_and_nothing_is_modified(built):
    before = {name: path.read_bytes() for name, path in built.items()}
    for path in built.values():
        scan_file(path)
    assert {name: path.read_bytes() for name, path in built.items()} == before
    assert not (next(iter(built.values())).parent.parent / "CANARY_EXECUTED").exists()


def test_formats_of_disguised_files(built):
    # every sample is named *.bin: formats come from the bytes
    assert scan_file(built["zip_hidden_member"]).format == "pytorch-zip"
    assert scan_file(built["legacy_late_payload"]).format == "pytorch-legacy"
    assert scan_file(built["legacy_magic_eval"]).format == "pickle"  # magic is not a literal
    assert scan_file(built["eval_proto0"]).format == "pickle"
    assert scan_file(built["npy_object"]).format == "npy"
    assert scan_file(built["gzip_pickle"]).format == "compressed-pickle"


def test_every_pickle_of_a_legacy_stream_is_scanned(built):
    res = scan_file(built["legacy_magic_eval"])
    assert len(res.pickles) == 5  # magic (eval), protocol, sys_info, data, storage keys
    assert res.pickles[0]["offset"] == 0


def test_payload_before_corrupt_tail_is_reported(built):
    res = scan_file(built["corrupt_tail"])
    codes = {f.code for f in res.findings}
    assert "malformed" in codes
    assert any(g.module == "os" for g in res.globals)
    assert res.pickles[0]["complete"] is False
