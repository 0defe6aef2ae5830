"""Which CUDA device is here and whether it runs the build's arch: the driver API first (libcuda, ~10 ms, no
torch), torch to confirm a negative answer (harness.verify, evolve, export and the MCP task status use it)."""

from __future__ import annotations

import ctypes

from harness.errors import NoGpuError

__all__ = ["driver_device", "gpu_unavailable_reason", "require_gpu", "runs_arch"]


def driver_device(gpu: int) -> tuple[str, int, int] | None:
    """``(key, major, minor)`` of CUDA device ``gpu`` through the driver API (libcuda, ~10 ms), or None
    when the driver, the device or any call is unavailable. Saves the parent process importing torch
    (~2 s per verification); the worker alone needs torch."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
        count, dev, major, minor, version = (ctypes.c_int() for _ in range(5))
        name, uuid = ctypes.create_string_buffer(256), ctypes.create_string_buffer(16)
        ok = (cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(count)) == 0 and 0 <= gpu < count.value
              and cu.cuDeviceGet(ctypes.byref(dev), gpu) == 0
              # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76 (cuda.h)
              and cu.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) == 0
              and cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev) == 0
              and cu.cuDeviceGetName(name, 256, dev) == 0
              and (getattr(cu, "cuDeviceGetUuid_v2", None) or cu.cuDeviceGetUuid)(uuid, dev) == 0
              and cu.cuDriverGetVersion(ctypes.byref(version)) == 0)
    except (OSError, AttributeError):
        return None
    if not ok:
        return None
    return f"{name.value.decode(errors='replace')}|{uuid.raw.hex()}|{version.value}", major.value, minor.value


def runs_arch(arch: str, major: int, minor: int) -> bool:
    """Whether compute capability ``major.minor`` runs ``arch`` (sm_90a: 9.0; an arch without digits: any)."""
    want = arch.removeprefix("sm_").rstrip("a")
    return not want.isdigit() or f"{major}{minor}" == want


def gpu_unavailable_reason(arch: str, gpu: int) -> str | None:
    """None when CUDA device ``gpu`` runs ``arch`` as far as the driver API says (~10 ms, no torch), else why not
    (for a cheap status line; :func:`require_gpu` is the check verification relies on)."""
    found = driver_device(gpu)
    if found is None:
        return f"no CUDA device {gpu} here (no NVIDIA driver or no GPU)"
    if not runs_arch(arch, found[1], found[2]):
        return f"GPU {gpu} ({found[0].split('|')[0]}) is compute capability {found[1]}.{found[2]}, not {arch}'s"
    return None


def require_gpu(arch: str, gpu: int, *, library: str | None = None, what: str = "verification") -> str:
    """Return a key naming CUDA device ``gpu`` (for the peak cache) when it runs ``arch`` (e.g. sm_90a:
    compute capability 9.0), else raise NoGpuError (``no_gpu``, CLI exit code 3, one plain line).

    Callers that have not built anything yet (``attnq evolve`` before it creates a run) call it with
    ``what`` naming the work; :func:`verify_kernel` passes the built ``library``, which the message names.
    The driver API answers the common case; torch confirms every negative answer.
    """
    want = arch.removeprefix("sm_").rstrip("a")
    need = f"compute capability {want[:-1]}.{want[-1]}" if want.isdigit() else arch
    found = driver_device(gpu)
    if found is not None and runs_arch(arch, found[1], found[2]):
        return found[0]
    prefix = f"{what} needs an NVIDIA GPU that runs {arch} ({need})"
    if library is not None:
        prefix = f"the build succeeded ({library}), but {prefix}"
    try:
        import torch
    except ImportError:  # pragma: no cover
        raise NoGpuError(f"{prefix}; torch is not installed") from None
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise NoGpuError(f"{prefix}; this machine has none (torch sees no CUDA device)")
    if gpu >= torch.cuda.device_count():
        raise NoGpuError(f"{prefix}; GPU index {gpu} does not exist ({torch.cuda.device_count()} visible)")
    major, minor = torch.cuda.get_device_capability(gpu)
    if not runs_arch(arch, major, minor):
        raise NoGpuError(f"{prefix}; GPU {gpu} ({torch.cuda.get_device_name(gpu)}) is {major}.{minor}")
    props = torch.cuda.get_device_properties(gpu)
    return f"{props.name}|{getattr(props, 'uuid', '')}|{torch.version.cuda}"
