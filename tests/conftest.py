import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Each of make test's workers gets its share of the cores for torch's OpenMP pool (inherited by
# the kernels and commands the tests start): two workers each starting a pool as wide as the
# machine spin against each other, which on two cores cost the suite about a minute of its 19.
# Set here, before any test module imports torch; a user's own setting wins.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))
STANDIN = REPO / "tests" / "standin" / "standin"
# One JAX compilation cache for the whole suite, shared by both workers and every kernel and
# command the tests start (they inherit the variable): a test's processes often compile a step
# another has compiled (the attempts of a time-to-accuracy search, a tuned cell after its tuning
# run), and on a slow CPU XLA's compiles are much of the suite's time. Only compiles are shared,
# never a result; the folder is new for each session (the controller makes it, workers inherit
# it) and removed after.
if "PYTEST_XDIST_WORKER" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    _CACHE = tempfile.mkdtemp(prefix="fwbench-test-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# make test runs the suite on two workers (pytest-xdist), each taking a whole file at a time in
# collection order. A long file that starts last keeps one worker busy while the other idles,
# so the files that took longest are collected first, longest first (their summed durations in
# a two-worker run: tests/test_distributed.py 418 s, ..., tests/test_memory_seed.py 92 s); every
# other file follows in its usual order. A wrong guess costs time, not correctness.
LONGEST_FIRST = (
    # its stable-machine simulation took 524 s beside the other worker's notebooks in a fresh
    # clone's run (66 s for the whole file alone): started first, it no longer ends the suite
    "test_verdicts.py",
    "test_distributed.py",
    "test_prediction_dataset.py",
    "test_training.py",
    "test_slurm.py",
    # a two-node cluster, a distributed cell in each framework and a node that dies, about 5 min
    "test_slurm_nodes.py",
    "test_web_audio.py",
    # two time-to-accuracy searches through the runner, about 75 s: at the end it ran alone
    "test_time_to_accuracy.py",
    "test_declared_models.py",
    "test_prediction_own_model.py",
    "test_prediction_epochs.py",
    # a real campaign through gpu/run.sh from a copy of the checkout, about 110 s
    "test_gpu_kit.py",
    "test_campaign_report.py",
    # a tuning run, its picks and a verdict run of the tuned modes, about 100 s
    "test_best_modes.py",
    "test_prediction_recommend.py",
    "test_models_resnet_vit.py",
    "test_trials.py",
    "test_models_variants_mobile_efficientnet.py",
    "test_runner.py",
    "test_models_mobilenet_efficientnet.py",
    "test_validation.py",
    "test_memory_seed.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def run_cli(*args, cwd=None, env=None, timeout=900):
    """Run ``python -m fwbench`` as a user would, returning the completed process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "fwbench", *map(str, args)],
        cwd=cwd or REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def write_campaign(tmp_path):
    def write(text: str, name: str = "campaign.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text.replace("notebook: STANDIN", f"notebook: {STANDIN}"))
        return path

    return write


def running_cluster(cluster_class, unavailable):
    """Start a test Slurm (``cluster_class``) with its SLURM_CONF and sacct stand-in in this
    process's environment, which every command the tests start inherits; yield it, then stop it
    and put the environment back. Skipped where ``unavailable()`` gives a reason, unless
    FWBENCH_REQUIRE_SLURM=1 (CI), where that is a failure."""
    reason = unavailable()
    if reason:
        if os.environ.get("FWBENCH_REQUIRE_SLURM") == "1":
            pytest.fail(f"FWBENCH_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    cluster = cluster_class().start()
    saved = {k: os.environ.get(k) for k in cluster.env}
    os.environ.update(cluster.env)
    try:
        yield cluster
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        cluster.stop()


@pytest.fixture(scope="session")
def slurm_cluster():
    """A real single-node Slurm (tests/slurm_cluster.py) for the whole session."""
    from tests.slurm_cluster import Cluster, unavailable

    yield from running_cluster(Cluster, unavailable)
