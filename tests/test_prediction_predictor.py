"""The predictor on synthetic sweeps whose law is known: grouped hold-outs never leak, the
conformal interval covers what it claims, and the correction learns what the prior misses."""

import numpy as np
import pandas as pd
import pytest

from fwbench.families.prediction import costs, predictor
from fwbench.models.lineage import lineage

FAMILIES = ("resnet", "mobilenet", "vit", "regnet", "densenet")


def synthetic_sweep(seed=0, noise=0.05):
    """Configurations of 15 models in 5 families whose true time is a known sum of costs: each
    framework has its own cost per depthwise FLOP (JAX's six times PyTorch's) and per op, dense
    FLOPs and bytes cost the same in both, small batches run a little less efficiently, plus
    log-normal noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for f, family in enumerate(FAMILIES):
        for m in range(3):
            gflops = rng.uniform(0.5, 10.0)
            depthwise = rng.uniform(0.0, 0.3) if family in ("mobilenet", "regnet") else 0.0
            intensity = rng.uniform(5, 30)
            for batch in (1, 4, 16, 32, 64):
                for threads in (1, 2):
                    for framework, mode in (("torch", "eager"), ("jax", "jit")):
                        flops = gflops * 1e9 * batch
                        rows.append(
                            {
                                "model": f"{family}_{m}",
                                "framework": framework,
                                "mode": mode,
                                "precision": "fp32",
                                "batch_size": batch,
                                "threads": threads,
                                "device_name": "CPU A",
                                "image_size": 224,
                                "total_flops": flops,
                                "flops:convolution": flops * (1 - depthwise),
                                "flops:depthwise/grouped convolution": flops * depthwise,
                                "bytes:elementwise/activation": flops / intensity,
                                "total_bytes": flops / intensity,
                                "param_bytes": gflops * 4e6,
                                "op_count": 100 + 40 * f,
                                "peak_tflops": 0.1 * threads,
                                "bandwidth_gbs": 10.0 * threads,
                            }
                        )
    frame = pd.DataFrame(rows)
    jax = frame.framework == "jax"
    peak, bandwidth = frame.peak_tflops * 1e12, frame.bandwidth_gbs * 1e9
    seconds = (
        1.5 * frame["flops:convolution"] / peak
        + np.where(jax, 12.0, 2.0) * frame["flops:depthwise/grouped convolution"] / peak
        + 3.0 * frame["bytes:elementwise/activation"] / bandwidth
        + frame.param_bytes / bandwidth
        + np.where(jax, 60e-6, 20e-6) * frame.op_count
    )
    slow_small = 1 + 0.5 / frame.batch_size
    frame["seconds"] = seconds * slow_small * np.exp(rng.normal(0, noise, len(frame)))
    return frame


def test_the_lineage_hold_out_never_trains_on_a_sibling():
    frame = synthetic_sweep()
    # a sibling of the held-out lineage under another name: a ResNeXt beside the ResNets
    sibling = frame[frame.model == "resnet_0"].assign(model="resnext50_32x4d")
    frame = pd.concat([frame, sibling], ignore_index=True)
    for name, train, test in predictor.holdout_splits(frame, "lineage"):
        assert name not in set(frame.loc[train].model.map(lineage))
        if name == "resnet":
            assert "resnext50_32x4d" in set(frame.loc[test].model)


def test_grouped_holdouts_never_leak():
    frame = synthetic_sweep()
    folds = list(predictor.holdout_splits(frame, "lineage"))
    assert [name for name, _, _ in folds] == sorted(lineage(f"{f}_0") for f in FAMILIES)
    for name, train, test in folds:
        assert set(frame.loc[train].model) & set(frame.loc[test].model) == set()
        assert set(frame.loc[test].model.map(lineage)) == {name}
    [(_, train, test)] = predictor.holdout_splits(frame, "batch")
    assert frame.loc[train].batch_size.max() <= 16 < frame.loc[test].batch_size.min()
    assert len(list(predictor.holdout_splits(frame, "threads"))) == 2
    assert list(predictor.holdout_splits(frame, "cpu")) == []  # one CPU: no such hold-out
    with pytest.raises(ValueError, match="unknown hold-out"):
        list(predictor.holdout_splits(frame, "random"))


def test_a_leaking_split_would_be_caught():
    """The check above fails on a random split, which is what it exists to catch."""
    frame = synthetic_sweep()
    shuffled = frame.sample(frac=1.0, random_state=0)
    train, test = shuffled.index[: len(frame) // 2], shuffled.index[len(frame) // 2 :]
    assert set(frame.loc[train].model) & set(frame.loc[test].model)


def test_the_fitted_costs_carry_over_to_unseen_families():
    frame = synthetic_sweep()
    held = predictor.evaluate(frame, "lineage")
    learned = predictor.errors(held.seconds, held.predicted)
    assert (held.cost > 0).all()  # the cost model's own seconds ride along for error_table
    roofline = predictor.errors(held.seconds, costs.roofline_seconds(held))
    assert learned["mape_pct"] < 15 < roofline["mape_pct"]
    batch = predictor.evaluate(frame, "batch")
    assert predictor.errors(batch.seconds, batch.predicted)["mape_pct"] < 15


def _group_factors(weights, pooled, frame):
    """Each term group's cost over the pooled one, for the terms where the pooled one is not
    zero: one number per group when a setting scales the pooled costs."""
    groups = [costs.term_group(name) for name in costs.cost_terms(frame).columns]
    factors = {}
    for group, cost, base in zip(groups, weights, pooled, strict=True):
        if base > 0:
            factors.setdefault(group, set()).add(round(cost / base, 9))
    return factors


def test_each_framework_gets_its_own_costs():
    """JAX's depthwise FLOPs cost six times PyTorch's in the synthetic law; the fitted costs say
    so, and a setting too thin to fit alone scales the costs of all rows, one factor per group
    of terms."""
    frame = synthetic_sweep(noise=0.0)
    weights, pooled = costs.fit_costs(frame)
    column = list(costs.cost_terms(frame).columns).index("flops:depthwise/grouped convolution")
    assert weights["jax jit"][column] > 3 * weights["torch eager"][column]
    thin = frame[(frame.framework == "torch") | frame.model.isin(["resnet_0", "vit_0"])]
    jax = thin[thin.framework == "jax"]
    assert costs.setting_fit(jax) == "scaled"
    weights, pooled = costs.fit_costs(thin)
    assert costs.setting_fit(thin[thin.framework == "torch"]) == "shrunk"
    factors = _group_factors(weights["jax jit"], pooled, thin)
    assert all(len(found) == 1 for found in factors.values()), factors


def test_a_setting_of_one_family_keeps_the_pooled_costs():
    """Rows of one family cannot tell a factor for its convolutions from one for its ops that
    carries over to another family: such a setting uses the pooled costs as they are."""
    frame = synthetic_sweep(noise=0.0)
    one = frame[(frame.framework == "torch") | frame.model.str.startswith("resnet")]
    weights, pooled = costs.fit_costs(one)
    assert costs.setting_fit(one[one.framework == "jax"]) == "pooled"
    assert "jax jit" not in weights and "torch eager" in weights


def test_a_setting_of_two_families_scales_the_pooled_costs():
    """Six JAX models of two families are too few families to cross-validate costs of their own:
    JAX scales the pooled costs, and its ops come out dearer than the pooled ones, as the law says
    (60 us an op against PyTorch's 20). Three families still scale (each fold of the
    cross-validation would fit on two); a fourth gives it its own, shrunk."""
    frame = synthetic_sweep(noise=0.0)
    jax = frame.framework == "jax"
    two = frame[~jax | frame.model.str.match("resnet|vit")]
    weights, pooled = costs.fit_costs(two)
    assert costs.setting_fit(two[two.framework == "jax"]) == "scaled"
    factors = _group_factors(weights["jax jit"], pooled, two)
    assert all(len(found) == 1 for found in factors.values()), factors
    assert min(factors["ops"]) > 1.5
    three = frame[~jax | frame.model.str.match("resnet|mobilenet|vit")]
    assert costs.setting_fit(three[three.framework == "jax"]) == "scaled"
    four = frame[~jax | frame.model.str.match("resnet|mobilenet|vit|densenet")]
    assert costs.setting_fit(four[four.framework == "jax"]) == "shrunk"


def test_the_shrink_weight_spans_the_scaled_and_the_free_costs():
    """On one matrix: an infinite weight returns the prior, a weight of zero the free fit, and a
    weight between lands between them, nearer the prior as the weight grows."""
    rng = np.random.default_rng(3)
    shares = rng.uniform(0.05, 0.5, (40, 3))
    truth = np.array([1.0, 2.0, 0.5])
    shares = shares / (shares @ truth)[:, None]  # each row's time is exactly the sum at truth
    prior = np.array([1.0, 1.0, 1.0])
    assert np.array_equal(costs._relative_nnls(shares, prior, np.inf), prior)
    assert np.allclose(costs._relative_nnls(shares, prior, 0.0), truth)
    distances = [
        np.abs(costs._relative_nnls(shares, prior, shrink) - prior).sum()
        for shrink in (0.01, 1.0, 100.0)
    ]
    assert distances[0] > distances[1] > distances[2] > 0


def test_cross_validation_shrinks_a_setting_only_as_far_as_its_families_agree():
    """Two laws, one fit. Where JAX is PyTorch with one category dearer (its depthwise FLOPs, six
    times), no factor per group can say so, and leave-one-lineage-out picks a weak shrink: held-out
    RegNets, the one depthwise family JAX has left besides its MobileNets, come out near their
    time, where the scaled costs miss them. Where JAX is PyTorch with each group dearer by a
    factor, folds of three families scale instead (the test below)."""
    frame = synthetic_sweep(noise=0.02)
    families = frame.model.map(lineage)
    train = frame[families != "regnet"]
    held = frame[(families == "regnet") & (frame.framework == "jax")]
    jax = train[train.framework == "jax"]
    pooled = costs._fit_costs(train)
    how, shrunk, shrink = costs.setting_costs(jax, pooled)
    assert how == "shrunk" and shrink <= 0.1
    scaled = costs._fit_scales(jax, pooled)
    at = {}
    for name, weights in (("shrunk", shrunk), ("scaled", scaled)):
        seconds = costs.cost_seconds({"jax jit": weights}, pooled, held)
        at[name] = predictor.errors(held.seconds, seconds)["mape_pct"]
    assert at["shrunk"] < 10 < at["scaled"], at


def test_a_thin_setting_that_differs_by_a_factor_per_group_is_recovered_by_scaling():
    """Here JAX's law is PyTorch's with its FLOPs twice as dear and its ops three times, and JAX
    without its RegNets spans four families: holding one out leaves three, too few for costs of
    its own free of doubt, and JAX scales the pooled costs. The scaled costs put each held-out
    family's JAX rows near their true time, before any correction; the pooled costs borrowed whole
    miss them by about a third. (On the default law, where JAX differs in one term, the depthwise
    FLOPs, the factors gain nothing: they are for a setting that differs by group, not by term.)"""
    frame = synthetic_sweep(noise=0.02)
    jax = (frame.framework == "jax").to_numpy()
    peak, bandwidth = frame.peak_tflops * 1e12, frame.bandwidth_gbs * 1e9
    flops = (
        1.5 * frame["flops:convolution"] + 2.0 * frame["flops:depthwise/grouped convolution"]
    ) / peak
    written = (3.0 * frame["bytes:elementwise/activation"] + frame.param_bytes) / bandwidth
    ops = 1e-3 * frame.op_count
    frame["seconds"] = np.where(jax, 2.0 * flops + written + 3.0 * ops, flops + written + ops)
    frame = frame[~jax | ~frame.model.str.startswith("regnet").to_numpy()]
    families = frame.model.map(lineage)
    for family in ("resnet", "mbconv", "vision transformer", "densenet"):
        train = frame[families != family]
        held = frame[(families == family) & (frame.framework == "jax")]
        weights, pooled = costs.fit_costs(train)
        assert costs.setting_fit(train[train.framework == "jax"]) == "scaled"
        scaled = costs.cost_seconds(weights, pooled, held)
        borrowed = costs.cost_seconds({}, pooled, held)
        assert predictor.errors(held.seconds, scaled)["mape_pct"] < 10, family
        assert predictor.errors(held.seconds, borrowed)["mape_pct"] > 20, family


def test_a_setting_keeps_the_pooled_cost_of_a_term_its_rows_never_exercise():
    """Only PyTorch's ViTs write linear layers' outputs in earnest (JAX's are held out): JAX's own
    fit cannot tell that term's cost from its CNN rows, so it keeps the pooled one, learned from
    the PyTorch ViTs (scaled by JAX's factor for byte terms), instead of pricing it from
    classifier heads at whatever NNLS picks."""
    frame = synthetic_sweep(noise=0.0)
    vit = frame.model.str.startswith("vit").to_numpy()
    linear = np.where(vit, frame.total_bytes, frame.total_bytes * 1e-7)
    frame["bytes:matmul/linear"] = linear
    frame["seconds"] += 2.0 * linear / (frame.bandwidth_gbs * 1e9)
    train = frame[~(vit & (frame.framework == "jax").to_numpy())]
    weights, pooled = costs.fit_costs(train)
    column = list(costs.cost_terms(train).columns).index("bytes:matmul/linear")
    assert "jax jit" in weights and pooled[column] > 0
    scaled = costs._fit_scales(train[train.framework == "jax"], pooled)
    assert weights["jax jit"][column] == scaled[column]
    # the held-out JAX ViTs then come out near their true time, not hundreds of times off
    fitted = predictor.fit(train)
    held = frame[vit & (frame.framework == "jax").to_numpy()]
    error = predictor.errors(held.seconds, fitted.predict(held).seconds)
    assert error["worst_pct"] < 100


def test_the_conformal_interval_covers_about_what_it_claims():
    frame = synthetic_sweep(seed=1, noise=0.1)
    held = predictor.evaluate(frame, "lineage")
    covered = ((held.seconds >= held.low) & (held.seconds <= held.high)).mean()
    assert 0.8 <= covered <= 1.0
    assert (held.high > held.predicted).all() and (held.low < held.predicted).all()


def test_errors_and_winner_rate_on_known_numbers():
    measured = pd.Series([1.0, 1.0, 1.0, 1.0])
    predicted = pd.Series([1.05, 0.88, 1.2, 1.0])
    got = predictor.errors(measured, predicted)
    assert got["mape_pct"] == pytest.approx((5 + 12 + 20 + 0) / 4)
    assert got["within_10pct"] == 50 and got["within_15pct"] == 75
    assert got["worst_pct"] == pytest.approx(20)
    pairs = pd.DataFrame(
        {
            "measured_ratio": [2.0, 0.5, 1.5, 1.01],
            "predicted_ratio": [1.5, 0.7, 0.9, 0.5],
            "decided": [True, True, True, False],
        }
    )
    assert predictor.correct_winner_rate(pairs) == pytest.approx(200 / 3)


def test_the_error_table_splits_a_holdout_by_setting_and_image_size():
    held = pd.DataFrame(
        {
            "holdout": ["lineage"] * 4,
            "framework": ["jax", "jax", "torch", "torch"],
            "mode": ["jit", "jit", "eager", "eager"],
            "image_size": [32, 224, 32, 32],
            "seconds": [1.0, 1.0, 1.0, 2.0],
            "predicted": [3.0, 1.1, 0.9, 2.2],
        }
    )
    table = predictor.error_table(held).set_index(["setting", "image_size"])
    assert table.loc[("jax jit", 32), "mape_pct"] == pytest.approx(200.0)
    assert table.loc[("jax jit", 224), "mape_pct"] == pytest.approx(10.0)
    assert table.loc[("torch eager", 32), "mape_pct"] == pytest.approx(10.0)
    assert table.loc[("torch eager", 32), "rows"] == 2
    assert table.cost_mape_pct.isna().all()
    costed = predictor.error_table(held.assign(cost=[1.5, 1.0, 1.0, 2.0]))
    costed = costed.set_index(["setting", "image_size"])
    assert costed.loc[("jax jit", 32), "cost_mape_pct"] == pytest.approx(50.0)
    assert costed.loc[("torch eager", 32), "cost_mape_pct"] == pytest.approx(0.0)


def test_the_worst_group_names_the_fold_the_setting_and_which_part_missed():
    """Fold b misses most (its JAX row by 300%, its PyTorch row by 10%); there JAX's cost model
    alone was off by 50%, so the correction made it worse."""
    held = pd.DataFrame(
        {
            "holdout": ["lineage"] * 4,
            "fold": ["a", "a", "b", "b"],
            "framework": ["jax", "torch", "jax", "torch"],
            "mode": ["jit", "eager", "jit", "eager"],
            "seconds": [1.0, 1.0, 1.0, 1.0],
            "predicted": [1.2, 1.1, 4.0, 1.1],
            "cost": [1.0, 1.0, 1.5, 1.0],
        }
    )
    where = predictor.worst_group(held)
    assert (where["holdout"], where["fold"], where["setting"]) == ("lineage", "b", "jax jit")
    assert where["fold_mape_pct"] == pytest.approx(155.0)
    assert where["mape_pct"] == pytest.approx(300.0)
    assert where["cost_mape_pct"] == pytest.approx(50.0)
    assert where["rows"] == 1


def test_a_holdout_says_which_rows_had_a_setting_its_fold_never_saw():
    """JAX measured on one CPU only: holding that CPU out leaves a fold with no JAX row to learn
    from, and every JAX row of it is marked, so that no winner is judged on it."""
    frame = synthetic_sweep()
    other = frame[frame.framework == "torch"].assign(device_name="CPU B")
    both = pd.concat([frame, other], ignore_index=True)
    held = predictor.evaluate(both, "cpu")
    on_a = held[held.fold == "device_name CPU A"]
    assert not on_a[on_a.framework == "jax"].setting_seen.any()
    assert on_a[on_a.framework == "torch"].setting_seen.all()
    assert held[held.fold == "device_name CPU B"].setting_seen.all()


def test_winner_score_leaves_out_pairs_with_a_framework_the_fold_never_saw():
    """Three decided pairs: two judged (one right, one wrong), one with JAX unseen by its fold,
    which is counted as left out and not scored, though its predicted winner is wrong."""
    rows = []
    cases = {  # model: (JAX img/s per trial, predicted JAX s, JAX seen)
        "right": ([5.0, 5.5, 5.2], 2.0, True),
        "wrong": ([5.0, 5.5, 5.2], 0.5, True),
        "unseen": ([5.0, 5.5, 5.2], 0.5, False),
    }
    for model, (jax_rates, jax_predicted, seen) in cases.items():
        for framework, mode, rates, predicted, row_seen in (
            ("torch", "eager", [10.0, 11.0, 10.5], 1.0, True),
            ("jax", "jit", jax_rates, jax_predicted, seen),
        ):
            rows.append(
                {
                    "campaign": "c",
                    "run_id": "r",
                    "model": model,
                    "precision": "fp32",
                    "batch_size": 4,
                    "threads": 2,
                    "device_name": "CPU A",
                    "image_size": 224,
                    "framework": framework,
                    "mode": mode,
                    "trial_img_s": dict(enumerate(rates)),
                    "seconds": 1 / float(np.median(rates)),
                    "predicted": predicted,
                    "setting_seen": row_seen,
                }
            )
    score = predictor.winner_score(pd.DataFrame(rows))
    assert score == {"correct_winner_rate": 50.0, "decided_pairs": 2, "unjudged_pairs": 1}
    assert predictor.winner_score(pd.DataFrame(rows[4:]))["decided_pairs"] == 0


def test_a_setting_slower_than_every_term_keeps_the_pooled_costs_and_does_not_crash():
    """A setting a thousand times slower than its terms at the ceilings spends under
    MIN_TERM_SHARE on each: no term is free to fit, so its costs are the pooled ones (scipy's nnls,
    given a matrix without columns, would bring the process down). Scaled, the same holds per
    group of terms."""
    frame = synthetic_sweep(noise=0.0)
    jax = frame.framework == "jax"
    frame.loc[jax, "seconds"] *= 1000.0
    weights, pooled = costs.fit_costs(frame)
    assert np.array_equal(weights["jax jit"], pooled)
    thin = frame[~jax | frame.model.str.match("resnet|vit")]
    weights, pooled = costs.fit_costs(thin)
    assert costs.setting_fit(thin[thin.framework == "jax"]) == "scaled"
    assert np.array_equal(weights["jax jit"], pooled)


def test_a_correction_is_kept_only_where_it_lowers_the_lineage_folds_error():
    """The synthetic law runs small batches slower, which no cost term says: the correction that
    reads the batch earns its place. Without that effect a correction can only learn the noise,
    and the lineage folds drop it."""
    sized = predictor.fit(synthetic_sweep(noise=0.02))
    assert set(sized.choice) == {"jax jit", "torch eager"}
    assert "none" not in sized.choice.values()
    flat = synthetic_sweep(noise=0.05)
    flat["seconds"] /= 1 + 0.5 / flat.batch_size
    assert predictor.fit(flat).choice == {"jax jit": "none", "torch eager": "none"}


def test_each_setting_gets_the_interval_its_own_misses_ask_for():
    """JAX rows ten times noisier than PyTorch's get a wider interval, and every row's interval
    is its setting's; a setting the fit never saw gets the width over all settings."""
    frame = synthetic_sweep(noise=0.02)
    jax = (frame.framework == "jax").to_numpy()
    noise = np.random.default_rng(3).normal(0, 0.2, jax.sum())
    frame.loc[jax, "seconds"] *= np.exp(noise)
    fitted = predictor.fit(frame)
    assert fitted.half_widths["jax jit"] > 2 * fitted.half_widths["torch eager"]
    found = fitted.predict(frame)
    width = np.log(found.high / found.seconds)
    assert np.allclose(width[jax], fitted.half_widths["jax jit"])
    unseen = frame.iloc[:3].assign(mode="compile")
    assert np.allclose(
        np.log(fitted.predict(unseen).high / fitted.predict(unseen).seconds), fitted.half_width
    )
