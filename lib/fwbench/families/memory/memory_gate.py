"""The memory baselines' float64 gradient gate in the report: which of ``torch.utils.checkpoint``'s
segments and torch.compile's budgets compute the unplanned step's gradients with dropout active,
and which do not, naming the tensor (``families/memory/gate.py`` runs the gate)."""

from __future__ import annotations

import pandas as pd

from fwbench.families.memory.memory_curve import MODEL_WORDS
from fwbench.report.tables import extra_columns
from fwbench.vocab import MEMORY_EXACT_TOLERANCE, and_list

METRIC = "exact_max_abs_diff"
_GATED_KINDS = ("checkpoint", "compile_budget", "jax_remat", "jax_policy", "jax_budget")
TOLERANCE = MEMORY_EXACT_TOLERANCE  # the gate's
UPSTREAM = "pytorch#190758"  # the partitioner's fresh masks below a budget of 1.0, reported there


def gate_table(meas: pd.DataFrame) -> pd.DataFrame:
    """One row per model, batch size and gated method: the largest gradient difference over
    trials, whether it is within the tolerance, and the tensor furthest off where it is not."""
    rows = meas[(meas.family == "memory") & (meas.metric == METRIC) & meas.value.notna()]
    rows = rows[[isinstance(e, dict) and e.get("method") in _GATED_KINDS for e in rows.extra]]
    if rows.empty:
        return pd.DataFrame()
    rows = extra_columns(rows, ["method", "worst_tensor"])
    out = []
    for (model, batch, method), part in rows.groupby(["model", "batch_size", "mode"], sort=True):
        worst = part.loc[part.value.idxmax()]
        out.append(
            {
                "model": model,
                "batch_size": batch,
                "method": method,
                "kind": worst.method,
                "trials": len(part),
                "max_abs_diff": float(worst.value),
                "passed": bool(worst.value <= TOLERANCE),
                "worst_tensor": worst.worst_tensor if worst.value > TOLERANCE else None,
            }
        )
    return pd.DataFrame(out)


def gate_sentences(table: pd.DataFrame) -> list[str]:
    """Per model: the baselines that pass, and for each that fails, how and where."""
    out = []
    if table.empty:
        return out
    for model, group in table.groupby("model", sort=True):
        passed = group[group.passed]
        failed = group[~group.passed].drop_duplicates("method")
        head = (
            f"{MODEL_WORDS.get(model, model)}: the float64 gradient gate (one training step, "
            "dropout active where the model has it, against its framework's unplanned step from "
            f"the same generator state, tolerance {TOLERANCE:g})"
        )
        parts = []
        if not passed.empty:
            parts.append(
                f"passed by {and_list(sorted(set(passed.method)))} (largest difference "
                f"{passed.max_abs_diff.max():.1e})"
            )
        for row in failed.itertuples():
            parts.append(
                f"failed by {row.method}: the gradient of {row.worst_tensor} is off by "
                f"{row.max_abs_diff:.2g} at most"
            )
        sentence = f"{head}: {'; '.join(parts)}."
        if (failed.kind == "compile_budget").any():
            sentence += (
                " Below a budget of 1.0 torch.compile's partitioner recomputes dropout in the "
                f"backward pass with fresh random numbers, as {UPSTREAM} reports: the step "
                "trains on gradients of another mask than its loss, with no error."
            )
        out.append(sentence)
    return out
