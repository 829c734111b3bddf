"""``fwbench predict``: a configuration's throughput, latency and memory without running it. A
machine whose ceilings the index lacks is calibrated first, by a quick 02_calibrate run that is
executed and indexed like any other; the forecast itself is ``families/prediction/answers.py``'s.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from fwbench.commands.common import (
    EXIT_CELL_FAILED,
    EXIT_OK,
    OWN_MODELS_HELP,
    campaign_models,
    decision_arguments,
    fail,
    indexed,
    load_training_table,
)

_QUICK_CALIBRATION = "params/calibrate_quick.yaml"


def add_parser(sub) -> None:
    predict = sub.add_parser(
        "predict",
        help="predict a configuration's throughput, latency and memory without running it",
        description="Predict throughput (img/s, with an interval), p50 latency and the model's own "
        "peak bytes for any torchvision classification model on this machine, from the features "
        "of its shapes (no timing) and the predictor fitted on the committed sweep. Shows the "
        "measurement too where one exists. A machine without ceilings in the index is calibrated "
        "first (about 30 s, executed and indexed like any run). " + OWN_MODELS_HELP,
    )
    predict.add_argument(
        "--model",
        required=True,
        help="e.g. resnet50, convnext_tiny, or a model --campaign FILE declares",
    )
    predict.add_argument("--framework", required=True, choices=["torch", "jax"])
    predict.add_argument("--batch-size", required=True, type=int)
    predict.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    predict.add_argument("--threads", type=int, help="intra-op threads (default: all cores)")
    predict.add_argument(
        "--mode",
        default="default",
        help="eager, compile (PyTorch); jit, torchax (JAX) (default: default)",
    )
    predict.add_argument(
        "--epoch-images",
        type=int,
        metavar="N",
        help="also forecast a training step and one epoch over N images (full batches)",
    )
    decision_arguments(predict, "one JSON object on stdout")
    predict.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.families.prediction import answers

    campaign, problem = campaign_models(args.campaign)
    if problem:
        return fail(problem)
    request, problem = answers.predict_request(
        model=args.model,
        framework=args.framework,
        mode=args.mode,
        batch_size=args.batch_size,
        precision=args.precision,
        threads=args.threads,
        image_size=args.image_size,
        epoch_images=args.epoch_images,
        campaign=campaign,
    )
    if problem:
        return fail(problem)
    out, db_path, problem = indexed(args)
    if problem:
        return fail(problem)
    table, source = load_training_table(db_path, out)
    if table.empty or table.model.nunique() < 2:
        return fail(
            "too few measured configurations to learn from; run params/sweep_cpu.yaml "
            "(or any inference campaign) and 21_prediction first"
        )
    ceiling = machine_ceiling(db_path, out, request)
    if ceiling is None:
        return fail(
            f"no {request.precision} ceilings with {request.threads} threads for "
            f"{request.device_name}, and {_QUICK_CALIBRATION} has no such cell"
        )
    answer = answers.predict(table, db_path, request, ceiling)
    if args.epoch_images is not None:
        answer.result["epoch"] = answers.epoch_forecast(
            table, db_path, out, request, answer.result, args.epoch_images
        )
    if args.json:
        print(answers.predict_json(answer))
        return EXIT_OK
    print(answers.predict_text(answer, source))
    return EXIT_OK if not math.isnan(answer.result["throughput_img_s"]) else EXIT_CELL_FAILED


def machine_ceiling(db_path: Path, out: Path, request):
    """This machine's ceilings at the request's precision and threads; measured first (a quick
    02_calibrate, executed and indexed like any run) when the index has none. None if that fails."""
    from fwbench.families.prediction import answers

    found = answers.indexed_ceiling(db_path, request) if db_path.exists() else None
    if found is not None:
        return found
    from fwbench.lab import Lab
    from fwbench.pipeline.campaign import CampaignError, load_campaign
    from fwbench.pipeline.runner import RunnerBusy
    from fwbench.results.layout import find_repo_root

    print(
        f"fwbench: no {request.precision} ceilings with {request.threads} threads for "
        f"{request.device_name} in the index; calibrating first (about 30 s)",
        file=sys.stderr,
    )
    only = f"*precision={request.precision}__threads={request.threads}*"
    try:
        campaign = load_campaign(find_repo_root(Path.cwd()) / _QUICK_CALIBRATION)
        if not campaign.select(only):
            return None
        Lab(out, db_path).run_once(campaign, only=only)
    except (CampaignError, RunnerBusy) as exc:
        print(f"fwbench: calibration failed: {exc}", file=sys.stderr)
        return None
    return answers.indexed_ceiling(db_path, request)
