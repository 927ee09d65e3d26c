"""The formats `core.scan` still recognises and reads itself (`sniffing.sniff`, `scan._scan_as`),
registered for the lists that derive from the registry."""

from __future__ import annotations

from inspector.core.formats.registry import FormatSpec, register
from inspector.core.vocabulary import Format

TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
TORCH_MIME = "application/x-pytorch-checkpoint"
PICKLE_LOADERS = ("pickle.load", "torch.load(weights_only=False)", "joblib.load")

for spec in (
    FormatSpec(Format.PYTORCH_ZIP, "PyTorch checkpoint (torch.save)", TORCH_SUFFIXES, TORCH_MIME,
               holds_code=True, loaders=("torch.load",)),
    FormatSpec(Format.TORCHSCRIPT, "TorchScript archive (torch.jit.save)", holds_code=True,
               loaders=("torch.jit.load",)),
    FormatSpec(Format.TORCH_EXPORT, "torch.export archive (.pt2)", (".pt2",), holds_code=True,
               loaders=("torch.export.load",)),
    FormatSpec(Format.PYTORCH_LEGACY, "PyTorch checkpoint, legacy stream (before 1.6)",
               holds_code=True, loaders=("torch.load",)),
    FormatSpec(Format.PICKLE, "Python pickle", (".pkl", ".pickle"), holds_code=True,
               loaders=PICKLE_LOADERS),
    FormatSpec(Format.PYTORCH_TAR, "PyTorch checkpoint, legacy tar", holds_code=True,
               loaders=("torch.load",)),
    FormatSpec(Format.TAR, "tar archive", (".tar",), loaders=("tarfile",)),
    FormatSpec(Format.COMPRESSED_PICKLE, "compressed pickle (joblib)", (".joblib",),
               holds_code=True, loaders=PICKLE_LOADERS),
    FormatSpec(Format.COMPRESSED_ARCHIVE, "compressed archive", loaders=("tarfile",)),
    FormatSpec(Format.DISTCP, "torch.distributed.checkpoint data file", (".distcp",),
               holds_code=True, loaders=("torch.distributed.checkpoint.load",)),
    FormatSpec(Format.DCP, "torch.distributed.checkpoint folder", holds_code=True,
               loaders=("torch.distributed.checkpoint.load",)),
    FormatSpec(Format.SAFETENSORS, "safetensors tensor file", (".safetensors",),
               "application/x-safetensors", loaders=("safetensors.safe_open",)),
    FormatSpec(Format.NPY, "NumPy array", (".npy",), holds_code=True,
               loaders=("numpy.load(allow_pickle=True)",)),
    FormatSpec(Format.NPZ, "NumPy archive", (".npz",), holds_code=True,
               loaders=("numpy.load(allow_pickle=True)",)),
    FormatSpec(Format.ZIP, "zip archive", loaders=("zipfile",)),
    FormatSpec(Format.SEVEN_ZIP, "7-Zip archive", loaders=("py7zr",)),
):
    register(spec)
