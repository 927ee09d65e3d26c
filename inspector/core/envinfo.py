"""The environment a bug report needs: OS, Python, package versions, CUDA, cuDNN, driver, GPUs.

Nothing here imports torch in the calling process (the GUI must never pay for it): package
versions come from installed metadata, the driver and GPUs from NVML, and torch's own CUDA
runtime and cuDNN versions from a short-lived subprocess.
"""

from __future__ import annotations

import contextlib
import json
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata

NOT_FOUND = "not found"
NOT_AVAILABLE = "n/a"

PACKAGES = ("checkpoint-inspector", "torch", "safetensors", "numpy", "PySide6", "pyqtgraph",
            "nvidia-ml-py")

_TORCH_PROBE = """
import json, torch
cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
print(json.dumps({
    "torch": torch.__version__,
    "cuda_runtime": torch.version.cuda,
    "cudnn": cudnn,
    "cuda_available": torch.cuda.is_available(),
    "cuda_devices": torch.cuda.device_count(),
}))
"""


@dataclass
class GpuInfo:
    """One GPU as NVML describes it."""

    index: int
    name: str
    uuid: str = NOT_AVAILABLE
    memory_total_mib: int | None = None
    ecc_mode: str = NOT_AVAILABLE


@dataclass
class EnvInfo:
    """Everything the report's and the About box's environment section shows."""

    os: str
    python: str
    packages: dict[str, str]
    torch_cuda_runtime: str = NOT_FOUND
    cudnn: str = NOT_FOUND
    cuda_available: bool = False
    driver: str = NOT_FOUND
    cuda_driver: str = NOT_FOUND
    nvml: str = NOT_FOUND
    gpus: list[GpuInfo] = field(default_factory=list)

    def to_json(self) -> dict:
        """Plain dict for JSON output."""
        return asdict(self)

    def lines(self) -> list[tuple[str, str]]:
        """(label, value) rows in reading order, for tables and the About box."""
        rows = [("OS", self.os), ("Python", self.python)]
        rows += [(name, version) for name, version in self.packages.items()]
        rows += [
            ("CUDA runtime (torch)", self.torch_cuda_runtime),
            ("cuDNN", self.cudnn),
            ("NVIDIA driver", self.driver),
            ("CUDA driver API", self.cuda_driver),
            ("NVML", self.nvml),
        ]
        if not self.gpus:
            rows.append(("GPUs", "none found"))
        for gpu in self.gpus:
            memory = f", {gpu.memory_total_mib} MiB" if gpu.memory_total_mib else ""
            rows.append((f"GPU {gpu.index}", f"{gpu.name}{memory}, ECC {gpu.ecc_mode}"))
        return rows


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed distribution versions, "not found" for those absent."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = NOT_FOUND
    return versions


def torch_build_info(python: str = sys.executable, timeout: float = 120.0) -> dict:
    """torch's CUDA runtime and cuDNN versions, asked of a subprocess; {} if it fails."""
    try:
        done = subprocess.run(
            [python, "-I", "-c", _TORCH_PROBE],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {}


def nvml_info() -> tuple[str, str, str, list[GpuInfo]]:
    """(NVML status, driver version, CUDA driver version, GPUs) read through NVML."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py not installed", NOT_FOUND, NOT_FOUND, []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"{NOT_FOUND} ({_nvml_text(exc)})", NOT_FOUND, NOT_FOUND, []
    try:
        driver = _text(_nvml_call(pynvml, "nvmlSystemGetDriverVersion"))
        cuda = _nvml_call(pynvml, "nvmlSystemGetCudaDriverVersion_v2")
        cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else cuda
        gpus = [_gpu(pynvml, i) for i in range(pynvml.nvmlDeviceGetCount())]
        return "ok", driver, cuda_text, gpus
    except pynvml.NVMLError as exc:
        return f"error ({_nvml_text(exc)})", NOT_FOUND, NOT_FOUND, []
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _gpu(pynvml, index: int) -> GpuInfo:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    memory = _nvml_call(pynvml, "nvmlDeviceGetMemoryInfo", handle)
    ecc = _nvml_call(pynvml, "nvmlDeviceGetEccMode", handle)
    if isinstance(ecc, (tuple, list)):
        current, pending = ecc[0], ecc[1]
        ecc_text = "enabled" if current else "disabled"
        if pending != current:
            ecc_text += f" ({'enabled' if pending else 'disabled'} after reboot)"
    else:
        ecc_text = NOT_AVAILABLE
    return GpuInfo(
        index=index,
        name=_text(_nvml_call(pynvml, "nvmlDeviceGetName", handle)),
        uuid=_text(_nvml_call(pynvml, "nvmlDeviceGetUUID", handle)),
        memory_total_mib=memory.total // (1024 * 1024) if hasattr(memory, "total") else None,
        ecc_mode=ecc_text,
    )


def _nvml_call(pynvml, name: str, *args):
    """One NVML query; a query the device or the binding lacks reads "n/a" instead of failing."""
    fn = getattr(pynvml, name, None)
    if fn is None:
        return NOT_AVAILABLE
    try:
        return fn(*args)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return NOT_AVAILABLE


def _nvml_text(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def collect(probe_torch: bool = True) -> EnvInfo:
    """Gather the whole environment; probe_torch=False skips the subprocess (under 50 ms)."""
    status, driver, cuda_driver, gpus = nvml_info()
    info = EnvInfo(
        os=platform.platform(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        packages=package_versions(),
        driver=driver,
        cuda_driver=cuda_driver,
        nvml=status,
        gpus=gpus,
    )
    if info.packages.get("torch") == NOT_FOUND:
        info.torch_cuda_runtime = info.cudnn = "torch not installed"
    elif probe_torch:
        build = torch_build_info()
        if build:
            info.torch_cuda_runtime = build.get("cuda_runtime") or "none (CPU build)"
            info.cudnn = str(build["cudnn"]) if build.get("cudnn") else "none"
            info.cuda_available = bool(build.get("cuda_available"))
        else:
            info.torch_cuda_runtime = info.cudnn = "unknown (torch did not start)"
    else:
        info.torch_cuda_runtime = info.cudnn = "not probed"
    return info
