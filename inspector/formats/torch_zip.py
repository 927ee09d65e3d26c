"""torch's zip archives: `pytorch-zip` (`torch.save` since 1.6: `<prefix>/data.pkl` and its
tensor records), `torchscript` (`torch.jit.save`), `torch-export` (`torch.export.save`, a
`.pt2`) and `distcp` (torch.distributed.checkpoint's back-to-back archives; its folder is `dcp`,
`scan.dcp_folder`). `zip_archive` reads every zip and names these by their members
(`sniffing.zip_kind`); here is what only torch's reading checks: storage references against
the records."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from inspector.core.dtypes import STORAGE_CLASSES
from inspector.core.vocabulary import Format, Severity
from inspector.formats.registry import FormatSpec, register

if TYPE_CHECKING:
    from inspector.formats.context import FormatContext

TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
TORCH_MIME = "application/x-pytorch-checkpoint"


# Members of a torch zip (below its folder) that torch.load opens besides the tensor records.
TORCH_READS = frozenset({"data.pkl", "version", ".data/version", "byteorder",
                         ".data/serialization_id", ".format_version", ".storage_alignment"})


STORAGE_ITEMSIZE = {
    name.removesuffix("Storage"): d.itemsize for name, d in STORAGE_CLASSES.items()
} | {"Untyped": 1}


@functools.lru_cache(maxsize=256)
def storage_itemsize(storage_type: str) -> int | None:
    leaf = storage_type.rsplit(".", 1)[-1]
    return STORAGE_ITEMSIZE.get(leaf[: -len("Storage")]) if leaf.endswith("Storage") else None


def check_records(ctx: FormatContext, storages: list, by_name: dict, prefix: str,
                  kind: str) -> None:
    """Storage references against the archive's records: absent, unreferenced, too small."""
    seen: set[str] = set()
    data_prefix = f"{prefix}/data/"
    for s in storages:
        name = data_prefix + s.key
        if name in seen:
            continue
        seen.add(name)
        record = by_name.get(name)
        if record is None:
            ctx.find(Severity.SUSPICIOUS, "zip-missing-record",
                     f"storage {s.key!r} is referenced but {name} is absent", name, s.offset)
            ctx.block(f"record {name} is missing")
            continue
        itemsize = storage_itemsize(s.storage_type)
        if not itemsize or s.numel < 0 or s.numel * itemsize == record.size:
            continue
        declared = s.numel * itemsize
        ctx.block(f"record {name} holds {record.size} bytes, storage declares {declared}")
        if declared > record.size:
            ctx.find(Severity.DANGEROUS, "storage-size-mismatch",
                     f"storage {s.key!r} declares {s.numel} x {itemsize} bytes but its record "
                     f"holds {record.size}; reading it would run past the data", name, s.offset)
        else:
            ctx.find(Severity.SUSPICIOUS, "storage-record-larger",
                     f"record holds {record.size} bytes, storage {s.key!r} uses {declared} "
                     "(extra bytes hidden after the tensor)", name, s.offset)
    if kind in (Format.PYTORCH_ZIP, Format.TORCHSCRIPT):
        for name in by_name:
            if name.startswith(data_prefix) and name not in seen:
                ctx.find(Severity.SUSPICIOUS, "zip-unreferenced-record",
                         f"{name} is not referenced by any pickle (hidden data?)", name)


DCP_LOADERS = ("torch.distributed.checkpoint.load",)
register(FormatSpec(Format.PYTORCH_ZIP, "PyTorch checkpoint", TORCH_SUFFIXES, TORCH_MIME,
                    holds_code=True, loaders=("torch.load",),
                    mime_globs=(".pt", ".pth", ".ckpt"), loadable=True))
register(FormatSpec(Format.TORCHSCRIPT, "TorchScript archive (torch.jit.save)", holds_code=True,
                    loaders=("torch.jit.load",), loadable=True))
register(FormatSpec(Format.TORCH_EXPORT, "torch.export archive (.pt2)", (".pt2",),
                    holds_code=True, loaders=("torch.export.load",), loadable=True))
register(FormatSpec(Format.DISTCP, "torch.distributed.checkpoint data file", (".distcp",),
                    holds_code=True, loaders=DCP_LOADERS))
register(FormatSpec(Format.DCP, "torch.distributed.checkpoint folder", holds_code=True,
                    loaders=DCP_LOADERS, loadable=True))
