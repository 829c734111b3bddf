"""fwbench: how JAX and PyTorch compare, per model and per hardware platform, and why."""

__version__ = "0.1.0"
