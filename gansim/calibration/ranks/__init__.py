"""The torch side of calibration: what runs in the rank processes and starts them (the
launcher, the built-in training loop and models, a user's script with its phase markers,
microbenchmarks, timing, faults), and the run configuration they share."""
