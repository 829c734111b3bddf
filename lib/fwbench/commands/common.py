"""What several commands share: the exit statuses, the one-line refusal, the names ``--into`` and
``slides`` take, the ingest's progress bar, and what ``predict`` and ``recommend`` both take and
read: their options, the models a campaign declares, the index and the training table."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

EXIT_OK, EXIT_CELL_FAILED, EXIT_BAD_INPUT = 0, 1, 2
# not 1: nothing failed, the index holds no configuration within the user's limits
EXIT_NOTHING_FITS = 3


def fail(message: str) -> int:
    print(f"fwbench: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def folder_name(text: str) -> str:
    """A folder name for --into: letters, digits, '_' and '-' only, so it cannot leave report/."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a name (letters, digits, _ and -)")
    return text


def notebook_bar(notebooks):
    """A progress bar on stderr over the executed notebooks an ingest reads: a whole executed/
    folder takes minutes, and stdout keeps the one line of counts."""
    from tqdm.auto import tqdm

    return tqdm(notebooks, desc="ingest", unit="notebook")


# how ``predict`` and ``recommend`` come to know a model of one's own, for their --help
OWN_MODELS_HELP = (
    "A model of your own is known by the campaign that declares it: --campaign FILE reads its "
    "'models:' section (nothing else of the file, and no step runs). A model declared in "
    "$FWBENCH_MODELS (JSON: name -> declaration, as a campaign's kernels get it) or shipped by an "
    "installed package's 'fwbench.models' entry point is known without it."
)


def decision_arguments(parser: argparse.ArgumentParser, json_help: str) -> None:
    """What ``predict`` and ``recommend`` both take."""
    parser.add_argument(
        "--campaign",
        metavar="FILE",
        help="a campaign file whose 'models:' declarations (your own models) --model may name",
    )
    parser.add_argument("--image-size", type=int, help="default: the model's own")
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.add_argument("--out", default="executed", help="executed-notebook folder")
    parser.add_argument(
        "--db", help="database path (default: $FWBENCH_DB, else OUT/fwbench.duckdb)"
    )


def campaign_models(path: str | None) -> tuple[tuple[str, list[str]] | None, str | None]:
    """The models the campaign file at ``path`` declares, registered in this process: (the file
    and the names it declares, None), (None, None) without a file, or (None, the one line that
    refuses it: a missing file, malformed YAML, a declaration that does not import)."""
    if path is None:
        return None, None
    from fwbench.pipeline.campaign import CampaignError, declared_models

    try:
        return (path, sorted(declared_models(path))), None
    except CampaignError as exc:
        return None, str(exc)


def indexed(args) -> tuple[Path, Path, str | None]:
    """The executed folder and the index ``predict`` and ``recommend`` read, the index built from
    the folder first where it is missing (a fresh clone); the one line to fail with if neither
    exists."""
    from fwbench.lab import Lab

    lab = Lab.at(args.out, args.db)
    if not lab.db_path.exists() and lab.out.is_dir():
        print(f"fwbench: no index at {lab.db_path}; indexing {lab.out} first", file=sys.stderr)
    return lab.out, lab.db_path, lab.ensure_index(progress=notebook_bar)


def load_training_table(db_path: Path, out: Path):
    """The newest 21_prediction run's table, else one built from the index (slower: every
    measured model's features)."""
    from tqdm.auto import tqdm

    from fwbench.families.prediction import forecast, frozen
    from fwbench.results.layout import find_repo_root

    if forecast.latest_table(out) is None:
        print("fwbench: no 21_prediction table; building one from the index", file=sys.stderr)
    tested = frozen.frozen_models(find_repo_root(Path.cwd()))
    return forecast.training_table(
        out, db_path, tested, progress=lambda items: tqdm(items, desc="features")
    )
