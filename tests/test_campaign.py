import pytest

from fwbench.pipeline.campaign import CampaignError, load_campaign
from fwbench.pipeline.cell_checks import preload_found
from fwbench.pipeline.notebook_params import read_parameters
from tests.conftest import REPO, STANDIN, run_cli


def test_grid_expands_to_named_cells(write_campaign):
    path = write_campaign(
        """
campaign: demo
steps:
  - notebook: STANDIN
    params: {label: b}
    grid: {x: [1, 2, 3], behaviour: [ok, raise]}
"""
    )
    campaign = load_campaign(path)
    assert len(campaign.cells) == 6
    slugs = {c.slug for c in campaign.cells}
    assert "behaviour=ok__x=1" in slugs and "behaviour=raise__x=3" in slugs
    assert all(c.parameters["label"] == "b" for c in campaign.cells)


def test_trials_and_step_params_that_differ_enter_the_slug(write_campaign):
    path = write_campaign(
        """
campaign: demo
steps:
  - notebook: STANDIN
    params: {label: a}
    trials: 2
  - notebook: STANDIN
    params: {label: b}
"""
    )
    keys = [c.key for c in load_campaign(path).cells]
    assert keys == ["standin/label=a__trial=1", "standin/label=a__trial=2", "standin/label=b"]


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "campaign: demo\nsteps:\n  - notebook: STANDIN\n    params: {nope: 1}\n",
            "no parameter 'nope'",
        ),
        ("campaign: demo\nsteps:\n  - notebook: STANDIN\n    params: {x: fast}\n", "expected int"),
        (
            "campaign: demo\nsteps:\n  - notebook: STANDIN\n    grid: {behaviour: [ok, explode]}\n",
            "explode",
        ),
        ("campaign: demo\nsteps:\n  - notebook: STANDIN\n    grid: {x: 1}\n", "non-empty list"),
        ("campaign: demo\nsteps: [\n", "malformed YAML"),
        ("campaign: demo\nsteps:\n  - notebook: missing_notebook\n", "not found"),
        ("campaign: demo\nsteps:\n  - notebook: STANDIN\n    bogus: 1\n", "unknown step keys"),
        ("campaign: 'a b'\nsteps:\n  - notebook: STANDIN\n", "'campaign' must be a name"),
        (
            "campaign: demo\nsteps:\n  - notebook: STANDIN\n"
            "    kernel_env: {LD_PRELOAD: libfwbench-nowhere.so.9}\n",
            "preloads libfwbench-nowhere.so.9, which this machine's dynamic linker does not find",
        ),
        ("campaign: demo\nsteps:\n  - notebook: STANDIN\n    kernel_env: [a]\n", "a mapping"),
    ],
)
def test_bad_input_is_refused_with_one_message(write_campaign, text, message):
    with pytest.raises(CampaignError, match=message):
        load_campaign(write_campaign(text))


@pytest.mark.parametrize(
    "notebook, params, message",
    [
        ("10_inference", "{framework: jax, mode: compile}", "not a jax mode"),
        ("11_training", "{framework: torch, mode: jit}", "not a torch training mode"),
        ("11_training", "{framework: jax, mode: eager}", "not a jax training mode"),
    ],
)
def test_a_mode_the_framework_lacks_is_refused_before_running(
    write_campaign, notebook, params, message
):
    text = (
        f"campaign: demo\nsteps:\n  - notebook: {REPO}/notebooks/{notebook}\n    params: {params}\n"
    )
    with pytest.raises(CampaignError, match=message):
        load_campaign(write_campaign(text))


@pytest.mark.parametrize("value", ["[1.0, 0.0]", "[-2.0]", "[]"])
def test_a_parameter_marked_above_zero_refuses_zero_negative_and_empty(write_campaign, value):
    text = (
        f"campaign: demo\nsteps:\n  - notebook: {REPO}/notebooks/14_web_audio\n"
        f"    params: {{audio_seconds: {value}}}\n"
    )
    with pytest.raises(CampaignError, match="audio_seconds.*must be above 0"):
        load_campaign(write_campaign(text))


def test_the_above_zero_marker_is_read_from_the_comment(tmp_path):
    nb = tmp_path / "marked.py"
    nb.write_text(
        '# %% tags=["parameters"]\nsizes = [1, 2]  # > 0: batch sizes\n'
        "other = 0  # counts from 0; not marked\n\n# %%\nprint(sizes)\n"
    )
    declared = read_parameters(nb)
    assert declared["sizes"].positive and not declared["other"].positive
    assert declared["sizes"].check([3]) is None
    assert "above 0" in declared["sizes"].check([3, 0])
    assert declared["other"].check(0) is None


def test_unknown_model_is_refused_by_the_registry(write_campaign, tmp_path):
    nb = tmp_path / "with_model.py"
    nb.write_text('# %% tags=["parameters"]\nmodel = "resnet50"\n\n# %%\nprint(model)\n')
    path = write_campaign(
        f"campaign: demo\nsteps:\n  - notebook: {nb.with_suffix('')}\n    grid: {{model: [resnet50, resnet51]}}\n"
    )
    with pytest.raises(CampaignError, match="resnet51"):
        load_campaign(path)


def test_a_timer_check_model_is_checked_against_the_registry_too(write_campaign):
    text = (
        f"campaign: demo\nsteps:\n  - notebook: {REPO}/notebooks/02_calibrate\n"
        "    params: {timer_check_model: resnet51}\n"
    )
    with pytest.raises(CampaignError, match="resnet51"):
        load_campaign(write_campaign(text))


def test_cli_bad_input_exits_2_and_writes_nothing(write_campaign, tmp_path):
    out = tmp_path / "out"
    path = write_campaign("campaign: demo\nsteps:\n  - notebook: STANDIN\n    params: {nope: 1}\n")
    proc = run_cli("run", path, "--out", out)
    assert proc.returncode == 2
    assert "no parameter 'nope'" in proc.stderr
    assert proc.stderr.count("error:") == 1
    assert not out.exists()


def test_parameters_cell_is_read_with_choices():
    declared = read_parameters(STANDIN.with_suffix(".py"))
    assert declared["x"].default == 1
    assert declared["behaviour"].choices == (
        "ok",
        "raise",
        "abort",
        "sleep",
        "abort_unless_env",
        "sleep_unless_env",
        "time",
    )
    assert declared["behaviour"].check("abort") is None
    assert "expected one of" in declared["behaviour"].check("boom")


def test_shipped_campaigns_validate():
    for path in sorted((REPO / "params").glob("*.yaml")):
        try:
            campaign = load_campaign(path)
        except CampaignError as exc:
            # a campaign that preloads an allocator refuses a machine without it, and says so
            if "dynamic linker does not find" in str(exc) and not preload_found("libjemalloc.so.2"):
                continue
            raise
        assert campaign.cells, path


def test_kernel_env_reaches_every_cell_and_a_linker_cache_name_is_accepted(write_campaign):
    campaign = load_campaign(
        write_campaign(
            "campaign: demo\nsteps:\n  - notebook: STANDIN\n    trials: 2\n"
            "    kernel_env: {LD_PRELOAD: libc.so.6, MALLOC_CONF: 'dirty_decay_ms:-1'}\n"
        )
    )
    assert [c.kernel_env for c in campaign.cells] == [
        {"LD_PRELOAD": "libc.so.6", "MALLOC_CONF": "dirty_decay_ms:-1"}
    ] * 2


def test_when_env_skips_a_step_unless_its_variable_is_set(write_campaign, tmp_path, monkeypatch):
    folder = tmp_path / "shards"
    folder.mkdir()
    nb = tmp_path / "with_path.py"
    nb.write_text('# %% tags=["parameters"]\ndata_path = ""\n\n# %%\nprint(data_path)\n')
    text = f"""
campaign: demo
steps:
  - notebook: STANDIN
  - notebook: {nb.with_suffix("")}
    when_env: FWBENCH_TEST_DIR
    params: {{data_path: "${{FWBENCH_TEST_DIR}}"}}
"""
    monkeypatch.delenv("FWBENCH_TEST_DIR", raising=False)
    campaign = load_campaign(write_campaign(text))
    assert [c.notebook for c in campaign.cells] == ["standin"]
    assert "FWBENCH_TEST_DIR is not set" in campaign.skipped[0]

    monkeypatch.setenv("FWBENCH_TEST_DIR", str(folder))
    campaign = load_campaign(write_campaign(text))
    assert campaign.cells[1].parameters == {"data_path": str(folder)}
    assert not campaign.skipped

    monkeypatch.setenv("FWBENCH_TEST_DIR", str(tmp_path / "missing"))
    with pytest.raises(CampaignError, match="missing does not exist"):
        load_campaign(write_campaign(text))


def test_an_unguarded_variable_must_be_set(write_campaign, monkeypatch):
    monkeypatch.delenv("FWBENCH_TEST_LABEL", raising=False)
    text = "campaign: demo\nsteps:\n  - notebook: STANDIN\n    params: {label: '${FWBENCH_TEST_LABEL}'}\n"
    with pytest.raises(CampaignError, match="FWBENCH_TEST_LABEL is not set"):
        load_campaign(write_campaign(text))


def test_a_torchvision_model_without_a_twin_runs_on_torch_only(write_campaign):
    step = f"campaign: demo\nsteps:\n  - notebook: {REPO}/notebooks/10_inference\n"
    cells = load_campaign(write_campaign(step + "    params: {framework: torch, model: swin_t}\n"))
    assert [c.parameters["model"] for c in cells.cells] == ["swin_t"]
    with pytest.raises(CampaignError, match="swin_t has no Flax twin.*resnet50"):
        load_campaign(write_campaign(step + "    params: {framework: jax, model: swin_t}\n"))
    validation = f"campaign: demo\nsteps:\n  - notebook: {REPO}/notebooks/01_validation\n"
    with pytest.raises(CampaignError, match="swin_t has no Flax twin"):
        load_campaign(write_campaign(validation + "    params: {model: swin_t}\n"))
