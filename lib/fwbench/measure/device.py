"""Which devices each framework sees, and how to wait for the work queued on them."""

from __future__ import annotations

import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceInfo:
    framework: str
    kind: str  # cpu / cuda / mps / tpu
    name: str  # marketing name, e.g. "NVIDIA H100 80GB HBM3", or the CPU model
    index: int = 0


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def torch_devices() -> list[DeviceInfo]:
    import torch

    found = [DeviceInfo("torch", "cpu", cpu_model_name())]
    if torch.cuda.is_available():
        found += [
            DeviceInfo("torch", "cuda", torch.cuda.get_device_name(i), i)
            for i in range(torch.cuda.device_count())
        ]
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        found.append(DeviceInfo("torch", "mps", "Apple MPS"))
    return found


def jax_devices() -> list[DeviceInfo]:
    import jax

    found = []
    for dev in jax.devices():
        kind = {"gpu": "cuda"}.get(dev.platform, dev.platform)
        name = cpu_model_name() if kind == "cpu" else getattr(dev, "device_kind", str(dev))
        found.append(DeviceInfo("jax", kind, name, dev.id))
    return found


def best_device(framework: str) -> str:
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
        return best_device(framework)
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
    import os
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
