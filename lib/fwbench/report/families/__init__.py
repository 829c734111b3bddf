"""Each family's report sections, one module per family of the vocabulary (``vocab.FAMILIES``).

A module exports its sections as constants and all of them as ``SECTIONS``, with the tables and
sentences only they use; ``outline.SECTIONS`` puts every family's in the report's order. ``analysis`` is what the analysis says about the run
itself (trust, history, failures), whatever family it measured. ``WITHOUT_SECTIONS`` names the
families that have none, and why.
"""

from fwbench.report.families import (
    analysis,
    calibration,
    distributed,
    inference,
    memory,
    prediction,
    training,
    validation,
    web_audio,
)

BY_FAMILY = {
    "analysis": analysis,
    "calibration": calibration,
    "distributed": distributed,
    "inference": inference,
    "memory": memory,
    "prediction": prediction,
    "training": training,
    "validation": validation,
    "web_audio": web_audio,
}
WITHOUT_SECTIONS = {
    "setup": "00_setup records the environment, which the report's methodology states",
}
