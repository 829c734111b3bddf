"""``fwbench freeze-test``: draw the predictor's frozen test set and write it as a campaign.

The draw (``families.prediction.frozen``) reads which models the index has measured, so it is made
once, before the predictor is changed, and its inputs are written beside the campaign so that
anyone can draw it again. It refuses to replace a set that exists: a new set is a new decision.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fwbench.commands.common import EXIT_OK, fail
from fwbench.results import db

# What the set's models are measured with: each framework as a user runs it by default on a CPU
# (PyTorch eager; PyTorch's own module on XLA through torchax, as none of them has a Flax twin),
# fp32 on both cores, a single image and a small batch, in interleaved trials
CAMPAIGN = """\
# The predictor's frozen test set: {size} models drawn by `fwbench freeze-test --seed {seed}
# --max-gflops {max_gflops:g}` from the {candidates} models the registry can build that no campaign
# had measured and that cost at most {max_gflops:g} GFLOPs per image at 224 px, spread over
# {lineages} lineages, the first drawn from one the training table lacks ({first}). The draw's
# inputs are in frozen_test.draw.json. Its models stay out of every training table; the
# predictions for these cells are committed before the campaign runs, and it is scored once.
# Estimate: `fwbench run params/frozen_test.yaml --dry-run`.
campaign: frozen_test
order: interleaved
seed: {seed}
rerun_shared: 2
steps:
  - notebook: 10_inference
    params: {{framework: torch, mode: eager, device: cpu, precision: fp32, threads: 2,
             image_size: 224, batch_sizes: [1, 8], min_iters: 3, min_seconds: 0.5, warmup: 2,
             block_size: 3}}
    trials: 3
    grid:
      model: [{models}]
  - notebook: 10_inference
    params: {{framework: jax, mode: torchax, device: cpu, precision: fp32, threads: 2,
             image_size: 224, batch_sizes: [1, 8], min_iters: 3, min_seconds: 0.5, warmup: 2,
             block_size: 3}}
    trials: 3
    grid:
      model: [{models}]
"""
MIN_LINEAGES = 4


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "freeze-test",
        help="draw the predictor's frozen test set (once, before changing the predictor)",
        description="Draw SIZE models that no campaign in the index has measured, spread over "
        "lineages with one the training table lacks first, and write them as a campaign (OUT) "
        "with the draw's inputs beside it (OUT with .draw.json). Refuses to replace a set.",
    )
    parser.add_argument("--size", type=int, default=12, help="models to draw (default: 12)")
    parser.add_argument("--seed", type=int, required=True, help="the draw's seed")
    parser.add_argument(
        "--max-gflops",
        type=float,
        default=20.0,
        help="leave out models above this many GFLOPs per 224 px image (default: 20)",
    )
    parser.add_argument("--db", help="index (default: $FWBENCH_DB, else executed/fwbench.duckdb)")
    parser.add_argument(
        "--out", default="params/frozen_test.yaml", help="the campaign file to write"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the draw, write nothing")
    parser.set_defaults(func=handle)


def measured_models(db_path: Path) -> list[str]:
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


def handle(args) -> int:
    from tqdm.auto import tqdm

    from fwbench.families.prediction import frozen
    from fwbench.models.lineage import lineage

    out = Path(args.out)
    draw_path = out.with_suffix(".draw.json")
    if args.size < MIN_LINEAGES:
        return fail(f"--size must be at least {MIN_LINEAGES}, got {args.size}")
    if not args.dry_run and (out.exists() or draw_path.exists()):
        return fail(f"{out} exists: a frozen set is never replaced; write a new one elsewhere")
    db_path = Path(args.db) if args.db else db.default_db_path()
    if not db_path.exists():
        return fail(f"no index at {db_path} (fwbench ingest builds it)")
    measured = measured_models(db_path)
    unmeasured = frozen.candidates(buildable_models(), measured)
    costs = {m: gflops(m) for m in tqdm(unmeasured, desc="GFLOPs", file=sys.stderr)}
    pool = [m for m in unmeasured if costs[m] <= args.max_gflops]
    seen = sorted({lineage(m) for m in measured})
    try:
        found = frozen.draw(pool, seen, args.size, args.seed)
    except ValueError as exc:
        return fail(str(exc))
    lineages = sorted({lineage(m) for m in found.models})
    if len(lineages) < MIN_LINEAGES:
        return fail(f"the draw spans {len(lineages)} lineages, fewer than {MIN_LINEAGES}")
    for model in found.models:
        print(f"{model}\t{lineage(model)}\t{costs[model]:.2f} GFLOPs")
    if args.dry_run:
        return EXIT_OK
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        CAMPAIGN.format(
            size=args.size,
            seed=args.seed,
            max_gflops=args.max_gflops,
            candidates=len(pool),
            lineages=len(lineages),
            first=lineage(found.models[0]),
            models=", ".join(found.models),
        )
    )
    draw_path.write_text(found.to_json())
    print(f"wrote {out} and {draw_path}", file=sys.stderr)
    return EXIT_OK
