"""Each framework at its best, chosen apart from the verdicts: a tuning run's candidates, the
picks `fwbench best-modes` writes, the tuned cells that read them, the records that say what ran,
and the rule that a verdict never picks a mode on the rounds it judges."""

from __future__ import annotations

import json

import nbformat
import numpy as np
import pandas as pd
import pytest

from fwbench import vocab
from fwbench.measure import best_modes, compiler, verdicts
from fwbench.report import tables
from fwbench.results import db
from tests.conftest import run_cli

COMMON = (
    "device: cpu, precision: fp32, threads: 1, image_size: 32, model: mobilenet_v3_small, "
    "batch_sizes: [1], min_iters: 2, min_seconds: 0.02, warmup: 1, block_size: 2"
)
# three JAX candidates, not the four of a full grid: the stock layers with and without YNNPACK,
# and the expert's (each cell a kernel and a compile, in the slowest fixture of the suite)
TUNING = f"""campaign: tiny_tuning
steps:
  - notebook: 10_inference
    params: {{framework: jax, mode: jit, {COMMON}}}
    grid:
      xla_options: [default, ynn-off]
  - notebook: 10_inference
    params: {{framework: jax, mode: jit-expert, xla_options: default, {COMMON}}}
  - notebook: 10_inference
    params: {{framework: torch, {COMMON}}}
    grid:
      channels_last: [false, true]
"""
VERDICT = f"""campaign: tiny_verdict
steps:
  - notebook: 10_inference
    params: {{framework: jax, mode: jit-tuned, tuning_path: {{path}}, {COMMON}}}
  - notebook: 10_inference
    params: {{framework: torch, mode: tuned, tuning_path: {{path}}, {COMMON}}}
"""


def _records(out, campaign) -> pd.DataFrame:
    rows = []
    for path in sorted(out.glob(f"{campaign}/*/10_inference/*.ipynb")):
        rows += db._records_in(nbformat.read(path, as_version=4))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A tiny tuning run, its picks, and a verdict run of the tuned modes that reads them."""
    tmp = tmp_path_factory.mktemp("tuning")
    out = tmp / "out"
    (tmp / "tuning.yaml").write_text(TUNING)
    done = run_cli("run", tmp / "tuning.yaml", "--out", out)
    assert done.returncode == 0, done.stderr[-3000:]
    picks = tmp / "best.json"
    chosen = run_cli("best-modes", "tiny_tuning", "--db", out / "fwbench.duckdb", "--out", picks)
    assert chosen.returncode == 0, chosen.stderr
    (tmp / "verdict.yaml").write_text(VERDICT.replace("{path}", str(picks)))
    verdict = run_cli("run", tmp / "verdict.yaml", "--out", out)
    assert verdict.returncode == 0, verdict.stderr[-3000:]
    return out, json.loads(picks.read_text())


def test_the_tuning_run_records_what_ran_in_every_record(tuned):
    out, _ = tuned
    records = _records(out, "tiny_tuning")
    jax = records[records.framework == "jax"]
    assert not jax.empty
    for row in jax.itertuples():
        ran = row.extra["ran"]
        assert ran["xla_options"] == row.extra["xla_options"]
        assert ran["compiler_options"] == compiler.xla_options(ran["xla_options"], "cpu")
        assert ran["layers"] == ("expert" if row.mode == "jit-expert" else "stock")
    expert = jax[jax["mode"] == "jit-expert"].iloc[0].extra["ran"]
    assert expert["conv_kinds"].get("depthwise", 0) == 11  # MobileNetV3-S's depthwise layers
    stock = jax[jax["mode"] == "jit"].iloc[0].extra["ran"]
    assert set(stock["conv_kinds"]) == {"library"}
    off = jax[(jax["mode"] == "jit") & (jax.extra.map(lambda e: e["xla_options"]) == "ynn-off")]
    assert off.iloc[0].extra["ran"]["kernel_mix"].get("ynn_fusions", 0) == 0
    torch = records[records.framework == "torch"]
    assert {r.extra["ran"]["channels_last"] for r in torch.itertuples()} == {False, True}


def test_best_modes_picks_each_configurations_fastest_candidate(tuned):
    _, selection = tuned
    assert selection["tuning"][0]["campaign"] == "tiny_tuning"
    picks = {p["framework"]: p for p in selection["picks"]}
    assert set(picks) == {"jax", "torch"}
    assert picks["jax"]["candidates"] == 3 and picks["torch"]["candidates"] == 2
    assert picks["jax"]["img_s"] >= picks["jax"]["runner_up_img_s"]


def test_tuned_cells_run_the_pick_and_record_it(tuned):
    out, selection = tuned
    records = _records(out, "tiny_verdict")
    picks = {p["framework"]: p for p in selection["picks"]}
    throughput = records[records.metric == "throughput_img_s"]
    assert set(throughput["mode"]) == {"jit-tuned", "tuned"}
    for row in records[records.batch_size.notna()].itertuples():
        pick = row.extra["tuned_pick"]
        assert pick["candidate"] == picks[row.framework]["candidate"]
        assert pick["tuning"] == selection["tuning"] == [picks[row.framework]["tuning_run"]]
        ran = row.extra["ran"]
        if row.framework == "jax":
            assert (ran["layers"], ran["xla_options"]) == tuple(
                picks["jax"]["choice"][k] for k in ("layers", "xla_options")
            )
        else:
            assert ran["channels_last"] == picks["torch"]["choice"]["channels_last"]


def _meas(rows):
    """Tuning-run records as the index gives them: one throughput per candidate."""
    base = {
        "family": "inference",
        "metric": "throughput_img_s",
        "status": "ok",
        "device_name": "cpu X",
        "precision": "fp32",
        "threads": 2,
        "model": "m",
        "batch_size": 1,
    }
    frame = [
        {**base, "framework": f, "mode": mode, "value": v, "extra": {"image_size": 224, **extra}}
        for f, mode, extra, v in rows
    ]
    return pd.DataFrame(frame)


def test_select_takes_the_fastest_and_breaks_ties_by_name():
    meas = _meas(
        [
            ("jax", "jit", {"xla_options": "default"}, 10.0),
            ("jax", "jit-expert", {"xla_options": "ynn-off"}, 30.0),
            ("jax", "jit-expert", {"xla_options": "default"}, 30.0),
            ("jax", "torchax", {}, 99.0),  # PyTorch's graph: never a JAX candidate
            ("torch", "eager", {"channels_last": True}, 5.0),
            ("torch", "compile", {}, 7.0),
        ]
    )
    picks = {p["framework"]: p for p in best_modes.select(meas, campaign="c", run_id="r")["picks"]}
    assert picks["jax"]["choice"] == {"layers": "expert", "xla_options": "default"}
    assert picks["jax"]["candidates"] == 3 and picks["jax"]["runner_up_img_s"] == 30.0
    assert picks["torch"]["candidate"] == "compile"


def test_a_graph_for_any_batch_size_is_a_candidate_of_its_own_and_eager_has_none():
    meas = _meas(
        [
            ("torch", "compile-freeze", {}, 6.0),
            ("torch", "compile-freeze", {"dynamic_shapes": True}, 11.0),
            ("torch", "eager", {"dynamic_shapes": True}, 5.0),
        ]
    )
    table = best_modes.candidates(meas)
    assert set(table.candidate) == {"compile-freeze", "compile-freeze+dynamic", "eager"}
    pick = best_modes.select(meas, campaign="c", run_id="r")["picks"][0]
    assert pick["choice"] == {
        "mode": "compile-freeze",
        "channels_last": False,
        "dynamic_shapes": True,
    }
    assert pick["runner_up"] == "compile-freeze"
    # a pick made before the choice existed (no key) is the static graph, as it always was
    assert best_modes.candidate_name("torch", {"mode": "compile", "channels_last": True}) == (
        "compile+channels_last"
    )


def test_a_configuration_without_a_pick_names_what_to_run():
    selection = best_modes.select(_meas([("torch", "eager", {}, 5.0)]), campaign="c", run_id="r")
    key = dict(device_name="cpu X", precision="fp32", threads=2, model="m", image_size=224)
    assert best_modes.choice(selection, framework="torch", batch_size=1, **key)["candidate"]
    with pytest.raises(best_modes.NoChoice, match="tuning_cpu.yaml"):
        best_modes.choice(selection, framework="torch", batch_size=8, **key)


def test_merge_keeps_other_devices_and_takes_newer_picks():
    old = best_modes.select(_meas([("torch", "eager", {}, 5.0)]), campaign="c", run_id="r1")
    other = _meas([("torch", "compile", {}, 9.0)]).assign(device_name="cpu Y")
    new = best_modes.select(other, campaign="c", run_id="r2")
    merged = best_modes.merge(old, new)
    assert {p["device_name"] for p in merged["picks"]} == {"cpu X", "cpu Y"}
    assert [r["run_id"] for r in merged["tuning"]] == ["r1", "r2"]


def test_best_modes_refuses_an_unknown_campaign_and_writes_nothing(tmp_path):
    index = tmp_path / "x.duckdb"
    db.ingest(tmp_path, index)
    done = run_cli("best-modes", "nope", "--db", index, "--out", tmp_path / "best.json")
    assert done.returncode == 2 and "nope" in done.stderr
    assert not (tmp_path / "best.json").exists()


@pytest.mark.parametrize(
    "params, words",
    [
        ("framework: torch, mode: tuned", "tuning_path"),
        ("framework: jax, mode: jit-tuned", "tuning_path"),
        ("framework: torch, mode: eager, xla_options: ynn-off", "JAX's jit"),
        ("framework: jax, mode: jit, xla_options: fastest", "xla_options"),
        ("framework: jax, mode: compile-freeze", "not a jax mode"),
    ],
)
def test_bad_modes_and_options_are_one_line_and_exit_2(tmp_path, params, words):
    path = tmp_path / "bad.yaml"
    path.write_text(
        f"campaign: bad\nsteps:\n  - notebook: 10_inference\n    params: {{{params}, {COMMON}}}\n"
    )
    done = run_cli("run", path, "--out", tmp_path / "out")
    assert done.returncode == 2 and words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_run_help_explains_every_mode_and_option_set():
    done = run_cli("run", "--help")
    for framework_modes in vocab.INFERENCE_MODES.values():
        for mode in framework_modes:
            assert mode in done.stdout
    for name in compiler.all_option_set_names():
        assert name in done.stdout
    for name in vocab.TORCH_OPTION_HELP:
        assert f"torch {name}:" in done.stdout


def test_unknown_option_sets_are_refused():
    with pytest.raises(ValueError, match="ynn-off"):
        compiler.xla_options("turbo", "cpu")


def test_kernel_mix_counts_library_fusions_loops_and_convolutions():
    hlo = "\n".join(
        [
            '%f = f32[1] fusion(%a), kind=kCustom, backend_config={"fusion_config":{"kind":'
            '"__ynn_fusion"}}',
            "%g = f32[1] fusion(%a), kind=kLoop, calls=%c",
            "%h = f32[1,2,2,8]{3,2,1,0} convolution(%x, %w), window={size=3x3}",
            "%d = f32[4,4]{1,0} dot(%p, %q)",
        ]
    )
    assert compiler.xla_kernel_mix(hlo) == {
        "convolutions": 1,
        "dots": 1,
        "loop_fusions": 1,
        "ynn_fusions": 1,
    }


# --------------------------------------------------------------------------- no winner's curse


def _samples(arms, rounds=6, runs=("r1", "r2", "r3")):
    """``throughput_samples`` of one configuration: each arm's per-round throughput in each run,
    with ``arms`` (framework, variant) -> its true img/s."""
    rng = np.random.default_rng(0)
    rows = []
    for run in runs:
        for framework, variant in arms:
            values = arms[(framework, variant)] * np.exp(rng.normal(0, 0.02, rounds))
            rows.append(
                {
                    "run_id": run,
                    "model": "m",
                    "device": "cpu",
                    "device_name": "cpu X",
                    "precision": "fp32",
                    "threads": 2,
                    "batch_size": 1,
                    "framework": framework,
                    "variant": variant,
                    "median": float(np.median(values)),
                    "samples": list(values),
                    "trials": list(range(1, rounds + 1)),
                    "shared": [False] * rounds,
                    "sample_source": "trials",
                }
            )
    return pd.DataFrame(rows)


def test_a_verdict_never_picks_a_mode_on_the_rounds_it_judges():
    # PyTorch measured in two modes, no tuned arm: the faster one is picked on these rounds,
    # so the clear 2x gap is reported without a verdict (the old rule called PyTorch faster)
    samples = _samples(
        {("jax", "jit"): 100.0, ("torch", "eager"): 150.0, ("torch", "compile"): 200.0}
    )
    matrix = tables.comparison_matrix(samples)
    best = matrix[matrix.comparison == "best"].iloc[0]
    assert best.torch_variant == "compile"
    assert best.winner == verdicts.PICKED_ON_ROUNDS
    # the defaults comparison picks nothing and keeps its verdict
    defaults = matrix[matrix.comparison == "defaults"].iloc[0]
    assert defaults.winner == "torch"


def test_a_tuned_arm_is_the_best_arm_even_where_another_mode_ran_faster():
    samples = _samples(
        {("jax", "jit-tuned"): 100.0, ("jax", "jit"): 140.0, ("torch", "tuned"): 200.0}
    )
    matrix = tables.comparison_matrix(samples)
    best = matrix[matrix.comparison == "best"].iloc[0]
    assert (best.jax_variant, best.torch_variant) == ("jit-tuned", "tuned")
    assert best.winner == "torch"


def test_a_relative_selection_file_is_found_from_a_kernels_folder(tmp_path, monkeypatch):
    # a campaign names params/best_modes.json from the repository; its kernels run in notebooks/
    selection = best_modes.select(_meas([("torch", "eager", {}, 5.0)]), campaign="c", run_id="r")
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "best.json").write_text(json.dumps(selection))
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    assert best_modes.read("params/best.json")["picks"] == selection["picks"]
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        best_modes.read("params/nowhere.json")


class _Analysis:
    """What the expert section reads of an analysis: this run's throughput samples."""

    def __init__(self, samples):
        self.samples, self.computed = samples, {}

    def once(self, make):
        return self.computed.setdefault(make, make(self))


def test_the_expert_section_sets_the_expert_form_against_stock_and_pytorch():
    from fwbench.families.inference import inference_tuning

    arms = {("jax", "jit"): 10.0, ("jax", "jit-expert"): 60.0, ("torch", "tuned"): 50.0}
    pairs = inference_tuning.expert_pairs(_Analysis(_samples(arms, runs=("r1",))))
    ratios = dict(zip(pairs.comparison, pairs.ratio, strict=True))
    assert ratios[inference_tuning.EXPERT_OVER_STOCK] == pytest.approx(6.0, rel=0.05)
    assert ratios[inference_tuning.EXPERT_OVER_TORCH] == pytest.approx(1.2, rel=0.05)
    assert set(pairs.a_variant) == {"jit", "tuned"}
