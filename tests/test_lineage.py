"""Lineages (models/lineage) and the frozen test set's draw (families/prediction/frozen).

A hold-out that leaves a lineage out must not train on a sibling of it, and the frozen test set
must be drawn by a rule anyone can repeat, with a lineage the training table lacks.
"""

import json

import pytest
import torchvision

from fwbench.families.prediction import frozen
from fwbench.models import hf_models
from fwbench.models.lineage import LINEAGES, lineage
from tests.conftest import REPO


def test_every_model_the_registry_can_build_has_a_known_lineage():
    names = torchvision.models.list_models(module=torchvision.models) + list(hf_models.MODELS)
    unknown = [name for name in names if lineage(name) not in LINEAGES]
    assert not unknown, unknown


@pytest.mark.parametrize(
    ("siblings", "expected"),
    [
        (["resnet50", "resnext50_32x4d", "wide_resnet50_2"], "resnet"),
        (["mobilenet_v3_small", "mnasnet0_5", "efficientnet_b0", "efficientnet_v2_s"], "mbconv"),
        (["vit_b_16", "swin_t", "maxvit_t", "hf_vit_base"], "vision transformer"),
        (["vgg11", "alexnet"], "vgg/alexnet"),
        (["googlenet", "inception_v3"], "inception"),
        # a hybrid of convolution and attention is not filed under either by a prefix
        (["hf_mobilevit_small"], "mobilevit"),
        (["hf_levit_128s"], "levit"),
    ],
)
def test_siblings_share_a_lineage(siblings, expected):
    assert {lineage(name) for name in siblings} == {expected}


def test_a_declared_model_is_its_own_lineage_unless_it_names_one():
    assert lineage("tinycnn") == "tinycnn"
    assert lineage("tinycnn", declared="resnet") == "resnet"


PROBE = """from torch import nn


def build(num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, num_classes))
"""


def test_a_declaration_names_its_lineage_and_a_name_prefix_never_files_it(tmp_path):
    import pandas as pd

    from fwbench.families.prediction import predictor
    from fwbench.models import declared, registry

    (tmp_path / "lineage_probe.py").write_text(PROBE)
    probe = {"torch": "lineage_probe:build", "path": ".", "image_size": 8}
    # a user's "resnet_mine" shares a prefix with torchvision's ResNets, not their blocks
    registry.declare(declared.parse("resnet_mine", probe, base=tmp_path))
    assert lineage("resnet_mine") == "resnet_mine"
    named = declared.parse("resnet_mine_too", {**probe, "lineage": "vgg/alexnet"}, base=tmp_path)
    assert named.lineage == "vgg/alexnet"
    registry.declare(named)
    assert lineage("resnet_mine_too") == "vgg/alexnet"
    # the kernels of a campaign get the key with the rest of the declaration
    carried = declared.from_environment(declared.to_environment({named.name: named}))
    assert carried[named.name].lineage == "vgg/alexnet"
    # the lineage hold-out leaves the declared model out with the lineage it names
    frame = pd.DataFrame({"model": ["resnet18", "resnet_mine", "resnet_mine_too", "vgg11"]})
    folds = predictor.holdout_splits(frame, "lineage")
    held = {name: set(frame.model[test]) for name, _, test in folds}
    assert held["resnet"] == {"resnet18"} and held["resnet_mine"] == {"resnet_mine"}
    assert held["vgg/alexnet"] == {"resnet_mine_too", "vgg11"}
    with pytest.raises(declared.DeclarationError, match="'lineage' must be a name"):
        declared.parse("resnet_mine", {**probe, "lineage": ""}, base=tmp_path)


CANDIDATES = ["vgg13", "vgg16", "resnext101_32x8d", "wide_resnet101_2", "densenet161"]
CANDIDATES += ["regnet_y_8gf", "regnet_x_3_2gf", "efficientnet_b4", "mnasnet0_75", "swin_s"]


def test_the_draw_spreads_over_lineages_and_starts_with_an_unseen_one():
    seen = ["resnet", "mbconv", "regnet", "densenet", "vision transformer"]
    found = frozen.draw(CANDIDATES, seen, size=6, seed=1)
    assert len(found.models) == len(set(found.models)) == 6
    assert lineage(found.models[0]) == "vgg/alexnet"  # the one lineage training lacks
    assert len({lineage(m) for m in found.models}) == 6
    again = frozen.draw(CANDIDATES, seen, size=6, seed=1)
    assert again == found
    assert frozen.draw(CANDIDATES, seen, size=6, seed=2).models != found.models


def test_a_draw_can_lead_with_two_unseen_lineages_and_hold_models_with_a_twin():
    seen = ["resnet", "mbconv", "regnet", "densenet"]
    twins = ["resnext101_32x8d", "wide_resnet101_2"]
    plain = frozen.draw(CANDIDATES, seen, size=6, seed=1)
    found = frozen.draw(CANDIDATES, seen, size=6, seed=1, unseen_first=2, twins=twins, min_twins=2)
    assert len(found.models) == len(set(found.models)) == 6
    # the two lineages the training table lacks lead, one model each
    assert {lineage(m) for m in found.models[:2]} == {"vgg/alexnet", "vision transformer"}
    assert set(twins) <= set(found.models)
    assert not set(twins) <= set(plain.models)  # the rule, not the seed, put both twins in
    assert frozen.draw(CANDIDATES, seen, 6, 1, 2, twins, 2) == found
    with pytest.raises(ValueError, match="2 candidate lineages are unseen, 3 asked for"):
        frozen.draw(CANDIDATES, seen, size=6, seed=1, unseen_first=3)
    with pytest.raises(ValueError, match="2 candidates have a twin, 3 asked for"):
        frozen.draw(CANDIDATES, seen, size=6, seed=1, twins=twins, min_twins=3)


def test_the_draw_refuses_a_set_that_tests_no_transfer_or_cannot_be_filled():
    with pytest.raises(ValueError, match="none tests transfer"):
        frozen.draw(["resnet101"], ["resnet"], size=1, seed=0)
    with pytest.raises(ValueError, match="2 candidates for a set of 3"):
        frozen.draw(["vgg13", "vgg16"], [], size=3, seed=0)
    assert frozen.candidates(["vgg13", "resnet50"], ["resnet50"]) == ["vgg13"]


def test_a_recorded_draw_is_made_again_from_its_inputs(tmp_path):
    found = frozen.draw(CANDIDATES, ["resnet"], size=5, seed=7)
    path = tmp_path / "draw.json"
    path.write_text(found.to_json())
    assert frozen.redraw(path) == found
    assert json.loads(path.read_text())["models"] == found.models
    twins = frozen.draw(CANDIDATES, ["resnet"], 5, 7, 2, ["vgg13", "swin_s"], 2)
    path.write_text(twins.to_json())
    assert frozen.redraw(path) == twins
    # a record from before the two rules names neither and is drawn again as it was
    old = {
        k: v
        for k, v in json.loads(found.to_json()).items()
        if k not in ("unseen_first", "twins", "min_twins")
    }
    path.write_text(json.dumps(old))
    assert frozen.redraw(path) == found


def test_the_committed_frozen_set_is_the_recorded_draw_and_in_no_hold_out():
    campaign = REPO / "params" / f"{frozen.CAMPAIGN}.yaml"
    if not campaign.is_file():
        pytest.skip("no frozen test set is committed")
    recorded = frozen.redraw(campaign.with_suffix(".draw.json"))
    assert sorted(frozen.campaign_models(campaign)) == sorted(recorded.models)
    assert len({lineage(m) for m in recorded.models}) >= 4
    assert set(recorded.models) & set(recorded.candidates) == set(recorded.models)


def test_freeze_test_writes_the_campaign_and_its_draw_and_never_replaces_them(
    tmp_path, monkeypatch
):
    from fwbench import cli
    from fwbench.commands import freeze_test_cmd
    from tests.test_prediction_dataset import write_index

    write_index(tmp_path / "i.duckdb")  # measures resnet18, mobilenet_v3_small, squeezenet1_1
    buildable = ["resnet18", "resnet34", "vgg13", "vgg16", "densenet161", "mnasnet0_75"]
    buildable += ["regnet_x_3_2gf", "vit_b_32", "googlenet", "hf_poolformer_s12"]
    monkeypatch.setattr(freeze_test_cmd, "buildable_models", lambda: buildable)
    out = tmp_path / "params" / "frozen_test.yaml"
    args = ["freeze-test", "--size", "6", "--seed", "3", "--db", str(tmp_path / "i.duckdb")]
    assert cli.main([*args, "--out", str(out)]) == 0

    models = frozen.campaign_models(out)
    assert len(models) == 6 and "resnet18" not in models
    recorded = frozen.redraw(out.with_suffix(".draw.json"))
    assert recorded.models == models
    assert recorded.trained_lineages == ["mbconv", "resnet", "shufflenet/squeezenet"]
    assert lineage(models[0]) not in recorded.trained_lineages
    from fwbench.models import registry
    from fwbench.pipeline.campaign import load_campaign

    twins = [m for m in models if registry.get_spec(m).has_twin]
    assert twins  # resnet34 or vit_b_32 drawn: the JAX twins' steps are written
    # PyTorch eager and compile and torchax for all six, JAX jit and jit-expert for the twins
    cells = load_campaign(out).cells
    assert len(cells) == (6 * 3 + 2 * len(twins)) * 3  # three trials each
    assert {c.parameters["model"] for c in cells if c.parameters["mode"] == "jit"} == set(twins)

    written = out.read_bytes()
    assert cli.main([*args, "--out", str(out)]) == 2  # never replaced
    assert out.read_bytes() == written
