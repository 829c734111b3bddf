"""Interleaved trials (campaign order, runner rounds, resume) and the paired-ratio interval."""

import json
import os
import signal
import subprocess
import sys
import time

import duckdb
import numpy as np
import pytest

from fwbench.measure.stats import (
    DEFAULT_PAIRED_METHOD,
    aa_false_winner_rate,
    paired_ratio_interval,
)
from fwbench.pipeline.campaign import CampaignError, load_campaign, relay_groups
from tests.conftest import REPO, run_cli

# A setup cell without trials, then two arms in separate steps (as PyTorch and JAX are), one with
# a grid of two cells: three trialled cells per round.
TWO_ARMS = """
campaign: arms
order: interleaved
seed: SEED
steps:
  - notebook: STANDIN
    params: {label: setup}
  - notebook: STANDIN
    params: {label: torch}
    grid: {x: [1, 2]}
    trials: TRIALS
  - notebook: STANDIN
    params: {label: jax}
    trials: TRIALS
"""

ARMS = ["standin/label=torch__x=1", "standin/label=torch__x=2", "standin/label=jax"]


def arms_campaign(write_campaign, seed=0, trials=3):
    text = TWO_ARMS.replace("SEED", str(seed)).replace("TRIALS", str(trials))
    return write_campaign(text)


def test_every_round_holds_every_trialled_cell_once_and_rounds_run_in_order(write_campaign):
    campaign = load_campaign(arms_campaign(write_campaign))
    order = campaign.run_order()
    assert order.order == "interleaved"
    assert order.before_rounds == ["standin/label=setup"]
    assert len(order.rounds) == 3
    for trial, keys in enumerate(order.rounds, start=1):
        # both steps' cells of one trial share a round: the arms pair by round
        assert sorted(keys) == sorted(f"{arm}__trial={trial}" for arm in ARMS)
    assert sorted(order.keys) == sorted(c.key for c in campaign.cells)
    assert len(order.keys) == len(set(order.keys))


def test_the_shuffle_is_seeded(write_campaign):
    def rounds(seed):
        return load_campaign(arms_campaign(write_campaign, seed=seed, trials=4)).run_order().rounds

    assert rounds(3) == rounds(3)
    by_seed = [rounds(seed) for seed in range(6)]
    assert any(a != b for a, b in zip(by_seed, by_seed[1:], strict=False))
    # the rounds are drawn, not left in file order
    positions = {tuple(k.split("__trial=")[0] for k in r) for rs in by_seed for r in rs}
    assert len(positions) > 1


def test_sequential_is_the_default_and_keeps_file_order(write_campaign):
    text = TWO_ARMS.replace("order: interleaved\n", "").replace("SEED", "0")
    campaign = load_campaign(write_campaign(text.replace("TRIALS", "2")))
    order = campaign.run_order()
    assert order.order == "sequential" and order.rounds == []
    assert order.keys == [c.key for c in campaign.cells]
    assert order.keys[:3] == [
        "standin/label=setup",
        "standin/label=torch__x=1__trial=1",
        "standin/label=torch__x=1__trial=2",
    ]


def test_a_step_order_overrides_the_campaign_default(write_campaign):
    text = """
campaign: mixed
steps:
  - notebook: STANDIN
    params: {label: a}
    trials: 2
  - notebook: STANDIN
    params: {label: b}
    trials: 2
    order: interleaved
  - notebook: STANDIN
    params: {label: c}
    trials: 2
    order: interleaved
"""
    order = load_campaign(write_campaign(text)).run_order()
    assert order.before_rounds == ["standin/label=a__trial=1", "standin/label=a__trial=2"]
    assert [sorted(r) for r in order.rounds] == [
        ["standin/label=b__trial=1", "standin/label=c__trial=1"],
        ["standin/label=b__trial=2", "standin/label=c__trial=2"],
    ]
    opted_out = load_campaign(
        write_campaign(
            "order: interleaved\n" + text.replace("order: interleaved", "order: sequential")
        )
    ).run_order()
    # now step a takes the campaign's interleaved default and b, c opt out of it
    assert opted_out.rounds == [["standin/label=a__trial=1"], ["standin/label=a__trial=2"]]
    assert opted_out.before_rounds == [
        f"standin/label={label}__trial={t}" for label in "bc" for t in (1, 2)
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "campaign: d\norder: random\nsteps:\n  - notebook: STANDIN\n",
            "'order' must be one of sequential, interleaved",
        ),
        (
            "campaign: d\nsteps:\n  - notebook: STANDIN\n    trials: 2\n    order: [interleaved]\n",
            "step 1: 'order' must be one of",
        ),
        ("campaign: d\nseed: -1\nsteps:\n  - notebook: STANDIN\n", "'seed' must be"),
        ("campaign: d\nseed: abc\nsteps:\n  - notebook: STANDIN\n", "'seed' must be"),
    ],
)
def test_a_bad_order_or_seed_is_refused(write_campaign, text, message):
    with pytest.raises(CampaignError, match=message):
        load_campaign(write_campaign(text))


def test_the_cli_refuses_a_bad_order_with_exit_2_before_anything_runs(write_campaign, tmp_path):
    path = write_campaign("campaign: d\nsteps:\n  - notebook: STANDIN\n    order: shuffled\n")
    out = tmp_path / "out"
    proc = run_cli("run", path, "--out", out)
    assert proc.returncode == 2
    assert proc.stderr.count("error:") == 1
    assert "'order' must be one of sequential, interleaved" in proc.stderr
    assert not out.exists()


def _visible_notebooks(run_dir):
    return {f"{p.parent.name}/{p.stem}": p for p in run_dir.glob("*/[!.]*.ipynb")}


def _recorded_ok(run_dir):
    path = run_dir / "manifest.json"
    if not path.is_file():
        return 0
    cells = json.loads(path.read_text())["cells"].values()
    return sum(c["status"] == "ok" for c in cells)


def test_a_killed_interleaved_run_resumes_at_trial_granularity_in_its_recorded_order(
    write_campaign, tmp_path
):
    """Kill the runner mid-round, change the seed, resume: the finished trials stay untouched and
    the rest run in the order recorded at the start, not in a new draw."""
    out = tmp_path / "out"
    path = arms_campaign(write_campaign, seed=0, trials=2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fwbench", "run", str(path), "--out", str(out)],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        run_dirs = []
        while time.time() < deadline:
            run_dirs = [p for p in (out / "arms").glob("*") if p.is_dir()]
            # the manifest, written atomically after each notebook, is what resume reads; a
            # notebook on disk whose result is not yet recorded would count as unfinished
            if run_dirs and _recorded_ok(run_dirs[0]) >= 3:
                break
            assert proc.poll() is None, "the runner ended before it could be stopped"
            time.sleep(0.05)
        else:
            raise AssertionError("the runner did not finish three trials in time")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    (run_dir,) = run_dirs
    manifest = json.loads((run_dir / "manifest.json").read_text())
    recorded = manifest["run_order"]
    assert recorded["order"] == "interleaved" and recorded["seed"] == 0
    assert recorded == load_campaign(path).run_order().as_dict()
    order = recorded["before_rounds"] + [k for r in recorded["rounds"] for k in r]
    finished = [k for k in order if manifest["cells"][k]["status"] == "ok"]
    assert 3 <= len(finished) < len(order)
    assert finished == order[: len(finished)]  # stopped after a prefix of the recorded order
    mtimes = {k: p.stat().st_mtime_ns for k, p in _visible_notebooks(run_dir).items()}

    # a different seed would draw the remaining trials in another order; the resumed run must
    # not use it (seeds 0 and 4 differ there wherever the run is stopped before its last cell)
    path.write_text(path.read_text().replace("seed: 0", "seed: 4"))
    remaining = order[len(finished) :]
    redrawn = load_campaign(path).run_order().keys
    assert [k for k in redrawn if k in remaining] != remaining
    resumed = run_cli("run", path, "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert [p for p in (out / "arms").glob("*") if p.is_dir()] == [run_dir]

    notebooks = _visible_notebooks(run_dir)
    assert sorted(notebooks) == sorted(order)
    assert all(notebooks[k].stat().st_mtime_ns == mtimes[k] for k in finished)
    by_time = sorted(notebooks, key=lambda k: notebooks[k].stat().st_mtime_ns)
    assert by_time == order
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["run_order"] == recorded
    assert {c["status"] for c in manifest["cells"].values()} == {"ok"}

    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    rows = con.execute("select cell, trial, threads from measurements order by cell").fetchall()
    assert {(cell, trial) for cell, trial, _ in rows} == {
        (k.split("/")[1], int(k.rsplit("=", 1)[1]) if "trial=" in k else 0) for k in order
    }
    assert all(threads is not None and threads >= 1 for _, _, threads in rows)


# ---- duet: both arms at once, one core and one thread each ----

DUET = """
campaign: duo
order: duet
seed: SEED
steps:
  - notebook: STANDIN
    params: {label: setup}
  - notebook: STANDIN
    params: {label: torch}
    grid: {x: [1, 2]}
    trials: 2
  - notebook: STANDIN
    params: {label: jax}
    grid: {x: [1, 2]}
    trials: 2
"""


def test_a_duet_round_pairs_the_arms_of_each_grid_point(write_campaign):
    order = load_campaign(write_campaign(DUET.replace("SEED", "3"))).run_order()
    assert order.order == "duet" and order.before_rounds == ["standin/label=setup"]
    for trial, keys in enumerate(order.rounds, start=1):
        pairs = [keys[i : i + 2] for i in range(0, len(keys), 2)]
        assert len(pairs) == 2
        for pair in pairs:
            # one cell of each arm, at the same grid point and trial
            assert sorted(k.split("__")[0] for k in pair) == [
                "standin/label=jax",
                "standin/label=torch",
            ]
            assert len({k.split("__", 1)[1] for k in pair}) == 1
            assert all(k.endswith(f"trial={trial}") for k in pair)


@pytest.mark.parametrize(
    "steps, message",
    [
        (
            "  - notebook: STANDIN\n    trials: 2\n",
            "needs exactly two steps with trials > 1, found 1",
        ),
        (
            "  - notebook: STANDIN\n    params: {label: a}\n    trials: 2\n"
            "  - notebook: STANDIN\n    params: {label: b}\n    trials: 3\n",
            "must have the same 'trials' and the same 'grid'",
        ),
        (
            "  - notebook: STANDIN\n    params: {label: a}\n    trials: 2\n    order: duet\n",
            "step 1: 'order' must be one of sequential, interleaved",
        ),
    ],
)
def test_a_duet_that_cannot_pair_its_arms_is_refused(write_campaign, steps, message):
    with pytest.raises(CampaignError, match=message):
        load_campaign(write_campaign(f"campaign: d\norder: duet\nsteps:\n{steps}"))


def test_a_duet_runs_each_pair_pinned_to_two_cores_with_one_thread(write_campaign, tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a duet needs two cores")
    out = tmp_path / "out"
    proc = run_cli("run", write_campaign(DUET.replace("SEED", "0")), "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    rows = con.execute("select cell, extra from measurements where metric = 'double_x'").fetchall()
    con.close()
    (run_dir,) = (out / "duo").glob("*")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    order = manifest["run_order"]
    assert order["order"] == "duet"
    cores = {}
    for cell, extra in rows:
        extra = json.loads(extra) if isinstance(extra, str) else extra
        if cell == "label=setup":
            assert len(extra["affinity"]) >= 2  # outside the rounds: the whole machine
            continue
        assert len(extra["affinity"]) == 1 and extra["omp_threads"] == "1"
        cores[f"standin/{cell}"] = extra["affinity"][0]
    for keys in order["rounds"]:
        for first, second in (keys[i : i + 2] for i in range(0, len(keys), 2)):
            assert cores[first] != cores[second]  # side by side, never on one core
            nb = json.loads((run_dir / f"{first}.ipynb").read_text())["metadata"]["fwbench"]
            assert nb["duet"] == {"core": cores[first], "partner": second}
            assert nb["contention"]["cpus"] == 1  # the reading is the pinned core's


# ---- the paired-ratio interval ----


@pytest.mark.parametrize("method", ["t", "bootstrap"])
def test_a_known_ratio_is_inside_the_interval_and_no_difference_is_outside(method):
    rng = np.random.default_rng(5)
    rounds = 6
    # a round effect both arms share (the machine's state): pairing must cancel it
    shared = np.exp(rng.normal(0.0, 0.3, size=rounds))
    a = 10.0 * shared * np.exp(rng.normal(0.0, 0.02, size=rounds))
    b = 1.2 * 10.0 * shared * np.exp(rng.normal(0.0, 0.02, size=rounds))
    result = paired_ratio_interval(a, b, method=method)
    assert result.low < 1.2 < result.high
    assert result.low > 1.0
    assert result.ratio == pytest.approx(1.2, rel=0.03)
    assert result.rounds == rounds and result.method == method
    # unpaired, the round effect swamps the 20%: the same numbers would not exclude 1
    assert np.percentile(b, 2.5) / np.percentile(a, 97.5) < 1.0


def test_a_missing_round_drops_its_pair_and_one_round_gives_no_interval():
    a = [1.0, 1.1, np.nan, 0.9]
    b = [1.2, 1.3, 5.0, 1.1]
    result = paired_ratio_interval(a, b)
    assert result.rounds == 3
    logs = np.log([1.2, 1.3 / 1.1, 1.1 / 0.9])
    assert result.ratio == pytest.approx(np.exp(logs.mean()))
    assert result.low < result.ratio < result.high  # the t point is the interval's centre
    by_median = paired_ratio_interval(a, b, method="bootstrap")
    assert by_median.ratio == pytest.approx(np.exp(np.median(logs)))
    single = paired_ratio_interval([1.0], [1.5])
    assert single.ratio == 1.5 and np.isnan(single.low) and np.isnan(single.high)
    with pytest.raises(ValueError, match="paired by round"):
        paired_ratio_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="method"):
        paired_ratio_interval([1.0, 2.0], [1.0, 2.0], method="wald")


def test_the_t_interval_keeps_its_a_a_false_winner_rate_and_the_simulator_catches_one_that_does_not():
    assert DEFAULT_PAIRED_METHOD == "t"
    rate_t = aa_false_winner_rate("t", 5, simulations=2000, seed=1)
    assert 0.03 <= rate_t <= 0.065
    # three rounds all on one side of 1 happen one time in four; the percentile bootstrap's
    # interval at 3 rounds is their range, so the simulator must report it calling winners
    rate_boot = aa_false_winner_rate("bootstrap", 3, simulations=1000, seed=1)
    assert rate_boot > 0.15


# ---- relay: a comparison's kernels at once, taking turns on the whole machine ----

RELAY = """
campaign: relayed
order: relay
seed: 5
steps:
  - notebook: STANDIN
    params: {label: setup}
  - notebook: STANDIN
    params: {label: torch, behaviour: time, seconds: 1.0}
    grid: {x: [1, 2]}
    trials: 2
  - notebook: STANDIN
    params: {label: jax, behaviour: time, seconds: 1.0}
    grid: {x: [1, 2]}
    trials: 2
"""


def test_a_relay_round_keeps_the_cells_of_each_grid_point_together(write_campaign):
    campaign = load_campaign(write_campaign(RELAY))
    order = campaign.run_order()
    assert order.order == "relay" and len(order.before_rounds) == 1
    assert "label=setup" in order.before_rounds[0]
    points = {c.key: (c.grid_point, c.trial) for c in campaign.cells}
    for keys in order.rounds:
        groups = relay_groups(keys, points)
        assert len(groups) == 2 and all(len(g) == 2 for g in groups)
        assert all(len({points[k] for k in g}) == 1 for g in groups)


def test_a_relay_with_a_lone_cell_is_refused(write_campaign):
    lone = RELAY.replace(
        "grid: {x: [1, 2]}\n    trials: 2\n  - notebook: STANDIN\n    params: {label: jax",
        "grid: {x: [1, 3]}\n    trials: 2\n  - notebook: STANDIN\n    params: {label: jax",
    )
    with pytest.raises(CampaignError, match="x=3 has only one cell a trial"):
        load_campaign(write_campaign(lone))


def test_a_relay_runs_each_group_at_once_and_never_times_two_kernels_together(
    write_campaign, tmp_path
):
    out = tmp_path / "out"
    # one grid point: two rounds of one group of two kernels are enough to see them take turns
    proc = run_cli("run", write_campaign(RELAY.replace("x: [1, 2]", "x: [1]")), "--out", out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    con = duckdb.connect(str(out / "fwbench.duckdb"), read_only=True)
    rows = con.execute("select cell, extra from measurements where metric = 'double_x'").fetchall()
    con.close()
    (run_dir,) = (out / "relayed").glob("*")
    order = json.loads((run_dir / "manifest.json").read_text())["run_order"]
    extras = {
        f"standin/{cell}": json.loads(extra) if isinstance(extra, str) else extra
        for cell, extra in rows
    }
    (setup,) = [e for e in extras.values() if e["label"] == "setup"]
    assert setup["relay"] is None
    for group in order["rounds"]:
        assert len(group) == 2
        a, b = (extras[k] for k in group)
        # both kernels were alive together: their timed spans interleave...
        assert a["relay"]["turns"] >= 2 and b["relay"]["turns"] >= 2
        first_a, last_a = a["calls"][0][0], a["calls"][-1][1]
        first_b, last_b = b["calls"][0][0], b["calls"][-1][1]
        assert first_a < last_b and first_b < last_a
        # ...and no call of one overlaps a call of the other
        for start, end in a["calls"]:
            assert not any(s < end and start < e for s, e in b["calls"])
        nb = json.loads((run_dir / f"{group[0]}.ipynb").read_text())["metadata"]["fwbench"]
        assert nb["relay"] == {"partners": [group[1]]}
        # the group's own kernels are not each other's contention: the meter counted their spinning
        # as its own work (a reading of the machine's load would fail on a shared machine, as a
        # parallel test suite is; a meter that missed the kernels would count near nothing here)
        spun = sum(end - start for e in (a, b) for start, end in e["calls"])
        assert nb["contention"]["own_cpu_s"] >= 0.5 * spun >= 1.0
