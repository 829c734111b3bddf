"""PyTorch models as JAX functions through torchax: the import shim, the float64 proof and the
rule that torchax and torch.compile never share a process. Each check runs in its own Python
process, since importing torchax changes torch for the rest of the process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fwbench.models import torchax_bridge


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)


def test_torchax_still_needs_the_shim_on_this_torch():
    # when this passes without the shim, torchax works with the pinned torch: drop the shim
    done = run(
        "import torch, torchax\ntorchax.default_env()\ntorchax.extract_jax(torch.nn.Linear(2, 2))\n"
    )
    assert done.returncode != 0 and "AttributeError" in done.stderr, done.stderr[-2000:]


def test_with_the_shim_torchax_runs_and_names_what_was_shimmed():
    done = run(
        "import jax.numpy as jnp, torch\n"
        "from fwbench.models import torchax_bridge as bridge\n"
        "torchax = bridge.load()\n"
        "torchax.default_env()\n"
        "weights, fn = bridge.jax_function(torch.nn.Linear(3, 2))\n"
        "print(len(bridge.SHIMMED), tuple(fn(weights, jnp.ones((1, 3))).shape))\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shimmed, shape = done.stdout.split(maxsplit=1)
    assert int(shimmed) > 0 and shape.strip() == "(1, 2)"


def test_a_torchvision_model_is_the_same_function_in_float64_and_only_with_64_bit_jax():
    # one process: the proof first refuses without JAX's 64-bit mode (float32 agreement, about
    # 1e-7, would pass for a proof it is not), then passes with it
    done = run(
        "import jax, torch, torchvision\n"
        "from fwbench.models import torchax_bridge as bridge\n"
        "torch.manual_seed(0)\n"
        "model = torchvision.models.resnet18(weights=None, num_classes=10)\n"
        "x = torch.randn(2, 3, 32, 32)\n"
        "try:\n"
        "    bridge.float64_agreement(model, x)\n"
        "except ValueError as exc:\n"
        "    print('refused:', 'jax_enable_x64' in str(exc))\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "print(bridge.float64_agreement(model, x))\n"
        # a zero-initialised head (torchvision's ViT has one) gives zero logits: no proof
        "head = torch.nn.Linear(3, 2)\n"
        "torch.nn.init.zeros_(head.weight); torch.nn.init.zeros_(head.bias)\n"
        "try:\n"
        "    bridge.float64_agreement(head, torch.ones(1, 3))\n"
        "except ValueError as exc:\n"
        "    print('refused:', 'all zero' in str(exc))\n"
        "print(bridge.float64_agreement(bridge.without_zero_weights(head), torch.ones(1, 3)))\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    refused, error, zero_refused, redrawn = done.stdout.splitlines()
    assert refused == "refused: True" and zero_refused == "refused: True"
    assert float(error) <= torchax_bridge.FLOAT64_TOLERANCE
    assert float(redrawn) <= torchax_bridge.FLOAT64_TOLERANCE


def test_an_in_place_write_through_a_slice_view_reaches_the_tensor():
    # torchvision's Swin V2 zeroes its key bias so (a slice of a clone of the qkv bias); stock
    # torchax 0.0.13 writes into a copy of the slice instead (docs/upstream/
    # torchax_slice_view_write.py), and the float64 proof of swin_v2_t failed at 0.38
    done = run(
        "import jax, torch\n"
        "from fwbench.models import torchax_bridge as bridge\n"
        "class Writes(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.bias = torch.nn.Parameter(torch.randn(3, 6))\n"
        "    def forward(self, x):\n"
        "        b = self.bias.clone()\n"
        "        b[:, 2:4].zero_()\n"  # through a 2-D slice, as Swin V2 through a 1-D one
        "        b[1][4:].fill_(0.5)\n"  # through a view of a view, another decomposed op
        "        b[0, :2].mul_(3.0)\n"  # torchax's own in-place op: right before, still right
        "        return x @ b\n"
        "torch.manual_seed(0)\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "print(bridge.float64_agreement(Writes(), torch.randn(2, 3)))\n"
        "print(' '.join(bridge.VIEW_WRITES))\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    error, kept = done.stdout.splitlines()
    assert float(error) <= torchax_bridge.FLOAT64_TOLERANCE
    assert {"aten.zero_.default", "aten.fill_.Scalar"} <= set(kept.split())


@pytest.mark.parametrize("order", ["torchax first", "compile first"])
def test_torchax_and_torch_compile_never_share_a_process(order):
    steps = {
        "torchax first": (
            "bridge.load()\n"
            "try:\n"
            "    torch.compile(lambda a: a + 1)(torch.ones(2))\n"
            "except bridge.TorchaxUnavailable:\n"
            "    print('refused')\n"
        ),
        # the other way round: a compiled function first, then torchax, then compile again
        "compile first": (
            "torch.compile(lambda a: a * 2)(torch.ones(2))\n"
            "bridge.load()\n"
            "try:\n"
            "    torch.compile(lambda a: a + 1)(torch.ones(2))\n"
            "except bridge.TorchaxUnavailable:\n"
            "    print('refused')\n"
        ),
    }
    done = run("import torch\nfrom fwbench.models import torchax_bridge as bridge\n" + steps[order])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "refused"
