"""One vocabulary: the names that every room of fwbench and every notebook must spell alike.

Frameworks and their display labels, what "default" means for each framework, the families (one
per notebook), the environment variables the runner hands to a kernel, the bootstrap settings
behind every interval and which way each metric is better. Model display labels live on the
registry's ``ModelSpec``; ``model_label`` reads them from there. This module imports nothing heavy,
so the report, the pipeline and the families can all use it.
"""

from __future__ import annotations

import re

FRAMEWORKS = ("torch", "jax")
_FRAMEWORK_LABELS = {"jax": "JAX", "torch": "PyTorch"}
_KIND_LABELS = {"cnn": "CNN", "transformer": "Transformer"}

# The memory family's goal at its reference scale (ResNet-152 at 224 px, BERT-base at
# sequence 128), stated on activations: at least this share of
# the activation memory saved at no more than this much added iteration time.
MEMORY_ACTIVATION_GOAL_PCT = 50.0
MEMORY_OVERHEAD_GOAL_PCT = 33.0
# The memory simulator's bar: its predicted peak and time within this error of the measured.
MEMORY_SIM_ERROR_BAR_PCT = 5.0
# The memory family's float64 proofs (a μ-TWO rewrite's graph, a baseline's gradients): within
# this absolute difference the same computation; a changed one shows far above it.
MEMORY_EXACT_TOLERANCE = 1e-10
# The prediction family's memory goal: the model's own peak bytes predicted within this error.
_MEMORY_PREDICTION_GOAL_PCT = 10.0
# The prediction family's goals per hold-out (21_prediction) and for the recommender's queries
# (22_recommend, its parameters' defaults): (metric, bound). An error is held to at most its
# bound (``PREDICTION_ERROR_METRICS``), a share to at least.
PREDICTION_GOALS = {
    "batch": ("mape_pct", 10.0),
    "lineage": ("mape_pct", 15.0),
    # the hold-out by name pattern that lineages replaced, in the prediction runs made before them
    "family": ("mape_pct", 15.0),
    "threads": ("within_15pct", 90.0),
    "cpu": ("within_15pct", 90.0),
    "memory_inference": ("memory_error_pct", _MEMORY_PREDICTION_GOAL_PCT),
    "memory_training": ("memory_error_pct", _MEMORY_PREDICTION_GOAL_PCT),
    # a forecast epoch is one more prediction, held to the goal for all of them
    "epoch": ("within_15pct", 90.0),
    "query": ("regret_within_5pct", 90.0),
    # the frozen test set, scored once (families/prediction/frozen_score.py holds its other goals)
    "frozen set": ("mape_pct", 15.0),
}
PREDICTION_ERROR_METRICS = ("mape_pct", "memory_error_pct")
# A prediction score's baseline (families/prediction/baselines.py): its records' ``predictor``, and
# the suffix of its row in the prediction report (``hold-out: lineage · baseline``)
PREDICTION_BASELINE = "baseline"
# The memory methods measured compiled: compilation also fuses kernels, so their times are only
# ever compared with each other, never with eager ones.
MEMORY_COMPILED_KINDS = ("compile_budget", "compiled_mu_two", "compiled_graph")

# What each framework does when a user changes nothing; a notebook's mode "default" resolves to it.
DEFAULT_MODE = {"torch": "eager", "jax": "jit"}
# The ways each notebook can run each framework; a campaign is checked against them before it runs.
# Each is a documented practice of its framework (DESIGN.md section 5, "Each framework at its best"):
INFERENCE_MODES = {
    "torch": ("eager", "compile", "compile-max-autotune", "compile-freeze", "tuned"),
    "jax": ("jit", "jit-expert", "jit-tuned", "torchax"),
}
MODE_HELP = {
    "eager": "PyTorch as it comes: eager execution",
    "compile": "torch.compile, inductor's default mode",
    "compile-max-autotune": "torch.compile with mode='max-autotune' (inductor benchmarks kernels)",
    "compile-freeze": "torch.compile with inductor freezing: BatchNorm folded, weights prepacked "
    "(PyTorch's documented setting for CPU inference)",
    "tuned": "PyTorch's mode and memory format that the tuning run chose for this model, batch "
    "size and device (read from the campaign's tuning_path)",
    "jit": "jax.jit of the stock Flax layers with XLA's default options",
    "jit-expert": "jax.jit of the twin's expert form: convolutions written as a JAX engineer writes "
    "them for the device (models/conv.py), proven equal in float64",
    "jit-tuned": "the layers (stock or expert) and XLA option set that the tuning run chose for "
    "this model, batch size and device (read from the campaign's tuning_path)",
    "torchax": "PyTorch's own graph run by XLA through torchax (never JAX's side of a comparison)",
}
# PyTorch's options beside its mode (10_inference parameters); a tuning run tries them as candidates.
TORCH_OPTION_HELP = {
    "channels_last": "a CNN's weights and inputs in NHWC memory format",
    "dynamic_shapes": "torch.compile modes: one graph for any batch size (dynamic=True); without "
    "it one static graph per batch size, whatever sizes the cell ran before",
}
# Modes a tuning run resolves: their cell reads its choice from a committed selection file, made
# from a tuning run before the verdict runs (measure/best_modes.py), so no verdict ever picks a
# mode on the rounds it judges.
TUNED_MODES = ("tuned", "jit-tuned")
# JAX's modes that compile a Flax twin with a campaign's own XLA option set (``xla_options``)
XLA_OPTION_MODES = ("jit", "jit-expert")


def twin_layers(mode: str) -> str:
    """The form of the Flax twin a JAX mode runs: ``expert`` for jit-expert, else ``stock``
    (the implementations of ``models/conv.py``)."""
    return "expert" if mode == "jit-expert" else "stock"


# JAX modes that run PyTorch's own graph (models/torchax_bridge) rather than a Flax twin: never
# JAX's side of a JAX-vs-PyTorch comparison, which is about the frameworks' own ways to run.
TORCH_GRAPH_MODES = ("torchax",)
TRAINING_MODES = {"torch": ("eager", "compile"), "jax": ("jit", "jit-expert")}
NOTEBOOK_MODES = {
    "10_inference": (INFERENCE_MODES, "mode"),
    "11_training": (TRAINING_MODES, "training mode"),
    "15_time_to_accuracy": (TRAINING_MODES, "training mode"),
}
# How 13_distributed may spread a training step over processes, per framework (each also has a
# one-process reference, "none", which its parity check runs and a campaign never names).
# dp_fused: JAX data parallelism with one all-reduce of the flattened gradients, not one per array
DISTRIBUTED_STRATEGIES = {"torch": ("ddp", "fsdp", "tp"), "jax": ("dp", "dp_fused", "fsdp", "tp")}
# The browsers 14_web_audio runs onnxruntime-web in (families/web_audio/drivers), and their names
BROWSERS = ("chromium", "firefox", "webkit")
BROWSER_LABELS = {"chromium": "Chromium", "firefox": "Firefox ESR", "webkit": "WebKitGTK"}
# Parameters whose allowed values depend on the cell's framework, as ``mode`` does above.
NOTEBOOK_FRAMEWORK_CHOICES = {"13_distributed": ("strategy", DISTRIBUTED_STRATEGIES)}

# One family per notebook: a notebook NN_<family> belongs to <family> (records carry it; the index
# derives it so for a cell's status rows), so a new family needs no line here. These notebooks
# belong to another family's: calibration's 02_calibrate, training's 15_time_to_accuracy, the trust
# experiment 21_orders (analysis), and the prediction family's second and third notebooks.
NOTEBOOK_FAMILIES = {
    "02_calibrate": "calibration",
    "15_time_to_accuracy": "training",
    "21_orders": "analysis",
    "22_recommend": "prediction",
    "23_kernels": "prediction",
}

# What the runner tells a kernel (and a record reads back); a kernel started by hand has none.
ENV_RUN_ID = "FWBENCH_RUN_ID"
ENV_CAMPAIGN = "FWBENCH_CAMPAIGN"
ENV_NOTEBOOK = "FWBENCH_NOTEBOOK"
ENV_CELL = "FWBENCH_CELL"
ENV_TRIAL = "FWBENCH_TRIAL"
ENV_EXECUTED_DIR = "FWBENCH_EXECUTED_DIR"
# Read from the user's environment: the index path, the kernel the runner starts, and the commit
# of a checkout copied without .git (a GPU node's: gpu/run.sh sets it from the kit).
ENV_DB = "FWBENCH_DB"
ENV_KERNEL = "FWBENCH_KERNEL"
ENV_COMMIT = "FWBENCH_COMMIT"
ENV_PREFIX = "FWBENCH_"
# gpu/run.sh copies the kit's commit file (``<sha> clean`` or ``<sha> dirty``) beside each run's
# manifest: the code that ran, whatever stale .git the node's copy carried. Ingest reads it.
KIT_COMMIT_FILE = "kit_commit.txt"
# The status of a cell its run stopped before (a time cap, a stopped runner): it measured nothing.
CUT = "cut"


def named_commit(text: str) -> str | None:
    """``<sha> dirty`` as ``<sha>-dirty``, ``<sha> clean`` (or the sha alone) as ``<sha>``; None
    for empty text."""
    words = text.split()
    if not words:
        return None
    return words[0] + ("-dirty" if words[1:2] == ["dirty"] else "")


# Every bootstrap interval: resamples, and the sample cap above which a seeded subsample is drawn.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_MAX_SAMPLES = 10_000
CONFIDENCE = 0.95

# Which way each metric is better, for `fwbench regressions` and the report's history: a rise in a
# HIGHER_IS_BETTER metric is an improvement, in a LOWER_IS_BETTER one a regression. The name
# decides first; a unit decides for the rest only where every metric measured in it moves one way
# (a time, a byte count, energy, a rate). A metric in neither has no direction: a count, a setting,
# or a value with a target rather than a side (interval coverage, the timer's ratio to torch's) is
# no better for going up, and guessing would call half its changes regressions.
HIGHER_IS_BETTER = "higher"
LOWER_IS_BETTER = "lower"
METRIC_DIRECTIONS = {
    # shares, rates and accuracies
    "mfu": HIGHER_IS_BETTER,
    "scaling_efficiency": HIGHER_IS_BETTER,
    "correct_winner_rate": HIGHER_IS_BETTER,
    "within_10pct": HIGHER_IS_BETTER,
    "within_15pct": HIGHER_IS_BETTER,
    "within_20pct": HIGHER_IS_BETTER,
    "per_op_within_15pct": HIGHER_IS_BETTER,
    "per_op_within_20pct": HIGHER_IS_BETTER,
    "regret_within_5pct": HIGHER_IS_BETTER,
    "calibration_inside_share": HIGHER_IS_BETTER,
    "regression_recall_10pct": HIGHER_IS_BETTER,
    "top1_agreement": HIGHER_IS_BETTER,
    "top1_agreement_vs_fp32": HIGHER_IS_BETTER,
    "val_top1": HIGHER_IS_BETTER,
    "val_top1_as_trained": HIGHER_IS_BETTER,
    "memory_saved_pct": HIGHER_IS_BETTER,
    "activation_saved_pct": HIGHER_IS_BETTER,
    "check_passed": HIGHER_IS_BETTER,
    # errors, overheads and losses
    "mape_pct": LOWER_IS_BETTER,
    "median_pct": LOWER_IS_BETTER,
    "per_op_mape_pct": LOWER_IS_BETTER,
    "per_op_median_pct": LOWER_IS_BETTER,
    "worst_pct": LOWER_IS_BETTER,
    "regret_pct": LOWER_IS_BETTER,
    "memory_error_pct": LOWER_IS_BETTER,
    "sim_peak_error_pct": LOWER_IS_BETTER,
    "sim_time_error_pct": LOWER_IS_BETTER,
    "profile_drift_pct": LOWER_IS_BETTER,
    "overhead_pct": LOWER_IS_BETTER,
    "comm_overhead_frac": LOWER_IS_BETTER,
    "data_share": LOWER_IS_BETTER,
    "rtf": LOWER_IS_BETTER,
    "stream_rtf": LOWER_IS_BETTER,
    "aa_false_winner_rate": LOWER_IS_BETTER,
    "aa_log_ratio_sd": LOWER_IS_BETTER,
    "regression_false_alerts_per_100": LOWER_IS_BETTER,
    "train_loss_final": LOWER_IS_BETTER,
    "speed_final_loss": LOWER_IS_BETTER,
    "max_abs_err": LOWER_IS_BETTER,
    "max_abs_err_vs_torch": LOWER_IS_BETTER,
    "max_rel_err": LOWER_IS_BETTER,
    "max_rel_err_vs_fp32": LOWER_IS_BETTER,
    "max_rel_err_vs_fp64": LOWER_IS_BETTER,
    "max_rel_err_vs_torch": LOWER_IS_BETTER,
    "exact_max_abs_diff": LOWER_IS_BETTER,
    "fp64_logits_max_rel_err": LOWER_IS_BETTER,
    "fp64_grad_max_rel_err": LOWER_IS_BETTER,
    "grad_max_rel_err": LOWER_IS_BETTER,
    "grad_max_rel_err_vs_fp64": LOWER_IS_BETTER,
    "loss_parity_max_rel": LOWER_IS_BETTER,
    "param_parity_max_rel": LOWER_IS_BETTER,
    "bn_stats_parity_max_rel": LOWER_IS_BETTER,
    "fp64_loss_parity_max_rel": LOWER_IS_BETTER,
    "fp64_param_parity_max_rel": LOWER_IS_BETTER,
    "fp64_bn_stats_parity_max_rel": LOWER_IS_BETTER,
    "fp64_output_parity_max_rel": LOWER_IS_BETTER,
    "dist_fp64_loss_parity_max_rel": LOWER_IS_BETTER,
    "dist_fp64_cross_framework_max_rel": LOWER_IS_BETTER,
}
_UNIT_DIRECTIONS = {
    "img/s": HIGHER_IS_BETTER,
    "TFLOP/s": HIGHER_IS_BETTER,
    "GB/s": HIGHER_IS_BETTER,
    "ms": LOWER_IS_BETTER,
    "s": LOWER_IS_BETTER,
    "bytes": LOWER_IS_BETTER,
    "J": LOWER_IS_BETTER,
}

# Terminal colour codes, which IPython puts in tracebacks and tqdm in progress output.
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def framework_label(name: str) -> str:
    return _FRAMEWORK_LABELS.get(name, name)


def kind_label(kind: str) -> str:
    return _KIND_LABELS.get(kind, kind)


def model_label(name: str) -> str:
    """The registry's display label; names outside it (the memory family's cases) as they are."""
    from fwbench.models.registry import MODELS

    spec = MODELS.get(name)
    return spec.label if spec else name


def series_label(framework: str, variant: str) -> str:
    return f"{framework_label(framework)} {variant}"


def threads_words(threads) -> str:
    """A CPU configuration's intra-op threads as words ("1 thread", "2 threads"); "" for 0, which
    the report uses where threads are not a setting of the configuration or were not recorded."""
    n = int(threads or 0)
    return "" if n <= 0 else f"{n} thread" if n == 1 else f"{n} threads"


# A precision a sentence names in words: ``default`` is no type of its own but each library's
# settings as they come (measure/precision.py), the reference study's setting.
_PRECISION_WORDS = {"default": "each library's default precision"}


def setting_words(precision: str, threads) -> str:
    """ "fp32" or "fp32 with 2 threads": how a sentence names a configuration's precision and,
    for a CPU one, its threads."""
    words = threads_words(threads)
    named = _PRECISION_WORDS.get(precision, str(precision))
    return f"{named} with {words}" if words else named


def and_list(items) -> str:
    """ "a", "a and b", "a, b and c": how a sentence lists things."""
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def metric_direction(metric: str, unit: str | None = None) -> str | None:
    """``HIGHER_IS_BETTER`` or ``LOWER_IS_BETTER`` for ``metric`` (by its name, else by its
    ``unit``), or None where neither says which way is better: the caller says "no known
    direction" rather than pick one."""
    return METRIC_DIRECTIONS.get(metric) or _UNIT_DIRECTIONS.get(unit)


def family_of(notebook: str) -> str:
    """The family of notebook ``notebook`` (its name, or a path to it): ``NOTEBOOK_FAMILIES``'s,
    else what follows its number; "unknown" for a name without one."""
    name = str(notebook).replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py")
    if name in NOTEBOOK_FAMILIES:
        return NOTEBOOK_FAMILIES[name]
    number, _, family = name.partition("_")
    return family if number.isdigit() and family else "unknown"


def resolve_mode(
    framework: str, mode: str, modes: dict[str, tuple] | None = None, what: str = "mode"
) -> str:
    """``default`` is each framework's out-of-the-box way to run (``DEFAULT_MODE``).

    ``modes`` names what each framework allows (inference's modes when left out); ``what`` names
    them in the error.
    """
    if mode == "default":
        return DEFAULT_MODE[framework]
    allowed = (modes or INFERENCE_MODES)[framework]
    if mode not in allowed:
        raise ValueError(f"mode {mode!r} is not a {framework} {what}; choose from {allowed}")
    return mode


# Where inference time goes (families/inference/op_categories), the same names in both
# frameworks' profiles, in the order the report stacks them; OVERHEAD is wall time outside every op.
OP_CATEGORIES = (
    "convolution",
    "depthwise/grouped convolution",
    "matmul/linear",
    "attention",
    "normalisation",
    "elementwise/activation",
    "pooling/reduction",
    "data movement/layout",
    "other",
)
OVERHEAD = "framework overhead"


# the notebook that reads a run and writes its report's content; it runs into the run it reads
ANALYSIS_NOTEBOOK = "20_analysis"
