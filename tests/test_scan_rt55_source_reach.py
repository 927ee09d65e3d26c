"""Load-time source is judged by what it can reach, not by the final names it calls.

Under a module the deny list names whole every name is its capability unless a short allow-list
calls it read-only (ctypes, operator and asyncio included); `gzip`/`lzma`/`bz2` openers write
where their mode says so; resolvers of a literal dotted name (`pkgutil.resolve_name`,
`importlib.import_module`, `__import__`) are judged as what they name; a computed `getattr` on
builtins hands out exec; and what a `def` evaluates (annotations, keyword-only defaults) and a
metaclass's methods run at import or as the class is built. Each hostile folder runs its payload
under the real loader (transformers' AutoConfig.from_pretrained with trust_remote_code, offline,
in a throwaway process: its canary appears) after the scan ran nothing; each benign twin, the
same shape with a harmless target, stays suspicious and loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from remote_code_support import from_pretrained, scan_records

from inspector.formats.archives.torch_package import judge_source
from inspector.scan.engine import scan_file

_CONFIG = "\n\nclass XConfig(PretrainedConfig):\n    model_type = 'xmodel'\n"
_META = ("\n\nclass XConfig(PretrainedConfig, metaclass=Meta):\n    model_type = 'xmodel'\n")
# name -> (hostile source, benign twin, the config class); `{c}` is the canary's path
_SHAPES = {
    "pkgutil": ("import pkgutil\nrun = pkgutil.resolve_name('os:system')\nrun('touch {c}')",
                "import pkgutil\njoin = pkgutil.resolve_name('os.path:join')\njoin('a', 'b')",
                _CONFIG),
    "logcfg": ("import logging.config\nlogging.config.dictConfig({{'version': 1, 'handlers': "
               "{{'h': {{'()': 'subprocess.Popen', 'args': 'touch {c}', 'shell': True}}}}}})",
               "import logging\nlogging.getLogger(__name__).addHandler(logging.NullHandler())",
               _CONFIG),
    "builtins": ("import builtins\nf = getattr(builtins, 'ex' + 'ec')\n"
                 "f(\"import os; os.system('touch {c}')\")",
                 "import builtins\nf = getattr(builtins, 'len')\nf('ab')", _CONFIG),
    "dunder_builtins": ("__builtins__['exec'](\"import os; os.system('touch {c}')\")",
                        "exec_ok = len('ab')", _CONFIG),
    "ctypes": ("import ctypes\nctypes.CDLL(None).system(b'touch {c}')", "import ctypes",
               _CONFIG),
    "lzma": ("import lzma\nwith lzma.open('{c}', 'wb') as fh:\n    fh.write(b'x')",
             "import lzma\nlzma.decompress(lzma.compress(b'x'))", _CONFIG),
    "gzip_mode": ("import gzip\nmode = 'w' + 'b'\nwith gzip.open('{c}', mode) as fh:\n"
                  "    fh.write(b'x')", "import gzip\ngzip.decompress(gzip.compress(b'x'))",
                  _CONFIG),
    "opcaller": ("import operator\noperator.methodcaller('system', 'touch {c}')(os)",
                 "import operator\noperator.itemgetter(0)([os.sep])", _CONFIG),
    "asyncio": ("import asyncio\nloop = asyncio.new_event_loop()\n"
                "p = loop.run_until_complete(asyncio.create_subprocess_shell('touch {c}'))\n"
                "loop.run_until_complete(p.wait())", "import asyncio", _CONFIG),
    "import_module": ("import importlib\nimportlib.import_module('subprocess').run("
                      "['touch', '{c}'])",
                      "import importlib\nimportlib.import_module('json').dumps(1)", _CONFIG),
    "def_return": ("def helper() -> os.system('touch {c}'):\n    return 1",
                   "def helper() -> os.path.join('a', 'b'):\n    return 1", _CONFIG),
    "def_annotation": ("def helper(x: os.system('touch {c}') = 1):\n    return x",
                       "def helper(x: os.sep = 1):\n    return x", _CONFIG),
    "kwonly_default": ("def helper(*, x=os.system('touch {c}')):\n    return x",
                       "def helper(*, x=os.getcwd()):\n    return x", _CONFIG),
    "method_kwonly": ("class Util:\n    def go(self, *, x=os.system('touch {c}')):\n"
                      "        return x", "class Util:\n    def go(self, *, x=os.sep):\n"
                      "        return x", _CONFIG),
    "meta_prepare": ("class Meta(type):\n    @classmethod\n"
                     "    def __prepare__(mcls, name, bases, **kw):\n"
                     "        os.system('touch {c}')\n        return dict()",
                     "class Meta(type):\n    @classmethod\n"
                     "    def __prepare__(mcls, name, bases, **kw):\n        return dict()",
                     _META),
    "meta_call": ("class Meta(type):\n    def __call__(cls, *a, **kw):\n"
                  "        os.system('touch {c}')\n        return super().__call__(*a, **kw)",
                  "class Meta(type):\n    def __call__(cls, *a, **kw):\n"
                  "        return super().__call__(*a, **kw)", _META),
}


def _folder(root: Path, name: str, statements: str, config: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(
        {"model_type": "xmodel", "auto_map": {"AutoConfig": "configuration_x.XConfig"}}))
    (folder / "configuration_x.py").write_text(
        f'"""A config."""\nimport os\nfrom transformers import PretrainedConfig\n'
        f"{statements}{config}")
    return folder


def _verdicts(folders: list[Path]) -> dict[str, str]:
    """Each file's verdict under `scan --json`."""
    return {key: r["verdict"] for key, r in scan_records(folders).items()}


def _expect(word: str) -> dict[str, str]:
    return {f"{name}/{file}": word for name in _SHAPES
            for file in ("config.json", "configuration_x.py")}


def test_source_that_reaches_a_capability_past_its_names_is_dangerous_and_runs(
        tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    canaries = {name: tmp_path / f"canary-{name}" for name in _SHAPES}
    folders = [_folder(tmp_path, name, hostile.format(c=canaries[name]), config)
               for name, (hostile, _, config) in _SHAPES.items()]
    assert _verdicts(folders) == _expect("dangerous")
    assert not [c for c in canaries.values() if c.exists()]  # the scan ran nothing
    loaded = from_pretrained(folders, tmp_path / "hf-home")
    assert [n for n, c in canaries.items() if not c.exists()] == [], (
        loaded.stdout + loaded.stderr[-2000:])


def test_the_benign_twins_stay_suspicious_and_load(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    folders = [_folder(tmp_path, name, benign, config)
               for name, (_, benign, config) in _SHAPES.items()]
    assert _verdicts(folders) == _expect("suspicious")
    loaded = from_pretrained(folders, tmp_path / "hf-home")
    assert loaded.returncode == 0 and "failed" not in loaded.stdout, loaded.stdout


def test_an_interned_module_calling_native_code_is_dangerous_and_runs(tmp_path: Path) -> None:
    pytest.importorskip("torch.package")
    canary = tmp_path / "canary"
    path = tmp_path / "native.pt"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("pkg/.data/version", "6\n")
        z.writestr("pkg/.data/extern_modules", "ctypes\n")
        z.writestr("pkg/boxmod.py", f"import ctypes\nctypes.CDLL(None).system(b'touch {canary}')"
                                    "\n\n\nclass Box:\n    pass\n")
        z.writestr("pkg/res/model.pkl", b"\x80\x02cboxmod\nBox\n.")
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    assert not canary.exists()
    run = subprocess.run([sys.executable, "-c", "import sys\nfrom torch.package import "
                          "PackageImporter\nPackageImporter(sys.argv[1]).load_pickle('res', "
                          "'model.pkl')", str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and canary.exists(), run.stderr[-1000:]


@pytest.mark.parametrize("statement", [
    "x = os.path.join('a', os.environ.get('B', ''))", "import sys\nok = sys.version_info.major",
    "import logging\nlogging.getLogger(__name__).setLevel(logging.INFO)",
    "with open(__file__, encoding='utf-8') as fh:\n    text = fh.read()",
    "import codecs\nwith codecs.open(__file__, 'r', 'utf-8') as fh:\n    text = fh.read()",
    "import gzip\nopener = gzip.open", "from pathlib import Path\nhere = Path(__file__).parent",
    "import torch\nkind = getattr(torch, name)", "from os import *\nprint(getcwd())",
    "def f(input):\n    x = input\n    return x\ny = f(1)",
    "def f(g: 'torch._C.Graph', code: os.PathLike = None):\n    return code.split()\nf(1)"])
def test_everyday_source_stays_clear(statement: str) -> None:
    assert judge_source(f"import os\n{statement}\n")[1] == [], statement


@pytest.mark.parametrize("statement", [
    "import torch\ngetattr(torch, name)('x')", "import gzip\ngzip.GzipFile('x', 'wb')",
    "import sys\nsys.path.insert(0, '/tmp')", "os.path.os.system('x')",
    "import inspect\nframe = inspect.currentframe()", "getattr(os.path, name)",
    "import builtins\ntable = builtins.__dict__", "import types\ntypes.FunctionType(c, {})",
    "m = __import__('o' + 's')", "import importlib\nimportlib.import_module(name)"])
def test_fresh_reaches_are_dangerous(statement: str) -> None:
    assert judge_source(f"import os\n{statement}\n")[1], statement
