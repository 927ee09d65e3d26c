"""Every answer true at a glance (issue 24): the advice follows the worse verdict, damage has
one word, refusals lead with "get it again" and name only flags that exist, verify never
passes a folder it did not check, consistency does not blame a device for NaN weights, and a
safetensors file gets wording for its format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from factories import (
    crc_damaged,
    mal_os_system,
    save_safetensors,
    save_state_dict,
    save_training_checkpoint,
    small_state_dict,
)

from inspector.checkpoint.extract import extract_hint
from inspector.cli import build_parser, main
from inspector.integrity.manifest import dialect_for_path
from inspector.scan.advice import DAMAGED, advise, display_word
from inspector.scan.engine import scan_file
from inspector.scan.result import ScanResult


def _nan_file(path: Path) -> Path:
    state = small_state_dict()
    state["fc1.weight"].view(-1)[3] = float("nan")
    return save_state_dict(path, state)


def _truncated(path: Path) -> Path:
    save_state_dict(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- the advice -----------------------------------------------------------------------------

def test_bad_weights_outrank_a_safe_scan_in_the_advice():
    safe = ScanResult("m.pt", format="pytorch-zip", verdict="safe")
    assert "torch.load" in advise(safe, "ok").action
    bad = advise(safe, "problem")
    assert bad.action.startswith("Do not use these weights")
    assert "torch.load" not in bad.action and "Convert" not in bad.action


def test_safetensors_gets_no_pickle_advice():
    advice = advise(ScanResult("m.safetensors", format="safetensors", verdict="safe"), "ok")
    assert "pickle" not in advice.headline.lower() and "safetensors" in advice.headline
    assert "weights_only" not in advice.action and "safetensors.torch.load_file" in advice.action
    assert "convert" not in advice.action.lower()


def test_a_crc_damaged_file_is_damaged_not_suspicious(tmp_path):
    scan = scan_file(crc_damaged(tmp_path / "crc.pt"))
    assert scan.to_json()["verdict"] == "suspicious"  # the JSON contract keeps its word
    assert display_word(scan) == DAMAGED
    assert advise(scan, "ok").word == DAMAGED
    assert "Get it again from its source" in advise(scan, "ok").action


def test_a_truncated_zip_is_damage_with_a_finding(tmp_path):
    scan = scan_file(_truncated(tmp_path / "cut.pt"))
    assert scan.verdict == "error"
    assert [f.code for f in scan.findings] == ["zip-truncated"]
    assert "cut short" in scan.findings[0].message
    assert display_word(scan) == DAMAGED


def test_scan_prints_damaged_for_crc_and_truncation(tmp_path, capsys):
    crc_damaged(tmp_path / "crc.pt")
    _truncated(tmp_path / "cut.pt")
    code, out, err = _cli(capsys, "scan", tmp_path / "crc.pt", tmp_path / "cut.pt")
    assert "SUSPICIOUS" not in out.upper().replace("DAMAGED", "")
    assert out.count("DAMAGED ") == 2 and "damaged    zip-crc-mismatch" in out
    assert "2 damaged" in err
    assert code == 3  # the worst JSON verdict (error) still decides the exit status


def test_inspect_of_a_nan_file_never_reads_fine(tmp_path, capsys):
    code, out, _ = _cli(capsys, "inspect", _nan_file(tmp_path / "nan.pt"))
    advice = next(line for line in out.splitlines() if line.startswith("advice:"))
    assert "Do not use these weights" in advice and "torch.load" not in advice
    assert code == 7


def test_inspect_of_a_truncated_file_is_damaged_not_format_unknown(tmp_path, capsys):
    code, out, _ = _cli(capsys, "inspect", _truncated(tmp_path / "cut.pt"))
    assert "format unknown" not in out and "NotAZip" not in out.splitlines()[0]
    assert "scan:     Damaged" in out and "zip-truncated" in out
    assert code == 3


def test_inspect_of_a_dangerous_file_shows_the_call_and_the_flag_that_exists(tmp_path,
                                                                            capsys, canary):
    code, out, _ = _cli(capsys, "inspect", mal_os_system(tmp_path / "evil.pt", canary))
    assert code == 2 and not canary.exists()
    error = out[out.index("error:"):]
    assert "get it again from its source" in error
    assert "os.system(" in out.split("error:")[0]  # the offending call, as scan shows it
    flags = {o for a in _parser_actions("inspect") for o in a.option_strings}
    named = {w.strip(".,;:()") for w in error.split() if w.startswith("--")}
    assert named == {"--override-dangerous"} and named <= flags


def test_diff_refusal_names_the_file_and_no_flag_it_lacks(tmp_path, capsys, canary):
    evil = mal_os_system(tmp_path / "evil.pt", canary)
    code, _, err = _cli(capsys, "diff", evil, save_state_dict(tmp_path / "good.pt"))
    assert code == 2 and not canary.exists()
    assert "evil.pt is dangerous; get it again from its source" in err
    assert "--" not in err and "override" not in err


def _parser_actions(command: str):
    parser = build_parser(command)
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[command]._actions


def test_report_headline_follows_the_bad_weights(tmp_path, capsys):
    out = tmp_path / "r.html"
    code, summary_line, _ = _cli(capsys, "report", _nan_file(tmp_path / "nan.pt"), "-o", out,
                                 "-q")
    html = out.read_text()
    summary = html[html.index('id="summary"'):html.index("</section>")]
    assert "SAFE TO OPEN" not in summary and "WEIGHTS ARE CORRUPTED" in summary
    assert "What to do" in html and summary_line.startswith("PROBLEM:")
    assert code == 1


# --- verify ---------------------------------------------------------------------------------

def _two_folders(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    save_state_dict(tmp_path / "a" / "m.pt")
    for name in ("x.pt", "y.pt", "z.pt", "w.pt"):
        save_state_dict(tmp_path / "b" / name)
    return tmp_path / "a", tmp_path / "b"


def test_verify_of_a_folder_it_never_checked_fails(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a, b = _two_folders(tmp_path)
    assert _cli(capsys, "manifest", "create", a, "-o", "M.sha256")[0] == 0
    code, out, _ = _cli(capsys, "verify", "-m", "M.sha256", b)
    assert code == 3
    assert "nothing was checked" in out and "a/m.pt" in out and str(tmp_path) in out
    # unrelated extras fold into one line
    assert out.count("NOT IN MANIFEST") == 1 and "NOT IN MANIFEST 4 files (" in out
    code, out, _ = _cli(capsys, "verify", "-m", "M.sha256", b, "--json")
    doc = json.loads(out)
    assert doc["ok"] is False and "nothing was checked" in doc["errors"][0]


def test_a_resized_file_still_gets_tensor_verdicts(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = save_state_dict(tmp_path / "m.pt")
    assert _cli(capsys, "manifest", "create", model, "-o", "M.json", "-q")[0] == 0
    state = small_state_dict()
    state["fc2.bias"] = state["fc2.bias"] + 1
    state["extra"] = torch.zeros(64)  # the file grows
    save_state_dict(model, state)
    code, out, _ = _cli(capsys, "verify", "-m", "M.json", "--json", "-q")
    doc = json.loads(out)
    assert code == 1 and doc["files"][0]["status"] == "size_mismatch"
    status = {t["key"]: t["status"] for t in doc["tensors"]}
    assert status["fc2.bias"] == "mismatch" and status["fc1.weight"] == "ok"
    assert status["extra"] == "extra"


def test_sha256sums_is_written_as_sha256sum(tmp_path, capsys):
    model = save_state_dict(tmp_path / "m.pt")
    assert dialect_for_path(tmp_path / "SHA256SUMS") == "sha256sum"
    assert _cli(capsys, "manifest", "create", model, "-o", tmp_path / "SHA256SUMS")[0] == 0
    line = (tmp_path / "SHA256SUMS").read_text().split()
    assert len(line) == 2 and len(line[0]) == 64 and line[1].endswith("m.pt")


# --- consistency and convert ----------------------------------------------------------------

def test_consistency_on_nan_weights_does_not_blame_the_device(tmp_path, capsys):
    code, out, _ = _cli(capsys, "consistency", _nan_file(tmp_path / "nan.pt"),
                        "--device", "cpu", "--repeats", "3")
    assert code == 7
    assert "INCONSISTENT" not in out and "nanx" not in out
    assert "the weights hold NaN/Inf in fc1.weight" in out and "first at element 3" in out
    code, out, _ = _cli(capsys, "consistency", tmp_path / "nan.pt", "--device", "cpu",
                        "--repeats", "3", "--json")
    doc = json.loads(out)
    assert code == 7 and doc["nonfinite_weights"] == ["fc1.weight"]


def test_convert_refuses_a_safetensors_file(tmp_path, capsys):
    src = save_safetensors(tmp_path / "m.safetensors")
    code, out, err = _cli(capsys, "convert", src, "-o", tmp_path / "out.safetensors", "--json")
    assert code == 3 and json.loads(out)["error"]["code"] == "already_safetensors"
    assert "safetensors file already" in err and not (tmp_path / "out.safetensors").exists()


def test_a_training_checkpoint_converted_whole_gets_the_key_hint(tmp_path, capsys):
    src = save_training_checkpoint(tmp_path / "run.ckpt")
    code, out, _ = _cli(capsys, "convert", src, "-o", tmp_path / "run.safetensors", "-q")
    assert code == 0 and "hint" in out and "--key model" in out


@pytest.mark.parametrize("keys, hint", [
    (["state_dict.model.l.weight", "state_dict.model.l.bias", "epoch"],
     "--key state_dict --strip-prefix model."),
    (["model.0.weight", "optimizer.state.0.exp_avg"], "--key model"),
    (["fc1.weight", "fc2.weight"], None),
    (["model.a", "model.b"], None),
])
def test_extract_hint(keys, hint):
    assert extract_hint(keys) == hint


# --- CLI habits -----------------------------------------------------------------------------

def test_a_mistyped_command_gets_did_you_mean(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "inspcet", "model.pt")
    assert code == 2 and out == ""
    assert "did you mean 'inspect'?" in err


def test_an_existing_file_without_extension_is_still_opened_not_refused(tmp_path, monkeypatch):
    from inspector import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights").write_bytes(b"x")
    assert not cli._looks_like_a_command("weights")
    assert cli._looks_like_a_command("inspcet")
    assert not cli._looks_like_a_command("model.pt") and not cli._looks_like_a_command("a/b")


def test_colour_only_on_a_terminal_and_never_with_no_color(monkeypatch):
    from inspector.cli.common import paint, use_colour

    class Tty:
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert use_colour(Tty())
    assert paint("SAFE", "safe", True) == "\x1b[32mSAFE\x1b[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty())
    monkeypatch.delenv("NO_COLOR")
    import io
    assert not use_colour(io.StringIO())  # piped
    assert paint("SAFE", "safe", False) == "SAFE"


def test_piped_scan_output_has_no_escape_codes(tmp_path, python_exe):
    import subprocess

    save_state_dict(tmp_path / "m.pt")
    proc = subprocess.run([python_exe, "-m", "inspector", "scan", str(tmp_path / "m.pt")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "\x1b[" not in proc.stdout and "SAFE" in proc.stdout


def test_json_errors_are_json_objects(tmp_path, python_exe):
    import subprocess

    def run(*argv):
        proc = subprocess.run([python_exe, "-m", "inspector", *argv], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        return proc.returncode, [json.loads(line) for line in proc.stderr.splitlines()]

    code, errors = run("verify", "--json", "-m", "missing.json")
    assert code == 2 and errors[0]["error"]["command"] == "verify"
    assert "missing.json" in errors[0]["error"]["message"]
    code, errors = run("scan", "--json", "--no-such-option", "x")
    assert code == 2 and "--no-such-option" in errors[-1]["error"]["message"]
    code, errors = run("diff", "--json", "gone.pt", "also-gone.pt")
    assert code == 2 and errors == [{"error": {"command": "diff",
                                               "message": "gone.pt: no such file or folder"}}]


def test_inspect_takes_several_files_like_scan(tmp_path, capsys):
    good = save_state_dict(tmp_path / "good.pt")
    bad = _nan_file(tmp_path / "nan.pt")
    code, out, _ = _cli(capsys, "inspect", good, bad, "--json", "-q")
    docs = [json.loads(line) for line in out.splitlines()]
    assert [Path(d["path"]).name for d in docs] == ["good.pt", "nan.pt"]
    assert code == 7  # the highest status wins


def test_the_first_nan_index_is_shown_and_in_the_data(tmp_path, capsys):
    code, out, _ = _cli(capsys, "inspect", _nan_file(tmp_path / "nan.pt"))
    assert "the first at flat index 3" in out
    code, out, _ = _cli(capsys, "inspect", tmp_path / "nan.pt", "--json")
    doc = json.loads(out)
    assert code == 7
    record = next(t for t in doc["tensors"] if t["key"] == "fc1.weight")
    assert record["first_nonfinite"] == 3
    assert all(t["first_nonfinite"] is None for t in doc["tensors"] if t["key"] != "fc1.weight")
    finding = next(f for f in doc["health"]["findings"] if f["key"] == "fc1.weight")
    assert finding["first_index"] == 3


def test_safetensors_tensors_are_listed_in_file_order(tmp_path, capsys):
    from safetensors.torch import save_file

    # safetensors writes the wider dtype first, so file order is not name order here
    save_file({"a": torch.zeros(4, dtype=torch.float16), "b": torch.ones(4, dtype=torch.float64)},
              str(tmp_path / "m.safetensors"))
    with open(tmp_path / "m.safetensors", "rb") as fh:
        from inspector.formats.safetensors_header import read_header
        spans = read_header(fh, (tmp_path / "m.safetensors").stat().st_size).spans
    file_order = [key for _b, _e, key, _d, _s in sorted(spans)]
    assert file_order == ["b", "a"]
    code, out, _ = _cli(capsys, "inspect", tmp_path / "m.safetensors", "--json")
    assert [t["key"] for t in json.loads(out)["tensors"]] == file_order
    code, out, _ = _cli(capsys, "inspect", tmp_path / "m.safetensors")
    assert code == 0
    rows = [line.split()[0] for line in out.splitlines() if line[:2] in ("a ", "b ")]
    assert rows == file_order


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = _Block(), torch.nn.ReLU(), torch.nn.Sequential(_Block())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.b(self.a(x)))


def test_a_scripted_model_is_one_plain_line_not_its_module_classes(tmp_path, capsys):
    path = tmp_path / "net.pt"
    torch.jit.save(torch.jit.script(_Net()), str(path))
    code, out, _ = _cli(capsys, "scan", path)
    assert code == 1 and "__torch__" not in out
    assert out.splitlines()[1:] == [
        "    suspicious torchscript: TorchScript runs its own code on load; no file, process or "
        "network operation found"]
    code, out, _ = _cli(capsys, "scan", path, "--json")
    listed = [g for g in json.loads(out)["globals"] if g["module"].startswith("__torch__")]
    assert len(listed) >= 4  # every class is still in the JSON, judged as the archive's code
    assert {g["severity"] for g in listed} == {"safe"}
    assert all("own TorchScript code" in g["reason"] for g in listed)


def test_the_report_does_not_pass_a_device_on_nan_weights():
    from inspector.report.sections import consistency_info

    result = {"device_label": "CPU", "repeats": 3, "consistent": True, "mode": "probe",
              "tensors": [{"key": "w", "status": "pass", "nonfinite": 1, "first_nonfinite": 0}],
              "nonfinite_weights": ["w"]}
    info = consistency_info(result)
    assert info.status == "fail" and "weights hold NaN/Inf in w" in info.error
    clean = consistency_info({**result, "nonfinite_weights": [], "tensors": []})
    assert clean.status == "pass" and clean.error is None


def test_a_damaged_file_is_damaged_throughout_the_report(tmp_path, capsys):
    out = tmp_path / "r.html"
    code, summary_line, _ = _cli(capsys, "report", crc_damaged(tmp_path / "crc.pt"), "-o", out,
                                 "-q")
    html = out.read_text()
    import re

    shown = re.sub(r"<[^>]+>", " ", html[html.index("</style>"):])  # the text a person reads
    assert "suspicious" not in shown.lower() and "DAMAGED" in shown
    assert summary_line.startswith("DAMAGED:") and code == 1
