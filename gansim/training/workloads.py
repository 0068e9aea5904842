"""Workloads: what one data-parallel step computes and how many gradient bytes it
all-reduces. Shipped GANs are described layer by layer, so parameter counts and FLOPs
come from the architecture itself; inline workloads give measured phase times."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from gansim.core.config import (
    AllreduceWorkloadSpec,
    GanWorkloadSpec,
    ProfiledWorkloadSpec,
    Scenario,
    TrainingOptions,
)
from gansim.core.errors import UserInputError
from gansim.core.registry import Registry


@dataclass(frozen=True)
class Layer:
    name: str
    params: int
    macs_per_sample: int  # multiply-accumulates of the forward pass for one sample
    kernels: int  # forward kernel launches (what dominates tiny layers on a GPU)
    buffer_bytes: int = 0  # state that is not a parameter (BatchNorm's running statistics)


def dense(n_in: int, n_out: int, *, bias: bool = True, kernels: int = 2) -> Layer:
    return Layer(f"dense {n_in}->{n_out}", n_in * n_out + (n_out if bias else 0), n_in * n_out, kernels)


def batch_norm(features: int, positions: int = 1) -> Layer:
    # learnable scale and shift; the running mean and variance (float32) and the int64 batch
    # count are buffers, which DDP broadcasts from rank 0 (broadcast_buffers)
    return Layer(f"batchnorm {features}", 2 * features, 2 * features * positions, 2,
                 buffer_bytes=2 * features * 4 + 8)


def conv(c_in: int, c_out: int, k: int, out_hw: int, *, bias: bool = True) -> Layer:
    return Layer(f"conv {c_in}->{c_out} k{k}", c_in * c_out * k * k + (c_out if bias else 0),
                 out_hw * out_hw * c_out * c_in * k * k, 2)


def conv_transpose(c_in: int, c_out: int, k: int, in_hw: int, *, bias: bool = True) -> Layer:
    return Layer(f"convT {c_in}->{c_out} k{k}", c_in * c_out * k * k + (c_out if bias else 0),
                 in_hw * in_hw * c_in * c_out * k * k, 2)


def elementwise(name: str, elements: int) -> Layer:
    return Layer(name, 0, elements, 1)


@dataclass(frozen=True)
class Network:
    layers: tuple[Layer, ...]

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def macs_per_sample(self) -> int:
        return sum(layer.macs_per_sample for layer in self.layers)

    @property
    def kernels(self) -> int:
        return sum(layer.kernels for layer in self.layers)

    @property
    def buffer_bytes(self) -> int:
        return sum(layer.buffer_bytes for layer in self.layers)

    def param_tensors(self) -> list[int]:
        """Parameter sizes in backward (gradient-ready) order: last layer first."""
        return [layer.params for layer in reversed(self.layers) if layer.params]


@dataclass(frozen=True)
class GanArchitecture:
    name: str
    generator: Network
    discriminator: Network
    sample_bytes: int  # one real input sample as the host hands it to the device
    host_prep_s_per_sample: float
    source: str


ARCHITECTURES: Registry[Callable[[], GanArchitecture]] = Registry("workload")


@ARCHITECTURES.register("paper-mlp-gan")
def paper_mlp_gan() -> GanArchitecture:
    """Seed 002, Table 2: G 50 -> 1200 (BN) -> 1000 (BN) -> 784 (sigmoid);
    D 784 -> 256 (dropout) -> 128 (dropout) -> 1. G: 2,051,384 parameters, D: 233,985."""
    b = 1
    generator = Network((
        dense(50, 1200), batch_norm(1200), elementwise("leaky_relu", 1200),
        dense(1200, 1000), batch_norm(1000), elementwise("leaky_relu", 1000),
        dense(1000, 784), elementwise("sigmoid", 784 * b),
    ))
    discriminator = Network((
        dense(784, 256), elementwise("leaky_relu+dropout", 2 * 256),
        dense(256, 128), elementwise("leaky_relu+dropout", 2 * 128),
        dense(128, 1), elementwise("sigmoid", 1),
    ))
    return GanArchitecture(
        "paper-mlp-gan", generator, discriminator, sample_bytes=28 * 28 * 4,
        # MNIST is cached in host memory after the first epoch (seed 002 section IV): a batch
        # is a gather of 3 KiB rows, about 1 us a sample on one core (estimate, not measured).
        host_prep_s_per_sample=1e-6, source="seed 002 Table 2",
    )


# The DCGANs are layer for layer the calibrator's torch models (gansim/calibration/ranks/models.py), so a
# simulated `dcgan` and a calibrated one are the same network (a test checks the counts).
@ARCHITECTURES.register("dcgan")
def dcgan_mnist() -> GanArchitecture:
    """DCGAN (Radford et al. 2016) for 28x28x1, latent 100, width 64:
    G convT 7x7 256 -> convT 4x4/2 128 -> convT 4x4/2 1; D conv 4x4/2 64 -> 128 -> conv 7x7 1."""
    generator = Network((
        conv_transpose(100, 256, 7, 1, bias=False), batch_norm(256, 49), elementwise("relu", 7 * 7 * 256),
        conv_transpose(256, 128, 4, 7, bias=False), batch_norm(128, 196), elementwise("relu", 14 * 14 * 128),
        conv_transpose(128, 1, 4, 14, bias=False), elementwise("tanh", 28 * 28),
    ))
    discriminator = Network((
        conv(1, 64, 4, 14, bias=False), elementwise("leaky_relu", 14 * 14 * 64),
        conv(64, 128, 4, 7, bias=False), batch_norm(128, 49), elementwise("leaky_relu", 7 * 7 * 128),
        conv(128, 1, 7, 1, bias=False), elementwise("sigmoid", 1),
    ))
    return GanArchitecture("dcgan", generator, discriminator, sample_bytes=28 * 28 * 4,
                           host_prep_s_per_sample=1e-6, source="Radford et al. 2016; gansim/calibration/ranks/models.py")


@ARCHITECTURES.register("dcgan-32")
def dcgan_cifar() -> GanArchitecture:
    """DCGAN for 32x32x3 (CIFAR-10 sized), latent 100, width 64: G convT 4x4 256 -> 128 -> 64 -> 3;
    D conv 4x4/2 64 -> 128 -> 256 -> conv 4x4 1."""
    generator = Network((
        conv_transpose(100, 256, 4, 1, bias=False), batch_norm(256, 16), elementwise("relu", 4 * 4 * 256),
        conv_transpose(256, 128, 4, 4, bias=False), batch_norm(128, 64), elementwise("relu", 8 * 8 * 128),
        conv_transpose(128, 64, 4, 8, bias=False), batch_norm(64, 256), elementwise("relu", 16 * 16 * 64),
        conv_transpose(64, 3, 4, 16, bias=False), elementwise("tanh", 32 * 32 * 3),
    ))
    discriminator = Network((
        conv(3, 64, 4, 16, bias=False), elementwise("leaky_relu", 16 * 16 * 64),
        conv(64, 128, 4, 8, bias=False), batch_norm(128, 64), elementwise("leaky_relu", 8 * 8 * 128),
        conv(128, 256, 4, 4, bias=False), batch_norm(256, 16), elementwise("leaky_relu", 4 * 4 * 256),
        conv(256, 1, 4, 1, bias=False), elementwise("sigmoid", 1),
    ))
    return GanArchitecture("dcgan-32", generator, discriminator, sample_bytes=32 * 32 * 3 * 4,
                           host_prep_s_per_sample=2e-6, source="Radford et al. 2016; gansim/calibration/ranks/models.py")


# ----------------------------------------------------------------------------- phases
@dataclass(frozen=True)
class RegularizationPhase:
    """A lazy regularisation phase (config.LazyRegularization): network "D" or "G", run at
    the minibatches whose index (from 0) is a multiple of `every`, `compute_s` seconds of
    forward and backward at the phases' batch."""

    name: str
    network: str
    every: int
    compute_s: float

    def runs_at(self, step: int) -> bool:
        return step % self.every == 0


@dataclass(frozen=True)
class StepPhases:
    """Seconds of one rank's step at `batch` samples, on an uncontended device.

    The vocabulary is shared with the calibrator's profile: d_forward is G's forward for
    the fakes plus D's forward on real and fake; g_forward is G's and D's forward; the
    backward phases include every network they flow through."""

    batch: float
    data_host_s: float
    sample_bytes: float
    d_forward_s: float
    d_backward_s: float
    d_optimizer_s: float
    g_forward_s: float
    g_backward_s: float
    g_optimizer_s: float
    # lazy regularisation phases, run every so many steps (scaled like forward and backward)
    regularization: tuple[RegularizationPhase, ...] = ()

    def _regularization_times(self, factor: float) -> tuple[RegularizationPhase, ...]:
        return tuple(replace(r, compute_s=r.compute_s * factor) for r in self.regularization)

    def slowed(self, factor: float) -> "StepPhases":
        """Every phase `factor` times longer (ranks sharing cores)."""
        return replace(
            self, data_host_s=self.data_host_s * factor, d_forward_s=self.d_forward_s * factor,
            d_backward_s=self.d_backward_s * factor, d_optimizer_s=self.d_optimizer_s * factor,
            g_forward_s=self.g_forward_s * factor, g_backward_s=self.g_backward_s * factor,
            g_optimizer_s=self.g_optimizer_s * factor, regularization=self._regularization_times(factor),
        )

    def at_batch(self, batch: float) -> "StepPhases":
        """Forward, backward, regularisation and input scale with the batch; optimizer
        updates do not."""
        k = batch / self.batch
        return replace(
            self, batch=batch, data_host_s=self.data_host_s * k, d_forward_s=self.d_forward_s * k,
            d_backward_s=self.d_backward_s * k, g_forward_s=self.g_forward_s * k,
            g_backward_s=self.g_backward_s * k, regularization=self._regularization_times(k),
        )


def phases_from_networks(batch: float, data_host_s: float, sample_bytes: float, d_fwd: float, d_bwd: float,
                         d_opt: float, g_fwd: float, g_bwd: float, g_opt: float) -> StepPhases:
    """Per-network figures -> step phases (seed 002, Algorithms 1 and 2)."""
    return StepPhases(
        batch=batch, data_host_s=data_host_s, sample_bytes=sample_bytes,
        d_forward_s=g_fwd + 2 * d_fwd, d_backward_s=2 * d_bwd, d_optimizer_s=d_opt,
        g_forward_s=g_fwd + d_fwd, g_backward_s=d_bwd + g_bwd, g_optimizer_s=g_opt,
    )


ADAM_FLOPS_PER_PARAM = 12  # two moment updates, bias correction, the step (PyTorch Adam)


def network_times(net: Network, batch: float, flops_per_s: float, launch_s: float) -> tuple[float, float, float]:
    """(forward, backward, optimizer) seconds from FLOPs / (peak x efficiency) plus launches.
    Backward costs twice the forward FLOPs (input and weight gradients)."""
    forward_flops = 2.0 * net.macs_per_sample * batch
    forward = forward_flops / flops_per_s + net.kernels * launch_s
    backward = 2 * forward_flops / flops_per_s + 2 * net.kernels * launch_s
    optimizer = ADAM_FLOPS_PER_PARAM * net.params / flops_per_s + len(net.param_tensors()) * launch_s
    return forward, backward, optimizer


@dataclass(frozen=True)
class GanWorkload:
    name: str
    d_params: int
    g_params: int
    bytes_per_param: int
    d_steps_per_g_step: int
    d_param_tensors: tuple[int, ...]
    g_param_tensors: tuple[int, ...]
    # Either fixed measured phases at a reference batch, or an architecture to cost by FLOPs.
    measured: StepPhases | None
    architecture: GanArchitecture | None
    # bytes of each network's buffers (BatchNorm statistics), broadcast when the training
    # options say broadcast_buffers
    d_buffer_bytes: int = 0
    g_buffer_bytes: int = 0
    # measured on a machine whose ranks share its cores: (ranks, how much slower each computes)
    core_sharing: tuple[tuple[int, float], ...] = ()
    # a calibration profile's tensors: padded at each rank count (see at_ranks)
    pad_per_rank: bool = False

    def at_ranks(self, ranks: int) -> "GanWorkload":
        """The workload as simulated on `ranks` ranks. Measured on a machine whose ranks share
        its cores (core_sharing), each phase is slowed by the factor at that rank count. A
        calibration profile's (pad_per_rank)
        has every gradient tensor padded to a whole number of elements per rank: a ring cuts
        each buffer into `ranks` pieces; pieces one element apart end a nanosecond apart, the
        ranks drift out of step, and the flow simulation then pays an event per rank and
        ring step instead of one per step: minutes instead of seconds at a few hundred
        ranks. Padding adds fewer than `ranks` elements per tensor (the paper's MLP GAN at
        256 ranks: 0.04 % more bytes)."""
        workload = self
        factor = dict(self.core_sharing).get(ranks, 1.0)
        if factor != 1.0 and self.measured is not None:
            workload = replace(workload, measured=self.measured.slowed(factor), core_sharing=())
        if not self.pad_per_rank or ranks <= 1:
            return workload

        def up(tensors: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(-(-t // ranks) * ranks for t in tensors)

        d_tensors, g_tensors = up(self.d_param_tensors), up(self.g_param_tensors)
        return replace(workload, d_param_tensors=d_tensors, g_param_tensors=g_tensors, d_params=sum(d_tensors),
                       g_params=sum(g_tensors))

    def phases(self, batch: float, device_tflops: float | None, options: TrainingOptions,
               *, source: str | None = None) -> StepPhases:
        if self.measured is not None:
            return self.measured.at_batch(batch)
        assert self.architecture is not None
        if device_tflops is None:
            raise UserInputError(
                f"workload {self.name!r} is costed by FLOPs but the topology's rank devices give no 'tflops'; "
                "add tflops to the gpu nodes or give a calibration profile",
                source=source, field="topology",
            )
        rate = device_tflops * 1e12 * options.compute_efficiency
        launch = options.kernel_launch_us * 1e-6
        arch = self.architecture
        g = network_times(arch.generator, batch, rate, launch)
        d = network_times(arch.discriminator, batch, rate, launch)
        return phases_from_networks(batch, arch.host_prep_s_per_sample * batch, arch.sample_bytes,
                                    d[0], d[1], d[2], g[0], g[1], g[2])


@dataclass(frozen=True)
class AllreduceWorkload:
    """A single all-reduce of `nbytes` (what nccl-tests measures)."""

    name: str
    nbytes: int


Workload = GanWorkload | AllreduceWorkload


def resolve_workload(spec: str | GanWorkloadSpec | AllreduceWorkloadSpec | ProfiledWorkloadSpec, per_gpu_batch: float,
                     *, source: str | None = None) -> Workload:
    if isinstance(spec, AllreduceWorkloadSpec):
        return AllreduceWorkload(f"allreduce-{spec.allreduce_bytes}B", spec.allreduce_bytes)
    if isinstance(spec, str):
        arch = ARCHITECTURES.get(spec, source=source, field="workload")()
        return GanWorkload(
            name=arch.name, d_params=arch.discriminator.params, g_params=arch.generator.params,
            bytes_per_param=4, d_steps_per_g_step=1,
            d_param_tensors=tuple(arch.discriminator.param_tensors()),
            g_param_tensors=tuple(arch.generator.param_tensors()), measured=None, architecture=arch,
            d_buffer_bytes=arch.discriminator.buffer_bytes, g_buffer_bytes=arch.generator.buffer_bytes,
        )
    if isinstance(spec, ProfiledWorkloadSpec):
        d_tensors, g_tensors = tuple(spec.d_param_tensors), tuple(spec.g_param_tensors)
        return GanWorkload(
            name=spec.name, d_params=sum(d_tensors), g_params=sum(g_tensors), bytes_per_param=4,
            d_steps_per_g_step=spec.d_steps_per_g_step, d_param_tensors=d_tensors, g_param_tensors=g_tensors,
            measured=StepPhases(**spec.phases.model_dump()), architecture=None,
            d_buffer_bytes=spec.d_buffer_bytes, g_buffer_bytes=spec.g_buffer_bytes,
            core_sharing=tuple(sorted(spec.core_sharing.items())), pad_per_rank=True,
        )
    d, g = spec.networks.discriminator, spec.networks.generator
    measured = phases_from_networks(
        per_gpu_batch, spec.data.host_prep_s, spec.data.bytes_per_sample,
        d.forward_s, d.backward_s, d.optimizer_s, g.forward_s, g.backward_s, g.optimizer_s,
    )
    regularization = tuple(RegularizationPhase(r.name, "D" if r.network == "discriminator" else "G", r.every,
                                               r.compute_s) for r in spec.regularization)
    return GanWorkload(
        name=spec.name, d_params=d.params, g_params=g.params, bytes_per_param=spec.bytes_per_param,
        d_steps_per_g_step=spec.d_steps_per_g_step, d_param_tensors=d.variable_sizes(),
        g_param_tensors=g.variable_sizes(), measured=replace(measured, regularization=regularization),
        architecture=None, d_buffer_bytes=d.buffer_bytes, g_buffer_bytes=g.buffer_bytes,
    )


def scenario_workload(scenario: Scenario, *, source: str | None = None) -> Workload:
    """The scenario's workload, its inline figures taken at the scenario's reference batch."""
    return resolve_workload(scenario.workload, scenario.reference_batch(), source=source)
