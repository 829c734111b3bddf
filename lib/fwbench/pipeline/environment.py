"""Capture everything about the software and hardware that a number depends on."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path

from fwbench.measure.device import cpu_identity, cpu_model_name, heap_allocator
from fwbench.results.layout import machine_words, now_iso
from fwbench.vocab import ENV_COMMIT, named_commit

_PACKAGES = (
    "torch",
    "torchvision",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "numpy",
    "papermill",
    "duckdb",
)
_ENV_VARS = (
    "XLA_FLAGS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "LD_PRELOAD",
    "MALLOC_CONF",
)


def git_sha(cwd: str | os.PathLike | None = None) -> str | None:
    """The checkout's commit, ``-dirty`` when tracked files differ, or None outside a checkout.

    A copy of a checkout sent elsewhere (a GPU node's) names its commit in ``FWBENCH_COMMIT``
    (``<sha> clean`` or ``<sha> dirty``), which wins: such a copy may carry a stale ``.git``
    (seen on a node: the records named a commit two before the one that ran)."""
    named = named_commit(os.environ.get(ENV_COMMIT, ""))
    if named:
        return named
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _package_versions() -> dict:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def pip_freeze_hash() -> str:
    """A hash of every installed distribution and version: equal hashes, equal environments."""
    dists = sorted(
        f"{d.metadata['Name']}=={d.version}".lower() for d in importlib.metadata.distributions()
    )
    return hashlib.sha256("\n".join(dists).encode()).hexdigest()[:16]


def torch_settings() -> dict:
    """torch's CUDA build and precision switches; imports torch only if it is installed."""
    try:
        import torch
    except ImportError:
        return {}
    info = {
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch_num_threads": torch.get_num_threads(),
    }
    return info


def jax_settings() -> dict:
    try:
        import jax
    except ImportError:
        return {}
    return {
        "jax_default_matmul_precision": jax.config.jax_default_matmul_precision,
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
    }


def gpu_info() -> list[dict]:
    """Name, driver, clocks and power limit of each NVIDIA GPU, read (never set) through NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        return [{"unavailable": f"NVML: {exc}"}]
    gpus = []
    # NVML can fail on any call (a driver mismatch, a GPU lost mid-run): each read says None, and
    # a device NVML cannot list says why, rather than failing the cell that captures the machine
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
    except Exception:
        driver = None
    try:
        count = pynvml.nvmlDeviceGetCount()
    except Exception as exc:
        return [{"unavailable": f"NVML device count: {exc}", "driver": driver}]
    for i in range(count):
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
        except Exception as exc:
            gpus.append({"index": i, "unavailable": f"NVML: {exc}", "driver": driver})
            continue

        def read(fn, *args, handle=h):
            try:
                return fn(handle, *args)
            except Exception:
                return None

        gpus.append(
            {
                "index": i,
                "name": read(pynvml.nvmlDeviceGetName),
                "driver": driver,
                "sm_clock_mhz": read(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
                "sm_clock_max_mhz": read(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM),
                "mem_clock_max_mhz": read(pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_MEM),
                "power_limit_w": (read(pynvml.nvmlDeviceGetPowerManagementLimit) or 0) / 1000.0,
                "memory_total_bytes": getattr(read(pynvml.nvmlDeviceGetMemoryInfo), "total", None),
            }
        )
    return gpus


def notebook_sources(notebooks: dict[str, str | os.PathLike]) -> dict[str, str]:
    """Each notebook's name with the sha256 (first 16 hex digits) of its source file's bytes.

    git_sha says little of a run made from a dirty tree (``-dirty`` names no file); the sources'
    own hashes let a report pool only the runs whose notebooks were the same. A file that cannot
    be read hashes to None, so the run still starts and says so."""
    hashes = {}
    for name, path in sorted(notebooks.items()):
        try:
            hashes[name] = source_digest(Path(path).read_bytes())
        except OSError:
            hashes[name] = None
    return hashes


def source_digest(data: bytes) -> str:
    """The hash a run records of a notebook's source: sha256, its first 16 hex digits."""
    return hashlib.sha256(data).hexdigest()[:16]


def capture(
    repo_dir: str | os.PathLike | None = None,
    *,
    frameworks: bool = True,
    notebooks: dict[str, str | os.PathLike] | None = None,
) -> dict:
    """The environment of this process. ``frameworks=False`` skips importing torch and JAX;
    ``notebooks`` (name to source path: those a campaign runs) adds ``notebook_sources``."""
    repo_dir = Path(repo_dir) if repo_dir else Path.cwd()
    env = {
        "captured_at": now_iso(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model_name(),
        "cpu": cpu_identity(),
        "cpu_count": os.cpu_count(),
        "git_sha": git_sha(repo_dir),
        "packages": _package_versions(),
        "pip_freeze_hash": pip_freeze_hash(),
        "env_vars": {k: os.environ.get(k) for k in _ENV_VARS},
        "allocator": heap_allocator(),
        "gpus": gpu_info(),
    }
    if notebooks is not None:
        env["notebook_sources"] = notebook_sources(notebooks)
    if frameworks:
        env["torch"] = torch_settings()
        env["jax"] = jax_settings()
    return env


def resume_problem(started: dict, here: dict) -> str | None:
    """Why a run started under environment ``started`` must not go on under ``here``, or None.

    Its trials pair by round and its intervals come from their spread: cells measured on two CPUs
    sold under one name would make one configuration of two machines (a Zen 4 ran these models
    1.5 times as fast as a Zen 3, both "AMD EPYC")."""
    then, now = machine_words(started), machine_words(here)
    if then is None:
        return (
            "it does not record its CPU's family and model (it was started before fwbench "
            f"recorded them), so resuming it on this {now} could mix two CPUs"
        )
    if then != now:
        return f"it was started on {then} and this machine is {now}"
    return None


def machine() -> dict:
    """The part of ``capture`` that ``resume_problem`` compares, without its slower parts."""
    return {"cpu": cpu_identity(), "gpus": gpu_info()}
