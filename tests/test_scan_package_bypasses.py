"""torch.package archives the scan must judge as PackageImporter reads them, written by hand
(zipfile) the way a hostile tool would: a module whose name is no Python identifier
(`my-mod.py`, `a b.py`, `9lives.py`), which PackageImporter imports by that name all the same.
Each hostile sample is scanned first (dangerous, and its canary absent), then proven in a fresh
process to run its payload under the real loader (the canary appears); each benign twin keeps
the verdict a package's own code gets (suspicious, never dangerous, never safe)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from inspector.scan.engine import scan_file

# The real loader, in a throwaway process: PackageImporter unpickles res/model.pkl.
_LOAD = ("import sys\n"
         "from torch.package import PackageImporter\n"
         "print(PackageImporter(sys.argv[1]).load_pickle('res', 'model.pkl'))\n")


def _pickle_of(module: str) -> bytes:
    """Protocol 2: GLOBAL 'module X', returned as it is (nothing called)."""
    return b"\x80\x02c" + module.encode() + b"\nX\n."


def _source(canary: Path | None) -> bytes:
    """A module defining class X; with a canary, it writes that file as it is imported."""
    payload = f"open({str(canary)!r}, 'w').write('ran')\n" if canary else ""
    return (payload + "class X:\n    pass\n").encode()


def _package(path: Path, sources: list[tuple[str, bytes]], pickled: str) -> Path:
    """A torch.package archive (folder `pkg`) holding `sources` (record name, bytes) in that
    order, and res/model.pkl naming `pickled`.X."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("pkg/.data/version", "6\n")
        z.writestr("pkg/.data/extern_modules", "")
        for name, data in sources:
            z.writestr(f"pkg/{name}", data)
        z.writestr("pkg/res/model.pkl", _pickle_of(pickled))
    return path


def _load(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _LOAD, str(path)], capture_output=True,
                          text=True, timeout=300)


def _dangerous_evidence(res) -> list[str]:
    return ([f"{f.code}: {f.message}" for f in res.findings if f.severity == "dangerous"]
            + [f"{g.import_name}: {g.reason}" for g in res.globals if g.severity == "dangerous"])


# module name -> its record in the archive
NON_IDENTIFIERS = {"my-mod": "my-mod.py", "a b": "a b.py", "9lives": "9lives.py",
                   "my-pkg.in-ner": "my-pkg/in-ner.py", "pkg-init": "pkg-init/__init__.py"}


@pytest.mark.parametrize("module", sorted(NON_IDENTIFIERS))
def test_a_module_whose_name_is_no_identifier_is_judged_as_the_code_it_runs(
        tmp_path: Path, module: str) -> None:
    canary = tmp_path / "canary"
    path = _package(tmp_path / "model.pt", [(NON_IDENTIFIERS[module], _source(canary))], module)
    res = scan_file(path)
    assert not canary.exists()  # the scan ran none of it
    assert res.verdict == "dangerous", res.to_json()
    code = [f for f in res.findings if f.code == "package-code"]
    assert [f.member for f in code] == [f"pkg/{NON_IDENTIFIERS[module]}"], res.to_json()
    assert f"as module {module} " in code[0].message
    assert any("builtins.open: can write files" in e for e in _dangerous_evidence(res))
    proc = _load(path)
    assert canary.exists(), proc.stdout + proc.stderr  # PackageImporter imported it and ran it


@pytest.mark.parametrize("module", sorted(NON_IDENTIFIERS))
def test_the_benign_twin_is_suspicious_package_code_as_any_other_module(
        tmp_path: Path, module: str) -> None:
    """The same archive with a module that only defines X: PackageImporter loads it (the class
    comes back), and the scan calls it what a package's own code is, suspicious."""
    path = _package(tmp_path / "model.pt", [(NON_IDENTIFIERS[module], _source(None))], module)
    res = scan_file(path)
    assert res.verdict == "suspicious", res.to_json()
    assert not _dangerous_evidence(res)
    assert [f.member for f in res.findings if f.code == "package-code"] == [
        f"pkg/{NON_IDENTIFIERS[module]}"]
    proc = _load(path)
    assert proc.returncode == 0 and f".{module}.X'" in proc.stdout, proc.stderr[-2000:]


def test_the_scan_command_calls_the_non_identifier_module_dangerous(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    path = _package(tmp_path / "model.pt", [("my-mod.py", _source(canary))], "my-mod")
    proc = subprocess.run([sys.executable, "-m", "inspector", "scan", str(path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.startswith("DANGEROUS"), proc.stdout
    assert not canary.exists()


# ---------------------------------------------------------------------------------------------
# Two members of one name: torch's reader hands PackageImporter the first, zipfile the last
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("hostile_copy", ["first", "last"])
def test_every_copy_of_a_duplicated_source_is_judged(tmp_path: Path, hostile_copy: str) -> None:
    canary = tmp_path / "canary"
    copies = [_source(canary), _source(None)]
    if hostile_copy == "last":
        copies.reverse()
    path = _package(tmp_path / "model.pt", [("mymod.py", c) for c in copies], "mymod")
    res = scan_file(path)
    assert not canary.exists()
    assert res.verdict == "dangerous", res.to_json()
    code = [f for f in res.findings if f.code == "package-code"]
    assert len(code) == 1 and code[0].severity == "dangerous", res.to_json()
    assert "builtins.open: can write files" in code[0].message
    assert "2 sources" in code[0].message
    mymod = next(g for g in res.globals if g.import_name == "mymod.X")
    assert mymod.severity == "dangerous", mymod.reason
    proc = _load(path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # torch's reader runs the first copy: the hostile one ran exactly when it came first
    assert canary.exists() == (hostile_copy == "first"), proc.stdout + proc.stderr


def test_two_benign_copies_stay_suspicious_package_code(tmp_path: Path) -> None:
    path = _package(tmp_path / "model.pt", [("mymod.py", _source(None))] * 2, "mymod")
    res = scan_file(path)
    assert res.verdict == "suspicious", res.to_json()
    assert not _dangerous_evidence(res)
    assert [f.severity for f in res.findings if f.code == "package-code"] == ["suspicious"]


# ---------------------------------------------------------------------------------------------
# A coding cookie: Python decodes a source's bytes by it (compile, the import system), so the
# scan must too. Under utf-7, `+AAo-` is a newline: what UTF-8 shows as a comment is code.
# Under latin-1, a byte UTF-8 cannot decode made the source "unread" (suspicious) while it ran.
# ---------------------------------------------------------------------------------------------


def _cookie_source(cookie: str, canary: Path | None, tail: str = "class X:\n    pass\n") -> bytes:
    """A module with a coding cookie; with a canary, one that writes it as it is imported,
    hidden from a UTF-8 reading (utf-7) or behind a byte UTF-8 refuses (latin-1)."""
    payload = f"open({str(canary)!r}, 'w').write('ran')" if canary else "X0 = 0"
    head = f"# -*- coding: {cookie} -*-\n".encode()
    if cookie == "utf-7":
        return head + b"# docs +AAo-" + payload.encode() + b"\n" + tail.encode()
    return head + "# caf\u00e9\n".encode("latin-1") + payload.encode() + b"\n" + tail.encode()


@pytest.mark.parametrize("cookie", ["utf-7", "latin-1"])
def test_a_package_source_is_read_by_its_coding_cookie(tmp_path: Path, cookie: str) -> None:
    canary = tmp_path / "canary"
    path = _package(tmp_path / "model.pt", [("mymod.py", _cookie_source(cookie, canary))],
                    "mymod")
    res = scan_file(path)
    assert not canary.exists()
    assert res.verdict == "dangerous", res.to_json()
    assert any("builtins.open: can write files" in e for e in _dangerous_evidence(res))
    proc = _load(path)
    assert canary.exists(), proc.stdout + proc.stderr


@pytest.mark.parametrize("cookie", ["utf-7", "latin-1"])
def test_the_benign_twin_with_a_coding_cookie_stays_suspicious(tmp_path: Path,
                                                                cookie: str) -> None:
    path = _package(tmp_path / "model.pt", [("mymod.py", _cookie_source(cookie, None))],
                    "mymod")
    res = scan_file(path)
    assert res.verdict == "suspicious", res.to_json()
    assert not _dangerous_evidence(res)
    finding = next(f for f in res.findings if f.code == "package-code")
    assert "could not be read" not in finding.message, finding.message
    proc = _load(path)
    assert proc.returncode == 0 and ".mymod.X'" in proc.stdout, proc.stderr[-2000:]


def test_a_source_python_cannot_decode_is_a_finding(tmp_path: Path) -> None:
    """An unknown encoding: PackageImporter's compile refuses it before any of it runs; the
    scan says so (suspicious, unread), never a silent pass."""
    path = _package(tmp_path / "model.pt", [("mymod.py", b"# coding: no-such-codec\nX = 1\n")],
                    "mymod")
    res = scan_file(path)
    assert res.verdict == "suspicious", res.to_json()
    finding = next(f for f in res.findings if f.code == "package-code")
    assert "could not be read" in finding.message and "no-such-codec" in finding.message
    proc = _load(path)
    assert proc.returncode != 0 and "no-such-codec" in proc.stderr, proc.stderr[-2000:]


_HF_CONFIG_TAIL = ("from transformers import PretrainedConfig\n\n\n"
                   "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n")


def _hf_folder(root: Path, canary: Path | None) -> Path:
    folder = root / "hf"
    folder.mkdir()
    (folder / "configuration_evil.py").write_bytes(
        _cookie_source("utf-7", canary, _HF_CONFIG_TAIL))
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "evil", "auto_map": {"AutoConfig": "configuration_evil.EvilConfig"}}))
    return folder


def _scan_json(folder: Path) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(folder)],
                          capture_output=True, text=True, timeout=600)
    return {Path(r["path"]).name: r for r in map(json.loads, proc.stdout.splitlines())}


def _from_pretrained(folder: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    code = ("import sys, transformers; print(type(transformers.AutoConfig.from_pretrained("
            "sys.argv[1], trust_remote_code=True)))")
    return subprocess.run([sys.executable, "-c", code, str(folder)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_remote_code_is_read_by_its_coding_cookie(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    folder = _hf_folder(tmp_path, canary)
    results = _scan_json(folder)
    assert not canary.exists()
    assert results["configuration_evil.py"]["verdict"] == "dangerous", results
    assert results["config.json"]["verdict"] == "dangerous", results
    assert "builtins.open: can write files" in " ".join(
        f["message"] for f in results["configuration_evil.py"]["findings"])
    proc = _from_pretrained(folder, tmp_path / "hf-home")
    assert canary.exists(), proc.stdout + proc.stderr[-2000:]


def test_benign_remote_code_with_a_coding_cookie_stays_suspicious(tmp_path: Path) -> None:
    folder = _hf_folder(tmp_path, None)
    results = _scan_json(folder)
    assert {n: r["verdict"] for n, r in results.items()} == {
        "configuration_evil.py": "suspicious", "config.json": "suspicious"}, results
    proc = _from_pretrained(folder, tmp_path / "hf-home")
    assert proc.returncode == 0 and "EvilConfig" in proc.stdout, proc.stderr[-2000:]
