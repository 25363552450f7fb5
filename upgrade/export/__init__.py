"""Release directories from model directories, LoRA adapters and training runs (``export``), with the standalone
modeling code for ``trust_remote_code`` (``standalone``)."""
