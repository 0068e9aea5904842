"""gansim calibration: short real ``torch.distributed`` runs, microbenchmarks and a fit.

``gansim calibrate`` measures the machine it runs on and writes ``profile.json``, which
``gansim predict`` / ``validate`` and scenarios (``profile:``) use instead of datasheet
figures. It needs PyTorch (the base install of gansim does not)::

    pip install 'gansim[calibrate]' torch==2.13.0      # CPU / any torch >= 2.2 works
    gansim calibrate --world-sizes 1,2                  # gloo on CPU, ~30 s on 2 cores
    gansim calibrate --backend nccl --world-sizes 1,2,4,8 --out a100.json   # one GPU box
    torchrun --nnodes 2 --nproc-per-node 8 ... $(which gansim) calibrate \\
        --backend nccl --world-sizes 1,8,16                                 # multi-node

What it does (docs/calibration.md):

1. for world size 1 and every world size asked for, spawn the ranks locally
   (``torch.multiprocessing``) or use the ranks ``torchrun`` started, and run the GAN
   training step for real (``--mode ddp``: DistributedDataParallel; ``--mode flat``: one
   all-reduce of the flattened gradients after backward, the paper's MirroredStrategy
   way), timing every phase (``data_s``, ``d_forward_s``, ``d_backward_s``,
   ``d_allreduce_s``, ``d_optimizer_s``, ``g_forward_s``, ``g_backward_s``,
   ``g_allreduce_s``, ``g_optimizer_s``, ``step_s``) per step and rank;
2. microbenchmarks: an all-reduce sweep printed like nccl-tests, the local reduction
   ``a += b`` (gamma), the per-phase compute at world size 1, and the slowdown when w ranks
   compute at once on this machine's cores (core sharing);
3. fit alpha, beta (ring closed form, least squares) and gamma from the microbenchmarks
   only, never from the multi-rank step times, which are kept under ``measured`` so that
   ``gansim validate`` can compare predictions against them.

Calibrating your own networks
-----------------------------
``--model`` takes a registered name (``paper-mlp-gan``, ``dcgan``, ``dcgan-32``) or a
*factory* given as ``module.path:function`` (importable from the current directory or
``PYTHONPATH``) or ``path/to/file.py:function``. The factory takes no arguments and returns
``(generator, discriminator, latent_dim, sample_shape)``:

- ``generator``: a ``torch.nn.Module`` mapping noise ``(batch, latent_dim)`` to samples
  ``(batch, *sample_shape)``;
- ``discriminator``: a ``torch.nn.Module`` mapping ``(batch, *sample_shape)`` to one
  probability per sample, ``(batch, 1)`` after a sigmoid (the loss is ``BCELoss``);
- ``latent_dim``: int; ``sample_shape``: tuple of ints, channels first.

Example, ``my_gan.py``::

    import torch.nn as nn

    def make():
        g = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 3 * 32 * 32),
                          nn.Sigmoid(), nn.Unflatten(1, (3, 32, 32)))
        d = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.LeakyReLU(0.2),
                          nn.Linear(512, 1), nn.Sigmoid())
        return g, d, 64, (3, 32, 32)

    gansim calibrate --model my_gan.py:make --world-sizes 1,2

The factory is called once per rank (and once up front to check the shapes), so it must
build fresh modules each time. Real data are not needed: batches are synthetic images of
``sample_shape`` from a seeded generator (timing does not depend on pixel values).

Python API
----------
- :mod:`gansim.calibration.ranks.models`: ``MODELS`` registry, ``build_model(spec)``, ``gradient_bytes``.
- :mod:`gansim.calibration.ranks.run_config`: ``RunConfig``, ``TASKS``, ``CalibrationError``.
- :mod:`gansim.calibration.ranks.launch` (process management): ``run_local(cfg, world_size, tasks)``,
  ``run_training(cfg, world_size)``, ``run_tasks_in_group`` and ``init_from_env`` (torchrun).
- :mod:`gansim.calibration.ranks.training_loop` (the timed step), :mod:`gansim.calibration.ranks.microbench`
  (all-reduce sweep, local reduction), :mod:`gansim.calibration.ranks.tasks` (what a rank runs),
  :mod:`gansim.calibration.ranks.timing` (devices, synchronisation, barriers),
  :mod:`gansim.calibration.ranks.faults` (status, injected faults, the failure message),
  :mod:`gansim.calibration.ranks.costs` (each phase's FLOPs and bytes, counted in the last
  warm-up step of the built-in loop and of a user's script, for the roofline).
- A user's own loop: :mod:`gansim.calibration.ranks.instrument` (``phase()``, ``step()``),
  :mod:`gansim.calibration.ranks.script` (one rank of ``--script``),
  :mod:`gansim.calibration.fit.communication` (buckets and buffers from the collectives issued),
  :mod:`gansim.calibration.traces.importer` (``--from-trace``).
- :mod:`gansim.calibration.fit.measurements`: ``fit_alpha_beta(points, gamma)`` (the ring closed form of
  :mod:`gansim.collectives.closed_forms`), ``fit_gamma(points)``, ``fit_from_measurements``.
- :mod:`gansim.calibration.profile.schema`: ``Profile`` (schema 1), ``load_profile(path)``,
  ``write_profile_atomic(profile, path)``.
- :mod:`gansim.calibration.pipeline`: ``run_calibration(options)``, the whole command.

Importing this package, :mod:`gansim.calibration.fit.measurements`, :mod:`gansim.calibration.profile.schema`,
:mod:`gansim.calibration.ranks.run_config` or :mod:`gansim.cli.calibrate` does not import torch.
"""

from gansim.calibration.ranks.instrument import phase, step

__all__ = ["phase", "step"]
