"""`weights_only_ok` must say exactly what a real `torch.load(weights_only=True)` does.

torch runs in a subprocess (never in the test process) over every benign, odd and malicious
sample and over the outside corpus; weights_only=True refuses every payload, and the canary
proves nothing ran.
"""

from __future__ import annotations

import json
import subprocess

from factories import corpus_fixture

from inspector.scan.engine import scan_file

LOADER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
out = {}
for path in json.load(sys.stdin):
    try:
        torch.load(path, map_location="cpu", weights_only=True)
        out[path] = None
    except Exception as exc:  # every refusal is an answer, whatever its type
        out[path] = f"{type(exc).__name__}: {str(exc)[:300]}"
json.dump(out, sys.stdout)
"""


def torch_verdicts(python_exe: str, paths: list[str], cwd) -> dict[str, str | None]:
    """Path -> None if torch.load(weights_only=True) loads it, else its error."""
    proc = subprocess.run([python_exe, "-I", "-c", LOADER], input=json.dumps(paths), text=True,
                          capture_output=True, timeout=600, cwd=cwd, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _compare(results: dict[str, str | None]) -> list[str]:
    wrong = []
    for path, error in results.items():
        res = scan_file(path)
        if res.weights_only_ok != (error is None):
            wrong.append(f"{path}: torch says {error or 'loads'}, scan says "
                         f"{res.weights_only_ok} {res.weights_only_blockers[:3]}")
    return wrong


def test_weights_only_ok_matches_torch_on_built_samples(tmp_path_factory, python_exe):
    corpus, canary = corpus_fixture(tmp_path_factory)
    paths = [str(p) for kind in corpus.values() for p in kind.values()]
    results = torch_verdicts(python_exe, paths, canary.parent)
    assert not canary.exists(), "torch.load(weights_only=True) ran a payload"
    assert _compare(results) == []
    loaded = {p for p, e in results.items() if e is None}
    # the check has teeth: torch loads the benign checkpoints and refuses every payload but one
    assert {str(p) for p in corpus["benign"].values() if p.stem in
            ("state_dict", "training_checkpoint", "every_dtype", "nested", "legacy")} <= loaded
    assert loaded & {str(p) for p in corpus["malicious"].values()} == {
        str(corpus["malicious"]["zip_hidden_member"])}
    assert not canary.exists()


def test_weights_only_ok_matches_torch_on_outside_corpus(corpus, python_exe, tmp_path):
    paths = sorted(str(p) for p in corpus.rglob("*") if p.is_file()
                   and p.suffix not in (".tsv", ".json", ".md") and "LICENSE" not in p.name)
    canary_dir = tmp_path
    results = torch_verdicts(python_exe, paths, canary_dir)
    assert _compare(results) == []
    assert sum(e is None for e in results.values()) >= 2  # the benign torch checkpoints load
    assert list(canary_dir.iterdir()) == [], "a corpus payload wrote into the working folder"
