"""Looking at what a model does: seeded long-context tasks (``tasks``), ``eval-model``'s runner (``evaluation``)
and plots (``plots``), the beta -> 0 sweep (``equivalence``), importance inspection (``importance``), text
generation (``generation``) and the lm-evaluation-harness model (``lm_eval_adapter``)."""
