"""One module per ``fwbench`` command: its parser (``add_parser``) beside its handler (``handle``).

``fwbench.cli`` imports every module here to build the parser, so `fwbench query` would pay for
whatever any command imports at its top. A module therefore imports at its top only the standard
library, ``common`` and ``results.db``; a handler imports the layers it drives (torch, pandas,
papermill behind them) when it runs. Looked up at that moment, a function a test patches in those
layers (``Lab.report``, ``tqdm.auto.tqdm``) is the patched one.
"""
