"""Replicas agree: under data parallelism every rank holds the same weights, so their exact
fingerprints (`fingerprint`) must be equal. Every N steps each rank all-gathers every tensor's
fingerprint and norm (two small collectives over the ranks' own process group: gloo on the CPU,
NCCL on GPUs), and a tensor whose fingerprints differ names the rank that disagrees: the odd one
out when three or more vote; with two, the one whose norm moved further from the last check
where they agreed (a guess the record says is one). This is how a fault that no single process
can see (a flip in one rank's optimizer arithmetic, a bad all-reduce) is caught.

Only replicated weights are compared: a model with a sharded parameter (FSDP's flat parameters,
a DTensor) or an FSDP module is skipped, since its ranks hold different bytes by design. The
comparison runs over the default process group, so under tensor or pipeline parallelism (plain
tensors that differ by rank) turn it off (`GuardConfig(replica_every=0)`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from inspector.guard.rules import Breach
from inspector.guard.weights.fingerprint import Prints, WeightWatch, fingerprint

RULE = "replica-differs"


def world() -> tuple[int, int] | None:
    """(rank, world size) when a process group with more than one rank is up, else None."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    return dist.get_rank(), dist.get_world_size()


def replicated(watch: WeightWatch) -> bool:
    """Whether every watched parameter is whole on each rank (as DDP keeps them)."""
    return not watch.sharded


@dataclass
class ReplicaCheck:
    """The cross-rank comparison, with the norms of the last check where all ranks agreed."""

    agreed: dict[str, float] = field(default_factory=dict)

    def compare(self, watch: WeightWatch) -> list[Breach]:
        """One breach per tensor whose replicas differ, its value the blamed rank."""
        import torch.distributed as dist

        place = world()
        if place is None or not watch.params or not replicated(watch):
            return []
        size = place[1]
        device = watch.params[0].device
        with torch.no_grad():
            prints = fingerprint(watch.params)
            norms = torch.stack(torch._foreach_norm([p.detach() for p in watch.params], 2.0)
                                ).to(device=device, dtype=torch.float64)
        flat = prints.flat.to(device)
        all_prints = [torch.empty_like(flat) for _ in range(size)]
        all_norms = [torch.empty_like(norms) for _ in range(size)]
        dist.all_gather(all_prints, flat)
        dist.all_gather(all_norms, norms)
        by_rank = [Prints(t, prints.lengths).per_tensor() for t in all_prints]
        norm_by_rank = [t.tolist() for t in all_norms]
        out = []
        for i, name in enumerate(watch.names[:len(watch.params)]):
            values = [by_rank[r][i] for r in range(size)]
            if len(set(values)) == 1:
                self.agreed[name] = norm_by_rank[0][i]
                continue
            blamed = self._blame(name, values, [norm_by_rank[r][i] for r in range(size)])
            out.append(Breach(RULE, "weights", float(blamed), None, name))
        return out

    def _blame(self, name: str, values: list[tuple[int, ...]], norms: list[float]) -> int:
        """The odd rank out by vote; on a tie, the rank whose norm moved furthest from the
        last agreement (the first rank when there was none)."""
        counts = Counter(values).most_common()
        if len(counts) > 1 and counts[0][1] > counts[1][1]:
            majority = counts[0][0]
            return next(r for r, v in enumerate(values) if v != majority)
        base = self.agreed.get(name)
        if base is None:
            return 0
        return max(range(len(norms)), key=lambda r: abs(norms[r] - base))
