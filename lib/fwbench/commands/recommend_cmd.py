"""``fwbench recommend``: a model's candidate configurations ranked by an objective within the
user's limits, measured where they ran and predicted elsewhere (``families/prediction/answers.py``
builds the ranking and its text)."""

from __future__ import annotations

import sys

from fwbench.commands.common import (
    EXIT_NOTHING_FITS,
    EXIT_OK,
    OWN_MODELS_HELP,
    campaign_models,
    decision_arguments,
    fail,
    indexed,
    load_training_table,
)


def add_parser(sub) -> None:
    recommend = sub.add_parser(
        "recommend",
        help="rank configurations of a model: measured where they ran, predicted elsewhere",
        description="Rank the candidate configurations of a model (framework, mode, precision, "
        "batch size, threads) on this machine's CPU, or on the calibrated devices named with "
        "--device, or on every one with --all-devices, by an objective, after dropping those "
        "over the latency or memory limit. Each row names its device and says whether it was "
        "measured or predicted, and whether it lies on the Pareto front over throughput, p95 "
        "latency, memory (GiB) and (with prices) cost. The first row is the recommendation. A "
        "model without a Flax twin is offered on JAX through torchax (PyTorch's graph on XLA) "
        "where the index measured that mode. " + OWN_MODELS_HELP,
        epilog="Exit status: 0 a recommendation, 2 bad input (one line), 3 nothing meets the "
        "limits (one sentence says how many candidates each limit left out; on stderr with "
        "--json, whose stdout is then []).",
    )
    recommend.add_argument(
        "--model",
        required=True,
        help="any torchvision classification model, or a model --campaign FILE declares",
    )
    limit = recommend.add_mutually_exclusive_group()
    limit.add_argument("--batch-size", type=int, help="fix the batch size (default: 1 to 64)")
    limit.add_argument("--max-latency-ms", type=float, help="limit on p95 latency per call")
    recommend.add_argument("--max-memory-gb", type=float, help="limit on the model's own bytes")
    recommend.add_argument(
        "--objective", default="throughput", choices=["throughput", "latency", "cost", "energy"]
    )
    recommend.add_argument(
        "--price-per-hour", metavar="FILE", help="YAML 'device: price' or CSV device,price_per_hour"
    )
    recommend.add_argument(
        "--top", type=int, default=10, help="rows to print, as text or JSON (default: 10)"
    )
    where = recommend.add_mutually_exclusive_group()
    where.add_argument(
        "--device",
        action="append",
        metavar="NAME",
        help="a calibrated device of the index, by the name its records carry, e.g. "
        "'AMD EPYC (family 25, model 17)' (repeatable; default: this machine's CPU)",
    )
    where.add_argument(
        "--all-devices", action="store_true", help="rank on every calibrated device of the index"
    )
    decision_arguments(recommend, "a JSON list, best first")
    recommend.set_defaults(func=handle)


def handle(args) -> int:
    from fwbench.families.prediction import answers, recommend

    campaign, problem = campaign_models(args.campaign)
    if problem:
        return fail(problem)
    query, has_twin, image_size, problem = answers.recommend_query(
        model=args.model,
        batch_size=args.batch_size,
        max_latency_ms=args.max_latency_ms,
        max_memory_gb=args.max_memory_gb,
        top=args.top,
        objective=args.objective,
        price_per_hour=args.price_per_hour,
        image_size=args.image_size,
        campaign=campaign,
    )
    if problem:
        return fail(problem)
    out, db_path, problem = indexed(args)
    if problem:
        return fail(problem)
    ceilings, measured = answers.index_tables(db_path)
    problem = answers.unanswerable(query, ceilings, measured)
    if problem:
        return fail(problem)
    ceilings, problem = answers.devices_to_rank(ceilings, args.device, args.all_devices)
    if problem:
        return fail(problem)
    table, source = load_training_table(db_path, out)
    if table.empty or table.model.nunique() < 2 or ceilings.empty:
        return fail(
            "too few measured configurations or no calibrated hardware to recommend from; run "
            "params/sweep_cpu.yaml and params/prediction.yaml first"
        )
    ranking = answers.rank_candidates(query, table, ceilings, measured, has_twin, image_size)
    sentence = recommend.explain(ranking, query)
    if args.json:
        print(answers.recommend_json(ranking, query, args.top))
    else:
        print(answers.recommend_text(ranking, query, sentence, args.top, len(table), source))
    if ranking.ranked.empty:
        if args.json:  # stdout holds the empty list; the sentence names the limits that left it
            print(f"fwbench: {sentence}", file=sys.stderr)
        return EXIT_NOTHING_FITS
    return EXIT_OK
