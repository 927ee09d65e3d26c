"""The shipped batch-job files (packaging/batch/): a Kubernetes Indexed Job manifest and a Slurm
array script. They must parse (YAML; `bash -n`) and their ckpt-inspector command lines must be
accepted by the real parser, with --shard and --results taken from the engine's task index."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from inspector.cli import build_parser

BATCH = Path(__file__).resolve().parent.parent / "packaging" / "batch"


def _parses(words: list[str]) -> object:
    """The CLI's own parser over a command line (argparse exits on an unknown option)."""
    assert words[0] == "ckpt-inspector"
    return build_parser(words[1]).parse_args(words[1:])


def test_the_indexed_job_parses_and_runs_a_real_verify_shard():
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load((BATCH / "k8s-indexed-job.yaml").read_text())
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    count = job["spec"]["completions"]
    [container] = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][:2] == ["sh", "-c"]
    line = container["command"][2].removeprefix("exec ")
    words = shlex.split(line.replace("${JOB_COMPLETION_INDEX}", "3"))
    args = _parses(words)
    assert args.command == "verify"
    assert (args.shard.index, args.shard.count) == (3, count)
    assert str(args.results) == "/results/verify-3.jsonl"
    assert args.paths == ["s3://models/release-7/"]  # a URL stays a URL
    assert {e["name"] for e in container["env"]} >= {"AWS_ACCESS_KEY_ID",
                                                     "AWS_SECRET_ACCESS_KEY"}


def test_the_slurm_array_script_is_valid_bash_and_runs_a_real_report_shard():
    script = (BATCH / "slurm-array.sh").read_text()
    subprocess.run(["bash", "-n", str(BATCH / "slurm-array.sh")], check=True)
    array = re.search(r"^#SBATCH --array=0-(\d+)$", script, re.M)
    assert array, "no #SBATCH --array line"
    call = re.search(r"^ckpt-inspector report .*?(?=\|\|)", script, re.M | re.S).group(0)
    call = call.replace("\\\n", " ")
    values = {"$folder": "/data/checkpoints", "${SLURM_ARRAY_TASK_ID}": "5",
              "${shards}": str(int(array.group(1)) + 1), "${SLURM_CPUS_PER_TASK:-1}": "4"}
    for name, value in values.items():
        call = call.replace(name, value)
    args = _parses(shlex.split(call))
    assert args.command == "report"
    assert (args.shard.index, args.shard.count) == (5, int(array.group(1)) + 1)
    assert str(args.results) == "results/report-5.jsonl"
    assert "ckpt-inspector merge results/report-*.jsonl -o fleet.html" in script
    _parses(["ckpt-inspector", "merge", "results/report-0.jsonl", "-o", "fleet.html"])
