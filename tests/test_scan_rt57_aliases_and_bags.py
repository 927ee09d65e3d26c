"""Methods a load runs are found where a class body binds them by alias, and a callable an
attribute bag holds is judged (round 57).

`scipy.io._netcdf.netcdf_file` says `__del__ = close` in its class body; the scan read only
`def`s, so what `close` reaches (`self.fp.close()`, a stored callable) went unjudged and a
payload popped at once was suspicious. `types.SimpleNamespace` has no source to read, so a
callable stored in one and called as `self.ftp.close()` by a class's `__del__` went unjudged
while `argparse.Namespace` in its place was caught. Each payload is proven under pickle.load
(accelerate's `write_basic_config` writes `$HF_HOME/accelerate/default_config.yaml`) and scanned
(dangerous; the canary never appears); the alias rules are held to small classes of our own."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

from inspector.scan.pickles.class_source import method_reaches

pytest.importorskip("accelerate")
pytest.importorskip("scipy")
pytest.importorskip("fsspec")


def _global(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def _text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


WRITER = _global("accelerate.commands.config.default", "write_basic_config")


def _bag(kind: str) -> bytes:
    """An attribute bag whose `close` is the writer, and (Namespace) `closed` False."""
    if kind == "simple":
        return _global("types", "SimpleNamespace") + b")\x81}" + _text("close") + WRITER + b"sb"
    return (_global("argparse", "Namespace") + b")R}(" + _text("closed") + b"\x89"
            + _text("close") + WRITER + b"ub")


def _payload(outer: str, bag: str) -> bytes:
    """NEWOBJ of `outer` holding the bag, popped at once (its __del__ runs inside the load)."""
    if outer == "netcdf":
        body = (_global("scipy.io._netcdf", "netcdf_file") + b")\x81}(" + _text("fp")
                + _bag(bag) + _text("mode") + _text("r") + _text("_mm_buf") + b"N"
                + _text("_mm") + b"N" + _text("_attributes") + b"}ub")
    else:
        body = (_global("fsspec.implementations.ftp", "FTPFileSystem") + b")\x81}"
                + _text("ftp") + _bag(bag) + b"sb")
    return b"\x80\x02" + body + b"0}" + _text("model") + _text("weights") + b"s."


CASES = {"alias-del": ("netcdf", "argparse"), "simple-namespace-bag": ("ftp", "simple")}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_payload_runs_under_pickle_load_and_the_scan_calls_it_dangerous(tmp_path, case):
    sample = tmp_path / f"{case}.pkl"
    sample.write_bytes(_payload(*CASES[case]))
    home = tmp_path / "hf"
    canary = home / "accelerate" / "default_config.yaml"
    env = {**os.environ, "HF_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", str(sample)],
                         capture_output=True, text=True, timeout=600, env=env)
    res = json.loads(out.stdout.splitlines()[0])
    assert res["verdict"] == "dangerous", res
    assert "write_basic_config" in json.dumps(res["findings"])
    assert not canary.exists()  # nothing of ours ran it
    ran = subprocess.run([sys.executable, "-c", "import pickle, sys; "
                          "print(pickle.load(open(sys.argv[1], 'rb')))", str(sample)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert canary.exists(), f"the payload did not run under pickle.load: {ran.stderr[-2000:]}"


SOURCE = '''
import os

def shut(self):
    os.remove(self.path)

class Base:
    def __setstate__(self, state):
        os.system(state)

class ByName:
    def close(self):
        self.fp.close()
    __del__ = close

class ByModuleFunction:
    __del__ = shut

class ByBase(Base):
    __setstate__ = Base.__setstate__

class Unreadable:
    __setstate__ = property(lambda self: None).fget

class Harmless:
    def close(self):
        return None
    __del__ = close
'''


def _denied(target: str) -> str | None:
    return "denied" if target.startswith(("os.", "subprocess.")) else None


@pytest.fixture
def module(tmp_path, monkeypatch):
    name = f"rt57_alias_{os.getpid()}_{tmp_path.name}".replace("-", "_")
    (tmp_path / f"{name}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.parametrize(("cls", "method"), [("ByModuleFunction", "__del__"),
                                             ("ByBase", "__setstate__"),
                                             ("Unreadable", "__setstate__")])
def test_an_alias_is_followed_to_what_it_runs(module, cls, method):
    reach = method_reaches(module, cls, method, _denied)
    assert reach is not None and reach.reasons, reach


def test_an_alias_calls_what_the_pickle_stored_where_the_def_does():
    from inspector.scan.pickles.records import Held

    held = (Held("fp", cls=("types", "SimpleNamespace"),
                 attrs=(Held("close", ref="os.system"),)),)
    reach = method_reaches("scipy.io._netcdf", "netcdf_file", "__del__", _denied, held)
    assert reach is not None and ("os.system", reach.stored[0][1]) in reach.stored


def test_an_alias_to_a_harmless_def_stays_clear(module):
    reach = method_reaches(module, "Harmless", "__del__", _denied)
    assert reach is not None and not reach.reasons and not reach.stored

