"""The JAX ÷ PyTorch ratio predicted directly: pairs from the same run only, the reading chosen
by folds that hold lineages out, an interval that holds, and a hold-out that never trains on the
lineage it scores."""

import numpy as np
import pandas as pd

from fwbench.families.prediction import predictor, ratio
from fwbench.models.lineage import lineage
from tests.test_prediction_predictor import synthetic_sweep


def _with_runs(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(campaign="sweep", run_id="r1")


def test_pairs_join_each_jax_row_to_the_pytorch_eager_row_of_its_run():
    frame = _with_runs(synthetic_sweep(noise=0.0))
    other_run = frame[frame.framework == "torch"].assign(run_id="r2", seconds=99.0)
    found = ratio.pairs(pd.concat([frame, other_run], ignore_index=True))
    assert len(found) == (frame.framework == "jax").sum()  # r2 has no JAX row to pair
    assert (found.torch_seconds < 99.0).all()
    row = found.iloc[0]
    torch = frame.loc[row.torch_index]
    assert (torch.framework, torch["mode"], torch.model) == ("torch", "eager", row.model)
    assert np.isclose(row.log_ratio, np.log(frame.loc[row.jax_index].seconds / torch.seconds))
    assert not found.decided.any()  # no trials in the table: nothing is decided
    assert found.same_run.all()


def test_a_jax_run_without_pytorch_pairs_with_the_median_of_other_runs_on_its_cpu():
    frame = _with_runs(synthetic_sweep(noise=0.0))
    torch = frame[frame.framework == "torch"]
    slower = torch.assign(run_id="r2", seconds=torch.seconds * 3)
    elsewhere = torch.assign(run_id="r3", device_name="CPU B", seconds=torch.seconds * 100)
    alone = frame[frame.framework == "jax"].assign(campaign="torchax", mode="torchax")
    found = ratio.pairs(pd.concat([torch, slower, elsewhere, alone], ignore_index=True))
    assert len(found) == len(alone) and not found.same_run.any() and not found.decided.any()
    # the median of 1x and 3x (CPU B is another CPU and stays out)
    row = found.iloc[0]
    assert np.isclose(row.torch_seconds, 2 * torch.loc[row.torch_index].seconds)


def test_the_ratio_model_reads_what_the_lineage_folds_reward_and_its_interval_holds():
    """In the synthetic law JAX's ratio grows with the depthwise share (its depthwise FLOPs cost
    six times PyTorch's) and with the op count: a constant ratio misses that, and the held-out
    lineages' ratios land inside the interval about as often as it claims."""
    frame = _with_runs(synthetic_sweep(seed=2, noise=0.05))
    model = ratio.fit(ratio.pairs(frame))
    assert model.reads in ("size", "mix")
    assert model.misses[model.reads] < model.misses["none"]
    held = ratio.evaluate(frame, predictor.evaluate(frame, "lineage").predicted)
    assert set(held.fold) == set(frame.model.map(lineage))
    inside = ((np.exp(held.log_ratio) >= held.low) & (np.exp(held.log_ratio) <= held.high)).mean()
    assert inside >= 0.75
    scores = ratio.scores(held).set_index("jax_mode")
    assert scores.loc["all", "pairs"] == len(held) and np.isnan(
        scores.loc["all", "direct_correct_winner_pct"]
    )  # no trials, so no pair is decided and no winner is judged
    assert scores.loc["all", "direct_mape_pct"] < 25


def test_the_ratio_hold_out_never_fits_on_the_lineage_it_scores(monkeypatch):
    frame = _with_runs(synthetic_sweep(noise=0.05))
    seen = []
    fit = ratio.fit

    def spy(rows, **kwargs):
        seen.append(set(rows.model.map(lineage)))
        return fit(rows, **kwargs)

    monkeypatch.setattr(ratio, "fit", spy)
    held = ratio.evaluate(frame, frame.seconds)
    for fold, lineages in zip(sorted(set(held.fold)), seen, strict=True):
        assert fold not in lineages
