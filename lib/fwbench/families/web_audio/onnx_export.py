"""A speech encoder as ONNX, for native ONNX Runtime and onnxruntime-web alike: exported with
``torch.onnx.export(..., dynamo=True)`` (torch.export, then onnxscript). wav2vec2's time axis is
dynamic, so one file serves every audio length; Whisper's window is fixed, and so is its input."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fwbench.models.speech import INPUT_NAMES, SAMPLE_RATE

_OUTPUT = "last_hidden_state"
# wav2vec2's receptive field is 400 samples (25 ms); ten minutes is far beyond a chunk
MIN_SAMPLES, MAX_SAMPLES = 400, SAMPLE_RATE * 600


def export_onnx(model, path: Path, example: np.ndarray, kind: str = "wav2vec2") -> Path:
    """Write ``model`` (a ``Wav2Vec2Model`` or a ``WhisperEncoder``, as ``kind`` says) to
    ``path``; its one input is ``example``'s shape with a batch axis of 1 in front (float32 audio,
    or Whisper's log-mel window), its one output the last hidden state."""
    import torch

    from fwbench.models.hf_models import LastHidden

    dynamic = None
    if kind == "wav2vec2":
        dynamic = ({1: torch.export.Dim("samples", min=MIN_SAMPLES, max=MAX_SAMPLES)},)
    program = torch.onnx.export(
        LastHidden(model).eval(),
        (torch.from_numpy(np.asarray(example, np.float32)[None].copy()),),
        dynamo=True,
        verbose=False,  # its progress lines would fill every executed notebook
        input_names=[INPUT_NAMES[kind]],
        output_names=[_OUTPUT],
        dynamic_shapes=dynamic,
    )
    program.save(str(path))
    return Path(path)
