"""The speech encoder as ONNX, for native ONNX Runtime and onnxruntime-web alike: exported with
``torch.onnx.export(..., dynamo=True)`` (torch.export, then onnxscript) with a dynamic time axis,
so one file serves every audio length."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fwbench.models.speech import SAMPLE_RATE

INPUT, OUTPUT = "input_values", "last_hidden_state"
# the feature encoder's receptive field is 400 samples (25 ms); ten minutes is far beyond a chunk
MIN_SAMPLES, MAX_SAMPLES = 400, SAMPLE_RATE * 600


def export_onnx(model, path: Path, example: np.ndarray) -> Path:
    """Write ``model`` (a ``Wav2Vec2Model``) to ``path``; its one input is (1, samples) float32
    audio and its one output the last hidden state."""
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_values):
            return self.inner(input_values).last_hidden_state

    samples = torch.export.Dim("samples", min=MIN_SAMPLES, max=MAX_SAMPLES)
    program = torch.onnx.export(
        Encoder(model).eval(),
        (torch.from_numpy(np.asarray(example, np.float32)[None].copy()),),
        dynamo=True,
        verbose=False,  # its progress lines would fill every executed notebook
        input_names=[INPUT],
        output_names=[OUTPUT],
        dynamic_shapes={"input_values": {1: samples}},
    )
    program.save(str(path))
    return Path(path)
