"""One scan budget per file (issue 22): decoded bytes and walked opcodes are bounded across
members, nesting levels and streams, each distinct zip record is read once, and past the
budget the file is not safe. Bounds are checked by counting, never by the clock
(`benchmarks/bench_scan_hostile.py` times the same files)."""

from __future__ import annotations

import pytest
from hostile_files import HOSTILE

from inspector.formats.archives import decompress, zipread
from inspector.scan import context as scan_context
from inspector.scan import engine as scan
from inspector.scan.budget import ScanBudget
from inspector.scan.engine import scan_bytes
from inspector.scan.pickles import walker as pickle_scan

# scales past the budget yet quick to build: bombs of 48 MiB, a million opcodes
SCALE = {"bz2_opcodes": 1_000_000, "bz2_bomb": 48, "zlib_bomb": 48, "lzma_bomb": 48,
         "gzip_members": 5_000, "zip_shared_bzip2": 6, "zip_deflate_opcodes": 1_000_000,
         "nested_bomb": 48, "marks": 200_000, "memo_puts": 1_000_000,
         "legacy_tar_storages": 300}


@pytest.fixture
def counted(monkeypatch):
    """Every decoded byte and walked opcode of the scans that follow, summed."""
    spent = {"decoded": 0, "opcodes": 0, "members": []}
    real_decompress, real_member, real_walk = (decompress.decompress, zipread.member_bytes,
                                               pickle_scan.scan_pickle)

    def decoding(buf, kind, limit):
        out = real_decompress(buf, kind, limit)
        spent["decoded"] += len(out.data)
        return out

    def member(buf, m, max_size):
        spent["members"].append(m.data_offset)
        out = real_member(buf, m, max_size)
        if m.method != zipread.STORED:
            spent["decoded"] += len(out)
        return out

    def walking(*args, **kwargs):
        out = real_walk(*args, **kwargs)
        spent["opcodes"] += out.opcodes
        return out

    monkeypatch.setattr(decompress, "decompress", decoding)
    monkeypatch.setattr(zipread, "member_bytes", member)
    monkeypatch.setattr(scan_context, "scan_pickle", walking)
    return spent


# padding streamed to its end and passed over (issue 34): the loader decodes it too, and what
# is left is a benign value, so these are read whole, within the held budget
READ_THROUGH = frozenset({"bz2_bomb", "zlib_bomb", "lzma_bomb", "gzip_members", "nested_bomb"})


@pytest.fixture
def small_stream_limit(monkeypatch):
    """A stream limit of 40 MiB per file, so that 48 MiB bombs are past it."""
    real = ScanBudget.for_size.__func__
    monkeypatch.setattr(ScanBudget, "for_size", classmethod(
        lambda cls, size: ScanBudget(real(cls, size).decoded, real(cls, size).opcodes,
                                     40 << 20)))


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_file_stays_within_its_budget_and_is_not_safe(name, counted):
    data = HOSTILE[name](SCALE[name])
    res = scan_bytes(data)
    expected = "safe" if name in READ_THROUGH else "suspicious"
    assert res.verdict == expected and res.error is None, res.to_json()
    assert not res.weights_only_ok
    budget = ScanBudget.for_size(len(data))
    assert counted["decoded"] <= budget.decoded, counted
    # the walk that spends the budget stops at it: never more than one budget's opcodes
    assert counted["opcodes"] <= budget.opcodes + 1, counted


@pytest.mark.parametrize("name", ["bz2_opcodes", "bz2_bomb", "zip_shared_bzip2",
                                  "zip_deflate_opcodes", "nested_bomb", "memo_puts"])
def test_past_the_budget_the_scan_says_so(name, small_stream_limit):
    res = scan_bytes(HOSTILE[name](SCALE[name]))
    assert "scan-budget" in {f.code for f in res.findings}, res.to_json()
    assert any("not fully scanned" in b for b in res.weights_only_blockers)


def test_many_entries_pointing_at_one_record_decode_it_once(counted):
    res = scan_bytes(HOSTILE["zip_shared_bzip2"](6))
    assert len(counted["members"]) == 1, counted["members"]
    shared = [f for f in res.findings if f.code == "zip-shared-record"]
    assert len(shared) == 5 and all("archive/data.pkl" in f.message for f in shared)


def test_what_was_found_before_the_budget_ran_out_stays_found():
    import bz2

    payload = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00idR0"  # os.system('id'), then a flood
    res = scan_bytes(bz2.compress(payload + b"N0" * 1_000_000 + b"N.", 9))
    assert res.verdict == "dangerous"
    assert "scan-budget" in {f.code for f in res.findings}


def test_the_budget_is_one_per_file_across_nesting_levels(counted):
    data = HOSTILE["nested_bomb"](48)
    scan_bytes(data)
    assert counted["decoded"] <= ScanBudget.for_size(len(data)).decoded


def test_a_real_checkpoint_is_far_inside_its_budget(tmp_path, counted):
    from factories import save_large_checkpoint

    path = save_large_checkpoint(tmp_path / "big.pt", 5000)
    res = scan.scan_file(path)
    assert res.verdict == "safe" and res.weights_only_ok, res.to_json()
    assert counted["opcodes"] < ScanBudget.for_size(path.stat().st_size).opcodes / 2
