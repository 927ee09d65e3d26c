"""`manifest create -o -` prints JSON every reader parses to the real names: a file name holding
a C1 control (U+0085) or a narrow no-break space (U+202F) came out rewritten by the terminal-safe
stream, as text no JSON parser reads back (or reads back as another name)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_the_printed_json_manifest_names_each_file_exactly(tmp_path: Path) -> None:
    names = ["a\u0085b.bin", "step-1\u202f000.pt", "plain.bin"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    done = subprocess.run([sys.executable, "-m", "inspector", "manifest", "create", str(tmp_path),
                           "-o", "-", "--no-tensors"], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.isascii()
    listed = sorted(Path(f["path"]).name for f in json.loads(done.stdout)["files"])
    assert listed == sorted(names)
