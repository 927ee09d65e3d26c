"""torch.package's own rebuild hook (red team, stop 56, finding 2): an object with
`__reduce_package__` is saved as a persistent id `('reduce_package', id, func, args)` (or the
older `('reduce_package', func, args)`), and `PackageImporter.load_pickle`'s persistent_load
calls `func(importer, *args)`. Each sample is proven to run its payload under the real
PackageImporter in a process of its own; the scan calls it dangerous and runs none of it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from factories import MARK, PROTO2, STOP, TUPLE, p_global, p_unicode
from load_time_samples import LOADER
from proofs import run_each_forked

from inspector.scan.engine import scan_file

BINPERSID = b"Q"
# rebuild(importer, path) writes `path`: what the payload's canary shows; the twin's only
# measures it
_REBUILD = ("import os\n\n\ndef rebuild(importer, path):\n"
            "    os.system('touch ' + path)\n    return path\n")
_TWIN = _REBUILD.replace("os.system('touch ' + path)", "len(path)")


def _exporter_form(path: Path, canary: Path, rebuild: str = _REBUILD) -> Path:
    """The archive as PackageExporter writes it for an object whose __reduce_package__ hands
    back (stepsmod.rebuild, (CANARY,)): the three-item form, with the object's id."""
    from torch.package import PackageExporter

    source = rebuild + ("\n\nclass Box:\n    def __init__(self, path):\n"
                         "        self.path = path\n\n"
                         "    def __reduce_package__(self, exporter):\n"
                         "        return (rebuild, (self.path,))\n")
    folder = path.parent / f"{path.stem}-src"
    folder.mkdir()
    (folder / "stepsmod.py").write_text(source.replace("os.system", "len"))  # inert at export
    sys.path.insert(0, str(folder))
    try:
        import stepsmod

        with PackageExporter(str(path)) as exporter:
            exporter.intern("stepsmod")
            exporter.save_source_string("stepsmod", source)
            exporter.save_pickle("model", "model.pkl", {"x": stepsmod.Box(str(canary))})
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("stepsmod", None)
    return path


def _two_item_form(path: Path, canary: Path) -> Path:
    """A pickle holding the older two-item form, ('reduce_package', func, args), which
    persistent_load calls on every load of the id."""
    from torch.package import PackageExporter

    pid = (MARK + p_unicode("reduce_package") + p_global("stepsmod", "rebuild")
           + MARK + p_unicode(str(canary)) + TUPLE + TUPLE)
    with PackageExporter(str(path)) as exporter:
        exporter.save_source_string("stepsmod", _REBUILD)
        exporter.save_binary("model", "model.pkl", PROTO2 + pid + BINPERSID + STOP)
    return path


SAMPLES = {"exporter_form": _exporter_form, "two_item_form": _two_item_form}


def _code(res) -> list[str]:
    """The severities of the scan's package-code findings."""
    return [f.severity for f in res.findings if f.code == "package-code"]


@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe):
    """Each sample, built and proven to run its payload under PackageImporter."""
    work = tmp_path_factory.mktemp("rt56-reduce")
    samples = {}
    for name, build in SAMPLES.items():
        canary = work / f"{name}.canary"
        samples[name] = (build(work / f"{name}.pt", canary), canary)
    outputs = run_each_forked(python_exe, LOADER, [["package", str(p)] for p, _ in
                                                   samples.values()], work, ("torch.package",),
                              isolated=True)
    for (name, (_, canary)), (code, output) in zip(samples.items(), outputs, strict=True):
        assert code == 0, output
        assert canary.exists(), f"{name}: PackageImporter did not run the payload: {output}"
        canary.unlink()
    return samples


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_reduce_package_id_is_a_call_of_its_function(proven, name):
    path, canary = proven[name]
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    calls = [f for f in res.findings if f.severity == "dangerous"
             and f.code == "call-outside-allowlist"]
    assert any("stepsmod.rebuild" in f.message for f in calls), res.to_json()
    assert not canary.exists()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_function_a_reduce_package_id_calls_is_judged_as_load_time_code(proven, name):
    path, canary = proven[name]
    res = scan_file(path)
    code = [f.message for f in res.findings if f.code == "package-code"]
    assert _code(res) == ["dangerous"] and "os.system" in code[0], code
    assert not canary.exists()


def test_a_harmless_reduce_function_leaves_its_module_suspicious(tmp_path):
    """The twin: rebuild only measures its argument; its call is still a REDUCE outside the
    allow-lists (dangerous, as any), but its module's code reaches nothing."""
    res = scan_file(_exporter_form(tmp_path / "twin.pt", tmp_path / "never", _TWIN))
    assert res.verdict == "dangerous"
    assert _code(res) == ["suspicious"], res.to_json()
