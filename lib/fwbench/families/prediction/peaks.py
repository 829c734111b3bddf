"""Memory prediction checked against measured peaks: the model's own bytes, never the process RSS.

Two predictions, each set beside a measurement made by the allocator:

- **Inference.** ``features.torch_features`` reads ``model_peak_bytes`` (parameters and buffers plus
  the op outputs alive at a forward's peak) from shapes on the meta device. The measurement runs
  the same model for real on the CPU, under ``torch.no_grad`` as the benchmark does, and reads the
  allocator's peak during one forward (``memory.footprint.measure_peak``, the memory family's own
  meter), plus the parameters' and buffers' bytes.
- **A training step at a batch size never run.** The memory family's liveness simulator gives a
  traced step's peak exactly at the batch size it was traced at (``sim_peak_error_pct`` 0.00% in
  the committed runs), but tracing runs the step. So the step is traced at two batch sizes too
  small to matter (2 and 3), and the memory at every position of the step is extrapolated along
  the line through them (``extrapolate``): the parameters, gradients and optimizer state do not
  grow with the batch, and the activations grow in proportion to it. The measurements are the ``graph`` method's peaks that the memory
  campaigns committed (the traced step, unplanned, measured by the same allocator meter).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

TRACE_BATCHES = (2, 3)  # batch sizes a step is traced at to extrapolate from (at 1, some ops
# specialize on the size-1 dimension and the graph differs)
# the cell parameters that change a memory case's shapes (``memory.cases.build_case``)
_SHAPE_KEYS = ("image_size", "seq_len", "encoder_size", "num_classes")

_TRAINING_SQL = """
select m.campaign, m.run_id, m.model, m.batch_size, m.device_name, median(m.value) as measured,
       any_value(c.parameters) as parameters
from measurements m
join cells c on c.campaign = m.campaign and c.run_id = m.run_id and c.notebook = m.notebook
     and c.cell = m.cell and coalesce(c.trial, 0) = coalesce(m.trial, 0)
where m.family = 'memory' and m.metric = 'peak_mem_bytes' and m.mode = 'graph'
  and m.status = 'ok' and m.device = 'cpu' and m.precision = 'fp32' and m.value > 0
group by all
"""


def error_pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted / measured - 1.0)


def forward_peak_bytes(name: str, batch_size: int, image_size: int | None = None) -> int:
    """The bytes registry model ``name`` holds at the peak of one no-grad forward on the CPU,
    measured: its parameters and buffers plus the allocator's high-water mark during the call.
    One forward runs first, unmeasured, so that one-time allocations (oneDNN's weight layouts,
    lazy buffers) do not count as the model's."""
    import torch

    from fwbench.families.memory import footprint
    from fwbench.models.registry import get_spec

    spec = get_spec(name)
    size = image_size or spec.image_size
    torch.manual_seed(0)
    model = spec.torch_model(image_size=size).eval()
    example = torch.randn(batch_size, 3, size, size)
    resident = [*model.parameters(), *model.buffers()]
    with torch.no_grad():
        model(example)
        return footprint.measure_peak(lambda: model(example), resident, "cpu")


def inference_errors(configs: pd.DataFrame, progress=None) -> pd.DataFrame:
    """For each (model, batch_size, image_size) in ``configs``: the predicted ``model_peak_bytes``
    (from the meta device), the measured forward peak, and the error in percent."""
    from fwbench.families.prediction import features as fw_features

    keys = configs[["model", "batch_size", "image_size"]].drop_duplicates()
    rows = keys.itertuples(index=False)
    rows = progress(list(rows)) if progress else rows
    out = []
    for model, batch_size, image_size in rows:
        predicted = fw_features.torch_features(model, int(batch_size), int(image_size))
        measured = forward_peak_bytes(model, int(batch_size), int(image_size))
        out.append(
            {
                "model": model,
                "batch_size": int(batch_size),
                "image_size": int(image_size),
                "predicted_bytes": predicted.model_peak_bytes,
                "measured_bytes": measured,
                "error_pct": error_pct(predicted.model_peak_bytes, measured),
            }
        )
    return pd.DataFrame(out)


def training_measurements(con) -> pd.DataFrame:
    """The memory campaigns' measured peaks of the unplanned traced step on the CPU in fp32, one
    row per model, shape and batch size (the newest run where several measured the same)."""
    frame = con.execute(_TRAINING_SQL).df()
    params = frame.pop("parameters").map(lambda p: p if isinstance(p, dict) else json.loads(p))
    # the shape as the cell set it, kept as canonical JSON: a column per key would turn the
    # integers of cells that set them into floats beside the cells that do not
    frame["case_shape"] = [
        json.dumps({k: p[k] for k in _SHAPE_KEYS if p.get(k) is not None}, sort_keys=True)
        for p in params
    ]
    frame = frame.sort_values("run_id").drop_duplicates(
        ["model", "case_shape", "batch_size"], keep="last"
    )
    return frame.reset_index(drop=True)


def _traced_memory(model: str, batch_size: int, shape: dict) -> np.ndarray:
    """The liveness simulator's bytes at every position of one training step of the memory
    family's ``model``, traced at ``batch_size`` on the CPU."""
    from fwbench.families.memory import liveness, simulator, tracer
    from fwbench.families.memory.cases import build_case

    case = build_case(model, batch_size, **shape)
    traced = tracer.trace_training_step(case.model, case.batch, case.targets, case.loss_fn)
    return np.asarray(simulator.simulate(liveness.analyze(traced)).total, dtype=float)


def extrapolate(memory: dict[int, np.ndarray], batch_size: int) -> float:
    """The peak at ``batch_size`` from the memory at every position traced at two batch sizes.

    Position by position, not peak to peak: the step is the same graph at every batch size, and
    what is alive at each position is a fixed part (parameters, gradients, optimizer state) and a
    part in proportion to the batch (activations). The peak itself is not on a line: at small
    batches it can sit in the optimizer update and at large ones in the backward pass."""
    (b0, m0), (b1, m1) = sorted(memory.items())[:2]
    if m0.shape != m1.shape:
        raise ValueError(
            f"the step traced at batch {b0} and {b1} is not the same graph "
            f"({m0.size} and {m1.size} positions): its peak cannot be extrapolated"
        )
    return float((m0 + (m1 - m0) / (b1 - b0) * (batch_size - b0)).max())


def training_errors(measured: pd.DataFrame, progress=None) -> pd.DataFrame:
    """Each measured training peak against the line through the simulator's peaks at
    ``TRACE_BATCHES``; rows measured at a traced batch size are left out (not a prediction)."""
    measured = measured[~measured.batch_size.isin(TRACE_BATCHES)]
    groups = list(measured.groupby(["model", "case_shape"]))
    groups = progress(groups) if progress else groups
    out = []
    for (model, shape_json), rows in groups:
        shape = json.loads(shape_json)
        memory = {b: _traced_memory(model, b, shape) for b in TRACE_BATCHES}
        for row in rows.itertuples(index=False):
            predicted = extrapolate(memory, int(row.batch_size))
            out.append(
                {
                    "model": model,
                    "case_shape": shape_json,
                    "batch_size": int(row.batch_size),
                    "campaign": row.campaign,
                    "run_id": row.run_id,
                    "predicted_bytes": predicted,
                    "measured_bytes": float(row.measured),
                    "error_pct": error_pct(predicted, float(row.measured)),
                }
            )
    return pd.DataFrame(out)
