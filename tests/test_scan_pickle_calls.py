"""Calls a pickle makes without REDUCE, and imports judged by what they are (red-team round).

Each hostile sample is built here, its harm proven under the real loader in a fresh process (a
canary appears that was absent; for the pointer call, the loader dies by SIGSEGV), and only
then scanned: DANGEROUS, exit 2. Benign twins keep the verdict they had.

- BUILD on a function or class itself sets attributes on shared code, and torch's legacy
  reader's `('module', obj, file, source)` persistent id writes `<obj.__name__>.patch` when
  `obj.dump_patches` is set (`_check_container_source`).
- OBJ and INST call their target with no arguments too (pickle's `_instantiate`).
- A BUILD state that stores `__setstate__` (or `append`, `extend`, `add`, any dunder) on an
  instance makes a later BUILD (APPENDS, ADDITEMS) a call of the stored value.
- An import is classified by what it is: leaf names whatever their case, re-exports of denied
  callables followed through the source (`static_source`, nothing imported).
- NEWOBJ_EX keywords that are raw pointers to torch's C constructors (`allocator`, `cdata`).
- The enum-member exemption (`Class('word')`) only where the class is an enum by its source.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import textwrap
import zipfile
from pathlib import Path

import pytest
from loader_proof import run_loader as _load
from loader_proof import scan_cli as _cli
from loader_proof import unicode as _s
from loader_proof import wait_for as _wait_for

from inspector.scan.engine import scan_file
from inspector.scan.pickles.policy import call_verdict, classify

POPEN_REEXPORT = (b"torch.distributed.elastic.multiprocessing.subprocess_handler."
                  b"subprocess_handler\nPopen\n")


def _dangerous(res) -> list[str]:
    return ([f"{f.code}: {f.message}" for f in res.findings if f.severity == "dangerous"]
            + [f"{g.import_name}: {g.reason}" for g in res.globals if g.severity == "dangerous"])


# --- BUILD on a global; torch's legacy source check (finding 1) -------------------------------

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_SYS_INFO = {"protocol_version": 1001, "little_endian": True,
                   "type_sizes": {"short": 2, "int": 4, "long": 4}}


def _legacy(path: Path, main: bytes) -> Path:
    """A legacy (non-zip) torch file whose main pickle is `main`, with no storages."""
    with open(path, "wb") as f:
        pickle.dump(LEGACY_MAGIC, f, protocol=2)
        pickle.dump(1001, f, protocol=2)
        pickle.dump(LEGACY_SYS_INFO, f, protocol=2)
        f.write(main)
        pickle.dump([], f, protocol=2)
    return path


def test_build_on_a_function_and_legacy_module_id_write_a_patch_file(tmp_path, python_exe):
    canary = tmp_path / "elsewhere" / "canary"
    canary.parent.mkdir()
    main = (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00"      # an allowed function
            b"N}(" + _s("dump_patches") + b"\x88" + _s("__name__") + _s(str(canary)) + b"u"
            b"\x86b0"                                                # BUILD on it: setattr
            b"}" + _s("weights") + b"(" + _s("module") + b"h\x00" + _s("model.py")
            + _s("class Net:\n    pass  # not the installed source\n") + b"tQs.")
    path = _legacy(tmp_path / "legacy.pt", main)
    patch = Path(f"{canary}.patch")
    assert not patch.exists()
    proc = _load(python_exe, f"import torch; torch.load({str(path)!r}, weights_only=False)",
                 tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert patch.exists(), "the legacy reader did not write the .patch file"
    assert "class Net" in patch.read_text()
    patch.unlink()
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "build-on-global" in out and "legacy-source-patch" in out, out
    assert not patch.exists()


def test_legacy_save_of_a_whole_model_keeps_its_verdict(tmp_path, python_exe):
    """torch.save(model, _use_new_zipfile_serialization=False) writes a ('module', cls, file,
    source) persistent id for each module class: no BUILD on them, no finding of this kind."""
    (tmp_path / "tinynet.py").write_text(textwrap.dedent("""
        import torch

        class TinyNet(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(3, 2)
    """))
    path = tmp_path / "legacy_model.pt"
    proc = _load(python_exe, "import torch, tinynet; torch.save(tinynet.TinyNet(), "
                 f"{str(path)!r}, _use_new_zipfile_serialization=False)", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert b"module" in path.read_bytes()  # the source-check persistent ids are there
    res = scan_file(path)
    assert not [f for f in res.findings if f.code in ("build-on-global", "legacy-source-patch")]
    # its verdict is what it was: the walk pushes a value it cannot see for every persistent
    # id, so the NEWOBJ of the module's class is an indirect call (dangerous before this, too)
    assert {f.code for f in res.findings if f.severity == "dangerous"} <= {"indirect-call"}


# --- OBJ / INST with no arguments (finding 2) ---------------------------------------------------

@pytest.mark.parametrize("name, data, loader, harm", [
    ("obj_write_config", b"(caccelerate.utils\nwrite_basic_config\no.",
     "import pickle; pickle.load(open(P, 'rb'))", "config"),
    ("inst_logout", b"(ihuggingface_hub\nlogout\n.", "import joblib; joblib.load(P)", "token"),
])
def test_obj_and_inst_without_arguments_call_their_target(tmp_path, python_exe, name, data,
                                                           loader, harm):
    pytest.importorskip("accelerate" if harm == "config" else "huggingface_hub")
    home = tmp_path / "hf_home"
    home.mkdir()
    token = home / "token"
    token.write_text("hf_not_a_real_token")
    config = home / "accelerate" / "default_config.yaml"
    path = tmp_path / f"{name}.pkl"
    path.write_bytes(data)
    env = {**os.environ, "HF_HOME": str(home)}
    proc = _load(python_exe, f"P = {str(path)!r}; {loader}", tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    if harm == "config":
        assert config.exists(), "write_basic_config() did not run"
    else:
        assert not token.exists(), "logout() did not delete the token"
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "call-outside-allowlist" in out, out


def test_python3_protocol_0_and_1_objects_keep_their_verdict(tmp_path):
    """Python 3 writes no INST or OBJ for instances (copyreg._reconstructor, REDUCE), and OBJ
    of an allowed class with no arguments stays what it was."""
    import argparse

    for proto in (0, 1):
        path = tmp_path / f"ns{proto}.pkl"
        path.write_bytes(pickle.dumps({"hparams": argparse.Namespace(lr=0.1)}, protocol=proto))
        assert scan_file(path).verdict == "suspicious"
    path = tmp_path / "od.pkl"
    path.write_bytes(b"(ccollections\nOrderedDict\no.")
    assert scan_file(path).verdict == "safe"


# --- a BUILD that stores __setstate__ (finding 3) -----------------------------------------------

def _splice_into_torch_zip(path: Path, payload: bytes) -> Path:
    """torch.save of a small model's state and an epoch, with d['optimizer'] = payload."""
    import torch

    buf = io.BytesIO()
    torch.save({"model": torch.nn.Linear(2, 2).state_dict(), "epoch": 3}, buf)
    zin = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                assert data.endswith(b"u.")
                data = data[:-1] + _s("optimizer") + payload + b"s."
            zout.writestr(info.filename, data)
    return path


def test_setstate_stored_by_build_runs_a_shell_command_in_a_torch_zip(tmp_path, python_exe):
    canary = tmp_path / "canary"
    payload = (b"ccollections\nOrderedDict\n)R"                   # an allowed OrderedDict()
               b"}" + _s("__setstate__") + b"c" + POPEN_REEXPORT + b"sb"  # o.__setstate__ = Popen
               b"(" + _s("sh") + _s("-c") + _s(f"touch {canary}") + b"lb")  # Popen([...])
    path = _splice_into_torch_zip(tmp_path / "ckpt.pt", payload)
    proc = _load(python_exe, "import torch, time; "
                 f"torch.load({str(path)!r}, weights_only=False); time.sleep(0.5)", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _wait_for(canary), "the stored __setstate__ did not run"
    canary.unlink()
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "build-stores-called-attribute" in out, out


@pytest.mark.parametrize("state", ["dict", "slots", "ordereddict"])
def test_setstate_stored_by_build_is_a_call_of_any_callable(tmp_path, python_exe, state):
    """mailbox.Maildir (an import judged suspicious, no denied name) stored as __setstate__ by
    a dict state, a slot state or an OrderedDict state: the next BUILD calls
    Maildir('<dir>'), which creates the folder."""
    stored = _s("__setstate__") + b"cmailbox\nMaildir\n"
    first = {"dict": b"}" + stored + b"s",
             "slots": b"N}" + stored + b"s\x86",
             "ordereddict": b"ccollections\nOrderedDict\n)R" + stored + b"s"}[state]
    data = (b"\x80\x02ccollections\nOrderedDict\n)R" + first + b"b"
            + _s("mdcanary") + b"b.")
    path = tmp_path / "setstate.pkl"
    path.write_bytes(data)
    canary = tmp_path / "mdcanary"
    proc = _load(python_exe, f"import pickle; pickle.load(open({str(path)!r}, 'rb'))", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (canary / "new").is_dir(), "the stored __setstate__ was not called"
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    evidence = _dangerous(res)
    assert any("build-stores-called-attribute" in e for e in evidence), evidence
    assert any("mailbox.Maildir" in e and "__setstate__" in e for e in evidence), evidence


def test_append_stored_by_build_is_called_by_appends(tmp_path, python_exe):
    """APPENDS on a non-list looks up `extend`, then `append`, on the instance."""
    data = (b"\x80\x02ccollections\nOrderedDict\n)R}" + _s("append") + b"cmailbox\nMaildir\n"
            b"sb(" + _s("mdcanary") + b"e.")
    path = tmp_path / "append.pkl"
    path.write_bytes(data)
    proc = _load(python_exe, f"import pickle; pickle.load(open({str(path)!r}, 'rb'))", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "mdcanary" / "new").is_dir()
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    assert any("mailbox.Maildir" in e and "append" in e for e in _dangerous(res))


def test_checkpoints_with_plain_object_state_keep_their_verdict(tmp_path):
    import argparse
    import collections

    import torch

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 3)
    path = tmp_path / "train.pt"
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(),
                "sched": sched.state_dict()}, path)
    assert scan_file(path).verdict == "safe"
    path = tmp_path / "hp.pt"
    torch.save({"hparams": argparse.Namespace(lr=0.1, name="run"),
                "od": collections.OrderedDict(a=1)}, path)
    res = scan_file(path)
    assert res.verdict == "suspicious", res.to_json()
    assert not [f for f in res.findings if f.code == "build-stores-called-attribute"]


def test_leaf_names_are_denied_whatever_their_case():
    for module, name in [("somepkg.helpers", "Popen"), ("somepkg.helpers", "SYSTEM"),
                         ("somepkg", "Check_Output")]:
        assert classify(module, name).severity == "dangerous", (module, name)
    assert classify("somepkg.helpers", "Opener").severity == "suspicious"


REEXPORT_PROBE = """
import sys
from inspector.scan.pickles.policy import classify
c = classify("transformers.tokenization_utils_sentencepiece", "copyfile")
print(c.severity, "|", c.reason)
print("imported:", sorted(m for m in ("transformers", "torch") if m in sys.modules))
"""


def test_a_reexport_of_a_denied_callable_is_classified_as_what_it_is(python_exe, tmp_path):
    """transformers' `from shutil import copyfile` hands out shutil.copyfile under a name no
    deny rule matches; the source says what it is, and nothing is imported to read it."""
    pytest.importorskip("transformers")
    truth = _load(python_exe, "import shutil, transformers.tokenization_utils_sentencepiece "
                  "as m; print(m.copyfile is shutil.copyfile)", tmp_path)
    assert truth.stdout.strip() == "True", truth.stderr
    proc = _load(python_exe, REEXPORT_PROBE, tmp_path)
    severity, reason = proc.stdout.splitlines()[0].split(" | ")
    assert severity == "dangerous", proc.stdout + proc.stderr
    assert "shutil.copyfile" in reason
    assert proc.stdout.splitlines()[1] == "imported: []"
    popen = classify("torch.distributed.elastic.multiprocessing.subprocess_handler."
                     "subprocess_handler", "Popen")
    assert popen.severity == "dangerous"


# --- NEWOBJ_EX pointer keywords (finding 5) -----------------------------------------------------

def _untyped_storage(kwargs: bytes) -> bytes:
    return (b"\x80\x04ctorch.storage\nUntypedStorage\nK\x10\x85" + kwargs + b"\x92.")


def test_storage_allocator_keyword_is_a_pointer_call(tmp_path, python_exe):
    path = tmp_path / "allocator.pkl"
    path.write_bytes(_untyped_storage(b"}\x8c\tallocator\x8a\x05\x41\x41\x41\x41\x41s"))
    proc = _load(python_exe, "import pickle, torch; print('before', flush=True); "
                 f"pickle.load(open({str(path)!r}, 'rb')); print('survived')", tmp_path)
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stdout, proc.stderr)
    assert "before" in proc.stdout and "survived" not in proc.stdout
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "torch-pointer-keyword" in out and "allocator" in out, out


def test_storage_with_a_device_keyword_stays_safe(tmp_path, python_exe):
    path = tmp_path / "device.pkl"
    path.write_bytes(_untyped_storage(b"}\x8c\x06device\x8c\x03cpus"))
    proc = _load(python_exe, "import pickle, torch; "
                 f"print(len(pickle.load(open({str(path)!r}, 'rb'))))", tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "16", proc.stderr
    assert scan_file(path).verdict == "safe"


# --- the enum-member exemption (finding 6) ------------------------------------------------------

def test_popen_reexport_called_with_one_word_is_dangerous(tmp_path, python_exe):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    canary = tmp_path / "spawned"
    program = bin_dir / "rtcanary"
    program.write_text(f"#!/bin/sh\necho SPAWNED > {canary}\n")
    program.chmod(0o755)
    path = tmp_path / "popen.pkl"
    path.write_bytes(b"\x80\x02c" + POPEN_REEXPORT + _s("rtcanary") + b"\x85R.")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = _load(python_exe, f"import pickle, time; pickle.load(open({str(path)!r}, 'rb')); "
                 "time.sleep(0.5)", tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert _wait_for(canary), "Popen('rtcanary') did not spawn the program"
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "enum member" not in out, out


def test_the_enum_pattern_needs_an_enum_class(tmp_path, python_exe):
    """mailbox.Maildir('mdcanary') looks like an enum member rebuilt by value; it creates a
    mail folder."""
    path = tmp_path / "maildir.pkl"
    path.write_bytes(b"\x80\x02cmailbox\nMaildir\n" + _s("mdcanary") + b"\x85R.")
    proc = _load(python_exe, f"import pickle; pickle.load(open({str(path)!r}, 'rb'))", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "mdcanary" / "cur").is_dir()
    res = scan_file(path)
    assert res.verdict == "dangerous", res.to_json()
    assert any("calls mailbox.Maildir" in e for e in _dangerous(res))


@pytest.mark.parametrize("module, name, value", [
    ("transformers.trainer_utils", "IntervalStrategy", "'steps'"),
    ("lightning.pytorch.trainer.states", "TrainerFn", "'fit'"),
    ("re", "RegexFlag", "2"),
])
def test_real_enum_members_keep_the_exemption(module, name, value):
    pytest.importorskip(module.split(".")[0])
    target = f"{module}.{name}"
    verdict = call_verdict(target, False, [f"{target}({value})"])
    assert verdict is not None and verdict.severity == "suspicious", verdict
    assert "enum member" in verdict.reason


# --- a finalizer the load leaves behind (red-team round 53) ----------------------------------


@pytest.mark.parametrize("module", ["numpy.lib._datasource", "numpy.lib.npyio"])
def test_a_datasource_whose_finalizer_removes_a_folder_is_dangerous(tmp_path, python_exe,
                                                                    module):
    """NumPy's DataSource removes its `_destpath` when it is collected, if `_istmpdest` is set
    (its __del__): a pickle that builds one (NEWOBJ + BUILD) deletes any folder once the loaded
    object is dropped, under its defining module's name as under the re-export's. The
    finalizer is judged from its source as every method the load runs unasked is."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "kept.txt").write_text("precious")
    state = (b"}" + _s("_destpath") + _s(str(victim)) + b"s" + _s("_istmpdest") + b"\x88s")
    data = (b"\x80\x02c" + module.encode() + b"\nDataSource\n)\x81" + state + b"b.")
    path = tmp_path / "source.pkl"
    path.write_bytes(data)
    proc = _load(python_exe, f"import pickle; pickle.load(open({str(path)!r}, 'rb'))", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not victim.exists(), "the finalizer did not remove the folder"
    victim.mkdir()
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert victim.exists()
    assert "DataSource" in out and "dangerous" in out, out
    # the finalizer itself is judged (IMPLICIT_METHODS), beside the module's deny entry
    assert "runs DataSource.__del__, which calls shutil.rmtree" in out, out


def test_a_pass_through_rebuild_keeps_the_class_whose_setstate_the_build_runs(tmp_path,
                                                                               python_exe):
    """torch.jit._pickle.restore_type_tag (allowed) hands its first argument back: the BUILD
    after it runs that instance's own __setstate__ (fsspec's MMapCache creates a file at the
    state's path), judged as the same BUILD straight on the instance is."""
    canary = tmp_path / "canary"
    state = (b"}(" + _s("size") + b"M\x00\x10" + _s("location") + _s(str(canary))
             + _s("blocksize") + b"K\x01" + _s("fetcher") + b"Nu")
    made = b"cfsspec.caching\nMMapCache\n)\x81"
    laundered = b"ctorch.jit._pickle\nrestore_type_tag\n(" + made + _s("x") + b"tR"
    path = tmp_path / "laundered.pkl"
    path.write_bytes(b"\x80\x02" + laundered + state + b"b.")
    proc = _load(python_exe, f"import pickle; pickle.load(open({str(path)!r}, 'rb'))", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert canary.exists(), "MMapCache.__setstate__ did not create the file"
    canary.unlink()
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "BUILD of fsspec.caching.MMapCache runs MMapCache.__setstate__" in out, out
    assert not canary.exists()


def test_a_method_the_load_runs_is_followed_into_an_object_the_pickle_put_in_an_attribute(
        tmp_path, python_exe):
    """fsspec's FSMap.__setitem__ (SETITEMS) writes through `self.fs`: the LocalFileSystem the
    pickle's BUILD state put there writes the pickle's bytes to a file of its choosing. The
    judge follows `self.fs.pipe_file` into that class's own method (`Call.attrs`)."""
    local = (b"cfsspec.implementations.local\nLocalFileSystem\n)\x81}(" + _s("auto_mkdir")
             + b"\x88" + _s("_intrans") + b"\x89" + _s("_transaction") + b"Nub")
    mapping = (b"cfsspec.mapping\nFSMap\n)\x81}(" + _s("fs") + local + _s("root")
               + _s(str(tmp_path)) + _s("_root_key_to_str") + _s(f"{tmp_path}/") + b"ub")
    path = tmp_path / "fsmap.pkl"
    path.write_bytes(b"\x80\x02" + mapping + b"(" + _s("canary") + b"C\x05pwnedu.")
    proc = _load(python_exe, f"import pickle; pickle.load(open({str(path)!r}, 'rb'))", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "canary").read_bytes() == b"pwned", "FSMap did not write the file"
    (tmp_path / "canary").unlink()
    code, out = _cli(python_exe, path)
    assert code == 2, out
    assert "SETITEMS of fsspec.mapping.FSMap runs FSMap.__setitem__" in out, out
    assert "AbstractFileSystem.pipe_file" in out, out
    assert not (tmp_path / "canary").exists()
