"""Torch-free tensor digests of plain torch.save archives agree with torch's, or fall back.

Every answer of the static layout path (`layout.torch_save` read by `tensors.sources`) is
compared with what `torch.load(weights_only=True)` gives for the same file: same keys, dtypes,
shapes and digests. A file it does not cover must be reported as a fallback, never answered.
"""

from __future__ import annotations

import io
import random
import time
import zipfile
from collections import OrderedDict
from pathlib import Path

import factories
import pytest
import torch

from inspector.layout.torch_save import STORAGE_DTYPES, V3_DTYPES, NotCovered, describe_archive
from inspector.rawtensors import readers
from inspector.sandbox.host.client import run_job
from inspector.tensors import records, sources, stats
from inspector.tensors.load import LoadError, load_checkpoint, resolve_global, split_leaves

# Benign factory samples the fast path must cover (the rest hold globals or non-tensors).
COVERED_BENIGN = {"state_dict"}


def _fast(path: Path) -> list[tuple] | None:
    """The layout path's answer, or None when it falls back to torch."""
    ckpt = sources._open_layout(str(path))
    if ckpt is None:
        return None
    assert ckpt.format == "pytorch-zip" and ckpt.objects == []
    return [(s.key, s.dtype, s.shape, sources.digest(s)) for s in ckpt.tensors]


def _torch(path: Path) -> list[tuple]:
    """What torch loads: the same records, from weights_only tensors (no other leaves)."""
    tensors, objects = split_leaves(load_checkpoint(str(path)))
    assert objects == [], f"torch sees non-tensor leaves {objects[:3]}"
    return [(k, records.dtype_name(t.dtype), list(t.shape), stats.tensor_digest(t))
            for k, t in tensors]


def _agrees_or_falls_back(path: Path) -> bool:
    """True when the fast path answered (and equals torch); False when it fell back."""
    fast = _fast(path)
    if fast is not None:
        assert fast == _torch(path)
    return fast is not None


def _save(tmp_path: Path, name: str, obj: object, **kwargs) -> Path:
    path = tmp_path / f"{name}.pt"
    torch.save(obj, path, **kwargs)
    return path


def _rewrite(path: Path, out: Path, edit) -> Path:
    """Copy a zip, passing each (name, bytes) through `edit` -> (bytes, compress_type)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(buf, "w") as zout:
        for info in zin.infolist():
            data, method = edit(info.filename, zin.read(info.filename))
            zout.writestr(zipfile.ZipInfo(info.filename), data, compress_type=method)
    out.write_bytes(buf.getvalue())
    return out


def _shapes() -> dict[str, object]:
    g = torch.Generator().manual_seed(7)
    base = torch.randn(6, 5, generator=g)
    tied = torch.randn(3, 4, generator=g)
    return {
        "nested": {"model": OrderedDict(enc={"w": torch.randn(2, 3, generator=g)},
                                        dec=OrderedDict(b=torch.arange(4))),
                   "opt": {"state": {"0": {"m": torch.zeros(3)}}}},
        "lists": {"layers": [torch.ones(2), (torch.full((2, 2), 3.0), torch.eye(3))]},
        "list_root": [torch.ones(3), torch.zeros(2, 2)],
        "tensor_root": torch.randn(4, 4, generator=g),
        "tied": {"a": tied, "b": tied, "c": {"again": tied}},
        "shared_offsets": {"whole": base, "rows": base[2:5], "col": base[:, 1], "tail": base[4]},
        "transposed": {"t": base.t(), "step": base[:, ::2], "expand": torch.ones(3, 1).expand(3, 4),
                       "perm": torch.randn(2, 3, 4, generator=g).permute(2, 0, 1)},
        "zero_d": {"s": torch.tensor(3.5), "i": torch.tensor(7)},
        "empty": {"e": torch.empty(0), "e2": torch.empty(0, 3), "e3": base[:, 5:]},
        "dtypes": {
            "bf16": torch.randn(5, generator=g).to(torch.bfloat16),
            "f16": torch.randn(5, generator=g).half(), "f64": torch.randn(5, generator=g).double(),
            "f8a": torch.randn(5, generator=g).to(torch.float8_e4m3fn),
            "f8b": torch.randn(5, generator=g).to(torch.float8_e5m2),
            "f8t": torch.randn(3, 4, generator=g).to(torch.float8_e4m3fn).t(),
            "bool": torch.tensor([True, False, True]),
            "c64": torch.randn(3, dtype=torch.complex64, generator=g),
            "c128": torch.randn(2, 2, dtype=torch.complex128, generator=g).t(),
            "u16": torch.arange(6).to(torch.uint16), "i8": torch.arange(-3, 3, dtype=torch.int8),
            "i64": torch.arange(4), "u8": torch.arange(4, dtype=torch.uint8),
        },
        "state_dict_metadata": torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(),
                                                   torch.nn.Linear(2, 1)).state_dict(),
        "key_collision": {"a.b": torch.ones(1), "a": {"b": torch.zeros(1)}},
    }


# TorchScript has its own static reader, checked in tests/test_torchscript_static.py.
@pytest.mark.parametrize("name", sorted(set(factories.BENIGN_BUILDERS) - {"torchscript"}))
def test_every_benign_sample_agrees_with_torch_or_falls_back(name: str, tmp_path: Path) -> None:
    path = factories.BENIGN_BUILDERS[name](tmp_path / f"{name}.bin")
    assert _agrees_or_falls_back(path) == (name in COVERED_BENIGN)


@pytest.mark.parametrize("name", sorted(_shapes()))
def test_plain_archives_take_the_fast_path_and_equal_torch(name: str, tmp_path: Path,
                                                           monkeypatch) -> None:
    path = _save(tmp_path, name, _shapes()[name])
    assert _agrees_or_falls_back(path)
    # tiny chunks exercise the chunked range and strided readers on every tensor
    monkeypatch.setattr(readers, "CHUNK_BYTES", 8)
    assert _agrees_or_falls_back(path)


def test_large_non_contiguous_view_is_gathered_in_bounded_chunks(tmp_path: Path,
                                                                  monkeypatch) -> None:
    big = torch.randn(300, 200, generator=torch.Generator().manual_seed(1))
    path = _save(tmp_path, "big", {"t": big.t(), "cols": big[:, 50:150]})
    monkeypatch.setattr(readers, "CHUNK_BYTES", 4096)
    ckpt = sources._open_layout(str(path))
    pieces = [len(c) for s in ckpt.tensors for c in s.read()]
    assert max(pieces) <= 4096 and sum(pieces) == 200 * 300 * 4 + 300 * 100 * 4
    assert _agrees_or_falls_back(path)


def _fallback_samples(tmp_path: Path) -> dict[str, Path]:
    plain = _save(tmp_path, "plain", {"w": torch.randn(4, 4), "b": torch.arange(3)})
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.quint8)
    param = torch.nn.Parameter(torch.randn(2))
    return {
        "legacy": _save(tmp_path, "legacy", {"w": torch.ones(2)},
                        _use_new_zipfile_serialization=False),
        "quantized": _save(tmp_path, "q", {"q": q}),
        "parameter": _save(tmp_path, "param", {"p": param}),
        "requires_grad": _save(tmp_path, "grad", {"g": torch.ones(2, requires_grad=True)}),
        "non_tensor_leaf": _save(tmp_path, "leaf", {"w": torch.ones(2), "epoch": 3}),
        "empty_container": _save(tmp_path, "emptydict", {"w": torch.ones(2), "opt": {}}),
        "int_key": _save(tmp_path, "intkey", {0: torch.ones(2)}),
        "protocol4": _save(tmp_path, "p4", {"w": torch.ones(2)}, pickle_protocol=4),
        "big_endian": _rewrite(plain, tmp_path / "be.pt", lambda n, d: (
            b"big" if n.endswith("/byteorder") else d, zipfile.ZIP_STORED)),
        "compressed_record": _rewrite(plain, tmp_path / "deflated.pt", lambda n, d: (
            d, zipfile.ZIP_DEFLATED if "/data/" in n else zipfile.ZIP_STORED)),
        "padded_record": _rewrite(plain, tmp_path / "padded.pt", lambda n, d: (
            d + b"\0" * 8 if n.endswith("/data/0") else d, zipfile.ZIP_STORED)),
    }


def test_anything_outside_the_layout_falls_back(tmp_path: Path) -> None:
    for name, path in _fallback_samples(tmp_path).items():
        with pytest.raises(NotCovered):
            describe_archive(path.read_bytes())
        assert sources._open_layout(str(path)) is None, name


def test_malicious_and_odd_archives_never_take_the_fast_path(tmp_path: Path, canary: Path) -> None:
    samples = [build(tmp_path / f"mal_{name}.bin", canary)
               for name, build in factories.MALICIOUS_BUILDERS.items()]
    samples += [build(tmp_path / f"odd_{name}.bin")
                for name, (build, _code) in factories.ODD_BUILDERS.items()]
    for path in samples:
        assert sources._open_layout(str(path)) is None, path.name


def test_random_byte_flips_in_data_pkl_never_give_an_answer_torch_would_not(tmp_path: Path) -> None:
    shapes = _shapes()
    source = _save(tmp_path, "src", {"tied": shapes["tied"], "views": shapes["shared_offsets"],
                                     "t": shapes["transposed"]["t"], "d": shapes["dtypes"]})
    with zipfile.ZipFile(source) as z:
        pkl_name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        pkl = z.read(pkl_name)
    rng = random.Random(4)
    answered = 0
    for i in range(250):
        mutated = bytearray(pkl)
        for _ in range(rng.choice((1, 1, 2, 3))):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        path = _rewrite(source, tmp_path / f"m{i}.pt", lambda n, d, m=bytes(mutated): (
            m if n == pkl_name else d, zipfile.ZIP_STORED))
        fast = _fast(path)
        if fast is not None:
            answered += 1
            try:
                expected = _torch(path)
            except LoadError as exc:
                pytest.fail(f"flip {i}: fast path answered but torch refuses: {exc}")
            assert fast == expected, f"flip {i}"
        path.unlink()
    assert answered > 0  # some flips (in names, values) keep the file loadable


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_dtype_tables_match_torch() -> None:
    for storage_type, (dtype, itemsize) in STORAGE_DTYPES.items():
        cls = resolve_global(storage_type)
        expected = torch.uint8 if cls is torch.UntypedStorage else cls.dtype
        assert (records.dtype_name(expected), expected.itemsize) == (dtype, itemsize)
    for name, itemsize in V3_DTYPES.items():
        assert getattr(torch, name).itemsize == itemsize


def test_worker_digests_a_plain_archive_without_importing_torch(tmp_path: Path,
                                                                cold_workers) -> None:
    path = _save(tmp_path, "plain", _shapes()["transposed"])
    started = time.monotonic()
    result = run_job({"op": "digests", "path": str(path), "allow_globals": []})
    fast_s = time.monotonic() - started
    assert result["torch_imported"] is False
    got = [(r["key"], r["dtype"], r["shape"], r["digest"]) for r in result["tensors"]]
    assert got == _torch(path)
    legacy = _save(tmp_path, "legacy", {"w": torch.ones(2)}, _use_new_zipfile_serialization=False)
    started = time.monotonic()
    assert run_job({"op": "digests", "path": str(legacy)})["torch_imported"] is True
    print(f"worker digests: torch-free {fast_s:.2f} s, torch {time.monotonic() - started:.2f} s")
