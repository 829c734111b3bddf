"""What ``fwbench predict`` and ``fwbench recommend`` answer, apart from reading their options and
the calibration run ``predict`` may start: the request and the query checked, this machine's
ceilings in the index, the forecast with the measurement beside it, an epoch's forecast, prices
per device, the ranked candidates, and the text or JSON each command prints.

A check returns the one line that says what is wrong instead of raising: the command prints that
line and exits 2.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from fwbench import vocab
from fwbench.families.prediction import dataset, epochs, forecast, recommend
from fwbench.families.prediction.forecast import Request
from fwbench.families.prediction.recommend import Query
from fwbench.measure.device import cpu_device_name
from fwbench.models.registry import get_spec, require_twin, unknown_model
from fwbench.results import db

# how ``predict`` and ``recommend`` come to know a model of one's own: the campaign that declares
# it (FWBENCH_MODELS and the entry points are read too, but a user has a campaign file at hand)
OWN_MODEL = (
    "a model of your own is read from the campaign that declares it under 'models:' "
    "(--campaign FILE)"
)


def model_spec(model: str, campaign: tuple[str, list[str]] | None = None):
    """(the registry's spec, None), or (None, the line refusing an unknown ``model`` with advice
    that works for ``predict`` and ``recommend``); ``campaign``: the file passed with
    ``--campaign`` and the names it declares."""
    try:
        return get_spec(model), None
    except ValueError as exc:  # a declaration in FWBENCH_MODELS or an entry point that fails
        return None, str(exc)
    except KeyError:
        if campaign is None:
            return None, unknown_model(model, OWN_MODEL)
        path, names = campaign
        declares = ", ".join(sorted(names)) or "no model"
        return None, unknown_model(model, f"{path} declares {declares} under 'models:'")


def predict_request(
    *,
    model: str,
    framework: str,
    mode: str,
    batch_size: int,
    precision: str,
    threads: int | None,
    image_size: int | None,
    epoch_images: int | None,
    campaign: tuple[str, list[str]] | None = None,
) -> tuple[Request | None, str | None]:
    """The request of ``fwbench predict``, checked before any work: (Request, None) or (None, the
    one line that says what is wrong). ``campaign``: as ``model_spec`` takes it."""
    spec, problem = model_spec(model, campaign)
    if problem:
        return None, problem
    try:
        mode = vocab.resolve_mode(framework, mode)
        # PyTorch's own graph on JAX's compiler (torchax) needs no Flax twin
        if framework == "jax" and mode not in vocab.TORCH_GRAPH_MODES:
            require_twin(model)
    except (KeyError, ValueError) as exc:
        return None, str(exc.args[0] if exc.args else exc)
    cores = len(os.sched_getaffinity(0))
    for name, value, top in (
        ("--batch-size", batch_size, None),
        ("--threads", threads, cores),
    ):
        if value is not None and (value < 1 or (top is not None and value > top)):
            bound = f"between 1 and {top} (this machine's cores)" if top else "at least 1"
            return None, f"{name} must be {bound}, got {value}"
    if epoch_images is not None and epoch_images < batch_size:
        return None, (
            f"--epoch-images must hold at least one batch of {batch_size}, got {epoch_images}"
        )
    image_size = image_size or spec.image_size
    if image_size < 32:
        return None, f"--image-size must be at least 32, got {image_size}"
    request = Request(
        model=model,
        framework=framework,
        mode=mode,
        batch_size=batch_size,
        precision=precision,
        threads=threads or cores,
        device="cpu",
        device_name=cpu_device_name(),
        image_size=image_size,
    )
    return request, None


def indexed_ceiling(db_path: Path, request: Request) -> pd.Series | None:
    """This machine's ceilings at the request's precision and threads, if the index has them."""
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


@dataclass
class Prediction:
    """One ``fwbench predict`` answer: the forecast, and what this machine measured beside it."""

    request: Request
    row: pd.DataFrame  # the request's features, which split the model's bytes in the text
    result: dict  # forecast.forecast's keys, "measured", and "epoch" where one was asked for
    measured: dict | None  # forecast.measured_throughput's
    other_sizes: list[int]  # image sizes this configuration was measured at instead
    model_seen: bool  # whether the table learned from this model's own measurements


def predict(table: pd.DataFrame, db_path: Path, request: Request, ceiling: pd.Series) -> Prediction:
    """The forecast for ``request`` on a machine of ``ceiling``, from predictors fitted on
    ``table``, and the newest measurement of that configuration in the index."""
    row = forecast.request_row(request, ceiling)
    result = forecast.forecast(table, row)
    con = db.connect(db_path, read_only=True)
    try:
        every_measurement = dataset.measured(con)
    finally:
        con.close()
    measured = forecast.measured_throughput(every_measurement, request)
    result["measured"] = measured["throughput_img_s"] if measured else None
    return Prediction(
        request=request,
        row=row,
        result=result,
        measured=measured,
        other_sizes=forecast.measured_sizes(every_measurement, request),
        model_seen=request.model in set(table.model),
    )


def epoch_forecast(table, db_path: Path, out: Path, request, result: dict, images: int) -> dict:
    """``predict --epoch-images``: a training step and one epoch of ``images`` (full batches), the
    forward's forecast times the multiple the index's measured training steps of this framework
    teach (other models only, as 21_prediction checks it against timed epochs)."""
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


def predict_json(answer: Prediction) -> str:
    """The answer as ``fwbench predict --json`` prints it: one JSON object."""
    return json.dumps(
        {
            **answer.result,
            "request": vars(answer.request),
            "measured_in": answer.measured,
            "measured_at_other_sizes": answer.other_sizes,
            "model_seen": answer.model_seen,
        }
    )


def predict_text(answer: Prediction, source: str) -> str:
    """The answer for a reader: the forecast, the model's bytes split into parameters and
    activations, the measurement (or where one sits), the epoch where asked, and what the
    predictor learned from (``source``: the table's file or the index)."""
    request, result = answer.request, answer.result
    low, high = result["interval"]["low"], result["interval"]["high"]
    latency = result["latency_ms"]
    scale = dataset.ELEMENT_BYTES[request.precision] / 4
    params_mib = answer.row.param_bytes.iloc[0] * scale / 2**20
    activations_mib = answer.row.peak_activation_bytes.iloc[0] * scale / 2**20
    lines = [
        f"{request.model} · {request.framework} {request.mode} · {request.precision} · batch "
        f"{request.batch_size} · {request.threads} threads · {request.image_size} px · "
        f"{request.device_name}",
        f"  predicted throughput   {result['throughput_img_s']:.4g} img/s "
        f"({result['coverage']:.0%} interval {low:.4g} to {high:.4g})",
        f"  predicted p50 latency  {'n/a' if latency is None else f'{latency:.4g} ms'}",
        f"  model peak memory      {result['peak_mem_bytes'] / 2**20:.1f} MiB (parameters "
        f"{params_mib:.1f} MiB + activations alive at the forward's peak "
        f"{activations_mib:.1f} MiB)",
        _measured_line(answer),
    ]
    epoch = result.get("epoch")
    if epoch:
        lines.append(_epoch_line(epoch, request.framework))
    lines.append(f"  learned from {result['trained_on']} measured configurations ({source})")
    if answer.model_seen:
        lines.append(
            f"  note: {request.model}'s own measurements are among those it learned from, so this "
            "is not a forecast for a model nobody ran"
        )
    return "\n".join(lines)


def _measured_line(answer: Prediction) -> str:
    request, measured = answer.request, answer.measured
    if measured:
        off = answer.result["throughput_img_s"] / measured["throughput_img_s"] - 1
        return (
            f"  measured               {measured['throughput_img_s']:.4g} img/s "
            f"({measured['campaign']} run {measured['run_id']}, {measured['trials']} trials): "
            f"the prediction is {off:+.1%} off"
        )
    if answer.other_sizes:
        sizes = ", ".join(f"{s} px" for s in answer.other_sizes)
        return (
            f"  measured               not at {request.image_size} px; at {sizes} on this "
            "machine (--image-size picks the size to predict)"
        )
    return "  measured               no measurement of this configuration on this machine"


def _epoch_line(epoch: dict, framework: str) -> str:
    if epoch.get("epoch_s") is None:
        return f"  predicted training     n/a: {epoch['reason']}"
    return (
        f"  predicted training     {epoch['step_ms']:.4g} ms a step ({epoch['multiple']:.2f}x "
        f"the forward, from {epoch['multiple_rows']} measured {framework} steps); "
        f"an epoch of {epoch['images']} images ({epoch['steps']} steps) "
        f"{epoch['epoch_s']:.4g} s ({epoch['interval']['low']:.4g} to "
        f"{epoch['interval']['high']:.4g})"
    )


def _read_prices(path: str) -> dict:
    """A price per hour per device name, from YAML (``name: price``) or CSV (``device,
    price_per_hour``); ValueError with the one line to show when the file says anything else."""
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


def recommend_query(
    *,
    model: str,
    batch_size: int | None,
    max_latency_ms: float | None,
    max_memory_gb: float | None,
    top: int,
    objective: str,
    price_per_hour: str | None,
    image_size: int | None,
    campaign: tuple[str, list[str]] | None = None,
) -> tuple[Query | None, bool | None, int | None, str | None]:
    """(Query, has_twin, image size, None) or (None, None, None, the one line that is wrong);
    ``campaign``: as ``model_spec`` takes it."""
    spec, problem = model_spec(model, campaign)
    if problem:
        return None, None, None, problem
    for name, value in (
        ("--batch-size", batch_size),
        ("--max-latency-ms", max_latency_ms),
        ("--max-memory-gb", max_memory_gb),
        ("--top", top),
    ):
        if value is not None and not value > 0:
            return None, None, None, f"{name} must be positive, got {value}"
    if objective == "cost" and not price_per_hour:
        return None, None, None, "--objective cost needs --price-per-hour FILE"
    try:
        prices = _read_prices(price_per_hour) if price_per_hour else None
    except ValueError as exc:
        return None, None, None, str(exc)
    query = Query(
        model=model,
        batch_size=batch_size,
        max_latency_ms=max_latency_ms,
        max_memory_bytes=max_memory_gb * 2**30 if max_memory_gb else None,
        objective=objective,
        prices=prices,
    )
    return query, spec.has_twin, image_size or spec.image_size, None


def index_tables(db_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The index's calibrated hardware (``dataset.ceilings``) and measured configurations
    (``dataset.measured``)."""
    con = db.connect(db_path, read_only=True)
    try:
        return dataset.ceilings(con), dataset.measured(con)
    finally:
        con.close()


def unanswerable(query: Query, ceilings: pd.DataFrame, measured: pd.DataFrame) -> str | None:
    """The one line that refuses a query the index cannot answer, or None: energy where nothing
    measured it, or prices for none of the index's devices."""
    if query.objective == "energy" and not measured.energy_j_per_img.notna().any():
        return (
            "--objective energy: no configuration in the index has an energy measurement (no "
            "RAPL or NVML counter could be read where they ran), and fwbench does not predict "
            "energy"
        )
    if query.prices and not set(query.prices) & set(ceilings.device_name):
        known = ", ".join(sorted(set(ceilings.device_name))) or "none"
        return f"--price-per-hour prices no device in the index; its devices: {known}"
    return None


def rank_candidates(
    query: Query,
    table: pd.DataFrame,
    ceilings: pd.DataFrame,
    measured: pd.DataFrame,
    has_twin: bool,
    image_size: int,
) -> recommend.Ranking:
    """The query's candidates on every identified device of ``ceilings`` (``devices_to_rank``),
    each scored by its measurement at ``image_size`` where one exists, else by predictors fitted
    on ``table``, then limited and ranked."""
    ceilings = ceilings[
        [
            dataset.identified(d, n)
            for d, n in zip(ceilings.device, ceilings.device_name, strict=True)
        ]
    ]
    rows = recommend.candidate_rows(query, table, ceilings, has_twin, image_size)
    measured = measured[measured.image_size == image_size]
    scored = recommend.score(rows, forecast.fit_targets(table), measured)
    return recommend.rank(scored, query)


def devices_to_rank(
    ceilings: pd.DataFrame, names: list[str] | None, every: bool
) -> tuple[pd.DataFrame, str | None]:
    """The calibrated hardware ``recommend`` ranks on: this machine's CPU unless ``names`` are
    given, every device with ``every``; with the one line that refuses a device the index has no
    ceilings for (None when all are there)."""
    if every:
        return ceilings, None
    known = sorted(set(ceilings.device_name))
    wanted = names or [cpu_device_name()]
    missing = [n for n in wanted if n not in known]
    if missing:
        which = f"--device {missing[0]!r}" if names else f"this machine's CPU, {missing[0]},"
        return ceilings.iloc[0:0], (
            f"{which} has no calibration in the index (calibrated: {'; '.join(known) or 'none'}); "
            "`fwbench predict` calibrates this machine (about 30 s), or pass --device NAME or "
            "--all-devices"
        )
    return ceilings[ceilings.device_name.isin(wanted)], None


# what the printed table calls its columns: the device, p95 named, memory in GiB
TEXT_COLUMNS = {
    "device_name": "device",
    "throughput_img_s": "img/s",
    "latency_p95_ms": "p95 ms",
    "peak_mem_gib": "memory GiB",
    "cost_per_million_img": "cost per 1M img",
}


def recommend_json(ranking: recommend.Ranking, query: Query, top: int) -> str:
    """The first ``top`` candidates as ``fwbench recommend --json`` prints them: one list, best
    first, the rows the text's table shows."""
    keys = recommend.JSON_KEYS + (["cost_per_million_img"] if query.prices else [])
    records = ranking.ranked.head(top)[keys].to_dict("records")
    return json.dumps(records, default=lambda v: v.item() if hasattr(v, "item") else str(v))


def recommend_text(
    ranking: recommend.Ranking,
    query: Query,
    sentence: str,
    top: int,
    trained_on: int,
    source: str,
) -> str:
    """The first ``top`` candidates as a table, then the sentence that recommends one (or names the
    limits that left none) and what the predictor learned from."""
    lines = []
    shown = ranking.ranked.head(top).assign(peak_mem_gib=lambda f: f.peak_mem_bytes / 2**30)
    if len(shown):
        columns = [c if c != "peak_mem_bytes" else "peak_mem_gib" for c in recommend.JSON_KEYS]
        columns += ["cost_per_million_img"] if query.prices else []
        table = shown[columns].rename(columns=TEXT_COLUMNS)
        lines.append(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    lines.append(sentence)
    lines.append(f"(learned from {trained_on} configurations, {source})")
    return "\n".join(lines)
