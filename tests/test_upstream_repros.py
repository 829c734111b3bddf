"""The repro scripts in docs/upstream/ run from a fresh clone, and their float64 check would catch
a rewrite that is not the same function as the stock convolution; the torchax one still shows its
bug (when it no longer does, fwbench's shim for it can go)."""

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

UPSTREAM = Path(__file__).resolve().parents[1] / "docs" / "upstream"
SCRIPTS = {
    "xla_cpu_depthwise_conv.py": "depthwise: stock / rewrite = ",
    "xla_cpu_small_output_conv.py": "small-output conv: stock / rewrite = ",
}


def _load(name):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), UPSTREAM / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(name: str, *args: str) -> list[str]:
    """The script's stdout lines after a run that must succeed within the minute the README
    promises (with room to spare for --tiny); its first line names the CPU."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(UPSTREAM / name), *args], capture_output=True, text=True, timeout=120
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert elapsed < 60, f"{name} {' '.join(args)} took {elapsed:.0f} s"
    lines = done.stdout.splitlines()
    assert lines[0].startswith("cpu: vendor_id: ")
    return lines


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_tiny_run_checks_then_times(name):
    lines = _run(name, "--tiny")
    assert any(line.startswith("float64 check: max relative difference ") for line in lines)
    last = lines[-1]
    assert last.startswith(SCRIPTS[name]) and "x (geometric mean over 2 layers)" in last, last
    assert float(last.removeprefix(SCRIPTS[name]).split("x")[0]) > 0


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_float64_check_passes_the_rewrite_and_catches_wrong_ones(name):
    module = _load(name)
    assert module.check_same_function(shapes=module.TINY_SHAPES) <= 1e-10

    def flipped(x, w, stride):  # the classic slip: correlation written as convolution
        return module.rewrite(x, w[::-1, ::-1], stride)

    def nearly(x, w, stride):  # off by 1e-7: passes an fp32 tolerance, not the float64 one
        return module.rewrite(x, w, stride) * (1 + 1e-7)

    for wrong in (flipped, nearly):
        with pytest.raises(AssertionError, match="max relative difference"):
            module.check_same_function(wrong, shapes=module.TINY_SHAPES)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_check_leaves_float64_off(name):
    import jax.numpy as jnp

    module = _load(name)
    module.check_same_function(shapes=module.TINY_SHAPES)
    assert jnp.ones(1).dtype == jnp.float32  # the timing that follows the check is fp32


def test_torchax_repro_runs_and_still_shows_the_lost_write():
    lines = _run("torchax_slice_view_write.py")
    # when this fails, torchax writes through slice views: drop torchax_bridge._keep_view_writes
    assert lines[-1].startswith("torchax loses the write through the slice view"), lines[-1]
    assert "b[2:4].zero_() (default)" in lines[-1]
    # torchax's own in-place op writes through the view in its default configuration
    assert "b[2:4].mul_(0) (default)" not in lines[-1]


def test_allreduce_repro_runs_two_processes_and_counts_what_xla_combined():
    lines = _run("xla_cpu_allreduce_per_array.py", "--tiny")
    assert lines[1].startswith("20 float32 arrays") and "2 processes" in lines[1], lines[1]
    forms = {line.split()[0]: line for line in lines[2:]}
    assert set(forms) == {"per-leaf", "sharded", "flattened"}
    # XLA combines the per-array means into variadic all-reduces: fewer instructions than arrays,
    # every array carried (the claim the report makes rests on this count)
    for form, arrays in (("per-leaf", 20), ("sharded", 20), ("flattened", 1)):
        count = forms[form].split("HLO: ")[1]
        instructions, carried = int(count.split()[0]), int(count.split(" over ")[1].split()[0])
        assert carried == arrays and 1 <= instructions <= arrays, forms[form]
        assert "float64 max error 0.0e+00" in forms[form]


def test_the_remat_repro_checks_its_gradients_and_still_shows_the_recompute_merged_away():
    lines = _run("xla_cpu_remat_cse.py", "--tiny")
    assert "float64 check: max absolute difference of the gradients 0.0e+00" in lines
    found = {}
    for line in lines:
        for name in ("no checkpoint", "checkpoint every 4", "checkpoint, cse disabled"):
            if line.startswith(name + " "):
                words = line.split()
                found[name] = (int(words[words.index("dots") + 1]), int(words[-5]))
    assert set(found) == {"no checkpoint", "checkpoint every 4", "checkpoint, cse disabled"}
    plain, planned = found["no checkpoint"], found["checkpoint every 4"]
    kept = found["checkpoint, cse disabled"]
    assert planned[0] > plain[0]  # the lowered program recomputes every segment
    assert kept[1] == planned[0]  # without XLA's cse the recomputation survives compiling
    # XLA:CPU merges it away (jaxlib 0.10.2); when this fails, the report's words on
    # jax.checkpoint on CPU (memory_frameworks) need a new look
    assert planned[1] == plain[1]
