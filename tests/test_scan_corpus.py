"""The public picklescan sample corpus (../shared/corpus/picklescan) against its labels.tsv.

Decisions, so the assertions are exact:
- `malicious`: never safe; all are dangerous. The 7-Zip archive cannot be listed without a 7-Zip
  library, but its LZMA2 stream decodes with the standard library and the pickle in it is
  scanned (finding `archive-partially-scanned`).
- `benign`: never dangerous. Object arrays and the password-protected zip are suspicious (an
  object array only loads with allow_pickle=True; an encrypted member cannot be scanned).
- `not_a_model`: never safe. Files with no known format get verdict `error` and a one-line
  message; `broken_model.pkl` is a truncated pickle that imports builtins.exec before the break,
  and an import of a code-running callable is dangerous whether or not the call completes.
"""

from __future__ import annotations

import csv
from collections import Counter

from inspector.scan.engine import scan_file


def _labels(corpus):
    with open(corpus / "labels.tsv", newline="") as fh:
        return [(row["path"], row["label"]) for row in csv.DictReader(fh, delimiter="\t")]


def test_corpus_against_labels(corpus):
    rows = _labels(corpus)
    results = {path: scan_file(corpus / path) for path, _ in rows}
    tally = Counter((label, results[path].verdict) for path, label in rows)
    malicious = [path for path, label in rows if label == "malicious"]
    dangerous = sum(results[p].verdict == "dangerous" for p in malicious)
    print(f"\npicklescan corpus: {dangerous}/{len(malicious)} malicious files called dangerous; "
          f"verdicts by label: {dict(sorted(tally.items()))}")
    assert not [p for p in malicious if results[p].verdict == "safe"]
    assert dangerous == len(malicious)
    seven = results["data/malicious1.7z"]
    assert "archive-partially-scanned" in {f.code for f in seven.findings}
    assert "builtins.eval" in {f"{g.module}.{g.name}" for g in seven.globals}
    benign = [p for p, label in rows if label == "benign"]
    assert not [p for p in benign if results[p].verdict in ("dangerous", "error")]
    assert {p for p in benign if results[p].verdict == "safe"} >= {
        "data/benign0_v0.pkl", "data/benign0_v3.pkl", "data/benign0_v4.pkl",
        "data/new_pytorch_model.bin", "data/pytorch_model.bin", "data2/int_array.npy",
        "data2/int_arrays.npz", "data2/int_arrays_compressed.npz"}
    for path, label in rows:
        if label == "not_a_model":
            res = results[path]
            assert res.verdict != "safe"
            if res.verdict == "error":
                assert res.error and "\n" not in res.error and "Traceback" not in res.error


def test_bypass_samples_are_caught_for_the_right_reason(corpus):
    expect = {
        "data/malicious1_0x1.zip": "zip-flag-bits",
        "data/malicious1_central_directory.zip": "zip-name-mismatch",
        "data2/malicious1_crc.zip": "zip-crc-mismatch",
        "data/pytorch_magic_bypass.pt": "posix.system",
        "data2/keyerror-exploit.pkl": "os.system",
        "data/malicious-invalid-bytes.pkl": "os.system",  # STACK_GLOBAL through PUT/GET memo
    }
    for path, evidence in expect.items():
        res = scan_file(corpus / path)
        seen = {f.code for f in res.findings} | {f"{g.module}.{g.name}" for g in res.globals}
        assert res.verdict == "dangerous" and evidence in seen, (path, sorted(seen))


def test_legacy_magic_bypass_scans_every_pickle(corpus):
    res = scan_file(corpus / "data/pytorch_magic_bypass.pt")
    assert len(res.pickles) >= 5
    assert {"builtins.eval", "posix.system"} <= {f"{g.module}.{g.name}" for g in res.globals}
