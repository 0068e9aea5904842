"""The scenario runner: a scenario file, its sweep and its run points, simulated (serially,
on a process pool or on Dask) into records and a summary. It sits on the training step and
knows nothing of the what-ifs or the outputs above it, which hook into each point through
`PointHooks`."""
