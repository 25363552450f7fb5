"""From Mamba2 checkpoints to Palimpsa models: reading checkpoints in the formats found in the wild
(``checkpoint``), the one loader of a model for use (``loading``), layer surgery (``surgery``), logit comparison
(``compare``) and the upgrade job behind ``upgrade-model`` (``upgrade``)."""
