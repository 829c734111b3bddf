"""The calibration family (02_calibrate): the machine's ceilings through each framework, and the timer check."""
