"""Shipped Python source (Hugging Face remote code, torch.package modules) is judged by what it
would do at load, not by the names it calls: a denied callable merely named as a value (handed
to map, atexit.register, a Thread, functools.partial, stored), a denied module's attributes
reached by getattr / vars / __dict__ / sys.modules, and the bodies of the module's own functions
used as decorators or callbacks. Each hostile folder or archive is proven to run its payload
under the real loader (offline, a throwaway process: its canary appears), after the scan ran
nothing; each benign twin, the same shape with a harmless target, stays suspicious and loads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from remote_code_support import from_pretrained, scan_records

from inspector.formats.archives.torch_package import judge_source
from inspector.scan.engine import scan_file

# name -> (hostile statements, benign twin); `{c}` is the canary's path
_SHAPES = {
    "map": ("list(map(os.system, ['touch {c}']))", "list(map(len, ['x']))"),
    "atexit": ("import atexit\natexit.register(os.system, 'touch {c}')",
               "import atexit\natexit.register(len, 'x')"),
    "getattr": ("getattr(os, 'sys' + 'tem')('touch {c}')", "getattr(os, 'path').join('x')"),
    "decorator": ("def register(cls):\n    os.system('touch {c}')\n    return cls",
                  "def register(cls):\n    cls.tag = os.path.join('a', 'b')\n    return cls"),
    "thread": ("import threading\nt = threading.Thread(target=os.system, args=('touch {c}',))\n"
               "t.start()\nt.join()",
               "import threading\nt = threading.Thread(target=len, args=('x',))\nt.start()\n"
               "t.join()"),
    "partial": ("import functools\nfunctools.partial(os.system, 'touch {c}')()",
                "import functools\nfunctools.partial(len, 'x')()"),
    "sys_modules": ("import sys\nsys.modules['os'].system('touch {c}')",
                    "import sys\nhere = sys.modules[__name__]"),
    "vars": ("vars(os)['system']('touch {c}')", "import string\nvars(string)['capwords']('a b')"),
    "posix_spawn": ("import sys\nos.waitpid(os.posix_spawn(sys.executable, [sys.executable, '-c',"
                    " \"open('{c}', 'w')\"], dict(os.environ)), 0)",
                    "import sys\nos.getpid() if sys.executable else None"),
    "spawnlp": ("os.spawnlp(os.P_WAIT, 'touch', 'touch', '{c}')", "os.getpid()"),
    "copy2": ("import shutil\nshutil.copy2(__file__, '{c}')",
              "import shutil\nshutil.which('touch')"),
}


def _config_source(statements: str, decorated: bool) -> str:
    decorator = "@register\n" if decorated else ""
    # (a docstring first: a source that opens with `import` also reads as a pickle's INST)
    return (f'"""A config."""\nimport os\nfrom transformers import PretrainedConfig\n'
            f"{statements}\n\n\n"
            f"{decorator}class XConfig(PretrainedConfig):\n    model_type = 'xmodel'\n")


def _folder(root: Path, name: str, source: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "xmodel", "auto_map": {"AutoConfig": "configuration_x.XConfig"}}))
    (folder / "configuration_x.py").write_text(source)
    return folder


def _dangerous(res) -> list[str]:
    return ([f"{f.code}: {f.message}" for f in res.findings if f.severity == "dangerous"]
            + [f"{g.import_name}: {g.reason}" for g in res.globals if g.severity == "dangerous"])


def test_remote_code_that_names_a_denied_callable_is_dangerous_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    canaries = {name: tmp_path / f"canary-{name}" for name in _SHAPES}
    folders = {name: _folder(tmp_path, name, _config_source(
        hostile.format(c=canaries[name]), name == "decorator"))
        for name, (hostile, _) in _SHAPES.items()}
    results = scan_records(list(folders.values()))
    assert {k: r["verdict"] for k, r in results.items()} == {
        f"{name}/{file}": "dangerous" for name in _SHAPES
        for file in ("config.json", "configuration_x.py")}
    assert not [c for c in canaries.values() if c.exists()]  # the scan ran nothing
    loaded = from_pretrained(list(folders.values()), tmp_path / "hf-home")
    assert "failed" not in loaded.stdout, loaded.stdout + loaded.stderr[-2000:]
    assert [n for n, c in canaries.items() if not c.exists()] == [], loaded.stderr[-2000:]


def test_the_benign_twins_stay_suspicious_and_load(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    folders = [_folder(tmp_path, name, _config_source(benign, name == "decorator"))
               for name, (_, benign) in _SHAPES.items()]
    results = scan_records(folders)
    assert {k: r["verdict"] for k, r in results.items()} == {
        f"{name}/{file}": "suspicious" for name in _SHAPES
        for file in ("config.json", "configuration_x.py")}
    loaded = from_pretrained(folders, tmp_path / "hf-home")
    assert loaded.returncode == 0 and "failed" not in loaded.stdout, loaded.stdout


def _package(path: Path, source: str) -> Path:
    """A torch.package archive interning module `boxmod` (class Box) with `source` on top,
    whose res/model.pkl imports boxmod.Box."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("pkg/.data/version", "6\n")
        z.writestr("pkg/.data/extern_modules", "os\natexit\n")
        z.writestr("pkg/boxmod.py", f"import os\n{source}\n\n\nclass Box:\n    pass\n")
        z.writestr("pkg/res/model.pkl", b"\x80\x02cboxmod\nBox\n.")
    return path


_LOAD_PICKLE = ("import sys\nfrom torch.package import PackageImporter\n"
                "print(PackageImporter(sys.argv[1]).load_pickle('res', 'model.pkl'))\n")


@pytest.mark.parametrize("shape", ["map", "getattr", "atexit"])
def test_package_code_that_names_a_denied_callable_is_dangerous_and_runs(
        tmp_path: Path, shape: str) -> None:
    pytest.importorskip("torch.package")
    canary = tmp_path / "canary"
    hostile, benign = _SHAPES[shape]
    path = _package(tmp_path / "hostile.pt", hostile.format(c=canary))
    res = scan_file(path)
    assert res.verdict == "dangerous" and _dangerous(res), res.to_json()
    assert not canary.exists()
    run = subprocess.run([sys.executable, "-c", _LOAD_PICKLE, str(path)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and canary.exists(), run.stderr[-1000:]
    twin = _package(tmp_path / "benign.pt", benign)
    assert scan_file(twin).verdict == "suspicious"
    run = subprocess.run([sys.executable, "-c", _LOAD_PICKLE, str(twin)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-1000:]


@pytest.mark.parametrize("statement", [
    "f = sys.modules.get('os')\nf.system('x')", "os.__dict__['system']('x')",
    "import inspect\nm = dict(inspect.getmembers(os))", "o = os\ngetattr(o, name)('x')",
    "def fac(n):\n    def d(c):\n        os.system(n)\n        return c\n    return d\n"
    "@fac('x')\nclass A:\n    pass",
    "import signal\ndef on(*a):\n    os.system('x')\nsignal.signal(signal.SIGTERM, on)",
    "runner = os.system", "class A:\n    run = staticmethod(os.popen)",
    "import shutil\nshutil.unpack_archive('a.zip', '/')"])
def test_other_ways_to_reach_a_denied_callable_are_dangerous(statement: str) -> None:
    assert judge_source(f"import os, sys\n{statement}\n")[1], statement


@pytest.mark.parametrize("statement", [
    "x = os.path.join('a', os.environ.get('B', ''))", "here = sys.modules[__name__]",
    "getattr(os.path, 'join')", "input = x.reshape(2)\ny = input",
    "def helper():\n    os.system('x')", "import logging\nlog = logging.getLogger(__name__)",
    "import shutil\nwhere = shutil.which('sh')"])
def test_everyday_source_reaches_nothing(statement: str) -> None:
    assert judge_source(f"import os, sys\n{statement}\n")[1] == [], statement


def test_every_process_runner_of_os_and_file_writer_of_shutil_is_dangerous() -> None:
    """The lists come from the modules' own names, so a runner or writer Python adds is in."""
    runners = [n for n in dir(os) if n.startswith(("exec", "spawn", "posix_spawn", "popen"))]
    writers = ["copy", "copy2", "copyfile", "copytree", "move", "rmtree", "make_archive",
               "unpack_archive", "chown", "copymode", "copystat"]
    assert {"execlp", "spawnlp", "posix_spawn", "posix_spawnp"} <= set(runners)
    missed = [f"os.{n}" for n in runners if not judge_source(f"import os\nos.{n}('x')\n")[1]]
    missed += [f"shutil.{n}" for n in writers if hasattr(shutil, n) and not judge_source(
        f"import shutil\nshutil.{n}('x')\n")[1]]
    assert missed == []
