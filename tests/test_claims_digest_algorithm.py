"""The digest algorithm every output names is this process's, never the worker's label.

The host hashes each tensor it checks itself, with SHA-256, and the worker's code does too. A
worker that names another algorithm (the digests themselves honest) would have `manifest
create` and `sign --tensors` record it, so that every later honest `verify` fails, and
`inspect`, the app's Integrity pane and `convert` show it. Such an answer is refuted
(`claims.refusal.algorithm_problems`); a lie is a real worker's, through the self-test hook.
"""

from __future__ import annotations

import json

import torch

from inspector.cli import main
from inspector.sandbox.host import operations
from inspector.sandbox.host.jobs import run_job

REFUSED = 5  # `inspect`: claim_refuted

RELABEL = """
    import inspector.tensors.sources as sources
    import inspector.sandbox.worker.inspect_op as inspect_op
    sources.DIGEST_ALGORITHM = inspect_op.DIGEST_ALGORITHM = "md5"  # the digests stay SHA-256
"""


def _weights(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.randn(4, 4), "b": torch.randn(4)}, path)
    return path


def test_a_manifest_never_records_the_workers_label(tmp_path, hostile, capsys) -> None:
    path = _weights(tmp_path)
    honest = tmp_path / "honest.json"
    assert main(["manifest", "create", str(path), "-o", str(honest)]) == 0
    recorded = json.loads(honest.read_text())["files"][0]["tensors"]
    assert {t["digest_algorithm"] for t in recorded} == {"sha256"}
    hostile(RELABEL)
    # the lie reaches the client: the reply's records name md5
    reply = run_job({"op": "digests", "path": str(path), "allow_globals": [],
                     "limits": operations._limits(path.stat().st_size, None)})
    assert {r["digest_algorithm"] for r in reply["tensors"]} == {"md5"}
    forged = tmp_path / "forged.json"
    assert main(["manifest", "create", str(path), "-o", str(forged)]) != 0
    assert not forged.exists()
    assert "the digests are sha256, named md5" in capsys.readouterr().err
    assert main(["verify", "-m", str(honest)]) != 0  # the lying worker's answer is not taken


def test_inspect_refuses_a_relabelled_reply(tmp_path, hostile, capsys) -> None:
    path = _weights(tmp_path)
    assert main(["inspect", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["digest_algorithm"] == "sha256"
    hostile(RELABEL)
    assert main(["inspect", str(path), "--json"]) == REFUSED
    report = json.loads(capsys.readouterr().out)
    assert report["error"]["code"] == "claim_refuted"
    assert "named md5" in report["error"]["message"] and report["digest_algorithm"] == "sha256"
