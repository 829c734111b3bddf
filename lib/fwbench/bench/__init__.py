"""Benchmark families: calibration ceilings and inference (training and memory live beside)."""
