"""Answers that agree with the reference reader (issue 22): legacy streams torch refuses are not
`safe` with weights_only_ok, a torch zip whose record is longer than its storage is refused by
`inspect` as a plain torch.load refuses it (the mmap path skips torch's check), and the
admission scan does not count against `inspect --timeout`. The safetensors library's refusals
of uncovered bytes are in `test_safetensors_header.py`."""

from __future__ import annotations

import io
import pickle
import subprocess
import sys
import time
import zipfile

import factories
import pytest
import torch

from inspector.sandbox.host import client, process
from inspector.scan.engine import scan_bytes, scan_file

MAGIC = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
VERSION = pickle.dumps(1001, protocol=2)


def _legacy() -> bytes:
    out = io.BytesIO()
    torch.save({"w": torch.ones(3)}, out, _use_new_zipfile_serialization=False)
    raw = out.getvalue()
    assert raw.startswith(MAGIC + VERSION)
    return raw


def _rest() -> bytes:
    return _legacy()[len(MAGIC + VERSION):]


LEGACY_REFUSED = {
    "protocol 1002": lambda: MAGIC + pickle.dumps(1002, protocol=2) + _rest(),
    "protocol in a tuple": lambda: MAGIC + pickle.dumps((1001,), protocol=2) + _rest(),
    "stray STOP as sys_info": lambda: MAGIC + VERSION + b"." + _rest(),
    "stray STOP after PROTO": lambda: MAGIC + VERSION + b"\x80\x02." + _rest(),
}


@pytest.mark.parametrize("name", sorted(LEGACY_REFUSED))
def test_a_legacy_stream_torch_refuses_is_not_weights_only_ok(name):
    data = LEGACY_REFUSED[name]()
    for weights_only in (True, False):
        with pytest.raises(Exception):  # noqa: B017 (torch's own words vary by case)
            torch.load(io.BytesIO(data), weights_only=weights_only)
    res = scan_bytes(data)
    assert res.verdict != "safe" and not res.weights_only_ok, res.to_json()
    assert "legacy-refused" in {f.code for f in res.findings}


@pytest.mark.parametrize("version", [VERSION, pickle.dumps(1001.0, protocol=2)])
def test_a_legacy_stream_torch_loads_stays_safe(version):
    data = MAGIC + version + _rest()
    torch.load(io.BytesIO(data), weights_only=True)  # torch compares with ==: 1001.0 passes
    res = scan_bytes(data)
    assert res.verdict == "safe" and res.weights_only_ok, res.to_json()


def _longer_record(tmp_path) -> bytes:
    src = factories._torch_zip_bytes(tmp_path)
    with zipfile.ZipFile(io.BytesIO(src)) as z:
        record = next(n for n in z.namelist() if "/data/" in n)
        grown = z.read(record) + bytes(4)
    return factories._rewrite_zip(src, {record: grown})


def test_a_record_longer_than_its_storage_is_refused_as_torch_refuses_it(tmp_path):
    path = tmp_path / "longer.pt"
    path.write_bytes(_longer_record(tmp_path))
    with pytest.raises(RuntimeError, match="record size"):
        torch.load(path, weights_only=True)  # the reference: no mmap
    torch.load(path, weights_only=True, mmap=True)  # what the worker used to do: it loads
    assert scan_file(path).verdict == "suspicious"
    report = client.inspect_file(path)
    assert report.error.code == "load_failed", report.error
    assert "record size" in report.error.message
    assert report.tensors == []


def test_a_plain_checkpoint_still_loads_through_the_mapping(tmp_path):
    path = factories.save_state_dict(tmp_path / "ok.pt")
    report = client.inspect_file(path)
    assert report.error is None and len(report.tensors) == len(factories.small_state_dict())


def test_the_timeout_waits_while_the_admission_scan_runs():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
    watchdog = process.Watchdog(proc, None, timeout=0.2)
    try:
        with watchdog.paused():
            time.sleep(0.8)  # a scan four times the timeout
            assert watchdog.reason is None and proc.poll() is None
        deadline = time.monotonic() + 30
        while watchdog.reason is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watchdog.reason == "timeout"  # the worker's own time still runs out
    finally:
        watchdog.finish()
        process.kill_group(proc)


def test_records_are_matched_by_name_not_by_where_torch_would_have_put_them(tmp_path):
    """The built-in sample is a zip written record by record (not by torch.save), so its
    records lie where torch's writer would not put them; the check must still hold."""
    from inspector.core.samples import BENIGN_NAME, write_samples

    write_samples(tmp_path)
    path = tmp_path / BENIGN_NAME
    torch.load(path, weights_only=True)  # the reference loads it
    report = client.inspect_file(path)
    assert report.error is None and report.tensors
