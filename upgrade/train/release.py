"""A run's ``final/`` as a release: the trainer copies its last checkpoint's model directory there and this adds
what a user loading, evaluating or uploading it expects at once (as ``export-model`` writes it): a model card with
the hub's metadata, the run's recipe and its latest evaluation, and a generation config; the directory's manifest
is rewritten to list them."""

from __future__ import annotations

import json
from pathlib import Path

from ..convert.checkpoint import tokenizer_files_in
from ..io.dtypes import dtype_name
from ..io.manifest import refresh_manifest
from ..io.model_card import license_of, release_card
from ..io.model_directory import generation_config_for
from ..model.configuration import PalimpsaConfig
from . import layout


def finish_final(directory: Path, run: Path) -> None:
    """Add the card and the generation config to ``directory`` (the run's ``final/`` being written), describing
    the model it holds and the run ``run`` that trained it."""
    config = PalimpsaConfig.from_pretrained(str(directory))
    generation_config_for(config).save_pretrained(directory)
    recipe, evaluation = run / layout.RECIPE, run / layout.EVAL_SUMMARY
    report = {
        "format": "palimpsa",
        "source": str(run / layout.FINAL),
        "source_kind": "model",
        "run": run.resolve().name,
        "base_model": config.base_model,
        "upgraded_layers": list(config.upgraded_layers),
        "beta": {"form": config.beta_form, "init": config.beta_init, "rank": config.beta_rank,
                 "scale": config.beta_scale, "importance_prior": config.importance_prior},
        "dtype": dtype_name(config.dtype),
        "evaluation": json.loads(evaluation.read_text()) if evaluation.is_file() else None,
    }
    card = release_card(report, recipe.read_text() if recipe.is_file() else None, None, license_of(config.base_model),
                        tokenizer=bool(tokenizer_files_in(directory)))
    (directory / "README.md").write_text(card)
    refresh_manifest(directory)
