"""Fine-tuning: the recipe schema (``recipe``), the data pipeline (``data``), the trainer (``trainer``) and the
layout of a training run's directory (``layout``)."""
