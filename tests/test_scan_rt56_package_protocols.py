"""torch.package: what the load runs of the archive's own code beyond its import and the
unpickler's own hooks (red team, stop 56, finding 3). A pickle that hands an instance of an
interned class to an allowed callable runs that class's protocols (`list(x)`: __iter__,
`dict(x)`: keys, `int(x)`: __index__), and its `getattr(Cls, 'name')` a descriptor's __get__,
wherever in the archive the method lies (a base class in another interned module, a helper
it calls there by a relative import); a module's top-level code runs the functions of other
interned modules it calls; PackageImporter strips its own `<torch_package_N>.` prefix from a
pickle's module names. Each hostile archive is proven to run its payload under the real
PackageImporter in a process of its own; the scan calls it dangerous and runs none of it; its
benign twin, the same code with a harmless line in place of the payload, stays suspicious."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import (
    EMPTY_TUPLE,
    MARK,
    NEWOBJ,
    PROTO2,
    REDUCE,
    STOP,
    TUPLE,
    p_global,
    p_unicode,
)
from load_time_samples import LOADER
from proofs import run_each_forked

from inspector.scan.engine import scan_file


def _handed(callable_: tuple[str, str], module: str, cls: str) -> bytes:
    """A pickle of `callable_(module.cls())`: the instance made with NEWOBJ (no call of the
    class), handed to an allowed callable."""
    return (PROTO2 + p_global(*callable_) + MARK + p_global(module, cls) + EMPTY_TUPLE + NEWOBJ
            + TUPLE + REDUCE + STOP)


_ITER = "import os\n\n\nclass Steps:\n    def __iter__(self):\n        {act}\n        yield 1\n"
_KEYS = ("import subprocess\n\n\nclass Table:\n    def keys(self):\n        {act}\n"
         "        return ['a']\n\n    def __getitem__(self, key):\n        return 1\n")
_INDEX = "import os\n\n\nclass Count:\n    def __index__(self):\n        {act}\n        return 3\n"
# a class whose __iter__ it inherits from another interned module, which calls a helper of a
# third by relative imports
_SPREAD = {"plans": "",
           "plans.steps": "from .base import Base\n\n\nclass Steps(Base):\n    pass\n",
           "plans.base": ("from . import tools\n\n\nclass Base:\n    def __iter__(self):\n"
                          "        tools.fire()\n        yield 1\n"),
           "plans.tools": "import subprocess\n\n\ndef fire():\n    {act}\n"}
# a class attribute whose descriptor runs as a pickle's getattr(Cls, 'name') looks it up
_DESCRIPTOR = ("import os\n\n\nclass Lazy:\n    def __get__(self, obj, owner):\n        {act}\n"
               "        return 1\n\n\nclass Config:\n    rate = Lazy()\n")
# a module whose import calls another interned module's function
_AT_IMPORT = {"stepsmod": "import helpers\n\nhelpers.fire()\n\n\nclass Box:\n    pass\n",
              "helpers": "import os\n\n\ndef fire():\n    {act}\n"}

SAMPLES: dict[str, tuple[dict[str, str], bytes]] = {
    "list_runs_iter": ({"stepsmod": _ITER}, _handed(("builtins", "list"), "stepsmod", "Steps")),
    "dict_runs_keys": ({"stepsmod": _KEYS}, _handed(("builtins", "dict"), "stepsmod", "Table")),
    "int_runs_index": ({"stepsmod": _INDEX}, _handed(("builtins", "int"), "stepsmod", "Count")),
    "inherited_from_another_module": (_SPREAD, _handed(("builtins", "list"), "plans.steps",
                                                       "Steps")),
    "import_calls_another_module": (_AT_IMPORT, PROTO2 + p_global("stepsmod", "Box")
                                    + EMPTY_TUPLE + NEWOBJ + STOP),
    "getattr_runs_descriptor": ({"stepsmod": _DESCRIPTOR}, PROTO2 + p_global(
        "builtins", "getattr") + MARK + p_global("stepsmod", "Config") + p_unicode("rate")
        + TUPLE + REDUCE + STOP),
    "mangled_module_name": ({"stepsmod": _ITER}, _handed(
        ("builtins", "list"), "<torch_package_0>.stepsmod", "Steps")),
}


def _act(source: str, canary: Path | None) -> str:
    """The payload line of a source template: a program that writes the canary, or (twin)
    a harmless call."""
    if canary is None:
        return source.replace("{act}", "len('x')")
    if "subprocess" in source:
        return source.replace("{act}", f"subprocess.run(['touch', {str(canary)!r}])")
    return source.replace("{act}", f"os.system('touch {canary}')")


def _build(path: Path, sources: dict[str, str], data: bytes, canary: Path | None) -> Path:
    """The archive, written by torch's own PackageExporter: `sources` interned, `data` as its
    `model/model.pkl` resource."""
    from torch.package import PackageExporter

    with PackageExporter(str(path)) as exporter:
        for module, source in sources.items():
            exporter.save_source_string(module, _act(source, canary),
                                        is_package=any(m.startswith(module + ".")
                                                       for m in sources))
        exporter.save_binary("model", "model.pkl", data)
    return path


@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe):
    """Each hostile archive, proven to run its payload under PackageImporter, and its twin."""
    work = tmp_path_factory.mktemp("rt56-protocols")
    samples = {}
    for name, (sources, data) in SAMPLES.items():
        canary = work / f"{name}.canary"
        samples[name] = (_build(work / f"{name}.pt", sources, data, canary), canary,
                         _build(work / f"{name}-twin.pt", sources, data, None))
    outputs = run_each_forked(python_exe, LOADER, [["package", str(p)] for p, _, _ in
                                                   samples.values()], work, ("torch.package",),
                              isolated=True)
    for (name, (_, canary, _)), (code, output) in zip(samples.items(), outputs, strict=True):
        assert code == 0, output
        assert canary.exists(), f"{name}: PackageImporter did not run the payload: {output}"
        canary.unlink()
    return samples


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_archive_code_a_load_runs_is_judged(proven, name):
    path, canary, _ = proven[name]
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    code = [f for f in res.findings if f.code == "package-code" and f.severity == "dangerous"]
    assert code, res.to_json()
    assert not canary.exists()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_benign_twin_stays_suspicious(proven, name):
    res = scan_file(proven[name][2])
    assert res.verdict == "suspicious", res.to_json()


def test_the_importer_under_its_own_module_name_is_dangerous(tmp_path):
    """PackageImporter binds itself as module `torch_package_importer` before any the archive
    interns: a pickle's global there is its import_module, judged as torch.package's names."""
    data = PROTO2 + p_global("torch_package_importer", "import_module") + STOP
    res = scan_file(_build(tmp_path / "importer.pt", {"torch_package_importer": ""}, data, None))
    use = next(g for g in res.globals if g.module == "torch_package_importer")
    assert use.severity == "dangerous" and "PackageImporter itself" in use.reason


def test_calls_followed_past_the_bound_leave_the_file_not_fully_read(tmp_path, monkeypatch):
    """Following one interned module's calls into the next is bounded; past the bound the
    file is reported not fully scanned (never safe), not silently judged."""
    from inspector.formats.archives import torch_package

    monkeypatch.setattr(torch_package, "MAX_JUDGINGS", 2)
    chain = {"first": "import second\n\nsecond.go()\n", "second": "import third\n\n\n"
             "def go():\n    third.go()\n", "third": "def go():\n    return 1\n"}
    res = scan_file(_build(tmp_path / "chain.pt", chain, PROTO2 + p_global("first", "x") + STOP,
                           None))
    assert any(f.code == "package-code-unfollowed" for f in res.findings), res.to_json()
