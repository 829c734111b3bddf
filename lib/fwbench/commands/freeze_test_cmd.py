"""``fwbench freeze-test``: draw the predictor's frozen test set and write it as a campaign.

The draw (``families.prediction.frozen``) reads which models the index has measured, so it is made
once, before the predictor is changed, and its inputs are written beside the campaign so that
anyone can draw it again. It refuses to replace a set that exists: a new set is a new decision.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from fwbench.commands.common import EXIT_OK, fail
from fwbench.results import db

# What the set's models are measured with: each framework as a user runs it on a CPU, by default
# and at its documented best that needs no tuning run (PyTorch eager and torch.compile; JAX jit of
# the stock and of the expert Flax twin, for the drawn models that have one; PyTorch's own module
# on XLA through torchax, for all), fp32 on both cores, a single image and a small batch, in
# interleaved trials
HEADER = """\
# The predictor's frozen test set: {size} models drawn by `fwbench freeze-test --seed {seed}
# --max-gflops {max_gflops:g}` from the {candidates} models the registry can build that no campaign
# had measured and that cost at most {max_gflops:g} GFLOPs per image at 224 px, spread over
# {lineages} lineages, led by {unseen} the training table lacks ({first}), {with_twin} models with a
# Flax twin. The draw's inputs are in {name}.draw.json. Its models stay out of every training
# table until it is scored; the predictions for these cells are committed before the campaign
# runs, and it is scored once. Cost: `fwbench run params/{name}.yaml --dry-run` estimates it.
campaign: {name}
order: interleaved
seed: {seed}
rerun_shared: 2
steps:
"""
STEP = """\
  - notebook: 10_inference
    params: {{framework: {framework}, mode: {mode}, device: cpu, precision: fp32, threads: 2,
             image_size: 224, batch_sizes: [1, 8], min_iters: 3, min_seconds: 0.5, warmup: 2,
             block_size: 3}}
    trials: 3
    grid:
      model: [{models}]
"""
# (framework, mode, only the models with a Flax twin)
SETTINGS = (
    ("torch", "eager", False),
    ("torch", "compile", False),
    ("jax", "jit", True),
    ("jax", "jit-expert", True),
    ("jax", "torchax", False),
)


def campaign_text(name: str, models: list[str], twins: list[str], **header) -> str:
    """The set's campaign file: the header, then one step per setting over the drawn models
    (the JAX twins' steps over ``twins`` only, left out where none has a twin)."""
    steps = [
        STEP.format(framework=framework, mode=mode, models=", ".join(twins if own else models))
        for framework, mode, own in SETTINGS
        if models and (twins or not own)
    ]
    return HEADER.format(name=name, **header) + "".join(steps)


_MIN_LINEAGES = 4


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "freeze-test",
        help="draw the predictor's frozen test set (once, before changing the predictor)",
        description="Draw SIZE models that no campaign in the index has measured, spread over "
        "lineages with one the training table lacks first, and write them as a campaign (OUT) "
        "with the draw's inputs beside it (OUT with .draw.json). Refuses to replace a set. "
        "Then, before the set is measured, --predict writes its predictions on this machine "
        "(commit them before the run); after the run, --score scores them, once.",
    )
    step = parser.add_mutually_exclusive_group()
    step.add_argument(
        "--predict",
        action="store_true",
        help="predict the set (OUT) on this machine and write OUT with .predictions.csv; "
        "refused once the index holds a measurement of its models",
    )
    step.add_argument(
        "--score",
        action="store_true",
        help="score the committed predictions against the set's newest run and write OUT with "
        ".score.json; refused where a score exists (a set is scored once)",
    )
    parser.add_argument("--size", type=int, default=12, help="models to draw (default: 12)")
    parser.add_argument(
        "--unseen",
        type=int,
        default=2,
        help="lineages the training table lacks that lead the draw, one model each (default: 2)",
    )
    parser.add_argument(
        "--min-twins",
        type=int,
        default=2,
        help="models with a Flax twin the set holds at least, for its JAX jit rows (default: 2)",
    )
    parser.add_argument("--seed", type=int, help="the draw's seed (needed to draw)")
    parser.add_argument(
        "--max-gflops",
        type=float,
        default=20.0,
        help="leave out models above this many GFLOPs per 224 px image (default: 20)",
    )
    parser.add_argument("--db", help="index (default: $FWBENCH_DB, else EXECUTED/fwbench.duckdb)")
    parser.add_argument(
        "--executed",
        default="executed",
        help="executed-notebook folder --predict reads and calibrates into (default: executed)",
    )
    parser.add_argument(
        "--out", default="params/frozen_test.yaml", help="the campaign file to write"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the draw, write nothing")
    parser.set_defaults(func=handle)


def _measured_models(db_path: Path) -> list[str]:
    """Every model any campaign in the index measured in the inference family, on any setting."""
    frame = db.query(
        "select distinct model from measurements where family = 'inference' and model is not null",
        db_path,
    )
    return sorted(frame.model)


def buildable_models() -> list[str]:
    """The image models the registry builds by name: torchvision's classification models and the
    transformers image encoders (the predictor's features read images)."""
    import torchvision

    from fwbench.models import hf_models

    hf = [name for name, entry in hf_models.MODELS.items() if entry.inputs == "image"]
    return sorted(torchvision.models.list_models(module=torchvision.models) + hf)


def gflops(model: str) -> float:
    from fwbench.families.prediction import features

    return features.torch_features(model, 1, 224).total_flops / 1e9


def _progress(desc: str):
    from tqdm.auto import tqdm

    return lambda items: tqdm(items, desc=desc, file=sys.stderr)


def handle(args) -> int:
    if args.predict:
        return predict(args)
    if args.score:
        return score(args)
    return draw(args)


def draw(args) -> int:
    from tqdm.auto import tqdm

    from fwbench.families.prediction import frozen
    from fwbench.models import registry
    from fwbench.models.lineage import lineage

    out = Path(args.out)
    draw_path = out.with_suffix(".draw.json")
    if args.seed is None:
        return fail("--seed is needed to draw a set")
    if args.size < _MIN_LINEAGES:
        return fail(f"--size must be at least {_MIN_LINEAGES}, got {args.size}")
    if args.unseen < 1 or args.min_twins < 0:
        return fail("--unseen must be at least 1 and --min-twins at least 0")
    if not args.dry_run and (out.exists() or draw_path.exists()):
        return fail(f"{out} exists: a frozen set is never replaced; write a new one elsewhere")
    db_path = db.index_path(args.db)
    if not db_path.exists():
        return fail(f"no index at {db_path} (fwbench ingest builds it)")
    measured = _measured_models(db_path)
    unmeasured = frozen.candidates(buildable_models(), measured)
    costs = {m: gflops(m) for m in tqdm(unmeasured, desc="GFLOPs", file=sys.stderr)}
    pool = [m for m in unmeasured if costs[m] <= args.max_gflops]
    seen = sorted({lineage(m) for m in measured})
    twins = [m for m in pool if registry.get_spec(m).has_twin]
    try:
        found = frozen.draw(pool, seen, args.size, args.seed, args.unseen, twins, args.min_twins)
    except ValueError as exc:
        return fail(str(exc))
    lineages = sorted({lineage(m) for m in found.models})
    if len(lineages) < _MIN_LINEAGES:
        return fail(f"the draw spans {len(lineages)} lineages, fewer than {_MIN_LINEAGES}")
    for model in found.models:
        print(f"{model}\t{lineage(model)}\t{costs[model]:.2f} GFLOPs")
    if args.dry_run:
        return EXIT_OK
    out.parent.mkdir(parents=True, exist_ok=True)
    drawn_twins = [m for m in found.models if m in twins]
    out.write_text(
        campaign_text(
            out.stem,
            found.models,
            drawn_twins,
            size=args.size,
            seed=args.seed,
            max_gflops=args.max_gflops,
            candidates=len(pool),
            lineages=len(lineages),
            unseen=args.unseen,
            first=", ".join(lineage(m) for m in found.models[: args.unseen]),
            with_twin=len(drawn_twins),
        )
    )
    draw_path.write_text(found.to_json())
    print(f"wrote {out} and {draw_path}", file=sys.stderr)
    return EXIT_OK


def predict(args) -> int:
    """The set's predictions on this machine, before any of its models is measured."""
    from fwbench.commands.common import indexed, load_training_table
    from fwbench.commands.predict_cmd import machine_ceiling
    from fwbench.families.prediction import answers, forecast, frozen_score, kernel_model
    from fwbench.measure.device import cpu_device_name
    from fwbench.pipeline.campaign import CampaignError, load_campaign

    campaign, (predictions, _) = Path(args.out), frozen_score.paths(Path(args.out))
    if predictions.exists():
        return fail(f"{predictions} exists: a set is predicted once, before it is measured")
    try:
        configs = frozen_score.configurations(load_campaign(campaign).cells)
    except (CampaignError, OSError) as exc:
        return fail(f"{campaign}: {exc}")
    if configs.empty:
        return fail(f"{campaign} has no 10_inference cell to predict")
    executed, db_path, problem = indexed(argparse.Namespace(out=args.executed, db=args.db))
    if problem:
        return fail(problem)
    seen = sorted(set(configs.model) & set(_measured_models(db_path)))
    if seen:
        return fail(
            f"the index already holds measurements of {', '.join(seen)}: too late to predict"
        )
    table, source = load_training_table(db_path, executed)
    device_name = cpu_device_name()
    ceilings = {}
    for precision, threads in sorted(set(zip(configs.precision, configs.threads, strict=True))):
        request = forecast.Request(
            model=configs.model[0], framework="torch", mode="eager", batch_size=1,
            precision=precision, threads=int(threads), device="cpu", device_name=device_name,
            image_size=int(configs.image_size[0]),
        )  # fmt: skip
        # a dry run writes nothing, so it never calibrates: it reads the index's ceilings alone
        ceilings[precision, threads] = (
            answers.indexed_ceiling(db_path, request)
            if args.dry_run
            else machine_ceiling(db_path, executed, request)
        )
        if ceilings[precision, threads] is None:
            return fail(f"no {precision} ceilings with {threads} threads for {device_name}")
    parts = []
    for (precision, threads), ceiling in ceilings.items():
        mine = configs[(configs.precision == precision) & (configs.threads == threads)]
        parts.append(frozen_score.predict_set(table, mine.reset_index(drop=True), ceiling))
    found = pd.concat(parts, ignore_index=True)
    # the kernel-level predictor where it covers a setting (fp32, with this CPU's micro-benchmarks)
    priced = [
        kernel_model.predict_from_index(
            db_path, table, mine, device_name, int(threads), progress=_progress("kernels")
        ).assign(threads=int(threads), precision="fp32")
        for threads, mine in configs[configs.precision == "fp32"].groupby("threads")
    ]
    found = frozen_score.with_kernel_predictions(
        found, pd.concat(priced, ignore_index=True) if priced else pd.DataFrame()
    )
    print(found.to_string(index=False))
    if args.dry_run:
        return EXIT_OK
    found.to_csv(predictions, index=False)
    print(f"wrote {predictions} ({len(found)} predictions for {device_name}, trained on "
          f"{source}); commit it before the set's run", file=sys.stderr)  # fmt: skip
    return EXIT_OK


def score(args) -> int:
    """The committed predictions against the set's newest run, once."""
    from fwbench.families.prediction import frozen_score

    campaign = Path(args.out)
    predictions, score_path = frozen_score.paths(campaign)
    if not predictions.exists():
        return fail(f"no {predictions}: predict the set (--predict) before it is measured")
    if score_path.exists():
        return fail(
            f"{score_path} exists: the set has been scored once; draw a new set to test again"
        )
    db_path = db.index_path(args.db, Path(args.executed))
    if not db_path.exists():
        return fail(f"no index at {db_path} (fwbench ingest builds it)")
    run = frozen_score.newest_run(frozen_score.measured_rows(db_path), campaign.stem)
    if run.empty:
        return fail(f"the index holds no run of {campaign.stem}: run {campaign} first")
    rows, summary = frozen_score.score(pd.read_csv(predictions), run)
    print(json.dumps(summary, indent=1))
    if args.dry_run:
        return EXIT_OK
    frozen_score.write_score(score_path, summary, str(run.run_id.iloc[0]), predictions)
    rows.to_csv(score_path.with_suffix(".csv"), index=False)
    print(f"wrote {score_path}: scored once", file=sys.stderr)
    return EXIT_OK
