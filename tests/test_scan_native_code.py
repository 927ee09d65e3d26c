""".pt2 / AOTInductor packages carrying native libraries are native code that runs at load: the
scan calls them dangerous without loading them, and the real loader
(`torch._inductor.aoti_load_package`) runs the library's constructor (a canary appears)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

_CONSTRUCTOR = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void run_at_load(void) {
    FILE *f = fopen(getenv("CANARY"), "w");
    if (f) { fputs("ran", f); fclose(f); }
}
"""


def _library(tmp_path: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the sample library")
    source = tmp_path / "payload.c"
    source.write_text(_CONSTRUCTOR)
    out = tmp_path / "payload.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    return out


def _package(path: Path, library: Path, method: int) -> Path:
    """A .pt2 package as aoti_compile_and_package lays it out, its model library `library`."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/archive_format", "pt2")
        z.writestr("m/archive_version", "0")
        z.writestr("m/.data/version", "1\n")
        z.writestr("m/byteorder", "little")
        z.writestr("m/data/aotinductor/model/model.wrapper_metadata.json",
                   json.dumps({"AOTI_DEVICE_KEY": "cpu"}))
        z.write(library, "m/data/aotinductor/model/model.wrapper.so", compress_type=method)
    return path


def test_a_pt2_package_with_a_native_library_is_dangerous_and_runs_at_load(
        tmp_path: Path) -> None:
    library = _library(tmp_path)
    packages = {"stored": _package(tmp_path / "stored.pt2", library, zipfile.ZIP_STORED),
                "deflated": _package(tmp_path / "deflated.pt2", library, zipfile.ZIP_DEFLATED)}
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json",
                          *map(str, packages.values())], capture_output=True, text=True,
                         timeout=600)
    records = {Path(r["path"]).stem: r for r in map(json.loads, out.stdout.splitlines())}
    canaries = {name: tmp_path / f"canary-{name}" for name in packages}
    assert not any(c.exists() for c in canaries.values())  # the scan loaded nothing
    for name, path in packages.items():
        record = records[name]
        native = [f for f in record["findings"] if f["code"] == "native-code"]
        assert record["verdict"] == "dangerous", record["findings"]
        assert [f["member"] for f in native] == ["m/data/aotinductor/model/model.wrapper.so"]
        subprocess.run([sys.executable, "-c", "import sys, torch._inductor as i\ntry:\n"
                        "    i.aoti_load_package(sys.argv[1])\nexcept RuntimeError:\n"
                        "    pass  # no model inside: the library already ran", str(path)],
                       env={**os.environ, "CANARY": str(canaries[name])}, check=True,
                       capture_output=True, timeout=300, cwd=tmp_path)
        assert canaries[name].exists(), name  # dlopen ran the library's constructor


def test_a_native_library_in_another_zip_is_suspicious(tmp_path: Path) -> None:
    library = _library(tmp_path)
    path = tmp_path / "tools.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.write(library, "bin/helper")  # known by its ELF magic, not its name
        z.writestr("README", "tools")
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(path)],
                         capture_output=True, text=True, timeout=600)
    record = json.loads(out.stdout.splitlines()[0])
    assert record["verdict"] == "suspicious"
    assert [(f["code"], f["member"]) for f in record["findings"]
            if f["severity"] != "info"] == [("native-library", "bin/helper")]


def _source_package(path: Path, compiler: str) -> Path:
    """A .pt2 package carrying its model as C++ source and the flags to build it (what
    aoti_compile_and_package writes with package_cpp_only), its `compiler` string given."""
    flags = {"compiler": compiler, "compile_only": True, "cflags": [], "definitions": [],
             "include_dirs": [], "passthrough_args": [], "ldflags": [], "libraries": [],
             "libraries_dirs": []}
    folder = "m/data/aotinductor/model/"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/archive_format", "pt2")
        z.writestr("m/version", "0\n")
        z.writestr(folder + "model.cpp", "int main() { return 0; }\n")
        z.writestr(folder + "model_compile_flags.json", json.dumps(flags))
        z.writestr(folder + "model_linker_flags.json",
                   json.dumps(dict(flags, compiler="true", compile_only=False)))
        z.writestr(folder + "model_metadata.json", json.dumps({"AOTI_DEVICE_KEY": "cpu"}))
    return path


def test_a_pt2_package_of_cpp_source_runs_its_flags_at_load_and_is_dangerous(
        tmp_path: Path) -> None:
    """No library, but a .cpp: the loader builds a shell command from the package's
    `compiler` string and runs it (then would dlopen what it built)."""
    canary = tmp_path / "canary-cpp"
    path = _source_package(tmp_path / "source.pt2", f"touch {canary}; true")
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(path)],
                         capture_output=True, text=True, timeout=600)
    record = json.loads(out.stdout.splitlines()[0])
    assert not canary.exists()  # the scan ran nothing
    assert record["verdict"] == "dangerous" and record["format"] == "torch-export"
    assert [f["member"] for f in record["findings"] if f["code"] == "native-code"] == [
        "m/data/aotinductor/model/model.cpp"]
    subprocess.run([sys.executable, "-c", "import sys, torch._inductor as i\ntry:\n"
                    "    i.aoti_load_package(sys.argv[1])\nexcept Exception:\n"
                    "    pass  # nothing was built: the command already ran", str(path)],
                   check=True, capture_output=True, timeout=300, cwd=tmp_path)
    assert canary.exists()


def test_a_torch_export_save_stays_suspicious(tmp_path: Path) -> None:
    """A plain torch.export.save archive holds no native code: suspicious, not dangerous."""
    torch = pytest.importorskip("torch")
    path = tmp_path / "exported.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),)), path)
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(path)],
                         capture_output=True, text=True, timeout=600)
    record = json.loads(out.stdout.splitlines()[0])
    assert (record["verdict"], record["format"]) == ("suspicious", "torch-export")
    assert [f["code"] for f in record["findings"] if f["severity"] != "info"] == ["torch-export"]
