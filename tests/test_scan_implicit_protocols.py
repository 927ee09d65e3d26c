"""Protocol methods the load runs on an instance it only handles (red-team round, class 1).

The unpickler and the allowed callables run methods of a class without a call opcode naming
them: a dict key's or a set item's `__hash__`, the `__iter__` of an instance `builtins.list` is
handed, the `__setitem__` of the object a `UserDict`'s `self.data[k] = v` reaches. Inside such
a method, `self.X(...)` with X no method of the class calls whatever the pickle stored in X; a
function the method's module imports is followed as one it defines; text that calls `open`
however the call is spelt (`(open)(...)`) reads as code.

Each hostile sample is built here, its harm proven under the real loader in a fresh process (a
canary appears that was absent, made by nothing of ours), and only then scanned through the
CLI: DANGEROUS, exit 2. Benign twins keep the verdict they had.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from loader_proof import run_loader as _load
from loader_proof import scan_cli as _cli
from loader_proof import unicode as _s
from loader_proof import wait_for as _wait_for

from inspector.scan.code_text import looks_like_code
from inspector.scan.engine import scan_file

SUBPROCESS = b"ctornado.process\nSubprocess\n"  # runs its argv when called


def _global(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n".encode()


def _argv(canary: Path) -> bytes:
    """The tuple ('sh', '-c', 'touch CANARY')."""
    return b"(" + _s("sh") + _s("-c") + _s(f"touch {canary}") + b"t"


def _proven_dangerous(python_exe: str, tmp_path: Path, path: Path, canary: Path,
                      finding: str) -> None:
    """The real loader makes the canary; the scan says DANGEROUS with `finding`."""
    assert not canary.exists()
    proc = _load(python_exe, f"import pickle; pickle.load(open({str(path)!r}, 'rb'))", tmp_path)
    assert _wait_for(canary), f"the real loader made no canary: {proc.stderr[-600:]}"
    canary.unlink()
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "implicit-call" in out and finding in out, out
    assert not canary.exists()


def _no_implicit_call(path: Path, verdict: str = "suspicious") -> None:
    res = scan_file(path)
    assert res.verdict == verdict, res.to_json()
    assert not [f for f in res.findings if f.code == "implicit-call"], res.to_json()


# --- F1: an implicit method calls what the pickle stored in an attribute ----------------------

def test_setitem_calls_a_callable_the_build_stored(tmp_path, python_exe):
    """SortedDict.__setitem__ runs `self._list_add(key)`; BUILD stored tornado's Subprocess
    there: SETITEM with the key ('sh', '-c', CMD) runs the command."""
    for module in ("sortedcontainers", "tornado"):
        pytest.importorskip(module)
    canary = tmp_path / "canary"
    path = tmp_path / "sorteddict.pkl"
    path.write_bytes(b"\x80\x02" + _global("sortedcontainers.sorteddict", "SortedDict")
                     + b")\x81}" + _s("_list_add") + SUBPROCESS + b"sb" + _argv(canary)
                     + b"K\x01s.")
    _proven_dangerous(python_exe, tmp_path, path, canary,
                      "SortedDict.__setitem__ → self._list_add): calls tornado.process."
                      "Subprocess")


def test_a_sorteddict_built_with_plain_state_keeps_its_verdict(tmp_path):
    """The same opcodes with a plain value where the callable was: nothing stored is called."""
    pytest.importorskip("sortedcontainers")
    path = tmp_path / "sorteddict.pkl"
    path.write_bytes(b"\x80\x02" + _global("sortedcontainers.sorteddict", "SortedDict")
                     + b")\x81}" + _s("_key") + b"Nsb" + _s("a") + b"K\x01s.")
    _no_implicit_call(path)


# --- F2: a dict key's, a set item's __hash__ ---------------------------------------------------

def _hash_key(canary: Path) -> bytes:
    """toolz's EqualityHashKey with key=Subprocess, item=argv: its __hash__ calls
    self.key(self.item)."""
    return (_global("toolz.sandbox.core", "EqualityHashKey") + b")\x81N}(" + _s("key")
            + SUBPROCESS + _s("item") + _argv(canary) + b"u\x86b")


@pytest.mark.parametrize("how, build, finding", [
    ("dict_key", lambda key: b"\x80\x04}" + key + b"K\x01s.", "SETITEM uses as a dict key"),
    ("set_item", lambda key: b"\x80\x04\x8f(" + key + b"\x90.", "ADDITEMS adds to a set"),
    ("frozenset_item", lambda key: b"\x80\x04(" + key + b"\x91.",
     "FROZENSET adds to a frozenset"),
])
def test_a_hashed_instance_runs_its_hash(tmp_path, python_exe, how, build, finding):
    for module in ("toolz", "tornado"):
        pytest.importorskip(module)
    canary = tmp_path / "canary"
    path = tmp_path / f"{how}.pkl"
    path.write_bytes(build(_hash_key(canary)))
    _proven_dangerous(python_exe, tmp_path, path, canary,
                      f"{finding} an instance of toolz.sandbox.core.EqualityHashKey, which "
                      "runs EqualityHashKey.__hash__")


def test_a_stock_hash_key_keeps_its_verdict(tmp_path):
    core = pytest.importorskip("toolz.sandbox.core")
    path = tmp_path / "keys.pkl"
    path.write_bytes(pickle.dumps({core.EqualityHashKey(None, (1, 2)): "v"}, protocol=4))
    _no_implicit_call(path)


# --- F3: an allowed callable runs the protocols of the instance it is handed -------------------

def test_builtins_list_runs_the_iter_of_its_argument(tmp_path, python_exe):
    """builtins.list(FilterAtlas): FilterAtlas.__iter__ calls self.NODE_OK(node) for each
    key of self._atlas."""
    for module in ("networkx", "tornado"):
        pytest.importorskip(module)
    canary = tmp_path / "canary"
    path = tmp_path / "atlas.pkl"
    atlas = (_global("networkx.classes.coreviews", "FilterAtlas") + b")\x81}(" + _s("_atlas")
             + b"}" + _argv(canary) + b"K\x01s" + _s("NODE_OK") + SUBPROCESS + b"ub")
    path.write_bytes(b"\x80\x02" + _global("builtins", "list") + atlas + b"\x85R.")
    _proven_dangerous(python_exe, tmp_path, path, canary,
                      "REDUCE hands to builtins.list an instance of networkx.classes.coreviews."
                      "FilterAtlas, which runs FilterAtlas.__iter__")


def test_builtins_list_of_a_stock_filter_atlas_keeps_its_verdict(tmp_path, python_exe):
    """The same call with the NODE_OK networkx itself makes (a show_nodes instance, whose
    __call__ is followed and calls nothing denied) loads and runs nothing."""
    nx = pytest.importorskip("networkx")
    from networkx.classes.coreviews import FilterAtlas

    body = pickle.dumps(FilterAtlas({1: {}, 2: {}}, nx.filters.show_nodes([1])), protocol=2)
    path = tmp_path / "atlas.pkl"
    path.write_bytes(b"\x80\x02" + _global("builtins", "list") + body[2:-1] + b"\x85R.")
    proc = _load(python_exe, f"import pickle; print(pickle.load(open({str(path)!r}, 'rb')))",
                 tmp_path)
    assert proc.stdout.strip() == "[1]", proc.stderr[-500:]
    _no_implicit_call(path)


# --- F5: a protocol statement on an attribute whose class the pickle chose ---------------------

def test_a_subscript_assignment_reaches_the_attributes_class(tmp_path, python_exe):
    """UserDict.__setitem__ runs `self.data[key] = item`; BUILD put a zict.File in data, whose
    __setitem__ writes a file named by the key in its directory."""
    pytest.importorskip("zict")
    work = tmp_path / "work"
    work.mkdir()
    canary = work / "canary#0"  # zict's File names the file it writes KEY#N
    zfile = (_global("zict.file", "File") + b")\x81}(" + _s("directory") + _s(str(work))
             + _s("memmap") + b"\x89" + _s("filenames") + b"}" + _s("_inc") + b"K\x00ub")
    path = tmp_path / "userdict.pkl"
    path.write_bytes(b"\x80\x02" + _global("collections", "UserDict") + b")\x81}" + _s("data")
                     + zfile + b"sb" + _s("canary") + b"C\x06pwned\ns.")
    _proven_dangerous(python_exe, tmp_path, path, canary,
                      "SETITEM of collections.UserDict runs UserDict.__setitem__")
    res = scan_file(path)
    assert any("UserDict.__setitem__ → File.__setitem__" in f.message for f in res.findings), \
        res.to_json()


def test_a_stock_userdict_keeps_its_verdict(tmp_path):
    import collections

    path = tmp_path / "userdict.pkl"
    path.write_bytes(pickle.dumps(collections.UserDict({"a": 1, "b": [2]}), protocol=4))
    _no_implicit_call(path)


# --- F6: functions a method imports; a parenthesised name called -------------------------------

def test_an_imported_function_is_followed(tmp_path, python_exe):
    """OuterProduct.__new__ calls expand(args[0]), imported from sympy.core.function, which
    sympifies (evaluates) its argument: text that calls `(open)(...)` writes a file."""
    pytest.importorskip("sympy")
    canary = tmp_path / "canary"
    code = f"(open)({str(canary)!r},'w').write('pwned')"
    path = tmp_path / "outer.pkl"
    path.write_bytes(b"\x80\x02" + _global("sympy.physics.quantum.operator", "OuterProduct")
                     + b"(" + _s(code) + _s("x") + b"t\x81.")
    _proven_dangerous(python_exe, tmp_path, path, canary,
                      "NEWOBJ of sympy.physics.quantum.operator.OuterProduct runs "
                      "OuterProduct.__new__, which calls sympy.core.sympify.sympify")
    assert "code-in-arguments" in _cli(python_exe, path)[1]


@pytest.mark.parametrize("text", [
    "(open)('x','w').write('y')", "open  # note\n('x', 'w')", "open\\\n('x')",
    "\uff4f\uff50\uff45\uff4e('x')", "((eval))('1')", "(os).system('id')", "x = '#'; (exec)(y)",
    "(__import__)('os')",
])
def test_a_called_name_reads_as_code_however_it_is_spelt(text):
    assert looks_like_code(text)


@pytest.mark.parametrize("text", [
    "open source weights (v2)", "reopen(x)", "open_file(x)", "layers.0.weight", "evaluation",
    "the model's (open) license", "compile-time flags",
])
def test_plain_text_does_not_read_as_code(text):
    assert not looks_like_code(text)
