"""The SIGKILL loop of tests/test_ledger_faults.py, run in a fresh interpreter.

One process imports torch once (and, through saves of its own outside the run, every module a
save imports on first use), then forks a child per save and kills it with SIGKILL at a random
moment within a save's duration (the median of three timed saves); after each kill it asks
`latest_valid` and loads what it names. Prints one JSON line: kills that landed mid-save, saves
that finished, strays left.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from inspector.ledger import save
from inspector.run.checkpoints import latest_valid

KEEP = 2


def state(step: int) -> dict:
    """A small training state whose every tensor says which step it belongs to."""
    return {"model": {"w": torch.full((48, 48), float(step)), "b": torch.arange(48.0) * step},
            "optimizer": {"exp_avg": torch.full((48, 48), step / 2)}, "step": step}


def save_in_child(run: Path, step: int) -> int:
    """Fork a child that saves `step`; return its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            save(state(step), run / "ckpt" / f"step-{step}.pt", step=step, run_dir=run,
                 keep=KEEP)
        except BaseException:
            os._exit(3)
        os._exit(0)
    return pid


def warm_up() -> float:
    """Save once in this process, in a scratch run folder, then time three forked saves there:
    their median is the span a kill's moment is drawn from. Without the first, each forked
    child would import the modules a first save loads (about 0.15 s, most of a child's save)
    and the kills would land in those imports instead of the save's writes; one timed save
    alone let a slow moment of the machine stretch every sleep of the run."""
    with tempfile.TemporaryDirectory() as scratch:
        save(state(0), Path(scratch) / "ckpt" / "step-0.pt", step=0, run_dir=scratch, keep=KEEP)
        spans = []
        for step in range(1, 4):
            start = time.perf_counter()
            _, status = os.waitpid(save_in_child(Path(scratch), step), 0)
            assert os.waitstatus_to_exitcode(status) == 0
            spans.append(time.perf_counter() - start)
    return statistics.median(spans)


def main(run: Path, kills: int, seed: int) -> None:
    torch.set_num_threads(1)
    duration = warm_up()
    rng = random.Random(seed)
    _, status = os.waitpid(save_in_child(run, 0), 0)
    assert os.waitstatus_to_exitcode(status) == 0
    floor, killed, finished, step = 0, 0, 0, 1
    while killed < kills and step < 6 * kills:
        pid = save_in_child(run, step)
        time.sleep(rng.uniform(0, duration * 1.2))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            killed += 1
        else:
            assert os.waitstatus_to_exitcode(status) == 0, f"step {step} save failed"
            finished += 1
        record = latest_valid(run)
        assert record is not None, f"no valid checkpoint after killing step {step}"
        assert floor <= record.step <= step, (floor, record.step, step)
        assert not Path(record.path).name.startswith("."), record.path
        loaded = torch.load(run / record.path, weights_only=True)
        want = state(record.step)
        assert torch.equal(loaded["model"]["w"], want["model"]["w"])
        assert torch.equal(loaded["optimizer"]["exp_avg"], want["optimizer"]["exp_avg"])
        floor = record.step
        step += 1
    folder = run / "ckpt"
    strays = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    # one save that is left to finish clears every temp file the killed ones left
    _, status = os.waitpid(save_in_child(run, step), 0)
    assert os.waitstatus_to_exitcode(status) == 0
    left = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    print(json.dumps({"killed": killed, "finished": finished, "attempts": step - 1,
                      "strays": len(strays), "strays_after": len(left), "latest": step}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
