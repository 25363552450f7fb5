"""``finetune-model`` with process 1 slower to write its share of every checkpoint than process 0 is to write its
own: torchrun starts this file in place of ``-m palimpsa.upgrade.cli.finetune_model``. A checkpoint must hold every
process's files however their timing falls; on a busy machine process 1 can be the late one."""

import runpy
import sys
import time

import accelerate.accelerator

_save_accelerator_state = accelerate.accelerator.save_accelerator_state


def _late(output_dir, weights, optimizers, schedulers, dataloaders, process_index, *args, **kwargs):
    if process_index == 1:
        time.sleep(3)
    return _save_accelerator_state(output_dir, weights, optimizers, schedulers, dataloaders, process_index,
                                   *args, **kwargs)


accelerate.accelerator.save_accelerator_state = _late
sys.argv[0] = "finetune-model"
runpy.run_module("palimpsa.upgrade.cli.finetune_model", run_name="__main__", alter_sys=True)
