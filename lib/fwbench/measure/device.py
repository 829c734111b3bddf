"""Which devices each framework sees, and how to wait for the work queued on them."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class _DeviceInfo:
    framework: str
    kind: str  # cpu / cuda / mps / tpu
    name: str  # marketing name, e.g. "NVIDIA H100 80GB HBM3", or the CPU model
    index: int = 0


# The instruction sets that decide which kernels a framework picks on x86: AVX-512 doubles the
# vector width, AVX-512-BF16 and AMX give bf16 its own hardware (without them PyTorch's bf16 runs
# at about 1% of fp32's speed on an AMD EPYC of family 25 model 1).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16")


@functools.cache
def cpu_identity() -> dict:
    """What tells two CPUs apart where the marketing name does not: a VM may report only "AMD
    EPYC" for both a Zen 3 (family 25, model 1, no AVX-512) and a Zen 4 (family 25, model 17,
    AVX-512 with BF16). ``family`` and ``model`` are None where /proc/cpuinfo has none."""
    try:
        with open("/proc/cpuinfo") as fh:
            text = fh.read()
    except OSError:
        text = ""
    return parse_cpuinfo(text)


def parse_cpuinfo(text: str) -> dict:
    """The identity of the first processor of a /proc/cpuinfo text (a VM's cores are alike)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())

    def number(key: str) -> int | None:
        value = fields.get(key, "")
        return int(value) if value.isdigit() else None

    return {
        "name": fields.get("model name") or platform.processor() or platform.machine(),
        "vendor": fields.get("vendor_id"),
        "family": number("cpu family"),
        "model": number("model"),
        "stepping": number("stepping"),
        "isa": [flag for flag in ISA_FLAGS if flag in flags],
    }


# Allocators a process may have preloaded, by the name their shared library starts with
_ALLOCATORS = ("jemalloc", "tcmalloc", "mimalloc")


def heap_allocator(maps: str | os.PathLike = "/proc/self/maps") -> str:
    """The malloc this process runs on: a preloaded allocator whose library is mapped, else glibc.

    It decides whether a freed buffer's pages are handed back to the kernel, and so how many page
    faults a step pays (the memory family's time model does not see them)."""
    try:
        text = Path(maps).read_text()
    except OSError:
        return "unknown"
    for line in text.splitlines():
        fields = line.split()
        name = Path(fields[-1]).name if fields else ""
        for allocator in _ALLOCATORS:
            if name.startswith(f"lib{allocator}"):
                return allocator
    return "glibc"


# jemalloc's arena index that names every arena at once (MALLCTL_ARENAS_ALL)
_ALL_ARENAS = 4096
# How long freed pages wait before jemalloc hands them back while a compilation runs: its own
# default, so what the compiler frees leaves the process as it would without the preload.
COMPILE_DECAY_MS = 10_000


def _mallctl():
    """jemalloc's control call where this process runs on jemalloc, else None."""
    if heap_allocator() != "jemalloc":
        return None
    try:
        return ctypes.CDLL(None).mallctl  # the preloaded library's symbol, found process-wide
    except (OSError, AttributeError):
        return None


def _decay_ms(ctl) -> tuple[int, int]:
    found = []
    for kind in ("dirty", "muzzy"):
        value, size = ctypes.c_ssize_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_ssize_t))
        if ctl(
            f"arenas.{kind}_decay_ms".encode(), ctypes.byref(value), ctypes.byref(size), None, 0
        ):
            raise OSError(f"jemalloc refused to read arenas.{kind}_decay_ms")
        found.append(value.value)
    return found[0], found[1]


def _set_decay_ms(ctl, dirty: int, muzzy: int) -> None:
    count, size = ctypes.c_uint(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_uint))
    ctl(b"arenas.narenas", ctypes.byref(count), ctypes.byref(size), None, 0)
    for kind, ms in (("dirty", dirty), ("muzzy", muzzy)):
        value = ctypes.c_ssize_t(ms)
        # the default for arenas made later, then every arena that exists (an index never
        # initialised answers an error, which leaves nothing to set)
        for name in [
            f"arenas.{kind}_decay_ms",
            *(f"arena.{i}.{kind}_decay_ms" for i in range(count.value)),
        ]:
            ctl(name.encode(), None, None, ctypes.byref(value), ctypes.sizeof(value))


@contextlib.contextmanager
def pages_released():
    """While open, jemalloc hands freed pages back to the kernel after its default delay, and
    on leaving it hands back every freed page it holds, then keeps freed pages as before.

    The memory family's seed-scale kernels run on jemalloc told never to hand pages back, so a
    step reuses the pages the previous one freed instead of faulting them in afresh; a
    compilation frees far more than a step and must not keep it. Under another malloc this does
    nothing."""
    ctl = _mallctl()
    if ctl is None:
        yield
        return
    kept = _decay_ms(ctl)
    _set_decay_ms(ctl, COMPILE_DECAY_MS, COMPILE_DECAY_MS)
    try:
        yield
    finally:
        ctl(f"arena.{_ALL_ARENAS}.purge".encode(), None, None, None, 0)
        _set_decay_ms(ctl, *kept)


def cpu_model_name() -> str:
    """The marketing name alone, e.g. "AMD EPYC"."""
    return cpu_identity()["name"]


def cpu_device_name() -> str:
    """The CPU's name as records carry it: the marketing name with the family and model numbers,
    so that two CPUs sold under one name never share a configuration in the report."""
    ident = cpu_identity()
    if ident["family"] is None or ident["model"] is None:
        return ident["name"]
    return f"{ident['name']} (family {ident['family']}, model {ident['model']})"


def torch_devices() -> list[_DeviceInfo]:
    import torch

    found = [_DeviceInfo("torch", "cpu", cpu_device_name())]
    if torch.cuda.is_available():
        found += [
            _DeviceInfo("torch", "cuda", torch.cuda.get_device_name(i), i)
            for i in range(torch.cuda.device_count())
        ]
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        found.append(_DeviceInfo("torch", "mps", "Apple MPS"))
    return found


def jax_devices() -> list[_DeviceInfo]:
    import jax

    found = []
    listed = list(jax.devices())
    # on a GPU node jax.devices() lists the default backend's devices only; the CPU is still
    # there for the CPU records and a cell asking for device "cpu"
    if all(dev.platform != "cpu" for dev in listed):
        try:
            listed += jax.devices("cpu")
        except RuntimeError:  # a jaxlib built without its CPU backend
            pass
    for dev in listed:
        kind = {"gpu": "cuda"}.get(dev.platform, dev.platform)
        name = cpu_device_name() if kind == "cpu" else getattr(dev, "device_kind", str(dev))
        found.append(_DeviceInfo("jax", kind, name, dev.id))
    return found


def _best_device(framework: str) -> str:
    """The accelerator a framework would use by default: cuda, tpu, mps, else cpu."""
    devices = torch_devices() if framework == "torch" else jax_devices()
    kinds = {d.kind for d in devices}
    for kind in ("cuda", "tpu", "mps"):
        if kind in kinds:
            return kind
    return "cpu"


def resolve_device(framework: str, device: str) -> str:
    """Turn the notebooks' ``device="auto"`` into a concrete kind; reject kinds that are absent."""
    if device == "auto":
        return _best_device(framework)
    devices = torch_devices() if framework == "torch" else jax_devices()
    if device not in {d.kind for d in devices}:
        raise RuntimeError(
            f"{framework} sees no {device} device (it sees {sorted({d.kind for d in devices})})"
        )
    return device


def device_name(framework: str, device: str) -> str:
    devices = torch_devices() if framework == "torch" else jax_devices()
    for d in devices:
        if d.kind == device:
            return d.name
    return device


def jax_device(device: str):
    import jax

    platform_name = {"cuda": "gpu"}.get(device, device)
    return jax.devices(platform_name)[0]


def torch_sync(device: str) -> None:
    """Block until queued torch work on ``device`` is done (a no-op on CPU, which runs eagerly)."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def jax_sync(value) -> None:
    """Block until ``value`` (any pytree of jax arrays) is computed."""
    import jax

    jax.block_until_ready(value)


def sync_for(framework: str, device: str):
    """A one-argument sync callable for the timers: it receives the last call's output."""
    if framework == "jax":
        return jax_sync
    return lambda _output: torch_sync(device)


def limit_threads(threads: int) -> int:
    """Run this process on ``threads`` of the cores it may use, with PyTorch's intra-op pool of
    that size; 0 keeps the machine's default. Returns the count in effect.

    Every thread the process has is pinned (the kernel's own threads included), and threads
    started later inherit the pinning: XLA sizes its CPU pool from the cores the process may use
    when the backend starts, so call this before the first JAX computation. Pinning, rather than a
    thread-count flag per framework, gives both frameworks the same hardware: ``threads: 1`` is one
    core for either.
    """
    import sys

    allowed = sorted(os.sched_getaffinity(0))
    if threads <= 0:
        return len(allowed)
    if threads > len(allowed):
        raise ValueError(f"threads={threads}, but this process may use {len(allowed)} cores")
    keep = set(allowed[:threads])
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), keep)
        except OSError:  # a thread that ended meanwhile
            pass
    # torch reads this when it starts its pool; set_num_threads where it already has
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    return threads
