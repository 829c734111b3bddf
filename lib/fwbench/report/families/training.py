"""Training (11_training): speed with every step synced, the float64 parity of the two frameworks'
steps and convergence on the same batches.
"""

from __future__ import annotations

from fwbench.report import charts, tables
from fwbench.report.items import Figure, Note, Section, Table, empty, nonempty, records, ratio_heatmap, throughput


TRAINING = Section(
    "Training",
    "Training speed with every step synced (each framework at its default and best "
    "practice), then the proof that both frameworks train the same function: per-step loss "
    "parity from the same weights on the same batches, and convergence on real data.",
    (
        Note("No training records in this run.", when=empty("training")),
        Figure(
            "training_ratio_matrix",
            "JAX ÷ PyTorch training throughput",
            "Median training images/s of JAX divided by PyTorch's (batch size over the synced "
            "step time), on {devices}; 95% bootstrap interval over steps (or trials, with "
            "three or more); ≈ marks equivalent within ±5%, ? inconclusive, (1 run) within "
            "one run.",
            ratio_heatmap("train_matrix"),
            when=nonempty("train_matrix"),
        ),
        Table(
            "training_ratio_matrix",
            "JAX ÷ PyTorch training throughput with 95% interval and the winner.",
            lambda a: a.train_matrix,
            records("training", ["throughput_img_s"]),
            drop=("device",),
            when=nonempty("train_matrix"),
        ),
        Figure(
            "training_throughput",
            "Training throughput vs batch size",
            "Median training images/s over synced steps with its 95% bootstrap interval, per "
            "framework and mode; both axes logarithmic.",
            throughput("train_samples"),
            when=nonempty("train_speed"),
        ),
        Figure(
            "training_memory",
            "Training peak memory vs batch size",
            "Peak memory over the timed training steps (torch allocator or XLA memory_stats "
            "on a GPU; process peak RSS on a CPU, which includes the runtime), GB = 10⁹ "
            "bytes.",
            lambda a: charts.by_batch(a.train_memory, "peak_mem_gb", "peak memory (GB)"),
            when=lambda a: not a.train_speed.empty and not a.train_memory.empty,
        ),
        Table(
            "training_speed",
            "Training step time (p50, p95), images/s, compile time, peak memory and energy "
            "per step (median over trials).",
            lambda a: a.train_speed,
            records("training", tables.TRAINING_SPEED),
            drop=("device",),
            when=nonempty("train_speed"),
        ),
        Figure(
            "training_parity",
            "Loss-curve parity",
            "Per-step training loss of PyTorch (eager) and JAX (jit) from the same ported "
            "weights on the same batches, fp32 with TF32 off, dropout off; the panel title "
            "gives the largest relative difference over the steps (the bar is 1e-3).",
            lambda a: charts.parity_chart(a.parity_curves),
            when=nonempty("parity_curves"),
        ),
        Table(
            "training_parity",
            "Largest relative difference, JAX against PyTorch: per-step loss, parameters and "
            "BatchNorm statistics after the last step.",
            lambda a: a.parity,
            records("training", tables.PARITY_METRICS),
            when=nonempty("parity_curves"),
        ),
        Figure(
            "training_convergence",
            "Convergence",
            "Train loss per step and validation top-1 per epoch, both frameworks from the same "
            "weights, batches and learning-rate schedule (dropout on, each side its own "
            "masks).",
            lambda a: charts.convergence_chart(a.convergence_curves),
            when=nonempty("convergence_curves"),
        ),
        Table(
            "training_convergence",
            "Validation top-1 (%) after the last epoch and mean train loss over the last "
            "epoch.",
            lambda a: a.convergence,
            records("training", tables.CONVERGENCE_METRICS),
            when=nonempty("convergence_curves"),
        ),
    ),
)


SECTIONS = (TRAINING,)
