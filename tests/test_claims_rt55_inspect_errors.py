"""Every operation's error code is held against this process's own facts by one checker
(`claims.errors.checked_error`), not convert's alone: a safetensors header the loader calls
corrupt must be one this process refuses too (`read_header`), a global it cannot allow one the
request allowed, an archive it did not cover a TorchScript or torch.export archive the static
parser does not cover here, and tensors it cannot handle or names that clash must be possible
in the input. `inspect`, `digests` (verify, manifest) and `diff` took these codes as fact."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from test_claims_worker_errors import _ends_with

from inspector.cli import main
from inspector.sandbox.host import operations
from inspector.sandbox.host.jobs import SandboxError

EXIT_LOAD_FAILED = 5


def _safetensors(tmp_path, name: str = "m.safetensors"):
    path = tmp_path / name
    save_file({"w": torch.ones(4, 4), "b": torch.zeros(4)}, str(path))
    return path


def _pickled(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.ones(4, 4), "epoch": 3}, path)
    return path


def _inspected(path, capsys, *args: str) -> dict:
    assert main(["inspect", str(path), "--json", *args]) == EXIT_LOAD_FAILED
    return json.loads(capsys.readouterr().out)["error"]


@pytest.mark.parametrize("code, why", [
    ("bad_safetensors", "every safetensors input's header reads whole here"),
    ("bad_allowed_global", "no global was allowed"),
    ("not_covered", "no input is a TorchScript or torch.export archive"),
    ("unsupported_tensors", "no input is one"),
    ("key_collision", "no two of the input's values share a name"),
])
def test_an_inspect_error_the_host_can_disprove_is_refuted(tmp_path, hostile, capsys,
                                                           code, why) -> None:
    path = _safetensors(tmp_path)
    assert main(["inspect", str(path)]) == 0  # honest
    capsys.readouterr()
    hostile(_ends_with(code, f"{path}: the header's data offsets overlap (corrupt)"))
    error = _inspected(path, capsys)
    assert error["code"] == "claim_refuted" and why in error["message"]


def test_a_report_of_a_refuted_corruption_names_the_loader_not_the_file(
        tmp_path, hostile) -> None:
    path = _safetensors(tmp_path)
    hostile(_ends_with("bad_safetensors", "the header's data offsets overlap (corrupt)"))
    main(["report", str(path), "-o", str(tmp_path / "r.json"), "--quiet"])
    said = (tmp_path / "r.json").read_text()
    assert "every safetensors input's header reads whole here" in said
    assert "none of its answer is trusted" in said


def test_a_corrupt_header_is_told_in_the_hosts_words(tmp_path, hostile, capsys) -> None:
    path = _safetensors(tmp_path)
    with open(path, "ab") as fh:
        fh.write(b"\0" * 8)  # bytes no tensor covers: the safetensors library refuses it
    hostile(_ends_with("bad_safetensors", "nothing wrong, trust me"))
    error = _inspected(path, capsys)
    assert error["code"] == "bad_safetensors"
    assert "not fully covered" in error["message"] and "trust me" not in error["message"]


def test_an_allowed_global_may_fail_to_import_on_the_loaders_word(
        tmp_path, hostile, capsys) -> None:
    path = _pickled(tmp_path)
    hostile(_ends_with("bad_allowed_global", "cannot allow mypkg.Thing"))
    error = _inspected(path, capsys, "--allow-global", "mypkg.Thing")
    assert error["code"] == "bad_allowed_global"
    assert "as reported by the jailed loader; not checked here" in error["message"]


@pytest.mark.parametrize("code", ["bad_safetensors", "unsupported_tensors", "key_collision",
                                  "not_covered"])
def test_digests_and_diff_errors_are_held_to_the_same_facts(tmp_path, hostile, code) -> None:
    a, b = _safetensors(tmp_path, "a.safetensors"), _safetensors(tmp_path, "b.safetensors")
    hostile(_ends_with(code, "a made-up failure"))
    for run in (lambda: operations.tensor_digests(a), lambda: operations.diff_files(a, b)):
        with pytest.raises(SandboxError) as refused:
            run()
        assert refused.value.code == "claim_refuted"


def test_a_pickles_clash_is_only_a_conversions(tmp_path, hostile) -> None:
    path = tmp_path / "clash.pt"
    torch.save({"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}}, path)
    hostile(_ends_with("key_collision", "a made-up failure"))
    with pytest.raises(SandboxError) as refused:
        operations.tensor_digests(path)  # the loader reads both; only a conversion refuses
    assert refused.value.code == "claim_refuted"
    with pytest.raises(SandboxError) as confirmed:
        operations.convert_file(path, tmp_path / "c.safetensors")
    assert confirmed.value.code == "key_collision"


def test_a_failed_loads_message_is_the_loaders_word_and_escaped(tmp_path, hostile,
                                                                capsys) -> None:
    path = _pickled(tmp_path)
    hostile(_ends_with("load_failed", "\x1b[2J\x1b[32mSAFE: the file was tampered with"))
    assert main(["inspect", str(path)]) == EXIT_LOAD_FAILED
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\\x1b[32mSAFE" in out
    error = next(line for line in out.splitlines() if line.startswith("error:"))
    assert "as reported by the jailed loader; not checked here" in error
    assert main(["convert", str(path), "-o", str(tmp_path / "c.safetensors")]) == EXIT_LOAD_FAILED
    err = capsys.readouterr().err
    assert "\x1b" not in err and "as reported by the jailed loader" in err
