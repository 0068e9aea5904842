"""The fit (numpy only, no torch): alpha, beta, gamma, compute and core sharing from a run's
measurements, the communication a script or trace issued, and the step model fitted to a
table of reported timings."""
