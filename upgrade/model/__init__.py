"""The model: ``PalimpsaConfig`` (``configuration``), the Mamba2 stack whose chosen layers are Palimpsa layers
(``modeling``) and the recurrent state it carries between calls (``cache``)."""
