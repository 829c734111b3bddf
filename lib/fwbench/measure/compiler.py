"""Compiler settings: the declared option sets a tuning run may choose from, and what ran.

Best practice for a framework includes the compiler settings its own documentation offers for the
device (DESIGN.md section 5, "Each framework at its best"). For JAX those are XLA options set per
executable (``jit(f).lower(x).compile(compiler_options=...)``), so two cells of one process never
share them by accident; for PyTorch, inductor's freezing (``torch._inductor.config.freezing``),
which folds BatchNorm into the convolutions and prepacks the weights for oneDNN, PyTorch's
documented setting for CPU inference.

``XLA_OPTION_SETS`` is the declared list, per device kind: a name, the options, and a line on what
they do. A set is only ever chosen on a tuning run (``measure/best_modes.py``), never on
the rounds of a verdict. Fast math is not offered: it changes results, and an fp32 comparison
promises fp32 arithmetic on both sides.

``xla_kernel_mix`` reads a compiled executable's optimised HLO and counts what will run: the
library fusions XLA hands to YNNPACK, XNNPACK or oneDNN, its own loop fusions, and the
convolution and dot instructions left, so a record says which kernels produced its time.
"""

from __future__ import annotations

import re
from collections import Counter

DEFAULT = "default"
# YNNPACK's fusion kinds (XLA's LibraryFusionType names); XLA:CPU's default hands individual
# convolutions and dots to YNNPACK.
_YNN = "LIBRARY_FUSION_TYPE_"
_YNN_DEFAULT = f"{_YNN}INDIVIDUAL_DOT,{_YNN}INDIVIDUAL_CONVOLUTION"

XLA_OPTION_SETS: dict[str, dict[str, tuple[dict, str]]] = {
    "cpu": {
        DEFAULT: ({}, "XLA:CPU as it comes: convolutions and dots to YNNPACK"),
        "ynn-dots-only": (
            {"xla_cpu_experimental_ynn_fusion_type": f"{_YNN}INDIVIDUAL_DOT"},
            "convolutions by XLA's own emitter, dots still to YNNPACK",
        ),
        "ynn-off": (
            {"xla_cpu_experimental_ynn_fusion_type": ""},
            "no YNNPACK at all: XLA's own emitters for every op",
        ),
        "ynn-fused": (
            {
                "xla_cpu_experimental_ynn_fusion_type": (
                    f"{_YNN_DEFAULT},{_YNN}DOT,{_YNN}ELTWISE,{_YNN}REDUCE"
                )
            },
            "YNNPACK also takes dots with their elementwise neighbours and reductions",
        ),
        "vector-512": (
            {"xla_cpu_prefer_vector_width": 512},
            "LLVM prefers 512-bit vectors (AVX-512 CPUs; elsewhere it changes nothing)",
        ),
        "onednn": (
            {"xla_cpu_use_onednn": True},
            "oneDNN thunks for matmul and convolution fusions",
        ),
    },
    "cuda": {
        DEFAULT: ({}, "XLA:GPU as it comes: autotuning level 4, Triton GEMMs where chosen"),
        "autotune-off": (
            {"xla_gpu_autotune_level": 0},
            "no autotuning (the reference study's workaround for ViT)",
        ),
        "no-triton-gemm": (
            {"xla_gpu_enable_triton_gemm": False},
            "cuBLAS for every GEMM instead of Triton",
        ),
    },
}


def xla_options(name: str, device_kind: str) -> dict:
    """The compiler options of the declared set ``name`` on ``device_kind`` ("cpu", "cuda");
    an unknown name is a ValueError naming the sets there are."""
    sets = XLA_OPTION_SETS.get(_family(device_kind), {DEFAULT: ({}, "")})
    if name not in sets:
        raise ValueError(
            f"unknown XLA option set {name!r} on {device_kind}; choose from {', '.join(sets)}"
        )
    return dict(sets[name][0])


def describe(name: str, device_kind: str) -> str:
    sets = XLA_OPTION_SETS.get(_family(device_kind), {})
    return sets[name][1] if name in sets else ""


def all_option_set_names() -> tuple[str, ...]:
    """Every declared set's name on any device: what a campaign's ``xla_options`` may say."""
    return tuple(dict.fromkeys(n for sets in XLA_OPTION_SETS.values() for n in sets))


# In optimised HLO: a library fusion names its kind in its backend config; the rest are
# instructions whose opcode follows the result shape.
_LIBRARY_FUSION = re.compile(r'"kind":"__(\w+?)_fusion"')
_LOOP_FUSION = re.compile(r"\bkind=k(Loop|Input|Output)\b")
_OPCODE = re.compile(r"\}?\s(convolution|dot|custom-call)\(")
_OPCODE_COUNTS = {"convolution": "convolutions", "dot": "dots", "custom-call": "custom_calls"}


def xla_kernel_mix(hlo_text: str) -> dict[str, int]:
    """What an optimised HLO module runs: ``{"ynn_fusions": 14, "loop_fusions": 46,
    "convolutions": 20, "dots": 1, ...}`` (only the kinds present)."""
    counts: Counter = Counter()
    for library in _LIBRARY_FUSION.findall(hlo_text):
        counts[f"{library.lower()}_fusions"] += 1
    counts["loop_fusions"] += len(_LOOP_FUSION.findall(hlo_text))
    counts.update(_OPCODE_COUNTS[opcode] for opcode in _OPCODE.findall(hlo_text))
    return {k: v for k, v in sorted(counts.items()) if v}


def _family(device_kind: str) -> str:
    return "cuda" if device_kind in ("cuda", "gpu") else device_kind
