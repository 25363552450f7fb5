"""How many processes a run has, for data parallelism on machines without a GPU.

accelerate joins the processes a launcher started (``torchrun --nproc_per_node N``, ``accelerate launch
--multi_gpu``) over NCCL on GPUs; on a machine without one it runs each of them alone, as N copies of the whole
run, unless it is told that it is on the CPU, where it joins them over gloo: :func:`cpu_data_parallel` says when to
tell it. ``accelerate launch --cpu --num_processes N`` starts a single process (several CPU processes are mpirun's
job there): :func:`processes_asked_of_accelerate` reads the N it was asked for, and :func:`run_as_processes` starts
the command again as N processes with ``torch.distributed.run``, the launcher accelerate itself uses on GPUs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

# set by the launchers that start one process per rank (torchrun, accelerate's, mpirun's)
RANK_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


def _has_accelerator() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6: CUDA, XPU, MPS, ... alike
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def cpu_data_parallel() -> bool:
    """True when a launcher started several processes on a machine without an accelerator: accelerate must then be
    built with ``cpu=True`` to join them (gloo) instead of running each as a run of its own."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not _has_accelerator()


def processes_asked_of_accelerate() -> int:
    """N when this process is the only one ``accelerate launch --cpu --num_processes N`` started (N > 1), else 1.

    accelerate's single-process launcher says so in the environment (``ACCELERATE_USE_CPU``, and ``MASTER_ADDR``
    only for N > 1) but not N; N is read from its own command line, the parent's, with accelerate's own parser (and
    from its config file when the command line does not give it)."""
    if not (_flag("ACCELERATE_USE_CPU") and "MASTER_ADDR" in os.environ):
        return 1
    if any(name in os.environ for name in RANK_VARIABLES):
        return 1
    import psutil  # a dependency of accelerate

    try:
        command = psutil.Process(os.getppid()).cmdline()
    except psutil.Error:
        return 1
    if "launch" not in command:
        return 1
    from accelerate.commands.config.config_args import default_config_file, load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    try:
        args, _ = launch_command_parser().parse_known_args(command[command.index("launch") + 1:])
    except SystemExit:  # not a command line of accelerate launch after all
        return 1
    count = args.num_processes
    config = args.config_file or (default_config_file if os.path.isfile(default_config_file) else None)
    if count is None and config is not None:
        count = load_config_from_file(config).num_processes
    return max(int(count or 1), 1)


def run_as_processes(count: int) -> int:
    """This command again, as ``count`` data-parallel processes on this machine (``torch.distributed.run
    --standalone``, with the environment accelerate's launcher set); its exit status. Ctrl-C and SIGTERM are passed
    on to the launcher, which stops the processes; they say what was written."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(count),
               "--no-python", sys.executable, *sys.orig_argv[1:]]
    launcher = subprocess.Popen(command)
    try:
        return launcher.wait()
    except KeyboardInterrupt:
        launcher.send_signal(signal.SIGTERM)
        launcher.wait()
        return 130
