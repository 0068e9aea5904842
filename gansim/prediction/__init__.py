"""Predictions from a calibration profile (the fit, never the measured multi-rank step
times) and their validation against what the calibrator measured."""
