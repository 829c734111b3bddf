"""The predictor's data, `fwbench predict` and 21_prediction, on an index these tests write: which
configurations enter (named hardware, clean trials, a ceiling), the medians they carry, the
JAX-vs-PyTorch pairs the correct-winner rate scores, and the command's answers."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fwbench.families.prediction import dataset, epochs, forecast, frozen, recommend
from fwbench.measure.device import cpu_device_name
from fwbench.results import db as fw_db
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[1]

CPU = "Test CPU (family 1, model 2)"
OLD_CPU = "Test CPU"  # a record made before family and model were recorded
IMAGE = 64
# images/s per trial, by (model, framework, batch size); the shared trial is the fourth
THROUGHPUT = {
    ("resnet18", "torch", 1): [10.0, 12.0, 11.0, 1.0],
    ("resnet18", "jax", 1): [5.0, 6.0, 5.5, 5.0],
    ("resnet18", "torch", 4): [30.0, 32.0, 31.0, 33.0],
    ("mobilenet_v3_small", "torch", 1): [50.0, 52.0, 51.0, 49.0],
    ("mobilenet_v3_small", "jax", 1): [52.0, 49.0, 51.0, 50.5],
    ("squeezenet1_1", "torch", 1): [40.0, 44.0, 42.0, 41.0],
}


def _insert(
    con,
    *,
    device_name,
    model,
    framework,
    batch,
    trial,
    value,
    metric="throughput_img_s",
    extra=None,
    shared=False,
    threads=2,
    family="inference",
    precision="fp32",
    mode=None,
):
    mode = mode or ("jit" if framework == "jax" else "eager")
    cell = f"{model}-{framework}-{mode}-{batch}-{trial}-{device_name}-{threads}-{family}"
    con.execute(
        "insert into measurements (run_id, campaign, notebook, cell, trial, status, family, model, "
        "framework, mode, device, device_name, precision, batch_size, threads, metric, value, "
        "unit, extra) values ('r1', 'synth', '10_inference', ?, ?, 'ok', ?, ?, ?, ?, 'cpu', ?, ?, "
        "?, ?, ?, ?, 'x', ?)",
        [
            cell,
            trial,
            family,
            model,
            framework,
            mode,
            device_name,
            precision,
            batch,
            threads,
            metric,
            value,
            json.dumps(extra if extra is not None else {"image_size": IMAGE}),
        ],
    )
    if metric not in (
        "latency_p50_ms",
        "epoch_seconds",
    ):  # one cell row per cell, whatever it records
        con.execute(
            "insert into cells (run_id, campaign, notebook, cell, trial, status, shared_machine) "
            "values ('r1', 'synth', '10_inference', ?, ?, 'ok', ?)",
            [cell, trial, shared],
        )


def write_index(path, device_name=CPU, threads=2):
    con = fw_db.connect(path)
    for (model, framework, batch), values in THROUGHPUT.items():
        for trial, value in enumerate(values, start=1):
            kwargs = dict(
                device_name=device_name,
                model=model,
                framework=framework,
                batch=batch,
                trial=trial,
                threads=threads,
            )
            _insert(con, value=value, shared=trial == 4, **kwargs)
            _insert(con, value=1000.0 * batch / value, metric="latency_p50_ms", **kwargs)
    # neither of these may enter: hardware without family and model, and a channels_last arm
    _insert(
        con,
        device_name=OLD_CPU,
        model="resnet18",
        framework="torch",
        batch=1,
        trial=1,
        value=99.0,
        threads=threads,
    )
    _insert(
        con,
        device_name=device_name,
        model="resnet18",
        framework="torch",
        batch=8,
        trial=1,
        value=99.0,
        extra={"image_size": IMAGE, "channels_last": True},
        threads=threads,
    )
    for framework, peak, bandwidth in (("torch", 0.1, 20.0), ("jax", 0.2, 5.0)):
        for metric, value in (("peak_matmul_tflops", peak), ("copy_bandwidth_gbs", bandwidth)):
            _insert(
                con,
                device_name=device_name,
                model=None,
                framework=framework,
                batch=None,
                trial=0,
                value=value,
                metric=metric,
                family="calibration",
                threads=threads,
            )
    con.close()


# a training step's p50 (ms) per trial, by (model, framework); the shared trial is the fourth, and
# each trial's timed epoch is the pass's steps times its step, plus a tenth for fetching batches
TRAINING_STEP_MS = {
    ("resnet18", "torch"): [40.0, 42.0, 41.0, 400.0],
    ("mobilenet_v3_small", "torch"): [20.0, 21.0, 22.0, 20.0],
    ("squeezenet1_1", "torch"): [25.0, 24.0, 26.0, 25.0],
}
TRAINING_BATCH, EPOCH_STEPS = 4, 30


def write_training(path, device_name=CPU, threads=2):
    """11_training's rows for the epoch forecast: steps and timed epochs of three models."""
    con = fw_db.connect(path)
    for (model, framework), values in TRAINING_STEP_MS.items():
        for trial, ms in enumerate(values, start=1):
            kwargs = dict(
                device_name=device_name,
                threads=threads,
                model=model,
                framework=framework,
                batch=TRAINING_BATCH,
                trial=trial,
                family="training",
                shared=trial == 4,
            )
            _insert(con, value=ms, metric="step_time_p50_ms", **kwargs)
            epoch = {"image_size": IMAGE, "steps": EPOCH_STEPS, "images": EPOCH_STEPS * 4}
            seconds = 1.1 * EPOCH_STEPS * ms / 1000
            _insert(con, value=seconds, metric="epoch_seconds", extra=epoch, **kwargs)
    con.close()


def test_measured_training_steps_and_epochs_take_clean_trials(tmp_path):
    write_index(tmp_path / "i.duckdb")
    write_training(tmp_path / "i.duckdb")
    con = fw_db.connect(tmp_path / "i.duckdb", read_only=True)
    steps, measured_epochs = epochs.measured(con)
    con.close()
    steps = steps.set_index("model")
    # three clean trials remain, so the shared fourth (400 ms) is left out
    assert steps.loc["resnet18"].step_s == pytest.approx(0.041)
    assert steps.loc["resnet18"].n_trials == 3 and steps.loc["resnet18"].image_size == IMAGE
    row = measured_epochs.set_index("model").loc["resnet18"]
    assert row.epoch_s == pytest.approx(1.1 * EPOCH_STEPS * 0.041)
    assert (row.steps, row.images, row.batch_size) == (EPOCH_STEPS, EPOCH_STEPS * 4, 4)
    assert set(row.trial_epoch_s) == {1, 2, 3}


def test_a_tuning_runs_candidates_never_pool_into_their_modes_row(tmp_path):
    write_index(tmp_path / "i.duckdb")
    con = fw_db.connect(tmp_path / "i.duckdb")
    # a fifth trial of each as a tuning run's candidate: JAX jit under another XLA option set,
    # and a PyTorch graph compiled for any batch size
    _insert(
        con,
        device_name=CPU,
        model="resnet18",
        framework="jax",
        batch=1,
        trial=5,
        value=99.0,
        extra={"image_size": IMAGE, "xla_options": "ynn-off"},
    )
    _insert(
        con,
        device_name=CPU,
        model="resnet18",
        framework="torch",
        batch=1,
        trial=5,
        value=99.0,
        mode="compile",
        extra={"image_size": IMAGE, "dynamic_shapes": True},
    )
    # the default option set is the mode as it comes, so its trial counts
    _insert(con, device_name=CPU, model="mobilenet_v3_small", framework="jax", batch=1,
            trial=5, value=99.0, extra={"image_size": IMAGE, "xla_options": "default"})  # fmt: skip
    frame = dataset.measured(con).set_index(["model", "framework", "mode", "batch_size"])
    con.close()
    assert ("resnet18", "torch", "compile", 1) not in frame.index
    jax = frame.loc[("resnet18", "jax", "jit", 1)]
    # its clean trials alone (the fourth ran on a shared machine)
    assert jax.seconds == pytest.approx(np.median([1 / 5.0, 1 / 6.0, 1 / 5.5]))
    mobile = frame.loc[("mobilenet_v3_small", "jax", "jit", 1)]
    assert mobile.seconds == pytest.approx(np.median([1 / v for v in (52, 49, 51, 99)]))


def test_measured_takes_clean_trials_of_named_hardware(tmp_path):
    write_index(tmp_path / "i.duckdb")
    con = fw_db.connect(tmp_path / "i.duckdb", read_only=True)
    frame = dataset.measured(con).set_index(["model", "framework", "batch_size"])
    con.close()
    assert set(frame.device_name) == {CPU}  # the old CPU's row is left out
    assert 8 not in frame.index.get_level_values("batch_size")  # so is channels_last
    row = frame.loc[("resnet18", "torch", 1)]
    # three clean trials remain, so the shared fourth (1 img/s) is left out
    assert row.seconds == pytest.approx(np.median([1 / 10, 1 / 12, 1 / 11]))
    assert row.latency_s == pytest.approx(np.median([1 / 10, 1 / 12, 1 / 11]))
    assert row.n_trials == 3 and row.image_size == IMAGE
    assert frame.loc[("resnet18", "torch", 4)].seconds == pytest.approx(
        np.median([4 / 30, 4 / 32, 4 / 31])
    )


def test_ceilings_are_the_best_any_framework_reached(tmp_path):
    write_index(tmp_path / "i.duckdb")
    con = fw_db.connect(tmp_path / "i.duckdb", read_only=True)
    table = dataset.ceilings(con)
    con.close()
    [row] = table.to_dict("records")
    assert (row["peak_tflops"], row["bandwidth_gbs"], row["threads"]) == (0.2, 20.0, 2)


def test_winner_pairs_decide_only_where_the_paired_interval_excludes_one(tmp_path):
    write_index(tmp_path / "i.duckdb")
    con = fw_db.connect(tmp_path / "i.duckdb", read_only=True)
    frame = dataset.measured(con)
    con.close()
    pairs = dataset.winner_pairs(frame).set_index("model")
    # JAX at about half PyTorch's throughput in every round: decided, twice the seconds
    assert pairs.loc["resnet18"].decided
    assert pairs.loc["resnet18"].measured_ratio == pytest.approx(
        np.median([1 / 5, 1 / 6, 1 / 5.5]) / np.median([1 / 10, 1 / 12, 1 / 11])
    )
    # MobileNetV3-S: the rounds point both ways, a tie
    assert not pairs.loc["mobilenet_v3_small"].decided
    assert "squeezenet1_1" not in pairs.index  # PyTorch only: no pair


def test_build_joins_features_and_ceilings(tmp_path):
    write_index(tmp_path / "i.duckdb")
    table, left_out = dataset.build(tmp_path / "i.duckdb", set())
    assert left_out == {
        "no ceiling for its device, precision and threads": 0,
        "a model of the frozen test set": 0,
        "only trials on a shared machine": 0,
        "a declared model this process was not given": 0,
    }
    assert len(table) == len(THROUGHPUT)
    row = table.set_index(["model", "framework", "batch_size"]).loc[("resnet18", "torch", 4)]
    # ResNet-18 at 64 px: torchvision's 1.81 GMACs at 224 px scale by (64/224)^2; FLOPs = 2 MACs
    assert row.total_flops == pytest.approx(4 * 2 * 1.814e9 * (64 / 224) ** 2, rel=0.05)
    assert row.peak_tflops == 0.2 and row.bandwidth_gbs == 20.0
    assert row.total_bytes > row.param_bytes > 11e6 * 4


def test_a_shared_trial_never_enters_the_training_table(tmp_path):
    write_index(tmp_path / "i.duckdb")
    con = fw_db.connect(tmp_path / "i.duckdb")
    # ResNet-18 at batch 2: two clean trials and a shared one ten times slower, too few clean
    # trials for the report's rule of three; SqueezeNet at batch 2 ran only on a shared machine
    for trial, value, shared in ((1, 20.0, False), (2, 22.0, False), (3, 2.0, True)):
        _insert(
            con, device_name=CPU, model="resnet18", framework="torch", batch=2, trial=trial,
            value=value, shared=shared,
        )  # fmt: skip
    _insert(
        con, device_name=CPU, model="squeezenet1_1", framework="torch", batch=2, trial=1,
        value=9.0, shared=True,
    )  # fmt: skip
    con.close()
    table, left_out = dataset.build(tmp_path / "i.duckdb", set())
    rows = table.set_index(["model", "framework", "batch_size"])
    row = rows.loc[("resnet18", "torch", 2)]
    assert row.n_trials == 2 and row.seconds == pytest.approx(np.median([2 / 20, 2 / 22]))
    assert ("squeezenet1_1", "torch", 2) not in rows.index
    assert left_out["only trials on a shared machine"] == 1
    # the measurements a reader is shown keep the report's rule: all three trials, shared or not
    con = fw_db.connect(tmp_path / "i.duckdb", read_only=True)
    shown = dataset.measured(con).set_index(["model", "framework", "batch_size"])
    con.close()
    assert shown.loc[("resnet18", "torch", 2)].n_trials == 3


def test_a_model_declared_elsewhere_is_left_out_rather_than_failing_the_table(tmp_path):
    write_index(tmp_path / "i.duckdb")
    con = fw_db.connect(tmp_path / "i.duckdb")
    # a campaign's own model this process was given no declaration of (no --campaign)
    for trial in (1, 2, 3):
        _insert(
            con, device_name=CPU, model="someones_net", framework="torch", batch=1, trial=trial,
            value=80.0,
        )  # fmt: skip
    con.close()
    table, left_out = dataset.build(tmp_path / "i.duckdb", set())
    assert "someones_net" not in set(table.model) and len(table) == len(THROUGHPUT)
    assert left_out["a declared model this process was not given"] == 1


def test_a_frozen_test_model_never_enters_the_table(tmp_path):
    write_index(tmp_path / "i.duckdb")
    table, left_out = dataset.build(tmp_path / "i.duckdb", {"resnet18"})
    assert "resnet18" not in set(table.model) and len(table)
    assert left_out["a model of the frozen test set"] == sum(
        1 for key in THROUGHPUT if key[0] == "resnet18"
    )


def test_a_model_without_a_twin_is_predicted_for_jax_through_torchax_only():
    from fwbench.families.prediction.answers import predict_request
    from fwbench.families.prediction.costs import SETTINGS

    asked = dict(
        model="convnext_tiny",
        framework="jax",
        batch_size=1,
        precision="fp32",
        threads=1,
        image_size=None,
        epoch_images=None,
    )
    request, problem = predict_request(**asked, mode="torchax")
    assert problem is None and request.mode == "torchax"
    assert f"{request.framework} {request.mode}" in SETTINGS
    request, problem = predict_request(**asked, mode="jit")
    assert request is None and "no Flax twin" in problem


def _predict(tmp_path, *args):
    return run_cli("predict", "--db", tmp_path / "i.duckdb", "--out", tmp_path / "executed", *args)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--model", "no_such_net", "--framework", "torch", "--batch-size", "1"], "unknown model"),
        (["--model", "convnext_tiny", "--framework", "jax", "--batch-size", "1"], "no Flax twin"),
        (["--model", "resnet18", "--framework", "torch", "--batch-size", "0"], "--batch-size"),
        (
            [
                "--model",
                "resnet18",
                "--framework",
                "torch",
                "--batch-size",
                "1",
                "--threads",
                "999",
            ],
            "--threads",
        ),
        (
            ["--model", "resnet18", "--framework", "jax", "--batch-size", "1", "--mode", "compile"],
            "not a jax mode",
        ),
        (
            ["--model", "resnet18", "--framework", "torch", "--batch-size", "8"]
            + ["--epoch-images", "4"],
            "--epoch-images",
        ),
    ],
)
def test_predict_refuses_bad_input_in_one_line_before_any_work(tmp_path, args, words):
    done = _predict(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], done.stderr
    assert not (tmp_path / "i.duckdb").exists() and not (tmp_path / "executed").exists()


def test_predict_answers_from_the_index_and_shows_the_measurement(tmp_path):
    name = cpu_device_name()
    if not dataset.identified("cpu", name):
        pytest.skip(f"this CPU ({name}) reports no family and model")
    write_index(tmp_path / "i.duckdb", device_name=name, threads=1)
    args = [
        "--model",
        "resnet18",
        "--framework",
        "torch",
        "--batch-size",
        "4",
        "--threads",
        "1",
        "--image-size",
        str(IMAGE),
    ]
    done = _predict(tmp_path, *args, "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["measured"] == pytest.approx(np.median([30.0, 32.0, 31.0]))
    assert answer["interval"]["low"] <= answer["throughput_img_s"] <= answer["interval"]["high"]
    assert answer["latency_ms"] > 0 and answer["peak_mem_bytes"] > 11e6 * 4
    assert answer["measured_at_other_sizes"] == []
    text = _predict(tmp_path, *args)
    assert text.returncode == 0 and "measured" in text.stdout and "img/s" in text.stdout
    assert answer["model_seen"] and "own measurements are among those it learned" in text.stdout


def test_predict_forecasts_an_epoch_from_other_models_training_steps(tmp_path):
    name = cpu_device_name()
    if not dataset.identified("cpu", name):
        pytest.skip(f"this CPU ({name}) reports no family and model")
    write_index(tmp_path / "i.duckdb", device_name=name, threads=1)
    args = ["--model", "resnet18", "--framework", "torch", "--batch-size", "4", "--threads", "1"]
    args += ["--image-size", str(IMAGE)]
    without = json.loads(_predict(tmp_path, *args, "--epoch-images", "102", "--json").stdout)
    assert without["epoch"]["epoch_s"] is None and "epoch_check" in without["epoch"]["reason"]
    write_training(tmp_path / "i.duckdb", device_name=name, threads=1)
    done = _predict(tmp_path, *args, "--epoch-images", "102", "--json")
    assert done.returncode == 0, done.stderr
    epoch = json.loads(done.stdout)["epoch"]
    # 102 images make 25 full batches of 4; the multiple comes from the two other models only
    assert (epoch["steps"], epoch["images"], epoch["multiple_rows"]) == (25, 100, 2)
    assert epoch["epoch_s"] == pytest.approx(25 * epoch["step_ms"] / 1000)
    assert epoch["interval"]["low"] < epoch["epoch_s"] < epoch["interval"]["high"]
    text = _predict(tmp_path, *args, "--epoch-images", "102")
    assert text.returncode == 0 and "an epoch of 100 images (25 steps)" in text.stdout


def test_a_measurement_at_another_image_size_is_pointed_at(tmp_path):
    write_index(tmp_path / "i.duckdb")
    con = fw_db.connect(tmp_path / "i.duckdb", read_only=True)
    measured = dataset.measured(con)
    con.close()
    request = forecast.Request("resnet18", "torch", "eager", 4, "fp32", 2, "cpu", CPU, 224)
    assert IMAGE != 224
    assert forecast.measured_throughput(measured, request) is None
    assert forecast.measured_sizes(measured, request) == [IMAGE]
    at_its_size = forecast.Request("resnet18", "torch", "eager", 4, "fp32", 2, "cpu", CPU, IMAGE)
    assert forecast.measured_sizes(measured, at_its_size) == []
    assert forecast.measured_throughput(measured, at_its_size)["throughput_img_s"] > 0


def test_the_newest_saved_table_is_found(tmp_path):
    for run in ("20260101T000000Z", "20260102T000000Z"):
        folder = tmp_path / "prediction" / run / "21_prediction"
        folder.mkdir(parents=True)
        (folder / forecast.TABLE_NAME).write_text("model\nx\n")
    assert forecast.latest_table(tmp_path).parts[-3] == "20260102T000000Z"
    assert forecast.latest_table(tmp_path / "nothing") is None


def test_21_and_22_score_hold_outs_and_recommendations(tmp_path, write_campaign):
    write_index(tmp_path / "i.duckdb")
    write_training(tmp_path / "i.duckdb")
    campaign = write_campaign(
        "campaign: predsynth\nsteps:\n  - notebook: 21_prediction\n"
        f"    params: {{holdouts: [lineage, batch, threads], db_path: '{tmp_path / 'i.duckdb'}'}}\n"
        "  - notebook: 22_recommend\n"
        f"    params: {{db_path: '{tmp_path / 'i.duckdb'}'}}\n"
    )
    out = tmp_path / "executed"
    done = run_cli("run", campaign, "--out", out, "--db", tmp_path / "out.duckdb")
    assert done.returncode == 0, done.stderr[-3000:]
    [table] = out.glob(f"predsynth/*/21_prediction/{forecast.TABLE_NAME}")
    assert set(forecast.load_table(table).model) == {m for m, _, _ in THROUGHPUT}
    con = fw_db.connect(tmp_path / "out.duckdb", read_only=True)
    rows = con.execute(
        "select notebook, metric, status, json_extract_string(extra, '$.holdout') as holdout, "
        "json_extract_string(extra, '$.test') as test, value, "
        "json_extract_string(extra, '$.predictor') as predictor from measurements "
        "where family = 'prediction'"
    ).df()
    con.close()
    # each score has its baseline beside it, on the same rows; the predictor's own rows first
    ruled = rows[rows.predictor == "baseline"]
    assert set(ruled.holdout.dropna()) == {"lineage"} and "regret_within_5pct" in set(ruled.metric)
    rows = rows[rows.predictor.isna() | (rows.predictor != "baseline")]
    # each of the repository's frozen test scores, where committed, is recorded as it stands,
    # under its set's own label
    tested = rows[rows.test.notna()]
    scores = [p for p in frozen.set_files(REPO) if p.with_suffix(".score.json").is_file()]
    assert set(tested.test) == {frozen.set_label(p) for p in scores}
    for path in scores:
        score = path.with_suffix(".score.json")
        # the predictor's own rows: a set's per-kernel-kind rows carry a predictor of their own
        mine = tested[(tested.test == frozen.set_label(path)) & tested.predictor.isna()]
        mape = json.loads(score.read_text())["mape_pct"]
        assert mine.set_index("metric").value["mape_pct"] == pytest.approx(mape)
        # and 22_recommend scores the committed predictions' picks on the set's rows
        scored_rows = pd.read_csv(score.with_suffix(".csv"))
        share = mine[mine.metric == "regret_within_5pct"].value
        expected = recommend.committed_queries(scored_rows).regret_pct.le(5).mean() * 100
        assert share.tolist() == [pytest.approx(expected)]
    rows = rows[rows.test.isna()]
    scored = rows[(rows.status == "ok") & (rows.notebook == "21_prediction")]
    # three lineages (resnet, mbconv, shufflenet/squeezenet) make the lineage hold-out; no batch size
    # above 16 and one thread count make no other, which the notebook says rather than scores
    # and every timed epoch is forecast from the other two models' steps
    assert set(scored.holdout) == {"lineage", "memory_inference", "epoch"}
    epoch = scored[scored.holdout == "epoch"].set_index("metric").value
    assert 0 <= epoch["mape_pct"] and 0 <= epoch["within_15pct"] <= 100
    # the memory check: the three PyTorch models at batch 1, each a real forward's peak
    memory = scored[scored.metric == "memory_error_pct"]
    assert set(memory.holdout) == {"memory_inference"} and memory.value.between(0, 100).all()
    skipped = rows[rows.status == "skipped"]
    assert set(skipped.holdout) == {"batch", "threads"}
    assert {"mape_pct", "within_15pct", "interval_coverage_pct"} <= set(scored.metric)
    # 22_recommend: ResNet-18 and MobileNetV3-S ran on both frameworks at batch 1, a choice each
    regret = rows[rows.metric == "regret_pct"]
    assert len(regret) == 2 and regret.value.between(0, 100).all()
    assert len(rows[rows.metric == "regret_within_5pct"]) == 1


def test_winner_pairs_never_pair_two_image_sizes():
    def row(framework, mode, image_size, seconds):
        return {
            "campaign": "c",
            "run_id": "r",
            "model": "resnet18",
            "precision": "fp32",
            "batch_size": 16,
            "threads": 2,
            "device_name": CPU,
            "image_size": image_size,
            "framework": framework,
            "mode": mode,
            "seconds": seconds,
            "trial_img_s": {1: 16 / seconds, 2: 16 / seconds},
        }

    # PyTorch timed at 224 and 32 px, JAX at 32 px only: one pair, at 32 px
    frame = pd.DataFrame(
        [
            row("torch", "eager", 224, 1.0),
            row("torch", "eager", 32, 0.1),
            row("jax", "jit", 32, 0.2),
        ]
    )
    [pair] = dataset.winner_pairs(frame).to_dict("records")
    assert pair["image_size"] == 32 and pair["measured_ratio"] == pytest.approx(2.0)
