"""Release directories from model directories, LoRA adapters and training runs (``export``); plain Mamba2
checkpoints from Palimpsa models."""
