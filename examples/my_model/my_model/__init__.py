"""A model of one's own for fwbench, kept outside fwbench's library: a small PyTorch CNN
(``torch_side``), its Flax NNX twin and weight map (``flax_twin``), and the declaration a package
ships through the ``fwbench.models`` entry-point group (see ``pyproject.toml``)."""

# The declaration fwbench reads through the entry point: the same keys as a campaign's
# ``models:`` section, without ``path`` (an installed package is importable already).
TINYCNN = {
    "torch": "my_model.torch_side:build",
    "flax": "my_model.flax_twin",
    "image_size": 32,
    "kind": "cnn",
    "label": "TinyCNN",
}
