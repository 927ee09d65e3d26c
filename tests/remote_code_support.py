"""The real Hugging Face loader and `ckpt-inspector scan` run over folders of remote code, each in
a process of its own, for the scanner's remote-code tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# The real loader over each folder in turn, offline; a folder that fails to load is reported
_FROM_PRETRAINED = """
import sys, transformers
for folder in sys.argv[1:]:
    try:
        transformers.AutoConfig.from_pretrained(folder, trust_remote_code=True)
    except Exception as exc:
        print("failed", folder, type(exc).__name__, exc)
"""


def from_pretrained(folders: list[Path], home: Path) -> subprocess.CompletedProcess:
    """`AutoConfig.from_pretrained(trust_remote_code=True)` on each folder, offline."""
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", _FROM_PRETRAINED, *map(str, folders)], env=env,
                          capture_output=True, text=True, timeout=600)


def scan_records(folders: list[Path]) -> dict[str, dict]:
    """`ckpt-inspector scan --json` over the folders: 'folder/file' -> its record."""
    out = subprocess.run([sys.executable, "-m", "inspector", "scan", "--json", *map(str, folders)],
                         capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in out.stdout.splitlines()]
    return {f"{Path(r['path']).parent.name}/{Path(r['path']).name}": r for r in records}
