"""The code a jailed worker ends a job with is a claim, held against what the host knows.

`convert`'s exit status follows the code, and a `weights_only_refused` answer names globals the
app offers to allow, so a worker the input took over could pick either. The host allows each
operation only the codes it can end with (`jobs.WORKER_CODES`), and confirms a code from its
own facts (`claims.errors`): a --key failure needs a --key; tensors with no safetensors form
need such a dtype among the input's tensors located here; a weights_only refusal needs the
static scan to find what torch refuses, and only globals the scan found blocking are offered.
Each lie is a real worker's answer, rewritten by the self-test hook before it is sent.
"""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from inspector.checkpoint.results import InspectResult
from inspector.cli import main
from inspector.gui.pipeline import _more_to_allow
from inspector.sandbox.host import operations
from inspector.sandbox.host.jobs import SandboxError

EXIT_REFUTED = 6  # `convert`: claim_refuted
EXIT_LOAD_FAILED = 5  # `inspect`


def _ends_with(code: str, message: str, globals_: list[str] = ()) -> str:
    """A payload: the worker ends its job with `code` instead of its reply."""
    return f"""
    import inspector.sandbox.worker.main as main
    real = main._Emitter.__call__
    def lying(self, event):
        if event.get("type") in ("result", "error"):
            event = {{"type": "error", "code": {code!r}, "message": {message!r},
                     "globals": {list(globals_)!r}}}
        return real(self, event)
    main._Emitter.__call__ = lying
    """


def _floats(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.randn(4, 4), "b": torch.randn(4)}, path)
    return path


@pytest.mark.parametrize("code, why", [
    ("unsupported_tensors", "every tensor of the input has a safetensors dtype"),
    ("key_not_found", "no --key was given"),
    ("not_tensor_mapping", "no --key was given"),
    ("key_collision", "no two of the input's values share a name"),
    ("output_exists", "not one a worker may send for convert"),
    ("no_cuda", "not one a worker may send for convert"),
])
def test_a_convert_error_the_host_can_disprove_is_refuted(tmp_path, hostile, capsys,
                                                          code, why) -> None:
    source = _floats(tmp_path)
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(source), "-o", str(out)]) == 0  # honest
    hostile(_ends_with(code, "a made-up failure"))
    assert main(["convert", str(source), "-o", str(out), "--force"]) == EXIT_REFUTED
    err = capsys.readouterr().err
    assert "none of its answer is trusted" in err and why in err


def test_an_honest_name_clash_is_confirmed_from_the_inputs_pickle(tmp_path, capsys) -> None:
    source = tmp_path / "clash.pt"
    torch.save({"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}}, source)
    assert main(["convert", str(source), "-o", str(tmp_path / "c.safetensors")]) == 10
    assert "two values are both named a.b" in capsys.readouterr().err


def test_a_key_failure_stands_when_a_key_was_asked(tmp_path, capsys) -> None:
    source = _floats(tmp_path)
    assert main(["convert", str(source), "--key", "state_dict",
                 "-o", str(tmp_path / "k.safetensors")]) == 10
    assert "state_dict" in capsys.readouterr().err


def test_a_code_the_host_cannot_check_says_whose_word_it_is(tmp_path, hostile) -> None:
    source = tmp_path / "q.pt"  # a quantized tensor: not located here
    torch.save({"q": torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)}, source)
    hostile(_ends_with("unsupported_tensors", "cannot convert without losing tensors: q"))
    with pytest.raises(SandboxError) as refused:
        operations.convert_file(source, tmp_path / "q.safetensors")
    assert refused.value.code == "unsupported_tensors"
    assert "as reported by the jailed loader; not checked here" in refused.value.message


FORGED = "mypkg.helpers.Config"


def test_a_weights_only_refusal_of_a_file_the_scan_finds_loadable_is_refuted(
        tmp_path, hostile, capsys) -> None:
    path = _floats(tmp_path)
    assert main(["inspect", str(path)]) == 0
    capsys.readouterr()
    hostile(_ends_with("weights_only_refused", f"Unsupported global: GLOBAL {FORGED}",
                       [FORGED]))
    assert main(["inspect", str(path), "--json"]) == EXIT_LOAD_FAILED
    report = json.loads(capsys.readouterr().out)
    assert report["scan"]["weights_only_ok"] is True
    assert report["error"]["code"] == "claim_refuted" and report["error"]["globals"] == []
    assert _more_to_allow(InspectResult.from_json(report).error, ()) == []


def _namespace(tmp_path):
    """A file torch's weights_only loader refuses for one global: argparse.Namespace."""
    path = tmp_path / "ns.pt"
    torch.save({"w": torch.ones(2), "args": argparse.Namespace(lr=0.1)}, path)
    return path


def test_only_globals_the_scan_finds_blocking_are_offered(tmp_path, hostile, capsys) -> None:
    path = _namespace(tmp_path)
    assert main(["inspect", str(path), "--json"]) == EXIT_LOAD_FAILED  # honest
    honest = json.loads(capsys.readouterr().out)["error"]
    assert (honest["code"], honest["globals"]) == ("weights_only_refused", ["argparse.Namespace"])
    hostile(_ends_with("weights_only_refused", "refused", ["argparse.Namespace", FORGED]))
    assert main(["inspect", str(path), "--json"]) == EXIT_LOAD_FAILED
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "claim_refuted" and FORGED in error["message"]


def test_a_global_the_file_imports_but_torch_allows_is_not_offered(tmp_path, hostile,
                                                                    capsys) -> None:
    path = _namespace(tmp_path)
    hostile(_ends_with("weights_only_refused", "refused",
                       ["argparse.Namespace", "collections.OrderedDict"]))
    assert main(["inspect", str(path), "--json"]) == EXIT_LOAD_FAILED
    error = json.loads(capsys.readouterr().out)["error"]
    assert (error["code"], error["globals"]) == ("weights_only_refused", ["argparse.Namespace"])
    assert "collections.OrderedDict" not in error["message"]
    assert _more_to_allow(InspectResult.from_json({"path": str(path), "error": error}).error,
                          ()) == ["argparse.Namespace"]


def test_consistency_holds_a_weights_only_refusal_against_the_scan(tmp_path, hostile,
                                                                   capsys) -> None:
    path = _floats(tmp_path)
    args = ["consistency", str(path), "--device", "cpu", "--repeats", "2", "--json"]
    assert main(args) == 0  # honest
    capsys.readouterr()
    hostile(_ends_with("weights_only_refused", f"Unsupported global: GLOBAL {FORGED}",
                       [FORGED]))
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "none of its answer is trusted" in err and "finds nothing" in err


def test_a_failed_read_back_is_said_as_the_workers_word(tmp_path, hostile, capsys) -> None:
    source = _floats(tmp_path)
    hostile("""
    import inspector.sandbox.worker.main as main
    real = main._Emitter.__call__
    def lying(self, event):
        if event.get("type") == "result":
            event = {**event, "verified": False, "mismatches": ["w"]}
        return real(self, event)
    main._Emitter.__call__ = lying
    """)
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(source), "-o", str(out)]) == EXIT_REFUTED
    assert "the jailed worker says the output it read back does not match the input" in (
        capsys.readouterr().err)
    assert not out.exists()
