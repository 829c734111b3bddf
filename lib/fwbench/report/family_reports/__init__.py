"""Each family's report sections, one module per family of the vocabulary (``vocab.FAMILIES``).

A module exports its sections as constants and all of them as ``SECTIONS``, with the tables and
sentences only they use; ``outline.SECTIONS`` puts every family's in the report's order. ``analysis`` is what the analysis says about the run
itself (trust, history, failures), whatever family it measured. ``WITHOUT_SECTIONS`` names the
families that have none, and why.
"""

from fwbench.report.family_reports import (
    analysis_report,
    calibration_report,
    distributed_report,
    inference_report,
    memory_report,
    prediction_report,
    training_report,
    validation_report,
    web_audio_report,
)

BY_FAMILY = {
    "analysis": analysis_report,
    "calibration": calibration_report,
    "distributed": distributed_report,
    "inference": inference_report,
    "memory": memory_report,
    "prediction": prediction_report,
    "training": training_report,
    "validation": validation_report,
    "web_audio": web_audio_report,
}
WITHOUT_SECTIONS = {
    "setup": "00_setup records the environment, which the report's methodology states",
}
