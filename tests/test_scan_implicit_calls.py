"""Code the unpickler runs that a class DEFINES, on opcodes that are no call (red-team round).

Each hostile sample is built here, its harm proven under the real loader in a fresh process (a
canary appears that was absent, made by nothing of ours), and only then scanned through the
CLI: DANGEROUS, exit 2. Benign twins keep the verdict they had (never dangerous).

- A pickle handed to a class (BUILD state, constructor arguments) whose own code unpickles it
  (torch's `_DataPipeSerializationWrapper.__setstate__` runs `pickle.loads`) is walked also
  without a PROTO opcode (protocol 0 or 1, or binary opcodes with no PROTO in front).
- NEWOBJ runs `cls.__new__` (sympy's Function sympifies, that is evaluates, a string), BUILD
  `__setstate__`, SETITEMS on a non-dict `__setitem__` (zict's File writes and deletes files),
  APPEND on a non-list `extend` or `append` (partd's File writes a file anywhere): the method
  is read from the installed source (never imported) and judged by what it calls.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from loader_proof import binbytes as _bb
from loader_proof import run_loader as _load
from loader_proof import scan_cli as _cli
from loader_proof import unicode as _s
from loader_proof import wait_for as _wait_for

from inspector.scan.engine import scan_file

DATAPIPE = b"torch.utils.data.datapipes.datapipe\n_DataPipeSerializationWrapper\n"


def _pickle_load(path: Path) -> str:
    return f"import pickle; pickle.load(open({str(path)!r}, 'rb'))"


# --- a pickle without PROTO handed to a class that unpickles it (finding 1) --------------------

def _inner(kind: str, command: str) -> bytes:
    """An inner pickle that runs `command`, with no PROTO opcode."""
    if kind == "protocol0":
        return b"cposix\nsystem\n(V" + command.encode() + b"\ntR."
    # binary opcodes (SHORT_BINUNICODE, STACK_GLOBAL) read without any PROTO in front
    return (b"\x8c\x05posix\x8c\x06system\x93" + _s(command) + b"\x85R.")


@pytest.mark.parametrize("kind", ["protocol0", "binary_without_proto"])
def test_datapipe_wrapper_unpickles_a_pickle_without_proto(tmp_path, python_exe, kind):
    canary = tmp_path / "canary"
    inner = _inner(kind, f"touch {canary}")
    path = tmp_path / "datapipe.pkl"
    # _DataPipeSerializationWrapper.__new__ (NEWOBJ), then BUILD with (inner, False): its
    # __setstate__ runs pickle.loads(inner)
    path.write_bytes(b"\x80\x02c" + DATAPIPE + b")\x81" + _bb(inner) + b"\x89\x86b.")
    assert not canary.exists()
    proc = _load(python_exe, _pickle_load(path), tmp_path)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert _wait_for(canary), "the real loader did not run the inner pickle"
    canary.unlink()
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "nested-pickle" in out and "may unpickle it" in out, out
    assert "runs nothing" not in out, out
    assert not canary.exists()


# --- methods a class defines that the unpickler runs without a call opcode (finding 2) --------

SYMPY_EVAL = "[globals()['__imp'+'ort__']('o'+'s').popen('touch {canary}').read(), x][1]"


def _sympy_sin(path: Path, canary: Path) -> None:
    """NEWOBJ sin.__new__(sin, TEXT): Function.__new__ sympifies TEXT (parse_expr: eval)."""
    text = SYMPY_EVAL.format(canary=canary)
    path.write_bytes(b"\x80\x02csympy.functions.elementary.trigonometric\nsin\n" + _s(text)
                     + b"\x85\x81.")


def _zict_setitems(path: Path, canary: Path) -> None:
    """NEWOBJ zict.file.File, BUILD of plain data, SETITEMS: File.__setitem__ writes a file
    (and deletes the one `filenames` names)."""
    folder, name = str(canary.parent), canary.name
    path.write_bytes(b"\x80\x02czict.file\nFile\n)\x81}(" + _s("directory") + _s(folder)
                     + _s("memmap") + b"\x89" + _s("filenames") + b"}" + _s("_inc") + b"K\x00ub("
                     + _s(name) + b"C\x07pwned!\nu.")


def _partd_append(path: Path, canary: Path) -> None:
    """NEWOBJ partd.file.File, BUILD {'path': FOLDER}, APPEND {NAME: bytes}: File.append writes
    FOLDER/NAME (File.__setstate__ runs File.__init__, which makes FOLDER)."""
    folder, name = str(canary.parent), canary.name
    path.write_bytes(b"\x80\x02cpartd.file\nFile\n)\x81}" + _s("path") + _s(folder) + b"sb}"
                     + _s(name) + b"C\x1bimport os; os.system('id')\nsa.")


def _partd_reconstructor(path: Path, canary: Path) -> None:
    """Protocol 0: copyreg._reconstructor(partd.file.File, object, None), then BUILD: no NEWOBJ
    at all; File.__setstate__ runs File.__init__, which makes the folder it is given."""
    path.write_bytes(b"ccopyreg\n_reconstructor\n(cpartd.file\nFile\nc__builtin__\nobject\nNtR"
                     b"(dVpath\nV" + str(canary).encode() + b"\nsb.")


@pytest.mark.parametrize("name, build, finding", [
    ("sympy_newobj", _sympy_sin, "NEWOBJ of sympy.functions.elementary.trigonometric.sin runs "
     "DefinedFunction.__new__, which calls sympy.core.sympify.sympify"),
    ("zict_setitems", _zict_setitems, "SETITEMS of zict.file.File runs File.__setitem__"),
    ("partd_append", _partd_append, "APPEND of partd.file.File runs File.append"),
    ("partd_reconstructor", _partd_reconstructor,
     "BUILD of partd.file.File runs File.__setstate__, which calls os.makedirs"),
])
def test_a_method_the_class_defines_is_judged_by_what_it_calls(tmp_path, python_exe, name,
                                                               build, finding):
    pytest.importorskip(name.split("_")[0])
    work = tmp_path / "work"
    work.mkdir()
    canary = tmp_path / "out" / "canary" if name == "partd_reconstructor" else work / "canary"
    path = tmp_path / f"{name}.pkl"
    build(path, canary)
    # zict's File names the file it writes KEY#N (`_safe_key`)
    made = canary.with_name("canary#0") if name == "zict_setitems" else canary
    assert not made.exists()
    proc = _load(python_exe, _pickle_load(path), work)
    assert _wait_for(made), f"the real loader made no canary: {proc.stderr[-600:]}"
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "implicit-call" in out and finding in out, out


def test_torch_sympy_function_in_a_torch_save_evaluates_text(tmp_path, python_exe):
    """torch's own CeilToInt (a sympy Function) in a checkpoint's hyper-parameters, as
    torch.load(weights_only=False) reads a Lightning checkpoint: NEWOBJ runs Function.__new__."""
    canary = tmp_path / "canary"
    path = tmp_path / "hp.ckpt"
    build = f"""
import copyreg, torch
from torch.utils._sympy.functions import CeilToInt
class H:
    __class__ = property(lambda self: CeilToInt)
    def __reduce_ex__(self, proto):
        return (copyreg.__newobj__, (CeilToInt, {SYMPY_EVAL.format(canary=canary)!r}))
torch.save({{"state_dict": torch.nn.Linear(2, 2).state_dict(), "hyper_parameters": {{"n": H()}}}},
           {str(path)!r})
"""
    proc = _load(python_exe, build, tmp_path)
    assert proc.returncode == 0 and not canary.exists(), proc.stderr[-500:]
    proc = _load(python_exe, f"import torch; torch.load({str(path)!r}, weights_only=False)",
                 tmp_path)
    assert _wait_for(canary), f"the real loader made no canary: {proc.stderr[-600:]}"
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "NEWOBJ of torch.utils._sympy.functions.CeilToInt runs Function.__new__, which " \
        "calls sympy.core.sympify.sympify" in out, out


# --- benign twins: the same opcodes on classes whose methods call nothing denied -------------

def _benign_files(folder: Path) -> dict[str, Path]:
    """Real saves of stock objects (their classes' __new__, __setstate__, __setitem__ run)."""
    import argparse
    import collections
    import datetime
    import pathlib
    import pickle

    import joblib
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    nn, sched = torch.nn, torch.optim.lr_scheduler
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4, 2), nn.LayerNorm(2), nn.Embedding(5, 2), nn.LSTM(2, 2))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizers = [torch.optim.AdamW(model.parameters()), sgd, torch.optim.Adam(model.parameters()),
                  torch.optim.RMSprop(model.parameters()), torch.optim.Adagrad(model.parameters())]
    schedulers = [sched.StepLR(sgd, 3), sched.MultiStepLR(sgd, [1, 2]), sched.OneCycleLR(
        sgd, 0.1, total_steps=10), sched.CosineAnnealingWarmRestarts(sgd, 5),
        sched.ReduceLROnPlateau(sgd), sched.LinearLR(sgd)]
    hparams = {"ns": argparse.Namespace(lr=0.1, data=pathlib.Path("/data"), tags=["a"]),
               "cfg": OmegaConf.create({"model": {"dim": 4, "layers": [1, 2]}, "lr": 0.1}),
               "lcfg": OmegaConf.create([1, {"a": 2}]),
               "when": [datetime.datetime(2024, 1, 2, 3, 4), datetime.date(2024, 1, 2),
                        datetime.timedelta(3)],
               "paths": [pathlib.Path("/a"), pathlib.PurePosixPath("b")],
               "col": [collections.OrderedDict(a=1), collections.defaultdict(list, {"a": [1]}),
                       collections.Counter("abca"), collections.deque([1, 2], maxlen=5)],
               "rng": np.random.get_state(), "torch_rng": torch.get_rng_state(),
               "arr": np.arange(6.0).reshape(2, 3)}
    x = np.random.default_rng(0).normal(size=(40, 3))
    y = (x[:, 0] > 0).astype(int)
    saves = {
        "state_dict.pt": model.state_dict(), "whole_model.pt": model,
        "optimizers.pt": optimizers, "optimizer_states.pt": [o.state_dict() for o in optimizers],
        "schedulers.pt": schedulers, "scheduler_states.pt": [s.state_dict() for s in schedulers],
        "grad_scaler.pt": {"scaler": torch.amp.GradScaler("cpu").state_dict()},
        "hparams.ckpt": {"state_dict": model.state_dict(), "hyper_parameters": hparams},
    }
    out = {}
    for name, value in saves.items():
        torch.save(value, folder / name)
        out[name] = folder / name
    plain = {k: v for k, v in hparams.items() if k != "torch_rng"}
    for proto in (0, 2, 4):
        out[f"hparams_p{proto}.pkl"] = folder / f"hparams_p{proto}.pkl"
        out[f"hparams_p{proto}.pkl"].write_bytes(pickle.dumps(plain, protocol=proto))
    for name, value in {"arrays.joblib": {"a": np.arange(10.0), "o": np.array([1, "x"], object)},
                        "pipeline.joblib": Pipeline([("s", StandardScaler()),
                                                     ("lr", LogisticRegression())]).fit(x, y),
                        "scaler.joblib": StandardScaler().fit(x)}.items():
        joblib.dump(value, folder / name)
        out[name] = folder / name
    return out


def test_benign_saves_keep_their_verdict(tmp_path):
    pytest.importorskip("omegaconf")
    pytest.importorskip("sklearn")
    for name, path in _benign_files(tmp_path).items():
        res = scan_file(path)
        assert res.verdict in ("safe", "suspicious"), (name, res.to_json())
        assert not [f for f in res.findings if f.code == "implicit-call"], (name, res.to_json())


def test_hf_training_args_keep_their_verdict(tmp_path, python_exe):
    pytest.importorskip("transformers")
    path = tmp_path / "training_args.bin"
    proc = _load(python_exe, "import torch; from transformers import TrainingArguments; "
                 f"torch.save(TrainingArguments(output_dir={str(tmp_path / 'o')!r}, "
                 "eval_strategy='steps', lr_scheduler_type='cosine', report_to=[]), "
                 f"{str(path)!r})", tmp_path)
    assert proc.returncode == 0, proc.stderr[-500:]
    res = scan_file(path)
    assert res.verdict == "suspicious", res.to_json()
    assert not [f for f in res.findings if f.code == "implicit-call"], res.to_json()


def test_a_pickle_in_a_plain_container_is_no_call_of_code(tmp_path):
    """A protocol-0 pickle held in a dict, a defaultdict or an OrderedDict is data: their own
    (C) code unpickles nothing, so loading the file runs nothing of it."""
    import collections
    import pickle

    inner = b"cposix\nsystem\n(Vtrue\ntR."
    value = {"plain": {"blob": inner}, "dd": collections.defaultdict(list, {"blob": inner}),
             "od": collections.OrderedDict(blob=inner)}
    path = tmp_path / "values.pkl"
    path.write_bytes(pickle.dumps(value, protocol=4))
    res = scan_file(path)
    assert res.verdict == "suspicious", res.to_json()
    assert not [f for f in res.findings if f.code in ("nested-pickle", "implicit-call")], \
        res.to_json()
