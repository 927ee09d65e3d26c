"""A jailed worker's error code is its own word only where a worker may send it.

The host's admission alone refuses a file by policy (`refused_dangerous`, `refused_global`,
`unsupported_format`), and a report passes a file refused so; a worker the input took over
that fails its load with such a code (or any code no worker sends) has its answer refuted
(`sandbox.host.jobs.worker_error`), so the load reads as failed, never as refused.
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
import torch

import inspector
from inspector.cli import main
from inspector.cli.common import EXIT_LOAD_FAILED
from inspector.sandbox.host.jobs import WORKER_CODES

POLICY = """
    import inspector.tensors.by_format as bf
    class Coded(Exception):
        code = CODE
        message = "not a checkpoint torch.load reads"
    def refuse(*a, **k):
        raise Coded()
    bf.load_request = refuse
"""


def _nan_weights(path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(16, 16, generator=g), torch.randn(16, generator=g)
    w[2, 3] = float("nan")
    torch.save({"fc.weight": w, "fc.bias": b}, path)


@pytest.mark.parametrize("code", ["unsupported_format", "refused_global", "refused_dangerous",
                                  "jail_refused", "made_up"])
def test_a_worker_that_names_a_host_code_is_refuted(tmp_path, hostile, capsys, fast_env,
                                                    code) -> None:
    path = tmp_path / "nan.pt"
    _nan_weights(path)
    hostile(f"CODE = {code!r}\n" + textwrap.dedent(POLICY))
    # a failed load (5), not a refusal (3, 2) or a jail's (9)
    assert main(["inspect", str(path), "--json"]) == EXIT_LOAD_FAILED
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "claim_refuted" and f"'{code}'" in error["message"]
    out = tmp_path / "r.json"
    assert main(["report", str(path), "-o", str(out), "--quiet", "--force"]) != 0
    doc = json.loads(out.read_text())
    assert doc["verdict"] != "safe" or doc["status"] != "passed"
    assert doc["files"][0]["load"]["status"] == "failed"


def _raised_codes() -> set[str]:
    """Every code literal a worker-side module raises a coded error with: the worker's own,
    the loaders' and the --key selection's (`checkpoint.extract`, which the worker runs)."""
    root = Path(inspector.__file__).parent
    files = [*(root / "tensors").rglob("*.py"), *(root / "sandbox" / "worker").rglob("*.py"),
             root / "checkpoint" / "extract.py"]
    codes = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text())):
            if (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args
                    and isinstance(node.exc.args[0], ast.Constant)
                    and isinstance(node.exc.args[0].value, str)
                    and node.exc.args[0].value.isidentifier()
                    and node.exc.args[0].value.islower()):
                codes.add(node.exc.args[0].value)
    return codes


def test_every_code_a_worker_raises_is_registered_and_none_is_the_hosts() -> None:
    from inspector.report.sections import REFUSALS

    raised = _raised_codes()
    assert "load_failed" in raised and "key_not_found" in raised  # the walk found them
    every = set().union(*WORKER_CODES.values())
    assert not raised - every, raised - every
    assert not every & set(REFUSALS)
    # the host's own checks of the output and the shards: a worker never ends with them
    assert not every & {"output_exists", "output_is_input", "verify_failed",
                        "already_safetensors", "bad_index", "coverage", "no_checkpoint"}
    assert "key_not_found" not in WORKER_CODES["inspect"]  # only convert selects a --key
