"""TorchScript and torch.export archives: weights read from their records, code shown, never run.

One small module with parameters and BatchNorm buffers is saved four ways by the real torch:
`torch.jit.save` of `torch.jit.script` and of `torch.jit.trace`, `torch.export.save`, and its
`state_dict()` with `torch.save`, which `inspect` loads the usual way and every static read
is compared against. Hostile archives are edited from real ones: an `os.system` call written
into `code/` (TorchScript's compiler refuses it, so `torch.jit.load` fails rather than runs
it), and a scripted `__setstate__` that creates a file through `torch.from_file`, which
`torch.jit.load` does run (shown in a throwaway subprocess) and the static reader refuses.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Dict, Tuple  # noqa: UP035 (TorchScript reads these annotations)

import pytest
import torch
from safetensors.torch import load_file

from inspector.checkpoint.results import InspectResult
from inspector.cli import main
from inspector.layout.torch_save import NotCovered, describe_archive
from inspector.layout.torchscript import (
    EXPORT_DTYPES,
    describe_export,
    describe_torchscript,
    judge_code,
)
from inspector.sandbox.host.client import (
    SandboxError,
    convert_file,
    diff_files,
    inspect_file,
    tensor_digests,
)
from inspector.scan.engine import scan_file

ARCHIVES = ("scripted", "traced", "exported")
_NET_CODE = f"code/__torch__/{__name__.rpartition('.')[2]}.py"  # where _Net's code goes
_LAYOUT_FIELDS = {"stride", "storage_offset", "contiguous", "shared_with"}


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(self.conv(x)).mean((2, 3)))


def _net() -> _Net:
    torch.manual_seed(15)
    net = _Net().eval()
    with torch.no_grad():  # buffers unlike their defaults, so a mix-up would show
        net.bn.running_mean.uniform_()
        net.bn.running_var.uniform_(1, 2)
        net.bn.weight.normal_()
        net.bn.num_batches_tracked += 7
    return net


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """The module saved four ways, and its state dict."""
    folder = tmp_path_factory.mktemp("ts")
    net = _net()
    example = torch.randn(1, 3, 8, 8)
    paths = {name: folder / f"{name}.pt" for name in ("scripted", "traced", "state_dict")}
    paths["exported"] = folder / "exported.pt2"
    torch.jit.save(torch.jit.script(net), str(paths["scripted"]))
    torch.jit.save(torch.jit.trace(net, example), str(paths["traced"]))
    torch.export.save(torch.export.export(net, (example,)), str(paths["exported"]))
    torch.save(net.state_dict(), paths["state_dict"])
    return paths


@pytest.fixture(scope="module")
def reference(saved) -> InspectResult:
    """`inspect` of the state dict saved with torch.save: what every static read must give."""
    report = inspect_file(saved["state_dict"])
    assert report.error is None, report.error
    return report


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _records(report: InspectResult) -> dict[str, dict]:
    return {t.key: {k: v for k, v in t.to_json().items() if k not in _LAYOUT_FIELDS}
            for t in report.tensors}


def test_export_dtype_numbers_are_torchs_schema() -> None:
    from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

    mine = {number: getattr(torch, name) for number, name in EXPORT_DTYPES.items()}
    assert mine == {int(k): v for k, v in _SERIALIZE_TO_TORCH_DTYPE.items()}


def test_static_layouts_name_every_state_dict_entry(saved) -> None:
    state = _net().state_dict()
    for name in ARCHIVES:
        data = saved[name].read_bytes()
        layout = describe_export(data) if name == "exported" else describe_torchscript(data)
        got = {t.key: (t.dtype, t.shape) for t in layout.tensors}
        assert got == {k: (str(v.dtype).removeprefix("torch."), tuple(v.shape))
                       for k, v in state.items()}, name
        assert layout.code and all(c.size > 0 and c.text for c in layout.code), name
    with pytest.raises(NotCovered):
        describe_archive(saved["scripted"].read_bytes())  # never taken for a plain checkpoint
    with pytest.raises(NotCovered):
        describe_torchscript(saved["state_dict"].read_bytes())
    with pytest.raises(NotCovered):
        describe_export(saved["scripted"].read_bytes())


class _WithConstants(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.register_buffer("scratch", torch.ones(2), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + torch.tensor([1.0, 2.0]) + self.scratch


def test_constants_are_counted_not_listed(tmp_path) -> None:
    net, example = _WithConstants(), torch.randn(1, 2)
    traced, exported = tmp_path / "c.pt", tmp_path / "c.pt2"
    torch.jit.save(torch.jit.trace(net, example), str(traced))
    torch.export.save(torch.export.export(net, (example,)), str(exported))
    script = describe_torchscript(traced.read_bytes())
    # TorchScript keeps every buffer as a module attribute, the non-persistent one too
    assert {t.key for t in script.tensors} == {"lin.weight", "lin.bias", "scratch"}
    assert script.constants == 1  # the torch.tensor literal, in constants.pkl
    export = describe_export(exported.read_bytes())
    assert {t.key for t in export.tensors} == set(net.state_dict()) == {"lin.weight", "lin.bias"}
    assert export.constants == 2  # the literal and the non-persistent buffer, lifted


@pytest.mark.parametrize("name", ARCHIVES)
def test_inspect_gives_the_state_dicts_statistics_and_shows_the_code(saved, reference, name):
    path = saved[name]
    before = _sha(path)
    report = inspect_file(path)
    assert report.error is None, report.error
    kind = "torch-export" if name == "exported" else "torchscript"
    assert report.format == kind and report.scan.verdict == "suspicious"
    assert kind in {f.code for f in report.scan.findings}
    assert _records(report) == _records(reference)
    assert report.health == reference.health
    assert report.code_archive == {"kind": kind, "constants": 0, "flags": 0}
    names = [c["name"] for c in report.code]
    assert names == ["models/model.json"] if name == "exported" else all(
        n.startswith("code/__torch__") and n.endswith(".py") for n in names)
    assert all(c["flags"] == [] and not c["truncated"] for c in report.code)
    json.dumps(report.contract, allow_nan=False)
    assert _sha(path) == before


@pytest.mark.parametrize("name", ARCHIVES)
def test_convert_writes_the_state_dict_bit_for_bit(saved, tmp_path, name):
    out = tmp_path / f"{name}.safetensors"
    result = convert_file(saved[name], out)
    assert result["verified"] and result["tensors_written"] == 9
    assert result["sidecar"] is None  # module settings (training, ...) are not weights
    written = load_file(out)
    state = _net().state_dict()
    assert set(written) == set(state)
    for key, t in state.items():
        assert written[key].dtype == t.dtype and written[key].shape == t.shape, key
        assert written[key].view(-1).view(torch.uint8).equal(
            t.contiguous().view(-1).view(torch.uint8)), key
    with pytest.raises(Exception, match="exists"):
        convert_file(saved[name], out)


def test_diff_digests_and_manifest_against_the_eager_state_dict(saved, tmp_path, capsys):
    ref = {e.key: e for e in tensor_digests(saved["state_dict"])}
    for name in ARCHIVES:
        assert {e.key: e for e in tensor_digests(saved[name])} == ref, name
    manifest = tmp_path / "m.json"
    assert main(["manifest", "create", str(saved["scripted"]), str(saved["exported"]),
                 "-o", str(manifest)]) == 0
    for entry in json.loads(manifest.read_text())["files"]:
        assert {t["key"]: t["digest"] for t in entry["tensors"]} == {
            k: e.digest for k, e in ref.items()}, entry["path"]
    result = diff_files(saved["scripted"], saved["state_dict"])
    assert result["a"]["format"] == "torchscript"
    assert result["identical"] and result["counts"] == {"identical": len(ref)}
    assert len(ref) == 9
    assert main(["diff", str(saved["exported"]), str(saved["traced"])]) == 0


def _with_code(src: Path, dst: Path, edit) -> Path:
    """A copy of a TorchScript archive whose code file of `_Net` is `edit(text)`."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith(_NET_CODE):
                data = edit(data.decode()).encode()
            zout.writestr(info, data)
    return dst


def _jit_load(python_exe: str, path: Path) -> subprocess.CompletedProcess:
    """`torch.jit.load` in a throwaway process (what a user loading the archive would run)."""
    return subprocess.run([python_exe, "-c", "import sys, torch; torch.jit.load(sys.argv[1])",
                           str(path)], capture_output=True, text=True, timeout=300)


def test_os_system_in_code_is_shown_and_flagged_and_never_runs(saved, tmp_path, canary,
                                                               python_exe, capsys):
    call = f'os.system("touch {canary}")'
    path = _with_code(saved["scripted"], tmp_path / "evil.pt", lambda text: text.replace(
        "    x: Tensor) -> Tensor:\n", f"    x: Tensor) -> Tensor:\n    {call}\n", 1))
    with zipfile.ZipFile(path) as z:
        edited = [z.read(n).decode() for n in z.namelist() if n.endswith(_NET_CODE)]
    assert len(edited) == 1 and call in edited[0]
    assert scan_file(path).verdict == "suspicious"
    report = inspect_file(path)
    assert report.error is None, report.error
    assert {t.key for t in report.tensors} == set(_net().state_dict())
    main_code = next(c for c in report.code if c["name"].endswith(_NET_CODE))
    assert main_code["flags"] == ["names the Python module os"]
    assert call in main_code["text"]
    assert report.code_archive["flags"] == 1
    assert main(["inspect", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FLAG: names the Python module os" in out and "1 flagged" in out
    assert main(["convert", str(path), "-o", str(tmp_path / "evil.safetensors")]) == 0
    # TorchScript's compiler rejects `os`, so even torch.jit.load fails instead of running it
    loaded = _jit_load(python_exe, path)
    assert loaded.returncode != 0 and "os.system" in loaded.stderr
    assert not canary.exists()


class _TupleTrap(torch.nn.Module):
    """Its state is a tuple; its __setstate__ creates `path` (torch.from_file, shared=True)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.path = path

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, str, bool]:  # noqa: UP006
        return (self.weight, self.path, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, str, bool]) -> None:  # noqa: UP006
        self.weight = state[0] + torch.from_file(state[1], True, 3) * 0.0
        self.path = state[1]
        self.training = state[2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


class _DictTrap(torch.nn.Module):
    """Its state is a dict a reader could mistake for attributes; the path is in its code."""

    __constants__ = ("path",)

    def __init__(self, path: str) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.path = path

    @torch.jit.export
    def __getstate__(self) -> Dict[str, torch.Tensor]:  # noqa: UP006
        return {"weight": self.weight}

    @torch.jit.export
    def __setstate__(self, state: Dict[str, torch.Tensor]) -> None:  # noqa: UP006
        self.weight = state["weight"] + torch.from_file(self.path, True, 3) * 0.0
        self.training = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight


@pytest.mark.parametrize("trap", [_TupleTrap, _DictTrap])
def test_code_that_runs_on_jit_load_is_refused_statically(tmp_path, canary, python_exe, trap):
    path = tmp_path / "trap.pt"
    torch.jit.save(torch.jit.script(trap(str(canary))), str(path))
    # the scan reads its code: torch.from_file in __setstate__ is dangerous before any load
    report = inspect_file(path)
    assert report.error.code == "refused_dangerous", report.error
    assert report.tensors == []
    assert main(["convert", str(path), "-o", str(tmp_path / "trap.safetensors")]) == 2
    with pytest.raises(SandboxError, match="dangerous"):
        tensor_digests(path)
    # and the static reader refuses a class that restores itself with its own code
    with pytest.raises(NotCovered, match="__setstate__"):
        describe_torchscript(path.read_bytes())
    assert not canary.exists()
    # the same archive, loaded as torch.jit.load loads it, runs its code
    assert _jit_load(python_exe, path).returncode == 0
    assert canary.exists()
    canary.unlink()


def test_judge_code_flags_escape_hatches_only() -> None:
    assert judge_code("x = torch.add(a, b)\nops.aten.mul(a, b)\nops.prim.RaiseException('"
                      "builtins.ValueError')\n_0 = getattr(self, \"0\")") == []
    assert judge_code("subprocess.run(['x'])\neval('1')\nops.evil_lib.go(x)") == [
        "names the Python module subprocess", "calls eval()",
        "calls evil_lib::go, an operator outside torch's own"]
    assert judge_code("t = torch.from_file(p, True, 16)") == [
        "calls aten::from_file, which reaches files (line 1)"]
