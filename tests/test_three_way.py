"""The three-way study's analysis (families/inference/inference_three_way): PyTorch's best, the Flax twin
and torchax, compared pairwise through the verdicts' estimator, and the port's gap in parts.

Known answers: synthetic rounds with set throughputs per arm, run shifts and round noise; and a
per-op breakdown whose headings must add up to the two JAX arms' wall-time difference.
"""

import numpy as np
import pandas as pd
import pytest

from fwbench.families.inference import inference_three_way as three_way
from fwbench.measure import verdicts
from fwbench.report import tables, why

# images/s each arm reaches, and so the ratios the study must find
TRUE = {("torch", "eager"): 80.0, ("torch", "compile"): 100.0, three_way.TORCHAX: 120.0}
TRUE[three_way.FLAX] = 150.0
CONFIG = {
    "model": "resnet50",
    "device": "cpu",
    "device_name": "Test CPU",
    "precision": "fp32",
    "threads": 2,
}


def samples_frame(runs: int, rounds: int, batch_sizes=(1, 8), seed: int = 3) -> pd.DataFrame:
    """``tables.throughput_samples`` rows of ``runs`` runs: each arm's trial values carry a run
    shift and round noise of their own (log SD 0.02 and 0.03)."""
    rng = np.random.default_rng(seed)
    rows = []
    for run in range(runs):
        shift = rng.normal(0, 0.02)
        for batch in batch_sizes:
            for (framework, variant), img_s in TRUE.items():
                values = img_s * np.exp(shift + rng.normal(0, 0.03, rounds))
                rows.append(
                    {
                        **CONFIG,
                        "batch_size": batch,
                        "framework": framework,
                        "variant": variant,
                        "median": float(np.median(values)),
                        "samples": [float(v) for v in values],
                        "trials": list(range(1, rounds + 1)),
                        "shared": [False] * rounds,
                        "reruns": [0] * rounds,
                        "sample_source": "trials",
                        "run_id": f"run{run}",
                    }
                )
    return pd.DataFrame(rows)


def test_three_pairs_per_configuration_with_the_estimators_verdicts():
    matrix = three_way.three_way_matrix(samples_frame(runs=3, rounds=6))
    assert len(matrix) == 2 * 3
    assert set(matrix.design) == {"3 runs × 6 rounds"}
    assert set(matrix.between_term) == {"fitted"}
    expected = {
        "Flax twin ÷ torchax": (150 / 120, "Flax twin"),
        "torchax ÷ PyTorch": (120 / 100, "torchax"),  # PyTorch's best here is compile
        "Flax twin ÷ PyTorch": (150 / 100, "Flax twin"),
    }
    for r in matrix.itertuples():
        ratio, faster = expected[r.pair]
        assert r.ci_low < ratio < r.ci_high
        assert r.ratio == pytest.approx(ratio, rel=0.05)
        if "PyTorch" in r.pair:  # its arm is the faster of two modes, picked on these rounds
            assert (r.verdict, r.faster) == (verdicts.PICKED_ON_ROUNDS, "")
        else:
            assert (r.verdict, r.faster) == (verdicts.FASTER_B, faster)
    assert set(matrix.a_variant[matrix.a_framework == "torch"]) == {"compile"}


def test_pytorchs_only_mode_is_its_arm_and_its_pairs_are_decided():
    frame = samples_frame(runs=3, rounds=6)
    matrix = three_way.three_way_matrix(frame[frame.variant != "eager"])
    assert set(matrix.verdict) == {verdicts.FASTER_B}


def test_one_run_calls_no_winner_and_an_imported_term_lets_it():
    one = samples_frame(runs=1, rounds=6)
    alone = three_way.three_way_matrix(one)
    assert set(alone.verdict) == {verdicts.WITHIN_ONE_RUN} and set(alone.faster) == {""}
    lent = verdicts.Between(var=0.02**2, df=10.0, source="imported", runs=3)
    imported = three_way.three_way_matrix(one[one.variant != "eager"], imported=lent)
    assert set(imported.between_term) == {"imported"}
    assert set(imported.verdict) == {verdicts.FASTER_B}


def test_a_configuration_without_all_three_arms_is_left_out():
    frame = samples_frame(runs=3, rounds=6)
    frame = frame[~((frame.batch_size == 8) & (frame.variant == "torchax"))]
    matrix = three_way.three_way_matrix(frame)
    assert set(matrix.batch_size) == {1}
    # the JAX-versus-PyTorch matrix never takes torchax as JAX's side
    jax_side = tables.comparison_matrix(frame)
    assert set(jax_side.jax_variant) == {"jit"}


def breakdown_rows(variant: str, ms: dict, wall: float) -> list[dict]:
    return [
        {
            **CONFIG,
            "batch_size": 1,
            "framework": "jax",
            "variant": variant,
            "category": category,
            "ms": value,
            "share": value / sum(ms.values()),
            "wall_ms": wall,
            "fusions_unnamed": False,
        }
        for category, value in ms.items()
    ]


def test_the_ports_gap_falls_under_headings_that_add_up_to_the_wall_time_difference():
    torchax_ms = {
        "convolution + normalisation": 30.0,
        "depthwise/grouped convolution": 6.0,
        "data movement/layout": 5.0,
        "elementwise/activation": 2.0,
        why.OVERHEAD: 1.0,
    }
    twin_ms = {
        "convolution + normalisation": 24.0,
        "depthwise/grouped convolution": 2.0,
        "data movement/layout": 0.5,
        "elementwise/activation": 2.5,
        why.OVERHEAD: 0.5,
    }
    breakdown = pd.DataFrame(
        breakdown_rows("torchax", torchax_ms, wall=44.0) + breakdown_rows("jit", twin_ms, wall=29.5)
    )
    matrix = three_way.three_way_matrix(samples_frame(runs=3, rounds=6, batch_sizes=(1,)))
    found = three_way.port_gaps(matrix, breakdown)
    assert found.gap_ms.sum() == pytest.approx(44.0 - 29.5)
    by = dict(zip(found.category, found.heading, strict=True))
    assert by["data movement/layout"] == "layout"
    assert by["depthwise/grouped convolution"] == "op choice"
    assert by[why.block_label(("convolution", "normalisation"))] == three_way.FUSED
    assert by["elementwise/activation"] == three_way.OTHER
    assert by[why.OUTSIDE] == "outside every op"

    summary = three_way.port_summary(found).iloc[0]
    assert summary["layout"] == pytest.approx(4.5)
    assert summary["op choice"] == pytest.approx(4.0)
    assert summary[three_way.FUSED] == pytest.approx(6.0)
    assert summary[three_way.OTHER] == pytest.approx(-0.5)
    assert summary["total"] == pytest.approx(44.0 - 29.5)
    # the parts read as one sentence, every part with its sign
    (sentence,) = why.why_sentences(found)
    assert "JAX torchax on ResNet-50 at batch 1" in sentence
    assert "elementwise/activation -0.50 ms" in sentence


def test_the_headline_sentence_names_the_design_and_the_verdict():
    matrix = three_way.three_way_matrix(samples_frame(runs=3, rounds=6))
    (line,) = three_way.headline_words(matrix)
    assert line.startswith("ResNet-50 on Test CPU in fp32 with 2 threads, the Flax twin ÷ torchax")
    assert "(3 runs × 6 rounds)" in line and line.count("the twin is faster") == 2


def test_the_readme_quotes_the_port_and_torchax_against_pytorch_as_tables(tmp_path):
    matrix = three_way.three_way_matrix(samples_frame(runs=3, rounds=6))
    matrix.loc[0, ["faster", "verdict"]] = ["", verdicts.INCONCLUSIVE]  # one undecided pair
    # as the README reads it back: the report's CSV, where an empty `faster` comes back as NaN
    matrix.to_csv(tmp_path / "three_way.csv", index=False)
    lines = three_way.readme_lines(pd.read_csv(tmp_path / "three_way.csv"), "r.md")
    assert len(lines) == 4  # per pair: its sentence, then its table
    assert lines[0].startswith("Flax twin ÷ torchax throughput, fp32 with 2 threads on Test CPU")
    assert "design 3 runs × 6 rounds" in lines[0] and "[report](r.md)" in lines[0]
    assert lines[1].splitlines()[0] == "| model | batch 1 | batch 8 |"
    first, second = lines[1].splitlines()[2].split(" | ")[1:3]
    assert first.endswith("(inconclusive)") and "(" not in second  # a winner needs no words
    assert lines[2].startswith("torchax ÷ PyTorch throughput")
    assert three_way.readme_lines(pd.DataFrame(), "r.md") == []
