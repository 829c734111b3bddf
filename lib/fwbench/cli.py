"""The ``fwbench`` command: run campaigns, ingest executed notebooks, query results, build reports.

Exit status: 0 ok, 1 some cell failed, 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from fwbench.results import db

EXIT_OK, EXIT_CELL_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _fail(message: str) -> int:
    print(f"fwbench: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def cmd_run(args) -> int:
    from fwbench.pipeline.campaign import CampaignError, load_campaign, valid_invocations
    from fwbench.pipeline.runner import RunnerBusy, run_series
    from fwbench.pipeline.slurm import EXECUTORS, SlurmSettings, SlurmUnavailable, parse_options

    if args.executor not in EXECUTORS:
        return _fail(f"--executor must be one of {', '.join(EXECUTORS)}, got {args.executor!r}")
    slurm_only = [
        flag
        for flag, value in (("--partition", args.partition), ("--slurm-option", args.slurm_option))
        if value
    ]
    if args.executor != "slurm" and slurm_only:
        return _fail(f"{' and '.join(slurm_only)} only apply with --executor slurm")
    invocations = None
    if args.invocations is not None:
        # read here rather than by argparse, whose refusal is a usage block, not one line
        text = args.invocations.strip()
        invocations = int(text) if re.fullmatch(r"[0-9]+", text) else None
        if not valid_invocations(invocations):
            return _fail(f"--invocations must be a positive integer, got {args.invocations!r}")
    try:
        campaign = load_campaign(args.params)
        slurm = (
            SlurmSettings(args.partition, parse_options(args.slurm_option), args.array_parallelism)
            if args.executor == "slurm"
            else None
        )
    except (CampaignError, SlurmUnavailable) as exc:
        return _fail(str(exc))
    invocations = invocations or campaign.invocations
    for reason in campaign.skipped:
        print(f"fwbench: skipping {reason}", file=sys.stderr)
    cells = campaign.select(args.only)
    if not cells:
        return _fail(f"--only {args.only!r} matches no cell of campaign {campaign.name}")
    out = Path(args.out)
    db_path = Path(args.db) if args.db else db.default_db_path(out)
    if args.dry_run:
        return _dry_run(args, campaign, cells, out, db_path, invocations)
    refused: list[str] = []

    def ingest_run(outcome) -> None:
        # each run as it ends, so that a series stopped half-way leaves its finished runs indexed
        failed = [k for k, r in outcome.results.items() if r.status != "ok"]
        try:
            counts = db.ingest(outcome.run_dir, db_path)
        except db.IngestError as exc:
            print(f"fwbench: ingest refused: {exc}", file=sys.stderr)
            refused.append(str(outcome.run_dir))
            return
        place = (
            f" (invocation {outcome.invocation} of {outcome.invocations})"
            if outcome.invocations > 1
            else ""
        )
        print(
            f"{outcome.run_dir}: {len(outcome.results) - len(failed)} ok, {len(failed)} not ok; "
            f"{counts['measurements']} records in {db_path}{place}",
            flush=True,
        )

    try:
        outcomes = run_series(
            campaign,
            out,
            invocations=invocations,
            resume=args.resume,
            only=args.only,
            timeout=args.timeout,
            slurm=slurm,
            after_run=ingest_run,
        )
    except (RunnerBusy, CampaignError, SlurmUnavailable) as exc:
        return _fail(str(exc))
    if refused:
        return EXIT_CELL_FAILED
    failed = any(r.status != "ok" for o in outcomes for r in o.results.values())
    if campaign.report and not args.only:
        from fwbench.report.render import ReportError, build_report

        # once, after the last run: the report reads every run of the campaign from the index
        try:
            print(
                build_report(
                    campaign.name, out=out, db_path=db_path, run_id=outcomes[-1].run_dir.name
                )
            )
        except ReportError as exc:
            print(f"fwbench: report failed: {exc}", file=sys.stderr)
            return EXIT_CELL_FAILED
    return EXIT_CELL_FAILED if failed else EXIT_OK


def _dry_run(args, campaign, cells, out: Path, db_path: Path, invocations: int) -> int:
    """List the cells the next run would run, in its order, and what the whole request costs."""
    from fwbench.pipeline.campaign import CampaignError
    from fwbench.pipeline.runner import done_cells, ordered_cells, series_left, series_of

    new_runs, resumed, last = invocations, None, 0
    if args.resume:
        try:
            run_dir, manifest, new_runs = series_left(out, campaign.name, invocations)
        except CampaignError as exc:
            return _fail(str(exc))
        if run_dir is not None:
            done = done_cells(run_dir, manifest)
            resumed = [c for c in cells if c.key not in done]
            print(
                f"resuming run {manifest['run_id']}: {len(cells) - len(resumed)} of the "
                f"{len(cells)} selected cells are done",
                file=sys.stderr,
            )
            _, last = series_of(manifest)
            if new_runs:
                print(
                    f"then {new_runs} new run{'s' if new_runs != 1 else ''} of its series "
                    f"(invocations {last + 1} to {last + new_runs} of {invocations})",
                    file=sys.stderr,
                )
            if not resumed and not new_runs:
                return EXIT_OK
    # the order the next run would follow, rounds of interleaved trials included: the resumed
    # run's recorded one, else the one a new run draws from its own seed
    if resumed:
        listed = ordered_cells(campaign, resumed, dict(manifest))
    else:
        listed = ordered_cells(campaign, cells, {}, campaign.seed + last)
    for cell in listed:
        print(cell.key)
    if resumed:
        then = f", then {len(cells)} cells × {new_runs} invocations" if new_runs else ""
        what = f"{len(resumed)} cells{then}"
    elif new_runs > 1:
        what = f"{len(cells)} cells × {new_runs} invocations"
    else:
        what = f"{len(cells)} cells"
    print(f"{what}; campaign file is valid", file=sys.stderr)
    if resumed and db_path.exists():
        _print_estimate(campaign, resumed, db_path)
        if new_runs:
            print(f"then {new_runs} new run{'s' if new_runs != 1 else ''}:", file=sys.stderr)
    if new_runs or not db_path.exists():  # without an index, the one line that says so
        _print_estimate(campaign, cells, db_path, new_runs)
    return EXIT_OK


def _print_estimate(campaign, cells, db_path: Path, invocations: int = 1) -> None:
    """Per-step durations from earlier runs in the index, to stderr beside the cell list."""
    from fwbench.pipeline import estimate

    if not db_path.exists():
        print(
            f"no duration estimate: no index at {db_path} (`fwbench ingest` builds it from the "
            "executed notebooks)",
            file=sys.stderr,
        )
        return
    for line in estimate.render(estimate.estimate(campaign, cells, db_path), invocations):
        print(line, file=sys.stderr)


def cmd_ingest(args) -> int:
    root = Path(args.dir)
    db_path = Path(args.db) if args.db else db.default_db_path(root)
    try:
        counts = db.ingest(root, db_path)
    except db.IngestError as exc:
        return _fail(str(exc))
    gone = f"; {counts['dropped']} runs no longer on disk dropped" if counts["dropped"] else ""
    print(
        f"{db_path}: {counts['runs']} runs, {counts['cells']} cells, "
        f"{counts['measurements']} records{gone}"
    )
    return EXIT_OK


def cmd_query(args) -> int:
    import duckdb

    db_path = Path(args.db) if args.db else db.default_db_path()
    try:
        frame = db.query(args.sql, db_path)
    except FileNotFoundError as exc:
        return _fail(str(exc))
    except duckdb.Error as exc:
        return _fail(f"query failed: {exc}")
    frame.to_csv(sys.stdout, index=False)
    return EXIT_OK


def cmd_regressions(args) -> int:
    from fwbench.report import regressions

    db_path = Path(args.db) if args.db else db.default_db_path()
    if not db_path.exists():
        return _fail(f"no database at {db_path}; run `fwbench ingest` first")
    known = regressions.campaigns(db_path)
    if args.campaign is not None and args.campaign not in known:
        return _fail(
            f"unknown campaign {args.campaign!r} in {db_path}; known: {', '.join(known) or 'none'}"
        )
    histories = regressions.load_histories(db_path, args.campaign)
    found = regressions.find_regressions(histories, with_campaign=args.campaign is None)
    found.to_csv(sys.stdout, index=False)
    return EXIT_OK


def cmd_report(args) -> int:
    from fwbench.report.render import ReportError, build_report

    out = Path(args.out)
    db_path = Path(args.db) if args.db else db.default_db_path(out)
    try:
        into = {}
        if args.into:
            from fwbench.report.render import repo_root

            root = repo_root()
            into = {
                "report_dir": root / "report" / args.into,
                "figures_dir": root / "figures" / args.into,
            }
        path = build_report(args.campaign, out=out, db_path=db_path, run_id=args.run_id, **into)
    except ReportError as exc:
        return _fail(str(exc))
    print(path)
    return EXIT_OK


def cmd_readme(args) -> int:
    from fwbench.report.readme import ReadmeError, update_readme

    try:
        changed = update_readme(args.campaign, Path(args.readme), Path(args.out), into=args.into)
    except ReadmeError as exc:
        return _fail(str(exc))
    print(f"{args.readme}: results block {'rewritten' if changed else 'already up to date'}")
    return EXIT_OK


def cmd_memory_index(args) -> int:
    from fwbench.report import memory_index
    from fwbench.report.readme import ReadmeError

    try:
        if args.readme:
            changed = memory_index.update_readme(Path(args.readme), Path(args.reports))
            print(f"{args.readme}: memory index {'rewritten' if changed else 'already up to date'}")
        else:
            table = memory_index.index_table(Path(args.reports))
            print(memory_index.markdown(table, Path(args.reports).as_posix()))
    except (ReadmeError, memory_index.MemoryIndexError) as exc:
        return _fail(str(exc))
    return EXIT_OK


QUICK_CALIBRATION = "params/calibrate_quick.yaml"


def _predict_request(args):
    """The request of ``fwbench predict``, checked before any work: (Request, None) or (None, the
    one line that says what is wrong)."""
    import os

    from fwbench import vocab
    from fwbench.families.prediction.forecast import Request
    from fwbench.measure.device import cpu_device_name
    from fwbench.models.registry import get_spec, require_twin

    try:
        spec = get_spec(args.model)
        if args.framework == "jax":
            require_twin(args.model)
        mode = vocab.resolve_mode(args.framework, args.mode)
    except (KeyError, ValueError) as exc:
        return None, str(exc.args[0] if exc.args else exc)
    cores = len(os.sched_getaffinity(0))
    for name, value, top in (
        ("--batch-size", args.batch_size, None),
        ("--threads", args.threads, cores),
    ):
        if value is not None and (value < 1 or (top is not None and value > top)):
            bound = f"between 1 and {top} (this machine's cores)" if top else "at least 1"
            return None, f"{name} must be {bound}, got {value}"
    epoch_images = getattr(args, "epoch_images", None)
    if epoch_images is not None and epoch_images < args.batch_size:
        return None, (
            f"--epoch-images must hold at least one batch of {args.batch_size}, got {epoch_images}"
        )
    image_size = args.image_size or spec.image_size
    if image_size < 32:
        return None, f"--image-size must be at least 32, got {image_size}"
    request = Request(
        model=args.model,
        framework=args.framework,
        mode=mode,
        batch_size=args.batch_size,
        precision=args.precision,
        threads=args.threads or cores,
        device="cpu",
        device_name=cpu_device_name(),
        image_size=image_size,
    )
    return request, None


def _machine_ceiling(db_path: Path, out: Path, request):
    """This machine's ceilings at the request's precision and threads; measured first (a quick
    02_calibrate, executed and indexed like any run) when the index has none. None if that fails."""
    from fwbench.families.prediction import dataset

    def lookup():
        con = db.connect(db_path, read_only=True)
        try:
            table = dataset.ceilings(con)
        finally:
            con.close()
        match = table[
            (table.device_name == request.device_name)
            & (table.precision == request.precision)
            & (table.threads == request.threads)
        ]
        return match.iloc[0] if len(match) else None

    found = lookup() if db_path.exists() else None
    if found is not None:
        return found
    from fwbench.pipeline.campaign import CampaignError, find_repo_root, load_campaign
    from fwbench.pipeline.runner import RunnerBusy, run_campaign

    print(
        f"fwbench: no {request.precision} ceilings with {request.threads} threads for "
        f"{request.device_name} in the index; calibrating first (about 30 s)",
        file=sys.stderr,
    )
    only = f"*precision={request.precision}__threads={request.threads}*"
    try:
        campaign = load_campaign(find_repo_root(Path.cwd()) / QUICK_CALIBRATION)
        if not campaign.select(only):
            return None
        run_dir, _ = run_campaign(campaign, out, only=only)
    except (CampaignError, RunnerBusy) as exc:
        print(f"fwbench: calibration failed: {exc}", file=sys.stderr)
        return None
    db.ingest(run_dir, db_path)
    return lookup()


def _indexed(args) -> tuple[Path, Path, str | None]:
    """The executed folder and the index ``predict`` and ``recommend`` read, the index built from
    the folder first where it is missing (a fresh clone); the one line to fail with if neither
    exists."""
    out = Path(args.out)
    db_path = Path(args.db) if args.db else db.default_db_path(out)
    if not db_path.exists():
        if not out.is_dir():
            return out, db_path, f"no index at {db_path} and no executed notebooks at {out}"
        print(f"fwbench: no index at {db_path}; indexing {out} first", file=sys.stderr)
        db.ingest(out, db_path)
    return out, db_path, None


def _training_table(db_path: Path, out: Path):
    """The newest 21_prediction run's table, else one built from the index (slower: every
    measured model's features)."""
    from tqdm.auto import tqdm

    from fwbench.families.prediction import forecast

    if forecast.latest_table(out) is None:
        print("fwbench: no 21_prediction table; building one from the index", file=sys.stderr)
    return forecast.training_table(
        out, db_path, progress=lambda items: tqdm(items, desc="features")
    )


def cmd_predict(args) -> int:
    import json
    import math

    from fwbench.families.prediction import dataset, forecast

    request, problem = _predict_request(args)
    if problem:
        return _fail(problem)
    out, db_path, problem = _indexed(args)
    if problem:
        return _fail(problem)
    table, source = _training_table(db_path, out)
    if table.empty or table.model.nunique() < 2:
        return _fail(
            "too few measured configurations to learn from; run params/sweep_cpu.yaml "
            "(or any inference campaign) and 21_prediction first"
        )
    ceiling = _machine_ceiling(db_path, out, request)
    if ceiling is None:
        return _fail(
            f"no {request.precision} ceilings with {request.threads} threads for "
            f"{request.device_name}, and {QUICK_CALIBRATION} has no such cell"
        )
    row = forecast.request_row(request, ceiling)
    result = forecast.forecast(table, row)
    con = db.connect(db_path, read_only=True)
    try:
        every_measurement = dataset.measured(con)
    finally:
        con.close()
    measured = forecast.measured_throughput(every_measurement, request)
    other_sizes = forecast.measured_sizes(every_measurement, request)
    result["measured"] = measured["throughput_img_s"] if measured else None
    if args.epoch_images is not None:
        result["epoch"] = _epoch_forecast(table, db_path, out, request, result, args.epoch_images)
    if args.json:
        seen = request.model in set(table.model)
        print(
            json.dumps(
                {
                    **result,
                    "request": vars(request),
                    "measured_in": measured,
                    "measured_at_other_sizes": other_sizes,
                    "model_seen": seen,
                }
            )
        )
        return EXIT_OK
    low, high = result["interval"]["low"], result["interval"]["high"]
    print(
        f"{request.model} · {request.framework} {request.mode} · {request.precision} · batch "
        f"{request.batch_size} · {request.threads} threads · {request.image_size} px · "
        f"{request.device_name}"
    )
    print(
        f"  predicted throughput   {result['throughput_img_s']:.4g} img/s "
        f"({result['coverage']:.0%} interval {low:.4g} to {high:.4g})"
    )
    latency = result["latency_ms"]
    print(f"  predicted p50 latency  {'n/a' if latency is None else f'{latency:.4g} ms'}")
    scale = dataset.ELEMENT_BYTES[request.precision] / 4
    params_mib = row.param_bytes.iloc[0] * scale / 2**20
    activations_mib = row.peak_activation_bytes.iloc[0] * scale / 2**20
    print(
        f"  model peak memory      {result['peak_mem_bytes'] / 2**20:.1f} MiB (parameters "
        f"{params_mib:.1f} MiB + activations alive at the forward's peak {activations_mib:.1f} MiB)"
    )
    if measured:
        off = result["throughput_img_s"] / measured["throughput_img_s"] - 1
        print(
            f"  measured               {measured['throughput_img_s']:.4g} img/s "
            f"({measured['campaign']} run {measured['run_id']}, {measured['trials']} trials): "
            f"the prediction is {off:+.1%} off"
        )
    elif other_sizes:
        sizes = ", ".join(f"{s} px" for s in other_sizes)
        print(
            f"  measured               not at {request.image_size} px; at {sizes} on this "
            "machine (--image-size picks the size to predict)"
        )
    else:
        print("  measured               no measurement of this configuration on this machine")
    epoch = result.get("epoch")
    if epoch and epoch.get("epoch_s") is not None:
        print(
            f"  predicted training     {epoch['step_ms']:.4g} ms a step ({epoch['multiple']:.2f}x "
            f"the forward, from {epoch['multiple_rows']} measured {request.framework} steps); "
            f"an epoch of {epoch['images']} images ({epoch['steps']} steps) "
            f"{epoch['epoch_s']:.4g} s ({epoch['interval']['low']:.4g} to "
            f"{epoch['interval']['high']:.4g})"
        )
    elif epoch:
        print(f"  predicted training     n/a: {epoch['reason']}")
    print(f"  learned from {result['trained_on']} measured configurations ({source})")
    if request.model in set(table.model):
        print(
            f"  note: {request.model}'s own measurements are among those it learned from, so this "
            "is not a forecast for a model nobody ran"
        )
    return EXIT_OK if not math.isnan(result["throughput_img_s"]) else EXIT_CELL_FAILED


def _epoch_forecast(table, db_path: Path, out: Path, request, result: dict, images: int) -> dict:
    """``predict --epoch-images``: a training step and one epoch of ``images`` (full batches), the
    forward's forecast times the multiple the index's measured training steps of this framework
    teach (other models only, as 21_prediction checks it against timed epochs)."""
    import math

    from fwbench.families.prediction import dataset, epochs

    steps = epochs.latest_steps(out)
    if steps is None:
        con = db.connect(db_path, read_only=True)
        try:
            measured_steps, _ = epochs.measured(con)
            hardware = dataset.ceilings(con)
        finally:
            con.close()
        steps = epochs.with_forward(table, epochs.with_features(measured_steps, hardware))
    count = images // request.batch_size
    found = {"images": count * request.batch_size, "steps": count}
    learned = epochs.multiple_for(steps, request.framework, request.model)
    if not learned[2]:
        return {
            **found,
            "epoch_s": None,
            "reason": f"no measured {request.framework} training step of another model in the "
            "index (params/epoch_check.yaml measures some)",
        }
    forward_s = request.batch_size / result["throughput_img_s"]
    half_width = math.log(result["throughput_img_s"] / result["interval"]["low"])
    epoch = epochs.forecast_epoch(forward_s, half_width, learned, count)
    return {
        **found,
        "step_ms": epoch["epoch_s"] / count * 1000,
        "epoch_s": epoch["epoch_s"],
        "interval": {"low": epoch["low"], "high": epoch["high"]},
        "multiple": learned[0],
        "multiple_rows": learned[2],
    }


def _prices(path: str) -> dict:
    """A price per hour per device name, from YAML (``name: price``) or CSV (``device,
    price_per_hour``); ValueError with the one line to show when the file says anything else."""
    import csv

    import yaml

    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--price-per-hour: no file {path}")
    text = file.read_text()
    try:
        if file.suffix.lower() == ".csv":
            rows = list(csv.DictReader(text.splitlines()))
            table = {row["device"]: row["price_per_hour"] for row in rows}
        else:
            table = yaml.safe_load(text)
    except (KeyError, yaml.YAMLError, csv.Error) as exc:
        raise ValueError(
            f"--price-per-hour {path}: expected YAML 'device name: price' lines or a CSV with "
            f"columns device,price_per_hour ({exc})"
        ) from None
    if not isinstance(table, dict) or not table:
        raise ValueError(f"--price-per-hour {path}: expected a mapping of device name to price")
    prices = {}
    for name, price in table.items():
        try:
            prices[str(name)] = float(price)
        except (TypeError, ValueError):
            raise ValueError(
                f"--price-per-hour {path}: price of {name!r} is not a number"
            ) from None
        if not prices[str(name)] > 0:
            raise ValueError(f"--price-per-hour {path}: price of {name!r} must be positive")
    return prices


def _recommend_query(args):
    """(Query, has_twin, image size, None) or (None, None, None, the one line that is wrong)."""
    from fwbench.families.prediction.recommend import Query
    from fwbench.models.registry import get_spec

    try:
        spec = get_spec(args.model)
    except KeyError as exc:
        return None, None, None, str(exc.args[0])
    for name, value in (
        ("--batch-size", args.batch_size),
        ("--max-latency-ms", args.max_latency_ms),
        ("--max-memory-gb", args.max_memory_gb),
        ("--top", args.top),
    ):
        if value is not None and not value > 0:
            return None, None, None, f"{name} must be positive, got {value}"
    if args.objective == "cost" and not args.price_per_hour:
        return None, None, None, "--objective cost needs --price-per-hour FILE"
    try:
        prices = _prices(args.price_per_hour) if args.price_per_hour else None
    except ValueError as exc:
        return None, None, None, str(exc)
    query = Query(
        model=args.model,
        batch_size=args.batch_size,
        max_latency_ms=args.max_latency_ms,
        max_memory_bytes=args.max_memory_gb * 2**30 if args.max_memory_gb else None,
        objective=args.objective,
        prices=prices,
    )
    return query, spec.has_twin, args.image_size or spec.image_size, None


def cmd_recommend(args) -> int:
    import json

    from fwbench.families.prediction import dataset, forecast, recommend

    query, has_twin, image_size, problem = _recommend_query(args)
    if problem:
        return _fail(problem)
    out, db_path, problem = _indexed(args)
    if problem:
        return _fail(problem)
    con = db.connect(db_path, read_only=True)
    try:
        ceilings = dataset.ceilings(con)
        measured = dataset.measured(con)
    finally:
        con.close()
    if query.objective == "energy" and not measured.energy_j_per_img.notna().any():
        return _fail(
            "--objective energy: no configuration in the index has an energy measurement (no "
            "RAPL or NVML counter could be read where they ran), and fwbench does not predict energy"
        )
    if query.prices and not set(query.prices) & set(ceilings.device_name):
        known = ", ".join(sorted(set(ceilings.device_name))) or "none"
        return _fail(f"--price-per-hour prices no device in the index; its devices: {known}")
    table, source = _training_table(db_path, out)
    if table.empty or table.model.nunique() < 2 or ceilings.empty:
        return _fail(
            "too few measured configurations or no calibrated hardware to recommend from; run "
            "params/sweep_cpu.yaml and params/prediction.yaml first"
        )
    ceilings = ceilings[
        [
            dataset.identified(d, n)
            for d, n in zip(ceilings.device, ceilings.device_name, strict=True)
        ]
    ]
    rows = recommend.candidate_rows(query, table, ceilings, has_twin, image_size)
    measured = measured[measured.image_size == image_size]
    scored = recommend.score(rows, forecast.fit_targets(table), measured)
    ranking = recommend.rank(scored, query)
    sentence = recommend.explain(ranking, query)
    if args.json:
        keys = recommend.JSON_KEYS + (["cost_per_million_img"] if query.prices else [])
        records = ranking.ranked[keys].to_dict("records")
        print(json.dumps(records, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
    else:
        shown = ranking.ranked.head(args.top)
        if len(shown):
            columns = [c for c in recommend.JSON_KEYS if c != "device_name"]
            columns += ["cost_per_million_img"] if query.prices else []
            print(shown[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(sentence)
        print(f"(p95 latency in latency_ms; learned from {len(table)} configurations, {source})")
    return EXIT_OK if len(ranking.ranked) else EXIT_CELL_FAILED


def _name(text: str) -> str:
    """A folder name for --into: letters, digits, '_' and '-' only, so it cannot leave report/."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a name (letters, digits, _ and -)")
    return text


def _decision_arguments(parser: argparse.ArgumentParser, json_help: str) -> None:
    """What ``predict`` and ``recommend`` both take."""
    parser.add_argument("--image-size", type=int, help="default: the model's own")
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--out", default="executed", help="executed-notebook folder")
    parser.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else OUT/fwbench.duckdb)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fwbench",
        description="How JAX and PyTorch compare, per model and hardware, and why.",
        epilog="Exit status: 0 ok, 1 some cell failed, 2 bad input (nothing written).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="execute a campaign (params/*.yaml) cell by cell with papermill",
        description="Validate every cell of a campaign against its notebook's parameters cell, "
        "then execute each cell in a fresh kernel into "
        "OUT/<campaign>/<run_id>/<notebook>/<slug>.ipynb and ingest the results.",
    )
    run.add_argument("params", help="campaign file, e.g. params/smoke.yaml")
    run.add_argument("--out", default="executed", help="output folder (default: executed)")
    run.add_argument(
        "--resume",
        action="store_true",
        help="re-run only cells without an ok result in the latest run of this campaign, then "
        "start the runs its series still lacks (see --invocations)",
    )
    run.add_argument(
        "--invocations",
        metavar="N",
        help="repeat the campaign as N runs, one after the other, each with its own run id and "
        "manifest (default: the campaign's 'invocations', else 1); a report runs once, after "
        "the last",
    )
    run.add_argument("--only", metavar="GLOB", help="run only cells whose notebook/slug matches")
    run.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="limit for each code cell of a notebook; past it the cell is recorded as timeout",
    )
    run.add_argument("--db", help="database path (default: $FWBENCH_DB, else OUT/fwbench.duckdb)")
    run.add_argument(
        "--executor",
        default="local",
        help="where cells run: local (kernels of this process, the default) or slurm (one job "
        "array per step or round of trials, through submitit; OUT must be on a filesystem the "
        "nodes share)",
    )
    run.add_argument("--partition", help="Slurm partition for --executor slurm")
    run.add_argument(
        "--slurm-option",
        action="append",
        metavar="KEY=VALUE",
        help="an sbatch setting for --executor slurm, as submitit names it (time=MINUTES, "
        "account=A, gpus_per_node=N, cpus_per_task=N, exclusive=false, ...); repeatable",
    )
    run.add_argument(
        "--array-parallelism",
        type=int,
        default=1,
        metavar="N",
        help="Slurm jobs of one array running at once (default 1: timing cells never share a "
        "node with each other)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="validate and list the cells, with each step's estimated duration from earlier "
        "runs in the index; execute nothing",
    )
    run.set_defaults(func=cmd_run)

    ingest = sub.add_parser(
        "ingest",
        help="build or update the DuckDB index from executed notebooks (idempotent)",
        description="Read every executed notebook under DIR, validate its records against the "
        "JSON Schema and replace the rows of each run in the database.",
    )
    ingest.add_argument(
        "dir", nargs="?", default="executed", help="folder to scan (default: executed)"
    )
    ingest.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else DIR/fwbench.duckdb)"
    )
    ingest.set_defaults(func=cmd_ingest)

    query = sub.add_parser(
        "query",
        help="run SQL against the index, print CSV",
        description="Tables: runs, cells, measurements (columns of DESIGN.md section 4).",
    )
    query.add_argument("sql", help='e.g. "select count(*) from measurements"')
    query.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else executed/fwbench.duckdb)"
    )
    query.set_defaults(func=cmd_query)

    regressions = sub.add_parser(
        "regressions",
        help="find the runs where a metric's level changed, over each configuration's history",
        description="For every metric and configuration (model, framework, mode, device_name, "
        "precision, batch_size) of a campaign, take one point per run (the median of the run's "
        "ok values: its trials), find where the level moved with a change-point search and "
        "keep a change when a t-test between the runs before and after it gives p < 0.01 and "
        "the level moved by at least 6%. Prints CSV: metric, configuration, run_id (the first "
        "run at the new level), change_pct (signed: new level over old, minus one, in percent; "
        "whether up is worse depends on the metric) and p_value. A history needs 4 runs; a "
        "change shows once 2 runs carry it. Only the header when nothing changed.",
        epilog="Without --campaign every campaign is read, each on its own, and the configuration "
        "names its campaign. Exit status: 0 ran (alerts or not), 2 unknown campaign or no "
        "database.",
    )
    regressions.add_argument("--campaign", help="campaign to read (default: all, each separately)")
    regressions.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else executed/fwbench.duckdb)"
    )
    regressions.set_defaults(func=cmd_regressions)

    report = sub.add_parser(
        "report",
        help="run the analysis notebook for a campaign and assemble report/<campaign>/",
        description="Executes notebooks/20_analysis.py for the campaign's latest run and writes "
        "report/<campaign>/report.md, report.html, tables and figures/<campaign>/.",
    )
    report.add_argument("campaign", help="campaign name, e.g. smoke")
    report.add_argument("--run-id", help="run to report (default: the latest of the campaign)")
    report.add_argument(
        "--into",
        metavar="NAME",
        type=_name,
        help="write report/NAME and figures/NAME instead of report/CAMPAIGN: a second report of "
        "one campaign, such as its run on another CPU (pass --run-id)",
    )
    report.add_argument(
        "--out", default="executed", help="executed-notebook folder (default: executed)"
    )
    report.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else OUT/fwbench.duckdb)"
    )
    report.set_defaults(func=cmd_report)

    readme = sub.add_parser(
        "readme",
        help="rewrite README.md's results block of a campaign from report/<campaign>/",
        description="Replace the lines between <!-- results:CAMPAIGN:start --> and "
        "<!-- results:CAMPAIGN:end --> in the README with the run, contention reading, JAX ÷ "
        "PyTorch ratios, training, MFU, share of the roofline bound, trust figures and "
        "why-sentences read from report/<campaign>/ (content.json, tables/*.csv) beside it. "
        "Nothing else in the README changes; build the report first with `fwbench report "
        "CAMPAIGN`.",
    )
    readme.add_argument("campaign", help="campaign whose report to quote, e.g. smoke")
    readme.add_argument(
        "--into",
        metavar="NAME",
        type=_name,
        help="quote report/NAME (built by `fwbench report CAMPAIGN --into NAME`) in the block "
        "marked <!-- results:NAME:start -->",
    )
    readme.add_argument(
        "--readme", default="README.md", help="file to rewrite (default: README.md)"
    )
    readme.add_argument(
        "--out", default="executed", help="executed-notebook folder to link to (default: executed)"
    )
    readme.set_defaults(func=cmd_readme)
    memory = sub.add_parser(
        "memory-index",
        help="every memory campaign's cells in one table, from the reports already built",
        description="Read report/*/tables/memory_curve.csv (written by `fwbench report` for "
        "each campaign that ran 12_memory) and print one markdown row per campaign and cell: "
        "the CPU, the trials, the activation goal of our plan and of torch.utils.checkpoint "
        "(meets, misses or undecided at +33% time, from intervals over trials), the simulator's "
        "peak error, whether its time model is within 5% (yes, no, or not shown where an "
        "interval over trials straddles the bar) with the interval reaching farthest, and the "
        "float64 proof. The verdicts are the reports' own.",
        epilog="Exit status: 0 written or printed, 2 no report with a memory curve, or a README "
        "without the lines <!-- results:memory_index:start --> and <!-- results:memory_index:end "
        "-->.",
    )
    memory.add_argument(
        "--reports", default="report", help="folder of built reports (default: report)"
    )
    memory.add_argument(
        "--readme",
        metavar="FILE",
        help="rewrite the block between FILE's memory_index markers instead of printing",
    )
    memory.set_defaults(func=cmd_memory_index)
    predict = sub.add_parser(
        "predict",
        help="predict a configuration's throughput, latency and memory without running it",
        description="Predict throughput (img/s, with an interval), p50 latency and the model's own "
        "peak bytes for any torchvision classification model on this machine, from the features "
        "of its shapes (no timing) and the predictor fitted on the committed sweep. Shows the "
        "measurement too where one exists. A machine without ceilings in the index is calibrated "
        "first (about 30 s, executed and indexed like any run).",
    )
    predict.add_argument("--model", required=True, help="e.g. resnet50, convnext_tiny")
    predict.add_argument("--framework", required=True, choices=["torch", "jax"])
    predict.add_argument("--batch-size", required=True, type=int)
    predict.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    predict.add_argument("--threads", type=int, help="intra-op threads (default: all cores)")
    predict.add_argument("--mode", default="default", help="eager, compile, jit (default: default)")
    predict.add_argument(
        "--epoch-images",
        type=int,
        metavar="N",
        help="also forecast a training step and one epoch over N images (full batches)",
    )
    _decision_arguments(predict, "one JSON object on stdout")
    predict.set_defaults(func=cmd_predict)
    recommend = sub.add_parser(
        "recommend",
        help="rank configurations of a model: measured where they ran, predicted elsewhere",
        description="Rank the candidate configurations of a model (framework, mode, precision, "
        "batch size, threads, every calibrated device in the index) by an objective, after "
        "dropping those over the latency or memory limit. Each row says whether it was measured "
        "or predicted, and whether it lies on the Pareto front over throughput, p95 latency, "
        "memory and (with prices) cost. The first row is the recommendation.",
    )
    recommend.add_argument("--model", required=True, help="any torchvision classification model")
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
    recommend.add_argument("--top", type=int, default=10, help="rows to print (default: 10)")
    _decision_arguments(recommend, "a JSON list, best first")
    recommend.set_defaults(func=cmd_recommend)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
