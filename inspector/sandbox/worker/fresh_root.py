"""The jail's fresh root: a nearly empty file system holding only what the worker needs.

Built the way bubblewrap builds one, in a mount namespace of the worker's own: a tmpfs, the
Python installation, the shared libraries and the job's inputs bound into it read-only at
their own paths, /dev with null, zero and urandom (and the NVIDIA nodes for a GPU job), the
worker's /proc, then `pivot_root` into it and the host's tree detached. Afterwards `stat`,
`readlink`, `/proc/self/mountinfo` and directory listings see only those paths: the user's
home, /etc, other worktrees and the client's folder are simply not there.

`root_plan` and `gpu_paths` are pure functions of what exists on the host (tested without a
GPU); `host_facts` reads those facts and `build_root` carries a plan out. Nothing here imports
torch.

A GPU job gets one GPU: the driver's shared nodes (`GPU_NODES`), the chosen GPU's own node
`/dev/nvidiaN` (N its device minor, `gpu_minor`), and that device's sysfs folder, never the
other GPUs' nodes, the MIG capability nodes, `nvidia-uvm-tools` or `nvidia-modeset`, nor the
rest of /sys/devices. CUDA is pointed at the same GPU by its UUID (`GpuPaths.uuid`, set as
`CUDA_VISIBLE_DEVICES`), so it is `cuda:0` inside whatever guards the jail has.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

BASE_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")
"""Device nodes every worker gets: Python reads urandom, libraries open null and zero."""

GPU_LIBRARY_PREFIXES = ("libcuda.so", "libcudadebugger.so", "libnvidia-ml.so",
                        "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so",
                        "libnvidia-gpucomp.so", "libnvidia-fatbinaryloader.so")
"""The driver's user-space libraries CUDA and NVML dlopen (torch ships the rest itself)."""

GPU_NODES = ("nvidiactl", "nvidia-uvm")
"""The driver's nodes every CUDA process opens besides its GPU's own `nvidiaN`: the control
node and unified memory. Not `nvidia-uvm-tools` (profiling), `nvidia-modeset` (display) or
`nvidia-caps/` (MIG capabilities)."""
GPU_READ = ("/proc/driver/nvidia",)
"""What the driver's libraries read besides the nodes and the device's sysfs folder (the fresh
root has it with the worker's own /proc; Landlock needs it named)."""
PCI_DEVICES = "/sys/bus/pci/devices"
"""Where the chosen GPU's sysfs folder is named by its PCI address (a symlink into
/sys/devices, recreated in the fresh root)."""


@dataclass(frozen=True)
class Mount:
    """One entry of the new root, at `path` (the host path it shows)."""

    path: str
    kind: str
    """`ro` (a read-only bind of the host's file or folder), `dev` (a device node or folder of
    them, bound writable), `link` (a symlink to `target`) or `proc` (the worker's /proc)."""
    target: str = ""


@dataclass(frozen=True)
class GpuPaths:
    """What a GPU job needs besides the CPU jail: device nodes, driver libraries, the device's
    sysfs folder, and the UUID CUDA knows it by."""

    devices: tuple[str, ...]
    libraries: tuple[str, ...]
    sysfs: tuple[str, ...] = ()
    uuid: str | None = None


def _covered(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def root_plan(read: Sequence[str], devices: Sequence[str],
              links: Mapping[str, str]) -> list[Mount]:
    """The mounts of a new root, parents before children.

    `read`: real paths (no symlink in them) bound read-only; a path inside another is covered
    by it. `devices`: device nodes (or folders of them) bound writable. `links`: host
    symlinks on the way to a read path (e.g. /lib -> usr/lib), recreated unless a bound
    folder already shows them. /proc is the worker's own; paths under it are left to it."""
    mounts: list[Mount] = [Mount("/proc", "proc")]
    bound: list[str] = []
    for path in sorted({os.path.normpath(p) for p in read}):
        if path == "/" or _covered(path, ["/proc"]) or _covered(path, bound):
            continue
        bound.append(path)
        mounts.append(Mount(path, "ro"))
    for path in sorted({os.path.normpath(p) for p in devices}):
        if not _covered(path, bound):
            mounts.append(Mount(path, "dev"))
    for path, target in sorted(links.items()):
        if not _covered(path, bound):
            mounts.append(Mount(path, "link", target))
    return mounts


LOADER_ARCH = {"x86_64": "x86-64", "aarch64": "AArch64"}
"""How `ldconfig -p` names each machine's own libraries (32-bit ones are plain `libc6`)."""


def gpu_minor(device: str) -> int | None:
    """The device minor of the GPU a request's `device` names: None for `cpu`, 0 for `cuda`
    and `auto`, N for `cuda:N` (None for anything else: no GPU is let in)."""
    device = device.strip().lower()
    if device in ("cuda", "auto"):
        return 0
    match = re.fullmatch(r"cuda:(\d{1,4})", device)
    return int(match.group(1)) if match else None


def gpu_paths(dev_names: Iterable[str], ldconfig: str, machine: str, minor: int = 0,
              gpus: Mapping[str, str] | None = None) -> GpuPaths:
    """The nodes among `dev_names` (entries of /dev) the GPU of device minor `minor` needs, the
    driver libraries for `machine` that `ldconfig -p` lists (its text), and, from `gpus` (PCI
    address -> the text of /proc/driver/nvidia/gpus/ADDRESS/information), that GPU's sysfs
    folder and UUID."""
    present = set(dev_names)
    devices = tuple(sorted(f"/dev/{n}" for n in (*GPU_NODES, f"nvidia{minor}") if n in present))
    tag = LOADER_ARCH.get(machine, machine)
    libraries = []
    for line in ldconfig.splitlines():
        match = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if not match:
            continue
        name, arch, path = match.groups()
        if name.startswith(GPU_LIBRARY_PREFIXES) and tag in arch.split(","):
            libraries.append(path)
    chosen = [(address, info) for address, info in sorted((gpus or {}).items())
              if _field(info, "Device Minor") == str(minor)]
    sysfs = tuple(f"{PCI_DEVICES}/{address}" for address, _ in chosen
                  if re.fullmatch(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]",
                                  address))
    uuid = _field(chosen[0][1], "GPU UUID") if len(chosen) == 1 else None
    return GpuPaths(devices, tuple(sorted(set(libraries))), sysfs, uuid)


def _field(information: str, name: str) -> str | None:
    """One `Name: value` line of the driver's per-GPU information file."""
    match = re.search(rf"^{re.escape(name)}:[ \t]*(\S+)", information, re.MULTILINE)
    return match.group(1) if match else None


def host_links(paths: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """Each path's real path, and every symlink met on the way to it (path -> target)."""
    real, links = [], {}
    for path in paths:
        parts = os.path.abspath(path).split("/")[1:]
        walked = ""
        for _ in range(40):  # symlink hops, as the kernel bounds them
            for i, part in enumerate(parts):
                candidate = f"{walked}/{part}"
                if os.path.islink(candidate):
                    target = os.readlink(candidate)
                    links[candidate] = target
                    base = target if target.startswith("/") else f"{walked}/{target}"
                    parts = os.path.normpath(base).split("/")[1:] + parts[i + 1:]
                    walked = ""
                    break
                walked = candidate
            else:
                break
        real.append(walked or "/")
    return real, links


# --- carrying a plan out ----------------------------------------------------------------

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 1 << 14
_MNT_DETACH = 2
# statvfs flags a remount must repeat: inside a user namespace they are locked
_ST_TO_MS = {os.ST_NOSUID: _MS_NOSUID, os.ST_NODEV: _MS_NODEV, os.ST_NOEXEC: _MS_NOEXEC,
             os.ST_NOATIME: 1024, os.ST_NODIRATIME: 2048, os.ST_RELATIME: 1 << 21}
_STAGING = ("/tmp", "/mnt", "/var/tmp")
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
"""pivot_root's system call number per machine."""

_libc = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def b(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    if _libc.mount(b(source), b(target), b(fstype), ctypes.c_ulong(flags), b(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _read_only(target: str, extra: int = 0) -> None:
    flags = os.statvfs(target).f_flag
    kept = sum(ms for st, ms in _ST_TO_MS.items() if flags & st)
    _mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | kept | extra)


def host_facts(read: Iterable[str], gpu: int | None) -> list[Mount]:
    """The plan for this host: `read` (files and folders the worker reads), the base devices,
    and for a GPU job (`gpu`: its device minor) that GPU's nodes, the driver libraries and the
    device's sysfs folder."""
    extra_devices: tuple[str, ...] = ()
    read = list(read)
    if gpu is not None and (found := host_gpu(gpu)).devices:  # a machine with the driver
        extra_devices = found.devices
        read += [*found.libraries, *found.sysfs]
    real, links = host_links(p for p in read if os.path.exists(p))
    devices = [d for d in (*BASE_DEVICES, *extra_devices) if os.path.exists(d)]
    return root_plan(real, devices, links)


@functools.cache
def host_gpu(minor: int) -> GpuPaths:
    """What the GPU of device minor `minor` needs on this host (nothing without a driver)."""
    if not os.path.exists("/dev/nvidiactl"):
        return GpuPaths((), ())
    return gpu_paths(os.listdir("/dev"), _ldconfig(), os.uname().machine, minor, _gpu_facts())


def _gpu_facts() -> dict[str, str]:
    """PCI address -> the driver's information text, for each GPU it drives."""
    base = "/proc/driver/nvidia/gpus"
    facts = {}
    for address in os.listdir(base) if os.path.isdir(base) else ():
        try:
            with open(f"{base}/{address}/information", encoding="utf-8",
                      errors="replace") as fh:
                facts[address] = fh.read(1 << 16)
        except OSError:
            continue
    return facts


def _ldconfig() -> str:
    """`ldconfig -p`, the loader cache's listing ('' where it cannot run)."""
    import subprocess

    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.path.exists(ldconfig):
            try:
                return subprocess.run([ldconfig, "-p"], capture_output=True, text=True,
                                      timeout=30, check=False).stdout
            except (OSError, subprocess.SubprocessError):
                return ""
    return ""


def _place(where: str, m: Mount, fd: int | None) -> None:
    if m.kind == "link":
        os.makedirs(os.path.dirname(where), exist_ok=True)
        os.symlink(m.target, where)
        return
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(where, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(where), exist_ok=True)
        os.close(os.open(where, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
    _mount(f"/proc/self/fd/{fd}", where, None, _MS_BIND | _MS_REC)
    if m.kind == "ro":
        _read_only(where, _MS_NODEV)


def staging_folder(plan: Sequence[Mount]) -> str:
    """The folder the new root is built in: one no bound path is or holds, since a recursive
    bind of such a path would carry the staging tmpfs along and show it instead of the host's
    folder (`cd /tmp` with the current folder bound hid every input under /tmp)."""
    bound = [m.path for m in plan if m.kind in ("ro", "dev")]
    for folder in _STAGING:
        if os.path.isdir(folder) and not _covered(folder, bound):
            return folder
    raise OSError(f"no folder to build the root in: each of {', '.join(_STAGING)} is bound")


def build_root(plan: Sequence[Mount], machine: str) -> str:
    """Make `plan` the root of this mount namespace (which must be this process's own, its
    mounts private); the host's tree is detached afterwards. Returns a one-line summary."""
    staging = staging_folder(plan)
    # Every source is opened before the tmpfs covers the staging folder (an input may be
    # under it); a bind from /proc/self/fd/N binds what the descriptor names.
    sources = {m.path: os.open(m.path, os.O_PATH | os.O_CLOEXEC) for m in plan
               if m.kind in ("ro", "dev")}
    proc = os.open("/proc", os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
    _mount("tmpfs", staging, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    try:
        for m in plan:
            _place(staging + m.path, m, proc if m.kind == "proc" else sources.get(m.path))
    except BaseException:
        _libc.umount2(os.fsencode(staging), _MNT_DETACH)  # the host's tree, as it was
        raise
    finally:
        for fd in (*sources.values(), proc):
            os.close(fd)
    os.chdir(staging)
    # pivot_root(".", "."): the old root ends up stacked on the new one, then is detached.
    if _libc.syscall(ctypes.c_long(PIVOT_ROOT[machine]), b".", b".") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"pivot_root: {os.strerror(err)}")
    if _libc.umount2(b".", _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"detaching the host's root: {os.strerror(err)}")
    os.chdir("/")
    _read_only("/", _MS_NODEV)
    devices = sum(m.kind == "dev" for m in plan)
    return f"tmpfs, the inputs and the Python installation read-only, {devices} devices"
