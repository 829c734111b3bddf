"""The recommender: the Pareto front, the limits and their fall-back, the objective's order, and
`fwbench recommend`'s answers on an index the tests write."""

import json

import pandas as pd
import pytest

from fwbench.families.prediction import recommend
from tests.conftest import run_cli
from tests.test_prediction_dataset import CPU, IMAGE, write_index

MIB = 2**20


def scored():
    """Four candidates: the fastest needs the most memory; the second is fast and small."""
    return pd.DataFrame(
        {
            "framework": ["torch", "jax", "torch", "jax"],
            "mode": ["eager", "jit", "eager", "jit"],
            "precision": ["fp32"] * 4,
            "batch_size": [64, 16, 1, 1],
            "threads": [2] * 4,
            "device_name": [CPU, CPU, CPU, "Other CPU (family 3, model 4)"],
            "throughput_img_s": [100.0, 90.0, 20.0, 10.0],
            "latency_p95_ms": [700.0, 200.0, 50.0, 120.0],
            "peak_mem_bytes": [900 * MIB, 300 * MIB, 100 * MIB, 100 * MIB],
            "energy_j_per_img": [float("nan")] * 4,
            "source": ["measured", "predicted", "measured", "predicted"],
        }
    )


def test_pareto_front():
    front = recommend.pareto(
        scored(), {"throughput_img_s": True, "latency_p95_ms": False, "peak_mem_bytes": False}
    )
    # the last is slower, slower per call and no smaller than the third: dominated
    assert front.tolist() == [True, True, True, False]


def test_memory_limit_falls_back_to_the_next_best():
    free = recommend.rank(scored(), recommend.Query(model="m"))
    assert free.ranked.iloc[0].batch_size == 64 and free.dropped == {}
    limited = recommend.rank(scored(), recommend.Query(model="m", max_memory_bytes=512 * MIB))
    assert limited.ranked.iloc[0].batch_size == 16  # the fastest that fits
    assert (limited.ranked.peak_mem_bytes <= 512 * MIB).all()
    assert limited.dropped == {"more than 0.5 GiB of memory": 1}
    none = recommend.rank(scored(), recommend.Query(model="m", max_memory_bytes=10 * MIB))
    assert none.ranked.empty
    assert "No configuration of m meets the limits" in recommend.explain(none, recommend.Query("m"))


def test_latency_limit_and_objectives():
    by_latency = recommend.rank(scored(), recommend.Query(model="m", objective="latency"))
    assert by_latency.ranked.latency_p95_ms.tolist() == [50.0, 120.0, 200.0, 700.0]
    capped = recommend.rank(scored(), recommend.Query(model="m", max_latency_ms=150))
    assert capped.ranked.batch_size.tolist() == [1, 1]  # 20 then 10 img/s
    prices = {CPU: 1.0}  # the other CPU has no price: left out of a cost ranking
    cost = recommend.rank(scored(), recommend.Query(model="m", objective="cost", prices=prices))
    assert cost.dropped == {"no price for its device": 1}
    assert cost.ranked.cost_per_million_img.iloc[0] == pytest.approx(1.0 / (100 * 3600) * 1e6)
    sentence = recommend.explain(cost, recommend.Query(model="m", objective="cost"))
    assert sentence.startswith("Run m on torch eager in fp32 at batch 64 with 2 threads")
    assert "1 with no price for its device" in sentence


def test_regret():
    assert recommend.regret_pct(95.0, 100.0) == pytest.approx(5.0)
    assert recommend.regret_pct(110.0, 100.0, larger_is_better=False) == pytest.approx(10.0)


def _recommend(tmp_path, *args):
    return run_cli(
        "recommend", "--db", tmp_path / "i.duckdb", "--out", tmp_path / "executed", *args
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--model", "no_such_net"], "unknown model"),
        (["--model", "resnet18", "--batch-size", "0"], "--batch-size must be positive"),
        (["--model", "resnet18", "--objective", "cost"], "needs --price-per-hour"),
        (["--model", "resnet18", "--price-per-hour", "missing.yaml"], "no file"),
        (
            ["--model", "resnet18", "--objective", "energy"],
            "no configuration in the index has an energy",
        ),
    ],
)
def test_recommend_refuses_bad_input_in_one_line(tmp_path, args, words):
    write_index(tmp_path / "i.duckdb")
    done = _recommend(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr


def test_recommend_a_malformed_price_file(tmp_path):
    write_index(tmp_path / "i.duckdb")
    (tmp_path / "p.yaml").write_text(f"'{CPU}': cheap\n")
    done = _recommend(tmp_path, "--model", "resnet18", "--price-per-hour", tmp_path / "p.yaml")
    assert done.returncode == 2 and "is not a number" in done.stderr


def test_recommend_returns_a_configuration_that_fits(tmp_path):
    write_index(tmp_path / "i.duckdb")
    (tmp_path / "p.csv").write_text(f'device,price_per_hour\n"{CPU}",2.0\n')
    common = [
        "--model",
        "resnet18",
        "--image-size",
        str(IMAGE),
        "--price-per-hour",
        tmp_path / "p.csv",
        "--device",
        CPU,
    ]
    done = _recommend(tmp_path, *common, "--batch-size", "4", "--json")
    assert done.returncode == 0, done.stderr
    ranked = json.loads(done.stdout)
    # PyTorch eager and JAX jit at batch 4 on the one calibrated CPU; PyTorch's was measured
    assert {(r["framework"], r["source"]) for r in ranked} == {
        ("torch", "measured"),
        ("jax", "predicted"),
    }
    measured = next(r for r in ranked if r["source"] == "measured")
    assert measured["throughput_img_s"] == pytest.approx(31.0)
    assert set(recommend.JSON_KEYS) <= set(ranked[0])
    assert ranked[0]["throughput_img_s"] == max(r["throughput_img_s"] for r in ranked)
    # a limit below every candidate's bytes leaves nothing to recommend, and says so
    tight = _recommend(tmp_path, *common, "--batch-size", "4", "--max-memory-gb", "0.001")
    assert tight.returncode == 3 and "No configuration of resnet18 meets the limits" in tight.stdout
    # with --json, stdout stays JSON (the empty list); the sentence naming the limit is on stderr
    tight_json = _recommend(
        tmp_path, *common, "--batch-size", "4", "--max-memory-gb", "0.001", "--json"
    )
    assert tight_json.returncode == 3 and json.loads(tight_json.stdout) == []
    assert "No configuration of resnet18 meets the limits" in tight_json.stderr
    assert "GiB of memory" in tight_json.stderr
    fits = _recommend(tmp_path, *common, "--max-memory-gb", "0.2", "--json")
    assert fits.returncode == 0, fits.stderr
    assert all(r["peak_mem_bytes"] <= 0.2 * 2**30 for r in json.loads(fits.stdout))


def test_recommend_json_prints_the_top_rows_the_text_shows(tmp_path):
    write_index(tmp_path / "i.duckdb")
    # two settings at seven batch sizes: fourteen candidates, of which the two best are printed
    common = ["--model", "resnet18", "--image-size", str(IMAGE), "--device", CPU, "--json"]
    done = _recommend(tmp_path, *common, "--top", "2")
    assert done.returncode == 0, done.stderr
    ranked = json.loads(done.stdout)
    assert len(ranked) == 2
    assert ranked[0]["throughput_img_s"] >= ranked[1]["throughput_img_s"]


def test_a_model_without_a_twin_is_offered_on_jax_through_torchax():
    # the settings the training table measured: PyTorch eager, JAX jit (a twin) and torchax
    table = pd.DataFrame(
        {
            "framework": ["torch", "jax", "jax"],
            "mode": ["eager", "jit", "torchax"],
            "precision": ["fp32"] * 3,
        }
    )
    ceilings = pd.DataFrame(
        [
            {
                "device": "cpu",
                "device_name": CPU,
                "precision": "fp32",
                "threads": 2,
                "peak_tflops": 0.2,
                "bandwidth_gbs": 20.0,
            }
        ]
    )
    query = recommend.Query(model="squeezenet1_1", batch_size=1)
    rows = recommend.candidate_rows(query, table, ceilings, False, IMAGE)
    assert set(zip(rows.framework, rows["mode"], strict=True)) == {
        ("torch", "eager"),
        ("jax", "torchax"),
    }
    both = recommend.candidate_rows(query, table, ceilings, True, IMAGE)
    assert ("jax", "jit") in set(zip(both.framework, both["mode"], strict=True))


def test_a_pick_from_predictions_is_scored_against_the_measured_best():
    group = pd.DataFrame(
        {
            "framework": ["torch", "jax", "torch"],
            "mode": ["eager", "jit", "compile"],
            "precision": ["fp32"] * 3,
            "batch_size": [8] * 3,
            "threads": [2] * 3,
            "img_s": [10.0, 20.0, 15.0],
            "latency_p95_s": [0.1, 0.5, 0.2],
        }
    )
    # the predictions rank the third first: it gives up a quarter of the best's throughput
    predicted = pd.DataFrame(
        {"throughput_img_s": [1.0, 2.0, 3.0], "latency_p95_ms": [100.0, 500.0, 150.0]}
    )
    found = recommend.choice(group, predicted, None)
    assert found["regret_pct"] == pytest.approx(25.0)
    # the record names both the pick and the measured best, so a miss says what it missed
    assert found["chosen"] == "torch compile fp32 batch 8, 2 threads"
    assert found["best"] == "jax jit fp32 batch 8, 2 threads"
    # under a 0.3 s cap the best that fits measures 15 img/s; a pick of it has no regret...
    assert recommend.choice(group, predicted, 0.3)["regret_pct"] == pytest.approx(0.0)
    # ...and one the predictions wrongly believe fits, which breaks the cap, counts as 100%
    wrong = predicted.assign(latency_p95_ms=[100.0, 500.0, 250.0], throughput_img_s=[1.0, 2.0, 3.0])
    broke = recommend.choice(group.assign(latency_p95_s=[0.1, 0.5, 0.4]), wrong, 0.3)
    assert broke["violates"] and broke["regret_pct"] == 100.0
    # the miss says what the pick changed: another mode at the same batch and threads
    assert found["differs"] == "setting"
    assert recommend.choice(group, predicted, 0.3)["differs"] == ""


def test_committed_predictions_pick_per_batch_and_pay_the_measured_gap():
    # a frozen set's scored rows: seconds per call predicted and measured, two frameworks of one
    # model at batch 1 and 8, and a model measured in one framework only
    base = {"precision": "fp32", "threads": 2, "image_size": 224, "device_name": CPU}
    scored = pd.DataFrame(
        [
            {**base, "model": "m", "framework": "torch", "mode": "eager", "batch_size": 1,
             "predicted_s": 0.10, "seconds": 0.10},
            {**base, "model": "m", "framework": "jax", "mode": "torchax", "batch_size": 1,
             "predicted_s": 0.20, "seconds": 0.12},
            # batch 8: the predictions pick JAX, which measures 0.8 s against PyTorch's 0.6 s
            {**base, "model": "m", "framework": "torch", "mode": "eager", "batch_size": 8,
             "predicted_s": 0.90, "seconds": 0.60},
            {**base, "model": "m", "framework": "jax", "mode": "torchax", "batch_size": 8,
             "predicted_s": 0.50, "seconds": 0.80},
            {**base, "model": "alone", "framework": "torch", "mode": "eager", "batch_size": 1,
             "predicted_s": 0.1, "seconds": 0.1},
        ]
    )  # fmt: skip
    queries = recommend.committed_queries(scored).set_index("batch_size")
    # one query per batch size with two candidates; a model with one has no choice to score
    assert list(queries.index) == [1, 8] and set(queries.model) == {"m"}
    assert queries.loc[1, "regret_pct"] == pytest.approx(0.0)
    # the pick gives up a quarter of the best's throughput (8/0.8 against 8/0.6 img/s)
    assert queries.loc[8, "regret_pct"] == pytest.approx(25.0)
    assert queries.loc[8, "chosen"] == "jax torchax fp32 batch 8, 2 threads"
    assert queries.loc[8, "differs"] == "setting"


def test_a_miss_says_what_its_pick_changed_from_the_best():
    rows = pd.DataFrame(
        {
            "framework": ["torch", "torch", "jax"],
            "mode": ["eager", "eager", "jit"],
            "precision": ["fp32"] * 3,
            "batch_size": [16, 4, 4],
            "threads": [2, 2, 1],
        }
    )
    best, smaller, other = (rows.iloc[i] for i in range(3))
    assert recommend._difference(smaller, best) == "batch size"
    assert recommend._difference(other, best) == "setting and batch size and threads"
    assert recommend._difference(best, best) == ""


def test_miss_causes_count_the_misses_by_what_their_pick_changed():
    queries = pd.DataFrame(
        {
            "query": ["batch", "batch", "batch", "latency", "latency", "latency"],
            "regret_pct": [0.0, 12.0, 20.0, 100.0, 30.0, 4.0],
            "differs": ["", "setting", "setting", "batch size", "batch size", "setting"],
            "violates": [False, False, False, True, False, False],
        }
    )
    causes = recommend.miss_causes(queries, 5.0).set_index(["query", "differs"])
    assert causes.loc[("batch", "setting"), "misses"] == 2
    assert causes.loc[("batch", "setting"), "worst_regret_pct"] == pytest.approx(20.0)
    assert causes.loc[("latency", "batch size"), "misses"] == 2
    assert causes.loc[("latency", "batch size"), "broke_cap"] == 1
    # a query within the goal is no miss, whatever its pick changed
    assert ("latency", "setting") not in causes.index
    assert recommend.miss_causes(queries[queries.regret_pct <= 5], 5.0).empty


def test_evaluate_never_fits_on_the_model_it_recommends_for(monkeypatch):
    from fwbench.families.prediction import forecast
    from tests.test_prediction_predictor import synthetic_sweep

    table = synthetic_sweep(noise=0.0).assign(
        run_id="r1", device="cpu", image_size=224, model_peak_bytes=1e8
    )
    table = table[table.model.str.endswith("0")]  # one model a family: five fits, not fifteen
    table["img_s"] = table.batch_size / table.seconds
    table["latency_s"] = table["latency_p95_s"] = table.seconds
    seen = []
    fit = forecast.fit_targets

    def spy(frame, seed=0):
        seen.append(set(frame.model))
        return fit(frame, seed=seed)

    monkeypatch.setattr(forecast, "fit_targets", spy)
    queries = recommend.evaluate(table)
    models = sorted(table.model.unique())
    assert len(seen) == len(models)
    for model, trained in zip(models, seen, strict=True):
        assert model not in trained
    assert set(queries["query"]) == {"batch", "latency"}
    # two frameworks x two thread counts at each batch size: four candidates a query
    assert (queries[queries["query"] == "batch"].candidates == 4).all()
    assert queries.regret_pct.between(0, 100).all()


def test_the_reports_prediction_table_keeps_hold_outs_and_queries_apart():
    from fwbench.families.prediction import prediction_report

    def row(metric, value, **extra):
        return {
            "family": "prediction",
            "status": "ok",
            "metric": metric,
            "value": value,
            "extra": extra,
        }

    meas = pd.DataFrame(
        [
            row("mape_pct", 12.0, holdout="batch"),
            row("mape_pct", 40.0, holdout="family"),
            row("regret_pct", 0.0, query="batch"),
            row("regret_pct", 10.0, query="batch"),
            row("regret_pct", 30.0, query="batch"),
            row("regret_within_5pct", 33.3, query="batch"),
            {**row("mape_pct", 99.0, holdout="cpu"), "status": "skipped"},
            # another predictor scored on the same hold-out gets a row of its own
            row("mape_pct", 55.0, holdout="batch", predictor="per-op sum", setting="all"),
            row("mape_pct", 30.0, holdout="batch", predictor="ratio, direct", jax_mode="jit"),
            row("mape_pct", 14.0, test="frozen set", times_scored=1),
        ]
    )
    table = prediction_report.prediction_table(meas).set_index(prediction_report.PREDICTION_GROUP)
    assert table.loc["hold-out: batch · per-op sum", "mape_pct"] == 55.0
    assert table.loc["hold-out: batch · ratio, direct · jit", "mape_pct"] == 30.0
    # a family_table would have pooled the two hold-outs' MAPE into one median of 26
    assert table.loc["hold-out: family", "mape_pct"] == 40.0
    assert table.loc["hold-out: batch", "mape_pct"] == 12.0
    assert table.loc["query: batch", "regret_pct"] == 10.0  # the median over three queries
    assert "hold-out: cpu" not in table.index  # skipped hold-outs carry no score

    # the README's rows say each goal and by how much it is met or missed
    meas = pd.concat(
        [meas, pd.DataFrame([row("memory_error_pct", 4.0, holdout="memory_inference")])]
    )
    _, block = prediction_report.readme_lines(prediction_report.prediction_table(meas), "r.md")
    lines = {line.split(" | ")[0].strip("| "): line for line in block.splitlines()}
    assert lines["hold-out: batch"].endswith("MAPE ≤ 10%: missed by 2.0 points |")
    assert lines["hold-out: family"].endswith("MAPE ≤ 15%: missed by 25.0 points |")
    assert lines["hold-out: memory_inference"].endswith("memory error ≤ 10%: met |")
    assert lines["query: batch"].endswith("regret ≤ 5% ≥ 90%: missed by 56.7 points |")
    assert lines["test: frozen set"].endswith("MAPE ≤ 15%: met |")
    assert not [line for line in lines if " · " in line]  # other predictors stay in the report


def test_evaluate_asks_each_image_size_its_own_queries():
    from tests.test_prediction_predictor import synthetic_sweep

    table = synthetic_sweep(noise=0.0).assign(
        run_id="r1", device="cpu", image_size=224, model_peak_bytes=1e8
    )
    table = table[table.model.isin(["resnet_0", "vit_0", "mobilenet_0"])]
    # the same models at 32 px run far faster: were they candidates beside the 224 px rows, a
    # 32 px configuration would win every query
    small = table.assign(image_size=32, seconds=table.seconds / 40)
    table = pd.concat([table, small], ignore_index=True)
    table["img_s"] = table.batch_size / table.seconds
    table["latency_s"] = table["latency_p95_s"] = table.seconds
    queries = recommend.evaluate(table)
    assert set(queries.image_size) == {224, 32}
    batch = queries[queries["query"] == "batch"]
    assert (batch.candidates == 4).all()
    latency = queries[queries["query"] == "latency"]
    assert len(latency) == 2 * table.model.nunique()


def test_one_configuration_is_one_row_its_measurement_first():
    twice = pd.concat(
        [scored().iloc[[2]].assign(source="predicted", throughput_img_s=25.0), scored()]
    )
    ranked = recommend.rank(twice, recommend.Query(model="m")).ranked
    assert len(ranked) == 4
    (row,) = ranked[ranked.batch_size.eq(1) & ranked.device_name.eq(CPU)].itertuples()
    assert (row.source, row.throughput_img_s) == ("measured", 20.0)


def test_recommend_ranks_this_machines_cpu_unless_told_and_names_each_device(tmp_path):
    write_index(tmp_path / "i.duckdb")
    common = ["--model", "resnet18", "--image-size", str(IMAGE), "--batch-size", "4"]
    # the index knows only the test CPU: this machine's is refused with the devices it has
    here = _recommend(tmp_path, *common)
    assert here.returncode == 2, here.stderr
    (line,) = here.stderr.strip().splitlines()
    assert "this machine's CPU" in line and CPU in line and "--all-devices" in line
    unknown = _recommend(tmp_path, *common, "--device", "Nowhere CPU (family 9, model 9)")
    assert unknown.returncode == 2 and "--device 'Nowhere CPU" in unknown.stderr
    every = _recommend(tmp_path, *common, "--all-devices")
    assert every.returncode == 0, every.stderr
    header = every.stdout.splitlines()[0].split()
    assert {"device", "p95", "memory", "GiB"} <= set(header), header
    assert "latency_ms" not in every.stdout and "peak_mem_bytes" not in every.stdout
    rows = every.stdout.splitlines()[1:3]
    assert all(CPU in row for row in rows), rows


def test_the_front_page_quotes_the_committed_prediction_report_by_its_own_rows(tmp_path):
    """A campaign without JAX-vs-PyTorch ratios has its family's lines in the brief block: the
    predictor's own rows with their goals, no other predictor's and no run id."""
    from pathlib import Path

    from fwbench.publish import readme

    repo = Path(__file__).resolve().parents[1]
    report = repo / "report" / "prediction"
    if not (report / "content.json").is_file():
        pytest.skip("no prediction report is committed")
    block = readme.results_block(
        "prediction", report, tmp_path, repo / "executed", repo / "figures", brief=True
    )
    assert "| hold-out: lineage |" in block and "MAPE ≤ 15%" in block
    assert " · " not in block and not readme.NAMED_RUN.search(block)
