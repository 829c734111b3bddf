"""Every family's report, found by its folder: the one place families are registered.

A family is a folder ``families/<family>/`` (its measuring code, its tables, sentences and charts,
and ``<family>_report.py``, which exports its report sections as constants and all of them as
``SECTIONS``, with a ``readme_part`` where it writes README lines). ``BY_FAMILY`` holds every
family with a report module; ``WITHOUT_SECTIONS`` every family folder without one, with what its
package says it is (setup: 00_setup records the environment, which the report's methodology
states). ``outline.SECTIONS`` puts the sections in the report's order; a family it does not place
is shown before the run's history. ``analysis`` is what the analysis says about the run itself
(trust, history, failures), whatever family it measured.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from fwbench import families


def _found() -> tuple[dict[str, ModuleType], dict[str, str]]:
    by_family, without = {}, {}
    for info in sorted(pkgutil.iter_modules(families.__path__), key=lambda found: found.name):
        if not info.ispkg:
            continue
        name = f"fwbench.families.{info.name}.{info.name}_report"
        try:
            by_family[info.name] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # the report module exists and failed: never hide that
                raise
            package = importlib.import_module(f"fwbench.families.{info.name}")
            without[info.name] = (package.__doc__ or "").strip().splitlines()[0]
    return by_family, without


BY_FAMILY, WITHOUT_SECTIONS = _found()
