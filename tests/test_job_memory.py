"""One memory allowance, read the same way by the client, the worker and the jail.

The client sends `Limits`; the worker's jail applies `memory_mb` plus the bytes of the files it
maps (`JailConfig.memory_bytes`), and a worker that runs out says that same allowance
(`Limits.allowance`). A GPU job's allowance is `protocol.GPU_MEMORY_MB` on both sides.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from safetensors.torch import save_file

from inspector.sandbox.host.consistency_job import ConsistencyRequest
from inspector.sandbox.host.jobs import SandboxError, run_job
from inspector.sandbox.protocol import GPU_MEMORY_MB, PAYLOAD_ENV, SELFTEST_ENV, Limits
from inspector.sandbox.worker.jail import MIB, JailConfig


class _Allocate:
    """Unpickles as `bytearray(n)`: a payload that asks for more memory than it may have."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __reduce__(self):
        return bytearray, (self.n,)


def test_a_worker_out_of_memory_names_the_allowance_the_jail_applied(tmp_path, monkeypatch):
    path = tmp_path / "small.safetensors"
    save_file({"w": torch.ones(4, 4)}, str(path))
    payload = tmp_path / "allocate.pkl"
    payload.write_bytes(pickle.dumps(_Allocate(16 << 30)))
    monkeypatch.setenv(SELFTEST_ENV, "1")
    monkeypatch.setenv(PAYLOAD_ENV, str(payload))
    limits = Limits(memory_mb=1024)
    with pytest.raises(SandboxError) as info:
        run_job({"op": "inspect", "path": str(path), "format": "safetensors",
                 "limits": limits.to_json()}, require_jail="any")
    assert info.value.code == "memory_limit"
    mapped = path.stat().st_size + payload.stat().st_size  # what the worker maps or reads
    assert limits.allowance(mapped) in info.value.message
    assert "1024 MB plus" in info.value.message


def test_the_jail_applies_what_the_allowance_says():
    config = JailConfig(limits=Limits(memory_mb=300), mapped_bytes=5 * MIB)
    assert config.memory_bytes == 305 * MIB
    assert config.limits.allowance(config.mapped_bytes) == "300 MB plus 5 MB of mapped files"


def test_a_gpu_job_asks_for_the_one_gpu_allowance(tmp_path):
    path = tmp_path / "w.pt"
    path.write_bytes(b"x")
    cuda = Limits.from_json(ConsistencyRequest(str(path), device="cuda:0").to_request()["limits"])
    cpu = Limits.from_json(ConsistencyRequest(str(path), device="cpu").to_request()["limits"])
    assert cuda.memory_mb == GPU_MEMORY_MB == Limits().on_gpu().memory_mb
    assert cpu.memory_mb == Limits().memory_mb
