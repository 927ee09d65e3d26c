"""The real Hugging Face loader and `ckpt-inspector scan` run over folders of remote code, each in
a process of its own, for the scanner's remote-code tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from proofs import run_each_forked

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


# One loader run, as `python -c` with argv KIND FOLDER CANARY: the payloads write to $CANARY
_LOAD_ONE = """
import os, sys
kind, folder, os.environ["CANARY"] = sys.argv[1:]
if kind == "sentence-transformers":
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        # sentence-transformers resolves a module `type` outside its package with transformers'
        # get_class_from_dynamic_module and calls the class's `load` (sentence_transformers/util/
        # misc.py import_module_class): that documented call where the library is absent
        from transformers.dynamic_module_utils import get_class_from_dynamic_module
        get_class_from_dynamic_module("custom_st.Custom", folder).load(folder)
    else:
        SentenceTransformer(folder, trust_remote_code=True)
else:
    import transformers
    getattr(transformers, kind).from_pretrained(folder, trust_remote_code=True)
"""
_PRELOAD = ("torch", "transformers.modeling_utils", "transformers.models.auto.modeling_auto",
            "transformers.models.auto.tokenization_auto", "transformers.dynamic_module_utils")


class LoadRun(NamedTuple):
    """The real loader over one folder: `kind` is a transformers Auto class or
    'sentence-transformers'; the payload, if it runs, writes `canary`."""

    kind: str
    folder: Path
    canary: Path


class Loaded(NamedTuple):
    """What one loader run did: its exit code, whether its canary appeared, and its output."""

    exit_code: int
    ran: bool
    output: str


def load_each(python_exe: str, runs: list[LoadRun], home: Path) -> list[Loaded]:
    """Each run's loader (`from_pretrained(trust_remote_code=True)`, offline, module cache in
    `home`) in a child forked from one interpreter that imported transformers once (a fresh
    interpreter per run cost about 6 CPU-seconds of imports); each canary is removed after it
    is seen, so a later scan is judged by what it leaves."""
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    for run in runs:
        assert not run.canary.exists(), run
    outputs = run_each_forked(python_exe, _LOAD_ONE,
                              [[run.kind, str(run.folder), str(run.canary)] for run in runs],
                              home.parent, _PRELOAD, env=env)
    loaded = []
    for run, (code, output) in zip(runs, outputs, strict=True):
        loaded.append(Loaded(code, run.canary.exists(), output))
        run.canary.unlink(missing_ok=True)
    return loaded
