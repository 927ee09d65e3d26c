"""Issue 22, the verdict path: the loaders' own readings (the `dry-run` op in the jail) decide.

Every sample of `readings_samples` is first proven malicious (its payload runs under its target
loader in a throwaway process and creates its canary there), then scanned with the jailed
readings: never safe, skipped or crashed, at least 95 % dangerous, nothing executed. Pickles
nested in values are findings on their key. A differential fuzz sample checks that the verdict's
imports are those CPython's unpicklers resolve in every reading a real loader makes of a mutated
file, and that what only the walker sees is a finding, not an import."""

from __future__ import annotations

import io
import pickle
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from factories import fuzz_seeds, mutate
from proofs import canary_folders, payload_runs_test, proof, run_each_forked
from readings_samples import NESTED_BUILDERS, READINGS_BUILDERS, disagreement, truths
from test_scan_adversarial import LOADER, PRELOAD

from inspector.sandbox.host.client import dry_run_reader
from inspector.scan import readings
from inspector.scan.engine import scan_bytes, scan_file, scan_paths

# test_scan_adversarial's loader, plus the code that later unpickles one value of a file
NESTED_LOADER = LOADER.replace('    elif kind == "dcp":', '''    elif kind.startswith("nested:"):
        import base64, binascii
        value = pickle.load(open(path, "rb"))["config"]["blob"]
        for step in reversed(kind.split(":", 1)[1].split("+")):
            raw = value if isinstance(value, bytes) else value.encode()
            value = {"raw": lambda b: b, "b64": base64.b64decode,
                     "hex": binascii.unhexlify}[step](raw)
        pickle.loads(value)
    elif kind == "dcp":''')
ALL = {**READINGS_BUILDERS, **NESTED_BUILDERS}


@pytest.fixture
def jailed_readings():
    """Scans in this test run the real readers in the jailed worker."""
    readings.set_reader(dry_run_reader)
    yield
    readings.set_reader(None)


# Proves every sample in one interpreter that imports the loaders once, then forks a
# throwaway child per sample (its own process: what a payload does there stays there).
@pytest.fixture(scope="module")
def proven(tmp_path_factory, python_exe):
    """Every sample, built and proven malicious; the proof's canary removed afterwards."""
    work = tmp_path_factory.mktemp("readings")
    with canary_folders("rd", sorted(ALL)) as (short, canaries):
        built = {name: (ALL[name][0], ALL[name][1](work / f"{name}.bin", canary_dir / "c"))
                 for name, canary_dir in canaries.items()}
        runs = [[loader, str(path), str(path.parent)] for loader, path in built.values()]
        outputs = run_each_forked(python_exe, NESTED_LOADER, runs, short, PRELOAD)
        yield {name: proof(path, canaries[name], output)
               for (name, (_, path)), (_, output) in zip(built.items(), outputs, strict=True)}


def test_enough_samples_across_the_classes():
    assert len(READINGS_BUILDERS) >= 40
    assert {loader for loader, _ in READINGS_BUILDERS.values()} >= {
        "pickle", "torch", "numpy", "joblib", "dcp"}


# the first test builds and proves every sample
test_payload_runs_under_its_loader = pytest.mark.timeout(1500)(payload_runs_test(ALL))


@pytest.fixture(scope="module")
def scanned(proven):
    """Every sample scanned once with the jailed readings, in one folder-style batch."""
    readings.set_reader(dry_run_reader)
    try:
        before = {name: path.read_bytes() for name, (path, *_) in proven.items()}
        by_path = {r.path: r for r in scan_paths([p for p, *_ in proven.values()])}
    finally:
        readings.set_reader(None)
    for name, (path, *_) in proven.items():
        assert path.read_bytes() == before[name]
    return {name: by_path[str(path)] for name, (path, *_) in proven.items()}


@pytest.mark.parametrize("name", sorted(ALL))
def test_scan_is_never_safe_skipped_or_crashed_and_runs_nothing(proven, scanned, name):
    _, canary_dir, _, _ = proven[name]
    res = scanned[name]
    assert res.verdict not in ("safe", "skipped"), res.to_json()
    assert res.error is None or res.verdict == "dangerous", res.to_json()
    assert not any(f.code == "readings-unavailable" for f in res.findings), res.to_json()
    assert not any(canary_dir.iterdir()), "the scan executed the payload"


def test_at_least_95_percent_dangerous(scanned):
    verdicts = {name: scanned[name].verdict for name in READINGS_BUILDERS}
    dangerous = [n for n, v in verdicts.items() if v == "dangerous"]
    assert len(dangerous) >= 0.95 * len(verdicts), {n: v for n, v in verdicts.items()
                                                   if v != "dangerous"}


@pytest.mark.parametrize("name", ["put_nul", "int_nul", "zip_nul_int", "npy_nul_int",
                                  "legacy_tar_nul_int", "dcp_metadata_nul_int"])
def test_a_grammar_differential_is_named_and_shows_the_real_import(scanned, name):
    res = scanned[name]
    (use,) = [g for g in res.globals if g.import_name == "os.system"]
    assert use.severity == "dangerous", res.to_json()
    # the reconstructed call is shown once: under the dangerous global, or as the finding
    calls = use.calls + [f.call for f in res.findings if f.code == "call-outside-allowlist"]
    assert any(c and c.startswith("os.system(") for c in calls), res.to_json()


@pytest.mark.parametrize("name", sorted(NESTED_BUILDERS))
def test_a_pickle_in_a_value_is_a_finding_on_its_key(scanned, name):
    res = scanned[name]
    found = [f for f in res.findings if f.code == "nested-pickle-value"]
    assert found and found[0].severity == "suspicious", res.to_json()
    assert "config.blob" in found[0].member and "never unpickle" in found[0].message
    assert res.verdict == "suspicious"  # the file itself loads: nothing in it runs
    # the inner pickle's os.system is the finding's, not an import of the file: no loader
    # unpickles the value on load, and the real readings resolve no import at all
    assert not res.globals
    (truth,) = truths([Path(res.path).read_bytes()], Path(res.path).parent)
    assert not truth


def test_data_only_nested_plain_pickle_is_info(tmp_path, jailed_readings):
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps({"blob": pickle.dumps([1, 2, 3]), "code": "import os"}))
    res = scan_file(path)
    codes = {(f.code, f.severity) for f in res.findings}
    assert ("nested-pickle-value", "info") in codes and ("code-in-value", "info") in codes
    assert res.verdict == "safe", res.to_json()


def test_a_call_outside_the_allow_list_is_dangerous_with_its_call(tmp_path, jailed_readings):
    path = READINGS_BUILDERS["wave_writer"][1](tmp_path / "w.pkl", tmp_path / "never")
    res = scan_file(path)
    calls = [f.call for f in res.findings if f.code == "call-outside-allowlist"]
    assert res.verdict == "dangerous" and any("wave.Wave_write(" in (c or "") for c in calls)
    assert not (tmp_path / "never").exists()


def test_an_enum_rebuilt_by_value_stays_suspicious(tmp_path, jailed_readings):
    from factories import PROTO2, _reduce, p_unicode

    path = tmp_path / "enum.pkl"
    path.write_bytes(_reduce("transformers.trainer_utils", "IntervalStrategy",
                             p_unicode("steps"), proto=PROTO2) + b".")
    assert scan_file(path).verdict == "suspicious"


def test_without_a_reader_the_result_says_nothing_about_readings(tmp_path):
    path = READINGS_BUILDERS["int_nul"][1](tmp_path / "a.pkl", tmp_path / "never")
    res = scan_file(path)
    assert not any(f.code == "parser-differential" for f in res.findings)


def test_differential_fuzz_sample_agrees_with_the_real_readings(tmp_path):
    """2,000 mutants of the fuzz seeds (benchmarks/bench_readings_fuzz.py runs 100,000): every
    import a real loader's reading resolves is in the verdict's globals, and every global is
    one (torch's own zip reader, numpy's zipfile and CPython's unpicklers decide the truth)."""
    rng = random.Random(22)
    seeds = [p.read_bytes() for p in fuzz_seeds(tmp_path / "seeds")
             if p.stat().st_size < 200_000]
    mutants = [mutate(rng.choice(seeds), rng) for _ in range(2000)]
    with readings.deferred():
        results = [scan_bytes(m) for m in mutants]
    readings.read(results, dry_run_reader)
    missed, extra = [], []
    for truth, res in zip(truths(mutants, tmp_path), results, strict=True):
        lacks, holds = disagreement(truth, res)
        if lacks:
            missed.append(sorted(lacks))
        if holds:
            extra.append(sorted(holds))
    assert not missed, missed[:5]
    assert not extra, extra[:5]
    assert not (tmp_path / "seeds" / "CANARY_EXECUTED").exists()


def test_every_deny_note_belongs_to_an_entry_and_every_entry_has_a_capability():
    from inspector.scan.pickles.policy import CAPABILITIES, DENY, DENY_NOTES

    assert set(DENY_NOTES) <= set(DENY)
    assert all(d.capability in CAPABILITIES and d.reason for d in DENY.values())
    assert DENY["os"].note and DENY["os"].note in DENY["os"].text


def test_no_allowed_call_is_on_the_deny_list():
    from inspector.scan.pickles.calls import CALL_ALLOWED
    from inspector.scan.pickles.policy import classify

    for key in CALL_ALLOWED:
        module, _, name = key.rpartition(".")
        assert classify(module, name).severity != "dangerous", key


def test_a_folder_skips_only_files_positively_something_else(tmp_path, jailed_readings):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "notes.txt").write_text("a README of the model\n")
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "tokenizer.model").write_bytes(b"\x0a\x05hello\x12\x03abc\x15\x00\x00\x80\x3f")
    (folder / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    (folder / "unknown.bin").write_bytes(bytes(range(7, 250)) * 3)
    READINGS_BUILDERS["marks_100001"][1](folder / "marks.pkl", tmp_path / "never")
    verdicts = {Path(r.path).name: r.verdict for r in scan_paths([folder])}
    assert verdicts == {"notes.txt": "skipped", "config.json": "skipped",
                        "tokenizer.model": "skipped", "logo.png": "skipped",
                        "unknown.bin": "error", "marks.pkl": "dangerous"}, verdicts


def test_a_global_cut_at_the_end_is_a_differential_the_walker_alone_misses(tmp_path,
                                                                          jailed_readings):
    # at the end of the bytes the C reader takes a name line without its newline and drops its
    # last byte: `systemX` imports os.system; the walker wants the newline and sees nothing
    path = tmp_path / "cut.pkl"
    path.write_bytes(b"\x80\x02cos\nsystemX")
    with readings.using(None):
        assert not any(g.import_name == "os.system" for g in scan_file(path).globals)
    res = scan_file(path)
    assert any(g.import_name == "os.system" and g.severity == "dangerous" for g in res.globals)
    found = [f for f in res.findings if f.code == "parser-differential"]
    assert found and found[0].severity == "dangerous" and "os.system" in found[0].message
    assert res.verdict == "dangerous"


def test_readers_swapped_in_parallel_threads_leave_none_behind():
    """Jobs run in parallel threads each scan with their own reader (`static_scan`); ending
    their blocks out of order must not leave one installed for later scans."""
    import threading

    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with readings.using(dry_run_reader):
            first_in.set()
            second_in.wait(10)
            seen["first"] = readings.current_reader()
        first_out.set()

    def second():
        first_in.wait(10)
        with readings.using(str):
            second_in.set()
            first_out.wait(10)
            seen["second"] = readings.current_reader()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"first": dry_run_reader, "second": str}
    assert readings.current_reader() is None


def test_a_pure_python_reading_past_its_opcode_budget_leaves_the_file_not_safe(jailed_readings):
    # a few hundred bytes of bzip2 that decode to 600,000 one-byte opcodes: past the joblib
    # reading's budget (readings.py_budget: 250,000 + the file's size), which the C readers
    # read whole
    import bz2

    dense = pickle.dumps([None] * 600_000, protocol=2)
    data = bz2.compress(dense)
    assert readings.py_budget(len(data)) < 600_000
    res = scan_bytes(data)
    codes = {f.code for f in res.findings}
    assert "readings-budget" in codes and "readings-unavailable" not in codes
    assert res.verdict == "suspicious" and not res.weights_only_ok
    # the same opcodes as the file's own bytes are read whole: a benign pickle stays safe
    plain = scan_bytes(dense)
    assert "readings-budget" not in {f.code for f in plain.findings}
    assert plain.verdict == "safe", plain.to_json()


def test_an_import_only_the_walker_sees_is_a_finding_as_severe_not_a_global(tmp_path,
                                                                           jailed_readings):
    # `os.sys%m` names no attribute any import system resolves: the C unpickler fails there
    # before anything runs, while the walker reads a GLOBAL of the os module
    path = tmp_path / "mangled.pkl"
    path.write_bytes(b"\x80\x02cos\nsys%m\n(S'id'\ntR.")
    with readings.using(None):
        alone = scan_file(path)
    assert [(g.import_name, g.severity) for g in alone.globals] == [("os.sys%m", "dangerous")]
    assert not any(f.code == "parser-differential" for f in alone.findings)
    res = scan_file(path)
    assert not res.globals
    (found,) = [f for f in res.findings if f.code == "parser-differential"]
    assert found.severity == "dangerous" and "os.sys%m" in found.message
    assert res.verdict == alone.verdict == "dangerous"


def test_a_benign_walker_only_import_is_a_suspicious_finding(tmp_path, jailed_readings):
    # the walker reads a protocol 0 GLOBAL of collections.OrderedDict where the C unpickler,
    # given a non-decimal protocol, stops at byte 1: no loader resolves it
    path = tmp_path / "late.pkl"
    path.write_bytes(b"\x80\xffccollections\nOrderedDict\n)R.")
    with readings.using(None):
        alone = scan_file(path)
    assert [g.import_name for g in alone.globals] == ["collections.OrderedDict"]
    res = scan_file(path)
    assert not res.globals
    (found,) = [f for f in res.findings if f.code == "parser-differential"]
    assert found.severity == "suspicious" and "collections.OrderedDict" in found.message


class _Recording:
    """The jailed reader, keeping each gated job's answer."""

    def __init__(self) -> None:
        self.answers: list[dict] = []

    def __call__(self, request: dict) -> dict:
        return dry_run_reader(request)

    def gated(self, request: dict, gate) -> dict:
        answer = dry_run_reader.gated(request, gate)
        self.answers.append(answer)
        return answer


def test_a_folder_streams_its_readings_part_by_part(tmp_path, monkeypatch):
    """The worker reads the walked files part by part while the rest are walked: one job, one
    part per PART_FILES files, and every file's readings folded in (none left unread)."""
    from factories import mal_os_system, save_state_dict, small_state_dict

    from inspector.scan.discover import discover
    from inspector.scan.engine import scan_batch

    monkeypatch.setattr(readings, "PART_FILES", 4)
    for i in range(9):
        save_state_dict(tmp_path / f"m{i}.pt", small_state_dict(i))
    mal_os_system(tmp_path / "m9.pkl", tmp_path / "canary")
    recording = _Recording()
    with readings.using(recording):
        results = scan_batch(list(discover([tmp_path])))
    assert [a["parts"] for a in recording.answers] == [3]
    verdicts = {Path(r.path).name: r.verdict for r in results}
    assert verdicts == {**{f"m{i}.pt": "safe" for i in range(9)}, "m9.pkl": "dangerous"}
    assert not any(f.code == "readings-unavailable" for r in results for f in r.findings)
    assert not (tmp_path / "canary").exists()


def test_a_walk_that_fails_mid_stream_raises_its_own_error(tmp_path, monkeypatch):
    """A walk that fails after parts went to the worker raises its error, not the job's."""
    monkeypatch.setattr(readings, "PART_FILES", 1)
    path = tmp_path / "a.pkl"
    path.write_bytes(pickle.dumps({"step": 1}))

    def walk():
        with readings.deferred():
            yield scan_file(path)
            yield scan_file(path)
        raise RuntimeError("the walk broke")

    with pytest.raises(RuntimeError, match="the walk broke"):
        readings.read_while(walk(), [], dry_run_reader)


def test_a_reader_whose_worker_never_starts_leaves_every_file_unread_not_a_crash(tmp_path):
    """A job that fails before it asks for the first part (no interpreter, no descriptors):
    the walk still runs to its end and every file says its readings are unavailable."""
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.pkl")
        paths[-1].write_bytes(pickle.dumps({"step": i}))

    class NoWorker:
        def __call__(self, request):
            raise OSError("no interpreter")

        def gated(self, base, parts):
            raise OSError("no interpreter")

    def walk():
        with readings.deferred():
            for path in paths:
                yield scan_file(path)

    results = readings.read_while(walk(), [], NoWorker())
    assert [Path(r.path).name for r in results] == ["0.pkl", "1.pkl", "2.pkl"]
    for r in results:
        assert r.verdict != "safe"
        assert any(f.code == "readings-unavailable" and "no interpreter" in f.message
                   for f in r.findings)


def test_a_later_part_that_is_no_object_is_refused(tmp_path):
    from inspector.sandbox.host.client import SandboxError, run_job

    blobs = tmp_path / "blobs"
    blobs.write_bytes(b"")

    def parts():
        yield {"readings": []}
        yield ["not", "an", "object"]

    with pytest.raises(SandboxError) as err:
        run_job({"op": "dry-run", "path": str(blobs)}, gate=parts)
    assert err.value.code == "bad_request"


def test_a_pickle_in_an_archive_no_reader_opens_is_apart_from_the_verdicts_imports(
        tmp_path, jailed_readings):
    """No loader reads the payload of an archive zipfile and torch refuse (proven: both raise,
    no canary, while the sound archive's payload runs under torch.load), so its import is not
    the verdict's: it is an `unreached-pickle` finding, still dangerous. The same payload in a
    sound archive is a global."""
    from factories import mal_zip_broken_directory, mal_zip_data_pkl

    canary = tmp_path / "canary"
    sound = mal_zip_data_pkl(tmp_path / "sound.pt", canary)
    broken = mal_zip_broken_directory(tmp_path / "broken.pt", canary)
    refusals = subprocess.run(
        [sys.executable, "-c", "import sys, torch, zipfile\n"
         "for load in (lambda p: torch.load(p, weights_only=False), zipfile.ZipFile):\n"
         "    try:\n        load(sys.argv[1])\n    except Exception as e:\n"
         "        print(type(e).__name__)\n", str(broken)],
        capture_output=True, text=True, timeout=300, check=True).stdout.split()
    assert len(refusals) == 2 and not canary.exists(), refusals
    # the same payload in the sound archive runs under torch.load (in a throwaway process)
    subprocess.run([sys.executable, "-c", "import sys, torch\n"
                    "torch.load(sys.argv[1], weights_only=False)", str(sound)],
                   capture_output=True, timeout=300, check=False)
    assert canary.exists()
    canary.unlink()

    res = scan_file(broken)
    assert res.verdict == "dangerous"
    assert ("os", "system") not in {(g.module, g.name) for g in res.globals}
    apart = [f for f in res.findings if f.code == "unreached-pickle"]
    assert apart and apart[0].severity == "dangerous" and "os.system" in apart[0].message
    res = scan_file(sound)
    assert ("os", "system") in {(g.module, g.name) for g in res.globals}
    assert not any(f.code == "unreached-pickle" for f in res.findings)
    assert not canary.exists()  # nothing of ours ran either payload


_TORCH_LOAD = ("import sys, torch\n"
               "try:\n    torch.load(sys.argv[1], weights_only=False)\n"
               "except Exception as e:\n    print(type(e).__name__)\n")


def _torch_load(path: Path) -> str:
    """torch.load(weights_only=False) of `path` in a throwaway process: the error it raises
    (empty when it loads)."""
    return subprocess.run([sys.executable, "-c", _TORCH_LOAD, str(path)], capture_output=True,
                          text=True, timeout=300, check=True).stdout.strip()


def test_torch_s_own_zip_reader_decides_what_a_damaged_archive_hands_torch_load(
        tmp_path, jailed_readings):
    """Where the scan's zip reader finds an archive damaged, torch's own reader (in the jail)
    decides which pickles torch.load unpickles. A local header naming another file: torch
    trusts the central directory and runs the payload (the canary appears), so os.system is
    the verdict's global. A data.pkl entry on another disk: torch refuses the archive (it
    raises, no canary), so os.system is only an `unreached-pickle` finding, still dangerous."""
    from factories import mal_zip_data_pkl_other_disk, mal_zip_local_name_mismatch

    canary = tmp_path / "canary"
    read = mal_zip_local_name_mismatch(tmp_path / "read.pt", canary)
    assert _torch_load(read) == "" and canary.exists()
    canary.unlink()
    refused = mal_zip_data_pkl_other_disk(tmp_path / "refused.pt", canary)
    assert _torch_load(refused) and not canary.exists()

    res = scan_file(read)
    codes = {f.code for f in res.findings}
    assert "zip-name-mismatch" in codes and "unreached-pickle" not in codes, codes
    assert res.verdict == "dangerous"
    assert ("os", "system") in {(g.module, g.name) for g in res.globals}
    res = scan_file(refused)
    assert "zip-entry-fields" in {f.code for f in res.findings}
    assert res.verdict == "dangerous"
    assert ("os", "system") not in {(g.module, g.name) for g in res.globals}
    apart = [f for f in res.findings if f.code == "unreached-pickle"]
    assert apart and apart[0].severity == "dangerous" and "os.system" in apart[0].message
    assert not canary.exists()  # nothing of ours ran either payload


def test_a_pickle_past_where_every_loader_s_reading_stops_is_apart(tmp_path, jailed_readings):
    """Back-to-back pickles: the second pops an empty stack, which CPython's unpickler refuses
    (a multi-pickle loop raises there: the third, an os.system call, never runs), while the
    walk reads on. The third's import is not the verdict's: it is an `unreached-pickle`
    finding, still dangerous. With a sound second pickle the payload runs and is a global."""
    from factories import PROTO2, call, touch_cmd

    canary = tmp_path / "canary"
    payload = call("os", "system", touch_cmd(canary))
    loop = ("import pickle, sys\nf = open(sys.argv[1], 'rb')\n"
            "try:\n    while True:\n        pickle.load(f)\n"
            "except EOFError:\n    pass\nexcept Exception as e:\n    print(type(e).__name__)\n")
    for second, runs in ((PROTO2 + b"0N.", False), (PROTO2 + b"N.", True)):
        path = tmp_path / f"stream-{runs}.pkl"
        path.write_bytes(PROTO2 + b"K\x01." + second + payload)
        _global_only_where_it_runs(path, loop, canary, runs)
    assert not canary.exists()


def _global_only_where_it_runs(path: Path, load: str, canary: Path, runs: bool) -> None:
    """`load` (a script given the path) runs the os.system payload of `path` in a throwaway
    process exactly when `runs` (else it prints the error it raised); the scan calls the file
    dangerous either way, with os.system a global where it runs and an `unreached-pickle`
    finding where it does not."""
    out = subprocess.run([sys.executable, "-c", load, str(path)], capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip()
    assert canary.exists() == runs and bool(out) != runs, out
    canary.unlink(missing_ok=True)
    res = scan_file(path)
    assert res.verdict == "dangerous"
    assert (("os", "system") in {(g.module, g.name) for g in res.globals}) == runs
    assert any(f.code == "unreached-pickle" and "os.system" in f.message
               for f in res.findings) != runs


def _gzip_cut_after(payload: bytes) -> bytes:
    """A gzip stream of `payload` and 6,000 random bytes, then an invalid deflate block: the
    scan's decoder salvages the first 4 KB of content (the payload), while Python's gzip reader
    loses the whole input chunk the error falls in and hands a loader nothing."""
    import os
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    body = c.compress(payload) + c.flush(zlib.Z_FULL_FLUSH)
    body += c.compress(os.urandom(6000)) + c.flush(zlib.Z_FULL_FLUSH)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + body + b"\x07\xff\xff\xff"


def test_compressed_content_past_where_the_stdlib_decoder_stops_is_apart(
        tmp_path, jailed_readings):
    """joblib and `pickle.load(gzip.open(...))` read a gzip pickle through Python's own gzip
    reader: cut by a data error, it hands them nothing (proven: the load raises, no canary),
    so the os.system the scan's salvaging decoder finds is an `unreached-pickle` finding,
    still dangerous, not a global. The same payload in a sound stream runs and is a global."""
    import gzip

    from factories import call, touch_cmd

    canary = tmp_path / "canary"
    payload = call("os", "system", touch_cmd(canary))
    load = ("import gzip, pickle, sys\n"
            "try:\n    pickle.load(gzip.open(sys.argv[1]))\n"
            "except Exception as e:\n    print(type(e).__name__)\n")
    for data, runs in ((_gzip_cut_after(payload), False),
                       (gzip.compress(payload + b"\0" * 6000), True)):
        path = tmp_path / f"model-{runs}.pkl.gz"
        path.write_bytes(data)
        _global_only_where_it_runs(path, load, canary, runs)
    assert not canary.exists()


def test_a_tar_member_is_read_as_the_whole_file_unpacking_writes(tmp_path, jailed_readings,
                                                                  python_exe):
    # pure-Python pickle (joblib's) keeps a last line that has no newline, dropping its last
    # byte as if it were one; C pickle stops: only joblib's reading imports `this`
    payload = b"\x80\x02cthis\ndX"
    archive = tmp_path / "model.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("model.joblib")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    load = ("import pickle, sys, tarfile, joblib\n"
            "tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')\n"
            "read = joblib.load if sys.argv[3] == 'joblib' else (\n"
            "    lambda p: pickle.load(open(p, 'rb')))\n"
            "try:\n    read(sys.argv[2] + '/model.joblib')\n"
            "except Exception as exc:\n    print(type(exc).__name__)\n")
    out = {kind: subprocess.run([python_exe, "-c", load, str(archive), str(tmp_path / kind),
                                 kind], capture_output=True, text=True, check=True).stdout
           for kind in ("joblib", "pickle")}
    # the harm: `import this` ran under joblib.load of the unpacked member (its Zen printed)
    assert "Beautiful is better than ugly" in out["joblib"], out
    assert out["pickle"].strip() == "UnpicklingError", out
    res = scan_file(archive)
    assert ("this", "d") in {(g.module, g.name) for g in res.globals}, res.to_json()
    assert res.verdict == "dangerous", res.to_json()
