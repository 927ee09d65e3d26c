"""What `convert` says of the file it wrote is checked here, not repeated from the worker.

The output's SHA-256 is computed here from the written file, its tensor and byte totals, its
aliases and encoded tensors read from its header, the selection the one the client asked for,
the digest algorithm this process's own (it hashed each tensor), the sidecar's values held
against the input's plain values (walked here without running the pickle), and the cloned
views and the views made contiguous against the input's storages and strides. A jailed worker
(through the self-test hook, as in `test_worker_lies.py`) that lies about any of them is
refused (`claim_refuted`, exit 6), and neither the output nor the sidecar is left written.
Where the input cannot be read here, the sidecar says its values are the loader's word.
"""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from inspector.cli import main
from inspector.sandbox.host import operations

EXIT_REFUTED = 6  # `convert`: claim_refuted, as verify_failed


def _reply_lie(change: str) -> str:
    """A payload that rewrites the worker's final reply (`result`) with `change`."""
    return f"""
    import hashlib
    import inspector.sandbox.worker.main as main
    real = main._Emitter.__call__
    def lying(self, event):
        if event.get("type") == "result":
            result = dict(event)
            {change}
            event = result
        return real(self, event)
    main._Emitter.__call__ = lying
    """


SIDECAR_LIE = """
    import inspector.sandbox.worker.convert as c
    real = c.sidecar_document
    def sidecar_document(objects):
        doc, rejected = real(objects)
        doc["values"] = {k: (30 if k == "epoch" else 0.03 if k == "lr" else v)
                         for k, v in doc["values"].items()}
        return doc, rejected
    c.sidecar_document = sidecar_document
"""

LIES = {
    "sha256": (_reply_lie('result["sha256"] = hashlib.sha256(b"another file").hexdigest()'),
               "the output's SHA-256 is "),
    "tensors-written": (_reply_lie('result["tensors_written"] += 1'),
                        "the output holds 4 tensors written, reported as 5"),
    "bytes-written": (_reply_lie('result["bytes_written"] *= 2'),
                      "the output holds 112 bytes written, reported as 224"),
    "cloned-views": (_reply_lie('result["cloned_views"] = []'),
                     "the cloned views are first, second, reported as []"),
    "made-contiguous": (_reply_lie('result["made_contiguous"] = ["model.w"]'),
                        "the views made contiguous are none, reported as ['model.w']"),
    "skipped": (_reply_lie('result["tensors_skipped"] = [{"key": "model.w", "reason": "x"}]'),
                "the tensors left out are none, reported as ['model.w']"),
    "digest-algorithm": (_reply_lie('result["digest_algorithm"] = "md5"'),
                         "the digests are sha256, named md5"),
    "sidecar-values": (SIDECAR_LIE,
                       "the sidecar's values are not the input's (epoch is 3, written as 30)"),
    "sidecar-dropped": (_reply_lie('result["sidecar_document"] = None; '
                                   'result["objects_moved"] = []; '
                                   'result["not_serializable"] = []'),
                        "the sidecar's values are not the input's"),
}


def _training(tmp_path):
    """A .pt the host reads whole: weights, two partial views of one storage (cloned when
    written), and plain values (one JSON cannot hold)."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(8, generator=g)
    state = {"model": {"w": torch.randn(4, 4, generator=g), "b": torch.randn(4, generator=g)},
             "first": base[:4], "second": base[4:],
             "epoch": 3, "lr": 3e-4, "name": "adamw", "fused": None, "amsgrad": False,
             "bad": float("nan")}
    source = tmp_path / "train.pt"
    torch.save(state, source)
    return source


@pytest.mark.parametrize("lie", list(LIES))
def test_a_lie_about_the_written_file_is_refused(tmp_path, hostile, capsys, monkeypatch,
                                                 lie) -> None:
    source = _training(tmp_path)
    payload, said = LIES[lie]
    hostile(payload)
    # the lie reaches the client: with its check left out, the job's reply carries it
    with monkeypatch.context() as patch:
        patch.setattr(operations, "check_conversion", lambda *args: None)
        shown = tmp_path / "shown.safetensors"
        reply = operations.convert_file(source, shown)
    sidecar = json.loads((tmp_path / "shown.sidecar.json").read_text()) if reply["sidecar"] \
        else None
    assert (reply["sha256"] != hashlib.sha256(shown.read_bytes()).hexdigest()
            or reply["tensors_written"] != 4 or reply["bytes_written"] != 112
            or reply["cloned_views"] != ["first", "second"]
            or reply["made_contiguous"] != [] or reply["digest_algorithm"] != "sha256"
            or reply["tensors_skipped"] != []
            or sidecar is None or sidecar["values"]["epoch"] != 3)
    out = tmp_path / "train.safetensors"
    code = main(["convert", str(source), "-o", str(out)])
    captured = capsys.readouterr()
    assert code == EXIT_REFUTED
    assert "verified" not in captured.out and "bit for bit" not in captured.err
    err = captured.err.strip()
    assert len(err.splitlines()) == 1
    assert "conversion does not match the file's own bytes" in err and said in err
    assert not out.exists() and not (tmp_path / "train.sidecar.json").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_an_honest_conversion_says_what_it_wrote(tmp_path, capsys) -> None:
    source = _training(tmp_path)
    out = tmp_path / "train.safetensors"
    assert main(["convert", str(source), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert (report["tensors_written"], report["bytes_written"]) == (4, 112)
    assert report["cloned_views"] == ["first", "second"]
    assert report["claims"]["checked"] is True
    sidecar = json.loads((tmp_path / "train.sidecar.json").read_text())
    assert sidecar["values"] == {"epoch": 3, "lr": 3e-4, "name": "adamw", "fused": None,
                                 "amsgrad": False}
    assert [o["key"] for o in sidecar["not_serializable"]] == ["bad"]
    assert "unchecked" not in sidecar
    assert main(["convert", str(source), "-o", str(out), "--force"]) == 0
    text = capsys.readouterr().out
    assert f"sha256    {hashlib.sha256(out.read_bytes()).hexdigest()}" in text
    assert "sidecar   " in text and "(5 values)" in text
    assert "bit for bit" in text


def _unreadable(tmp_path):
    """A .pt the host cannot read whole (a quantized tensor), with a plain value."""
    source = tmp_path / "q.pt"
    quantized = torch.quantize_per_tensor(torch.linspace(-1, 1, 16), 0.1, 3, torch.qint8)
    torch.save({"w": torch.ones(4), "q": quantized, "epoch": 3}, source)
    return source


def test_a_sidecar_not_read_here_says_whose_word_it_is(tmp_path, capsys) -> None:
    source = _unreadable(tmp_path)
    out = tmp_path / "q.safetensors"
    assert main(["convert", str(source), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "(1 values, as reported by the jailed loader)" in text
    assert f"sha256    {hashlib.sha256(out.read_bytes()).hexdigest()}" in text
    sidecar = json.loads((tmp_path / "q.sidecar.json").read_text())
    assert sidecar["values"] == {"epoch": 3}
    assert sidecar["unchecked"].startswith("these values are as reported by the jailed loader")


def test_the_written_file_is_checked_where_the_input_is_not_read(tmp_path, hostile,
                                                                 capsys) -> None:
    source = _unreadable(tmp_path)
    hostile(LIES["sha256"][0])
    out = tmp_path / "q.safetensors"
    assert main(["convert", str(source), "-o", str(out)]) == EXIT_REFUTED
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the output's SHA-256 is " in err
    assert not out.exists() and not (tmp_path / "q.sidecar.json").exists()


ECHO = _reply_lie('result.update(key="state_dict", strip_prefix=["model."], '
                  'aliases={"model.b": "model.w"}, '
                  'encoded={"model.w": {"kind": "quantized", "dtype": "qint8"}})')
"""A worker that says it converted a selection it was not asked for, and wrote an alias and
an encoded tensor its output does not hold."""


def test_what_was_asked_and_written_is_the_clients_and_the_outputs(tmp_path, hostile, capsys,
                                                                   monkeypatch) -> None:
    source = _training(tmp_path)
    hostile(ECHO)
    with monkeypatch.context() as patch:  # the lie reaches the client
        patch.setattr(operations, "check_conversion", lambda *args: None)
        reply = operations.convert_file(source, tmp_path / "shown.safetensors")
    assert reply["key"] == "state_dict" and reply["encoded"] and reply["aliases"]
    out = tmp_path / "train.safetensors"
    assert main(["convert", str(source), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["key"], report["strip_prefix"]) == (None, [])
    assert (report["aliases"], report["encoded"]) == ({}, {})
    assert main(["convert", str(source), "-o", str(out), "--force"]) == 0
    text = capsys.readouterr().out
    assert "all 4 tensors of the input" in text and "(sha256)" in text
    assert "extracted" not in text and "encoded" not in text and "alias " not in text


def test_a_strided_view_is_said_made_contiguous_from_the_inputs_layout(tmp_path,
                                                                        capsys) -> None:
    source = tmp_path / "t.pt"
    torch.save({"t": torch.arange(12.0).reshape(3, 4).t(), "row": torch.ones(0, 3).t()},
               source)
    assert main(["convert", str(source), "-o", str(tmp_path / "t.safetensors"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["claims"]["checked"] is True
    assert report["made_contiguous"] == ["t"]  # an empty tensor is contiguous, as torch says
