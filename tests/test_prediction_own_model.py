"""A model of one's own in `fwbench predict` and `fwbench recommend`, end to end: declared as
`examples/my_model/` declares it, named with `--campaign`, answered from an index these tests
write; the refusal of an unknown model advises what works, and `FWBENCH_MODELS` still does."""

import json

import numpy as np
import pytest

from fwbench.families.prediction import dataset
from fwbench.measure.device import cpu_device_name
from fwbench.models import declared
from fwbench.results import db as fw_db
from tests.conftest import REPO, run_cli
from tests.test_prediction_dataset import CPU, IMAGE, _insert, write_index

EXAMPLE = REPO / "examples" / "my_model"
CAMPAIGN = EXAMPLE / "campaign.yaml"
# TinyCNN at batch 4 and the example's image size, three clean trials (images/s)
TINY_IMG_S = [400.0, 420.0, 410.0]


def _own_index(path, device_name=CPU, threads=2):
    """``write_index``'s rows, TinyCNN measured by PyTorch eager, and two models through torchax
    (so that the training table has JAX's torchax setting)."""
    write_index(path, device_name=device_name, threads=threads)
    con = fw_db.connect(path)
    where = dict(device_name=device_name, threads=threads)
    for trial, value in enumerate(TINY_IMG_S, start=1):
        _insert(con, model="tinycnn", framework="torch", batch=4, trial=trial, value=value, **where)
        for model, img_s in (("resnet18", 4.0), ("mobilenet_v3_small", 30.0)):
            _insert(
                con, model=model, framework="jax", mode="torchax", batch=1, trial=trial,
                value=img_s + trial, **where,
            )  # fmt: skip
    con.close()


def _cli(command, tmp_path, *args, env=None):
    where = ["--db", tmp_path / "i.duckdb", "--out", tmp_path / "executed"]
    return run_cli(command, *where, *args, env=env)


def test_predict_and_recommend_answer_for_a_model_a_campaign_declares(tmp_path):
    name = cpu_device_name()
    if not dataset.identified("cpu", name):
        pytest.skip(f"this CPU ({name}) reports no family and model")
    _own_index(tmp_path / "i.duckdb", device_name=name, threads=1)
    asked = ["--model", "tinycnn", "--framework", "torch", "--batch-size", "4", "--threads", "1"]
    asked += ["--image-size", str(IMAGE), "--campaign", CAMPAIGN]
    done = _cli("predict", tmp_path, *asked, "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["throughput_img_s"] > 0 and answer["model_seen"]
    assert answer["measured"] == pytest.approx(np.median(TINY_IMG_S))
    # its twin gives it a JAX side of its own
    on_jax = [a if a != "torch" else "jax" for a in asked]
    jax = _cli("predict", tmp_path, *on_jax)
    assert jax.returncode == 0, jax.stderr
    assert "tinycnn · jax jit" in jax.stdout and "img/s" in jax.stdout
    ranked = _cli(
        "recommend", tmp_path, "--model", "tinycnn", "--campaign", CAMPAIGN,
        "--image-size", str(IMAGE), "--batch-size", "4", "--json",
    )  # fmt: skip
    assert ranked.returncode == 0, ranked.stderr
    rows = json.loads(ranked.stdout)
    settings = {(r["framework"], r["mode"]) for r in rows}
    assert {("torch", "eager"), ("jax", "jit"), ("jax", "torchax")} <= settings
    measured = [r for r in rows if r["source"] == "measured"]
    assert [(r["framework"], r["mode"]) for r in measured] == [("torch", "eager")]


def _twinless_campaign(tmp_path):
    """The example's PyTorch model declared without its twin, as a campaign of the user's."""
    campaign = tmp_path / "mine.yaml"
    campaign.write_text(
        "campaign: mine\nmodels:\n"
        f"  plaincnn: {{torch: 'my_model.torch_side:build', path: '{EXAMPLE}', image_size: 32,"
        " lineage: plain}\n"
        "steps:\n  - notebook: 10_inference\n    params: {model: plaincnn}\n"
    )
    return campaign


def test_recommend_offers_torchax_for_a_declared_model_without_a_twin(tmp_path):
    _own_index(tmp_path / "i.duckdb")
    asked = ["--model", "plaincnn", "--campaign", _twinless_campaign(tmp_path)]
    asked += ["--image-size", str(IMAGE), "--batch-size", "1", "--device", CPU, "--json"]
    done = _cli("recommend", tmp_path, *asked)
    assert done.returncode == 0, done.stderr
    settings = {(r["framework"], r["mode"]) for r in json.loads(done.stdout)}
    assert settings == {("torch", "eager"), ("jax", "torchax")}


def test_an_unknown_model_is_refused_with_advice_that_works(tmp_path):
    asked = ["--framework", "torch", "--batch-size", "4"]
    done = _cli("predict", tmp_path, "--model", "tinycnn", *asked)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "unknown model 'tinycnn'" in line and "--campaign FILE" in line
    # a campaign that declares other models says which
    other = _twinless_campaign(tmp_path)
    done = _cli("recommend", tmp_path, "--model", "tinycnn", "--campaign", other)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert f"{other} declares plaincnn under 'models:'" in line
    # a campaign file that is not there, or whose declaration does not import: one line each
    missing = _cli("predict", tmp_path, "--model", "tinycnn", *asked, "--campaign", "nowhere.yaml")
    assert missing.returncode == 2 and "campaign file not found" in missing.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("campaign: b\nmodels:\n  mynet: {torch: 'no_such_module:build'}\nsteps: []\n")
    done = _cli("predict", tmp_path, "--model", "mynet", *asked, "--campaign", broken)
    assert done.returncode == 2 and "cannot import 'no_such_module'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "i.duckdb").exists() and not (tmp_path / "executed").exists()


def test_help_names_the_campaign_and_fwbench_models_still_works(tmp_path):
    for command in ("predict", "recommend"):
        shown = " ".join(run_cli(command, "--help").stdout.split())
        assert "--campaign FILE" in shown and "'models:'" in shown and "FWBENCH_MODELS" in shown
    _own_index(tmp_path / "i.duckdb")
    found = declared.parse("tinycnn", {"torch": "my_model.torch_side:build", "path": str(EXAMPLE)})
    env = declared.to_environment({"tinycnn": found})
    asked = ["--model", "tinycnn", "--image-size", str(IMAGE), "--batch-size", "4"]
    done = _cli("recommend", tmp_path, *asked, "--device", CPU, "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert {r["source"] for r in json.loads(done.stdout)} >= {"measured"}
