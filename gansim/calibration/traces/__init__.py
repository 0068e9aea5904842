"""`gansim calibrate --from-trace`: torch.profiler (Kineto) traces of a user's own job, CPU or
CUDA, turned into a profile; the GPUs a trace's deviceProperties name."""
