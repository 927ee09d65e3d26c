"""Replicas agree: two CPU processes train one DDP model over gloo with the guard; a weight the
test corrupts on one rank, inside its optimizer step (where that rank's own fingerprint cannot
see it, and by too little for its own bounds), is named with its rank at the next replica
check."""

from __future__ import annotations

import json

import torch.multiprocessing as mp
from guard_support import ddp_rank


def test_a_weight_flipped_on_one_rank_is_named_with_its_rank_within_n_steps(tmp_path):
    every, bad_step = 5, 6
    mp.start_processes(ddp_rank, args=(2, str(tmp_path / "store"), str(tmp_path / "run"), 1,
                                       bad_step, every, str(tmp_path / "seen")),
                       nprocs=2, join=True, start_method="spawn")
    seen = {r: json.loads((tmp_path / f"seen.{r}.json").read_text()) for r in (0, 1)}
    for rank in (0, 1):
        replica = [s for s in seen[rank] if s[1] == "replica-differs"]
        # faulty step 6 -> first check at step 10, within N = 5 steps; both ranks agree on who
        assert replica and replica[0][:3] == [10, "replica-differs", "module.2.weight"]
        assert replica[0][3] == 1.0
    # the fault was too small for rank 1's own rules: only the vote across ranks saw it
    assert not [s for s in seen[1] if s[0] <= 10 and s[1] != "replica-differs"]


def test_fsdp_shards_are_watched_locally_and_never_compared_across_ranks(tmp_path):
    from guard_support import fsdp_rank

    mp.start_processes(fsdp_rank, args=(2, str(tmp_path / "store"), str(tmp_path / "run"),
                                        str(tmp_path / "seen")),
                       nprocs=2, join=True, start_method="spawn")
    seen = {r: json.loads((tmp_path / f"seen.{r}.json").read_text()) for r in (0, 1)}
    # each rank holds a different shard by design: no replica check, no false alarm
    assert seen[1] == []
    # rank 0's own shard, flipped by the test, is named there
    assert seen[0][0] == [4, "weights-changed", "0.weight"]
    assert not [s for s in seen[0] if s[1] == "replica-differs"]
