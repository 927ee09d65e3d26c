"""The dry run reads a blob through the C unpickler without peek() only where a FRAME could
change the reading (`dry_run.may_frame`): a FRAME whose length runs past the end fails both C
readers alike, with the same imports and calls before it."""

from __future__ import annotations

import json
import mmap
import pickle
import random
import struct
import subprocess
import sys
from pathlib import Path

from inspector.sandbox.worker.dry_run import FRAME_WINDOW, may_frame, read_stream

SEEDS = [pickle.dumps(x, protocol=p) for p in (2, 4, 5) for x in
         [{"a": [1, 2, 3], "b": "x" * 300}, list(range(50)), {"k": b"\x95" * 20},
          ("t", 1.5, None)]] + [
    b"cos\nsystem\n(S'echo'\ntR.",
    b"\x80\x04\x95\x19\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system\x94\x93\x94.",
]


def _mutant(rng: random.Random) -> bytes:
    """A seed with FRAME heads inserted (lengths past the end, huge or small) and bytes
    flipped, deleted or inserted."""
    data = bytearray(rng.choice(SEEDS))
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(data) + 1)
        op = rng.random()
        if op < 0.4:
            length = rng.choice([len(data) - pos + rng.randint(1, 50), rng.randint(0, 2 ** 20),
                                 rng.randint(0, 40)])
            data[pos:pos] = b"\x95" + struct.pack("<Q", length)
        elif op < 0.7 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op < 0.85:
            del data[pos:pos + rng.randint(1, 8)]
        else:
            data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 6)))
    return bytes(data)


def _seen(data: bytes, kind: str, persistent: bool) -> tuple:
    record, _, boundaries = read_stream(data, 0, kind, persistent)
    return (record["pickles"], record["end"], record["imports"],
            [c["texts"] for c in record["calls"]], sorted(boundaries))


CHILD = """
import json, random, resource, sys
# a mutated length can make the buffered reader ask for a huge read: MemoryError, not swap
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
sys.path.insert(0, sys.argv[1])
from test_dry_run_frames import _mutant, _seen
from inspector.sandbox.worker.dry_run import may_frame
rng = random.Random(22)
compared, differing = 0, []
for _ in range(3000):
    data = _mutant(rng)
    if may_frame(data, 0, len(data)):
        continue
    compared += 1
    for persistent in (False, True):
        if _seen(data, "c", persistent) != _seen(data, "c-nopeek", persistent):
            differing.append(data.hex())
print(json.dumps({"compared": compared, "differing": differing[:5]}))
"""


def test_without_a_fitting_frame_both_c_readers_read_alike():
    # in a child with a bounded address space (the jail bounds the worker's the same way)
    out = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).parent)],
                         capture_output=True, text=True, timeout=600, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["differing"] == []
    assert result["compared"] > 1000  # most mutants carry a frame that does not fit


def test_a_frame_that_fits_is_found():
    framed = pickle.dumps({"a": 1}, protocol=4)
    assert may_frame(framed, 0, len(framed))
    head = b"\x95" + (0).to_bytes(8, "little")
    assert may_frame(head, 0, len(head)) and not may_frame(head, 0, len(head) - 1)
    # a 0x95 byte that is an argument (BINPUT 149) with a length no file holds is not one
    plain = pickle.dumps([[i] for i in range(300)], protocol=2)
    assert b"\x95" in plain and not may_frame(plain, 0, len(plain))


def _resident_file_kb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("RssFile:")[1].split()[0])


def test_a_mapped_search_finds_a_frame_across_windows_and_gives_its_pages_back(tmp_path):
    size = 8 * FRAME_WINDOW
    plain, framed = tmp_path / "plain", tmp_path / "framed"
    for path in (plain, framed):
        with open(path, "wb") as fh:
            fh.truncate(size)  # zeros: no 0x95 byte anywhere
    with open(framed, "r+b") as fh:
        fh.seek(3 * FRAME_WINDOW - 4)  # the head's length bytes run into the next window
        fh.write(b"\x95" + (16).to_bytes(8, "little"))
    with open(plain, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        before = _resident_file_kb()
        assert not may_frame(mm, 0, size)
        grown_mb = (_resident_file_kb() - before) / 1024
    # one window's pages at most stay mapped; without giving them back every page did
    assert grown_mb < 2 * FRAME_WINDOW / 2**20, grown_mb
    with open(framed, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert may_frame(mm, 0, size)
        assert not may_frame(mm, 0, 3 * FRAME_WINDOW + 4)  # its 16 bytes run past that end
