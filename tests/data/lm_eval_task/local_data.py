"""Loads this folder's jsonl files through ``datasets`` (no download), wherever lm_eval is started from.

lm_eval calls ``custom_dataset`` with the task's ``dataset_kwargs`` and ``metadata`` as keyword arguments.
"""

from pathlib import Path

import datasets

HERE = Path(__file__).resolve().parent


def load(data_file: str, **_) -> datasets.DatasetDict:
    return datasets.load_dataset("json", data_files={"test": str(HERE / data_file)})
