"""Archives that write outside their folder when unpacked, and compressed payloads behind
padding (issue 34). Each builder is `builder(path, canary) -> path`: the archive is meant to
be unpacked into a folder that is a sibling of `canary` (`unpack_folder(canary)`), and doing so
writes `canary`; a compressed payload runs `touch canary` when its loader reads it.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import pickle
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from factories import _rewrite_zip, _torch_zip_bytes, call, touch_cmd

WRITTEN = b"written outside the folder\n"


def unpack_folder(canary: Path) -> Path:
    """The folder the archives below are unpacked into: beside the canary."""
    return canary.parent / "unpacked"


def _tar(members: list[tarfile.TarInfo]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(WRITTEN) if info.isfile() else None)
    return out.getvalue()


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(WRITTEN)
    return info


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def tar_absolute(path: Path, canary: Path) -> Path:
    """A tar member named by the canary's absolute path."""
    path.write_bytes(_tar([_file("model/config.txt"), _file(str(canary))]))
    return path


def tar_dotdot(path: Path, canary: Path) -> Path:
    """A tar member whose `..` part climbs out of the folder."""
    path.write_bytes(_tar([_file("../" + canary.name)]))
    return path


def tar_symlink_through(path: Path, canary: Path) -> Path:
    """A symlink to the folder above, then a member written through it."""
    path.write_bytes(_tar([_link("cache", "..", tarfile.SYMTYPE),
                           _file("cache/" + canary.name)]))
    return path


def tar_symlink_chain(path: Path, canary: Path) -> Path:
    """A symlink to another symlink inside the archive, which leads to the canary's folder by
    its absolute name; the member written through the first lands outside."""
    path.write_bytes(_tar([_link("a", str(canary.parent), tarfile.SYMTYPE),
                           _link("sub/b", "../a", tarfile.SYMTYPE),
                           _file("sub/b/" + canary.name)]))
    return path


def tar_hardlink(path: Path, canary: Path) -> Path:
    """A hard link to the canary (an existing file outside), then a member of the link's name:
    tarfile opens the link for writing, which writes the canary."""
    path.write_bytes(_tar([_link("weights.bin", str(canary), tarfile.LNKTYPE),
                           _file("weights.bin")]))
    return path


MODE, OWNER = 0o6777, 12345  # what the members below set on the outside file: setuid, setgid


def _folder(name: str) -> tarfile.TarInfo:
    """A folder member setting mode 6777, owner 12345 and mtime 0 on its path."""
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, MODE, 0
    info.uid = info.gid = OWNER
    return info


def _metadata(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mode, info.mtime, info.uid, info.gid = MODE, 0, OWNER, OWNER
    return info


# Each builder below is `builder(path, target) -> path`: `target` is an existing file beside
# `unpack_folder(target)`, and unpacking the archive there with tarfile (no filter) sets its
# mode to 6777 and its mtime to 0 (its owner to 12345 when root unpacks); no member is named by
# the target's path or climbs out by name.

def tar_folder_over_link(path: Path, target: Path) -> Path:
    """A symlink to the target, then a folder member of the link's name: mkdir finds the path
    taken and passes; extractall then sets the folder's mode, owner and times through it."""
    path.write_bytes(_tar([_link("weights", str(target), tarfile.SYMTYPE),
                           _folder("weights")]))
    return path


def tar_folder_then_link(path: Path, target: Path) -> Path:
    """A file, a folder member of its name (mkdir passes), then a symlink of that name to the
    target: extractall sets the folder's mode, owner and times after the last member, through
    the link that stands then."""
    path.write_bytes(_tar([_file("weights"), _folder("weights"),
                           _link("weights", str(target), tarfile.SYMTYPE)]))
    return path


def tar_hardlink_over_link(path: Path, target: Path) -> Path:
    """A file, a symlink to the target, then a hard link of the symlink's name to the file:
    linking over the symlink fails, and tarfile copies the file there, through the link."""
    path.write_bytes(_tar([_metadata(_file("config.txt")),
                           _link("weights", str(target), tarfile.SYMTYPE),
                           _metadata(_link("weights", "config.txt", tarfile.LNKTYPE))]))
    return path


def tar_hardlink_folder_over_link(path: Path, target: Path) -> Path:
    """A folder, a symlink to the target, then a hard link of the symlink's name to the folder:
    linking fails, and tarfile makes the folder member there and sets its mode through it."""
    path.write_bytes(_tar([_folder("cache"), _link("weights", str(target), tarfile.SYMTYPE),
                           _metadata(_link("weights", "cache", tarfile.LNKTYPE))]))
    return path


def tar_hardlink_to_symlink(path: Path, target: Path) -> Path:
    """A symlink `a/b/s -> ../NAME` (to the file `a/NAME`, inside), then a hard link `t` to it:
    link(2) links the symlink itself, so `t` reads `../NAME` from the folder's top, the target;
    tarfile sets the hard link's mode, owner and times through it. No symlink points outside."""
    path.write_bytes(_tar([_file("a/" + target.name),
                           _link("a/b/s", "../" + target.name, tarfile.SYMTYPE),
                           _metadata(_link("t", "a/b/s", tarfile.LNKTYPE))]))
    return path


def tar_folder_beside_link(path: Path, target: Path) -> Path:
    """The harmless twin of `tar_folder_over_link`: the same symlink, and a folder member of
    another name, which no link leads through."""
    path.write_bytes(_tar([_link("weights", str(target), tarfile.SYMTYPE), _folder("cache")]))
    return path


def tar_hardlink_to_symlink_beside(path: Path, target: Path) -> Path:
    """The harmless twin of `tar_hardlink_to_symlink`: the hard link sits beside the symlink,
    so the copy reads `../NAME` from the same place, the file `a/NAME` inside."""
    path.write_bytes(_tar([_file("a/" + target.name),
                           _link("a/b/s", "../" + target.name, tarfile.SYMTYPE),
                           _metadata(_link("a/b/t", "a/b/s", tarfile.LNKTYPE))]))
    return path


def _zip(entries: list[tuple[zipfile.ZipInfo, bytes]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info, data in entries:
            z.writestr(info, data)
    return out.getvalue()


def zip_dotdot(path: Path, canary: Path) -> Path:
    """A zip member whose `..` part climbs out of the folder."""
    path.write_bytes(_zip([(zipfile.ZipInfo("../" + canary.name), WRITTEN)]))
    return path


def zip_absolute(path: Path, canary: Path) -> Path:
    """A zip member named by the canary's absolute path."""
    path.write_bytes(_zip([(zipfile.ZipInfo(str(canary)), WRITTEN)]))
    return path


def zip_symlink_through(path: Path, canary: Path) -> Path:
    """A Unix symlink entry to the canary's folder, then a member written through it."""
    link = zipfile.ZipInfo("cache")
    link.create_system, link.external_attr = 3, (stat.S_IFLNK | 0o777) << 16
    path.write_bytes(_zip([(link, str(canary.parent).encode()),
                           (zipfile.ZipInfo("cache/" + canary.name), WRITTEN)]))
    return path


TAR_BUILDERS: dict[str, Callable[[Path, Path], Path]] = {
    "tar_absolute": tar_absolute,
    "tar_dotdot": tar_dotdot,
    "tar_symlink_through": tar_symlink_through,
    "tar_symlink_chain": tar_symlink_chain,
    "tar_hardlink": tar_hardlink,
}
# unpacking these into `unpack_folder(target)` sets the mode, owner and times of `target`
THROUGH_LINK_BUILDERS: dict[str, Callable[[Path, Path], Path]] = {
    "tar_folder_over_link": tar_folder_over_link,
    "tar_folder_then_link": tar_folder_then_link,
    "tar_hardlink_over_link": tar_hardlink_over_link,
    "tar_hardlink_folder_over_link": tar_hardlink_folder_over_link,
    "tar_hardlink_to_symlink": tar_hardlink_to_symlink,
}
ZIP_BUILDERS: dict[str, Callable[[Path, Path], Path]] = {
    "zip_dotdot": zip_dotdot,
    "zip_absolute": zip_absolute,
    "zip_symlink_through": zip_symlink_through,
}


def zip_nul_torch_zip(path: Path, canary: Path) -> Path:
    """A zip holding a malicious torch zip under a name with a NUL: zipfile cuts the name at
    the NUL, so extracting it gives `model.pt`, which torch.load unpickles."""
    inner = _rewrite_zip(_torch_zip_bytes(path.parent), {
        "/data.pkl": call("os", "system", touch_cmd(canary))})
    raw = _zip([(zipfile.ZipInfo("model.ptX.txt"), inner)])
    path.write_bytes(raw.replace(b"model.ptX.txt", b"model.pt\x00.txt"))
    return path


PADDING = 48 << 20  # bytes of padding before the payload


def padded_pickle(canary: Path, padding: int = PADDING) -> bytes:
    """A protocol 4 pickle: `padding` zero bytes (one BINBYTES8, popped), then os.system."""
    import struct

    return (b"\x80\x04\x8e" + struct.pack("<Q", padding) + bytes(padding) + b"0"
            + call("os", "system", touch_cmd(canary))[2:])


def padded_protocol0(canary: Path, quoted: bool, padding: int = PADDING) -> bytes:
    """A protocol 0 pickle: one line of `padding` characters (a quoted STRING, or a UNICODE
    line), popped, then os.system, in protocol 0 opcodes only."""
    pad = b"S'" + b"A" * padding + b"'\n" if quoted else b"V" + b"A" * padding + b"\n"
    cmd = touch_cmd(canary).replace("'", "\\'")
    return pad + b"0cos\nsystem\n(S'" + cmd.encode() + b"'\ntR."


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def _lz4(data: bytes) -> bytes:
    import lz4.frame

    return lz4.frame.compress(data)


COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress, "zstd": _zstd,
    "lz4": _lz4,
}


def open_compressed(kind: str, path: Path):
    """The file object a loader reads a `kind` stream through (joblib's own readers for gzip,
    bz2, xz and lz4; zstandard's for zstd)."""
    if kind == "zstd":
        import zstandard

        # pickle.load reads lines too: zstandard's reader gives them through a buffer
        return io.BufferedReader(zstandard.open(path, "rb"))
    if kind == "lz4":
        import lz4.frame

        return lz4.frame.open(path, "rb")
    return {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}[kind](path, "rb")


def compressed_padded(kind: str) -> Callable[[Path, Path], Path]:
    """A `kind` stream of `padded_pickle`."""
    def build(path: Path, canary: Path) -> Path:
        path.write_bytes(COMPRESSORS[kind](padded_pickle(canary)))
        return path

    build.__doc__ = f"{kind} of a pickle whose payload follows 48 MiB of padding"
    return build


def zip_deflated_padded(path: Path, canary: Path) -> Path:
    """A torch zip whose deflated data.pkl runs os.system after 48 MiB of padding."""
    src = _torch_zip_bytes(path.parent)
    path.write_bytes(_rewrite_zip(src, {"/data.pkl": padded_pickle(canary)},
                                  compress={"/data.pkl"}))
    return path


def tar_zst(path: Path, canary: Path) -> Path:
    """A `.tar.zst` of a model folder whose `model.pkl` runs os.system when unpickled."""
    info = tarfile.TarInfo("model/model.pkl")
    payload = call("os", "system", touch_cmd(canary))
    info.size = len(payload)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        tar.addfile(info, io.BytesIO(payload))
    path.write_bytes(_zstd(out.getvalue()))
    return path


def zstd_torch_zip(path: Path, canary: Path) -> Path:
    """A zstd'd malicious torch zip."""
    inner = _rewrite_zip(_torch_zip_bytes(path.parent), {
        "/data.pkl": call("os", "system", touch_cmd(canary))})
    path.write_bytes(_zstd(inner))
    return path


def lz4_pickle(path: Path, canary: Path) -> Path:
    """An lz4 frame of an os.system pickle (joblib's compress='lz4')."""
    path.write_bytes(_lz4(call("os", "system", touch_cmd(canary))))
    return path


def benign_compressed(kind: str, path: Path) -> Path:
    """A `kind` stream of a plain pickle of numbers (what a benign compressed pickle holds)."""
    path.write_bytes(COMPRESSORS[kind](pickle.dumps({"step": 3, "lr": [0.1, 0.01]},
                                                    protocol=4)))
    return path


def gzip_torch_zip_padded(path: Path, canary: Path) -> Path:
    """A gzip'd torch zip whose stored data.pkl runs os.system after 48 MiB of padding."""
    inner = _rewrite_zip(_torch_zip_bytes(path.parent), {"/data.pkl": padded_pickle(canary)})
    path.write_bytes(gzip.compress(inner))
    return path


def tar_gz_padded(path: Path, canary: Path) -> Path:
    """A `.tar.gz` of a model folder: 48 MiB of padding in one member, then `model.pkl`, which
    runs os.system when unpickled."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (("model/padding.bin", bytes(PADDING)),
                           ("model/model.pkl", call("os", "system", touch_cmd(canary)))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(gzip.compress(out.getvalue()))
    return path
