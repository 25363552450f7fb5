"""Files, knowing nothing of the model: dtype names (``dtypes``), sha256 manifests and weight checks
(``manifest``), safetensors shards (``shards``), outputs written whole or not at all (``output``), and the one
writer of a model directory (``model_directory``)."""
