"""Memory and energy meters (DESIGN.md section 5)."""

from fwbench.measure.meters.energy import EnergyReading, measure_energy
from fwbench.measure.meters.peak_memory import PeakMemory, measure_peak_memory

__all__ = ["EnergyReading", "PeakMemory", "measure_energy", "measure_peak_memory"]
