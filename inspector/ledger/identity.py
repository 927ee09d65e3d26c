"""Who saves: the host, the rank and the time each ledger record carries."""

from __future__ import annotations

import datetime
import os
import socket


def current_rank() -> int:
    """torch.distributed's rank when a process group is up, else $RANK, else 0."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK") or 0)


def world_size() -> int:
    """torch.distributed's world size when a process group is up, else $WORLD_SIZE, else 1."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE") or 1)


def barrier() -> None:
    """Wait for every rank, when there are ranks to wait for."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def host() -> str:
    """This machine's name."""
    return socket.gethostname()


def now() -> str:
    """The time in UTC, ISO 8601 to the millisecond."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
