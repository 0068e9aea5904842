"""Workloads (GANs described by layers or by measured phases, or one all-reduce), the
memory model, and the data-parallel training step built as a task graph."""
