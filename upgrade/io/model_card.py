"""Model cards (``README.md``) as the hub reads them: metadata front matter (``base_model``, ``pipeline_tag``,
``library_name``, ``license``, tags), no local paths, and a snippet that loads the model from the repository it
will live in.

The pieces every card shares; what a card says about its model is its writer's (the upgrade, the export, the
trainer's ``final/``). A base model is named by its hub id when it has one and by its directory's name otherwise;
its license is read from the front matter of the card the source carries.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

REPO_PLACEHOLDER = "<namespace>/<model-name>"  # in a snippet when the repository is not known yet
PIPELINE_TAG = "text-generation"
TAGS = ["palimpsa", "mamba2"]
_LICENSE_FIELDS = ("license", "license_name", "license_link")
# an absolute path in a recipe or a message: from a separator (or the start) up to the next blank or quote
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/-])(?:~|[A-Za-z]:)?/(?:[^\s'\"/]+/)*([^\s'\"/]+)/?")


def is_local(source: str | None) -> bool:
    """Whether ``source`` names a local path rather than a hub repository id."""
    if not source:
        return False
    return source.startswith((".", "/", "~")) or source.count("/") != 1 or Path(source).expanduser().exists()


def hub_id(source: str | None) -> str | None:
    """``source`` when it is a hub repository id, also found in a hub cache's snapshot path
    (``.../models--owner--name/snapshots/<commit>``); None for a local checkpoint."""
    if not source:
        return None
    cached = re.search(r"models--([^/]+)--([^/]+)/snapshots/[^/]+/?$", source)
    if cached:
        return f"{cached.group(1)}/{cached.group(2)}"
    return None if is_local(source) else source


def display_name(source: str | None) -> str:
    """How a card names a model: its hub id, or its directory's name (a card never shows a local path)."""
    if not source:
        return "a model trained from scratch"
    found = hub_id(source)
    return found if found else f"{Path(source).expanduser().name} (a local checkpoint)"


def without_local_paths(text: str) -> str:
    """``text`` (a recipe) with every absolute path cut to ``.../NAME``, its last part."""
    return _ABSOLUTE_PATH.sub(lambda match: f".../{match.group(1)}", text)


def front_matter_of(readme: Path) -> dict:
    """The YAML front matter of a card, or {} when it has none (or none that parses)."""
    try:
        text = readme.read_text()
    except (OSError, UnicodeDecodeError):
        return {}
    match = re.match(r"---\n(.*?)\n---\n", text, re.DOTALL)
    if not match:
        return {}
    try:
        found = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}
    return found if isinstance(found, dict) else {}


def license_of(*directories: str | Path | None) -> dict:
    """The license fields (``license``, and ``license_name``/``license_link`` for ``other``) of the first card
    among ``directories`` that states a license; {} when none does."""
    for directory in directories:
        if not directory or not Path(directory).expanduser().is_dir():
            continue
        matter = front_matter_of(Path(directory).expanduser() / "README.md")
        if matter.get("license"):
            return {key: matter[key] for key in _LICENSE_FIELDS if key in matter}
    return {}


def front_matter(*, base_model: str | None, license: dict, library_name: str | None) -> str:
    """The card's metadata block: only what is known (a base model that is a hub id, a license the source
    states)."""
    fields: dict = {}
    if hub_id(base_model):
        fields["base_model"] = hub_id(base_model)
    fields.update(license)
    fields["pipeline_tag"] = PIPELINE_TAG
    if library_name:
        fields["library_name"] = library_name
    fields["tags"] = list(TAGS)
    return "---\n" + yaml.safe_dump(fields, sort_keys=False) + "---\n"


def usage(repo_id: str | None, model_format: str, tokenizer: bool) -> list[str]:
    """A "Use" section (lines) that loads the model from the hub repository ``repo_id`` (a placeholder when not
    known): with transformers' Auto classes and the code the repository carries for a Palimpsa model, plainly for
    transformers' Mamba2, with mamba_ssm or palimpsa for mamba_ssm's format."""
    repo = repo_id or REPO_PLACEHOLDER
    lines = ["## Use", ""]
    if repo_id is None:
        lines += [f"Replace `{REPO_PLACEHOLDER}` with the repository this model is uploaded to.", ""]
    lines += ["```python"]
    if model_format == "mamba_ssm":
        lines += ["from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel", "",
                  f'model = MambaLMHeadModel.from_pretrained("{repo}")', "",
                  "# or, without mamba_ssm's CUDA extension: pip install palimpsa",
                  "from palimpsa.upgrade import load_model_and_tokenizer", "",
                  f'model, tokenizer = load_model_and_tokenizer("{repo}")', "```", ""]
        return lines
    lines += ["from transformers import AutoModelForCausalLM" + (", AutoTokenizer" if tokenizer else ""), ""]
    if tokenizer:
        lines.append(f'tokenizer = AutoTokenizer.from_pretrained("{repo}")')
    if model_format == "palimpsa":
        lines += [f'model = AutoModelForCausalLM.from_pretrained("{repo}", trust_remote_code=True)', "",
                  "# or, with palimpsa installed (pip install palimpsa), its own classes and no remote code:",
                  "import palimpsa.upgrade", "", f'model = AutoModelForCausalLM.from_pretrained("{repo}")',
                  "model.set_beta_scale(0.0)  # every Palimpsa layer becomes exactly the Mamba2 layer it came from"]
    else:
        lines.append(f'model = AutoModelForCausalLM.from_pretrained("{repo}")')
    return lines + ["```", ""]


def missing_metadata(repo_id: str | None, license: dict) -> list[str]:
    """What the user has to fill in before publishing a card, one line each (printed by the commands)."""
    notes = []
    if not license:
        notes.append("note: the model card states no license (the source's card has none): add `license:` to the "
                     "front matter of README.md before publishing; the base model's license applies")
    if repo_id is None:
        notes.append(f"note: the card's snippet loads {REPO_PLACEHOLDER}: pass --hub-id or --push-to-hub to name "
                     "the repository")
    return notes


def _describe_source(report: dict) -> str:
    name = Path(report["source"]).name
    if report.get("run"):
        return f"the training run `{report['run']}` (its `{name}/` model)"
    return {"adapter": f"the LoRA adapter `{name}`, merged into its base model",
            "mamba2": f"the Mamba2 checkpoint `{name}`"}.get(report["source_kind"], f"the model directory `{name}`")


def release_card(report: dict, recipe: str | None, repo_id: str | None, license: dict, tokenizer: bool) -> str:
    """The card of an exported model or a training run's ``final/``, from its report: ``format`` (``palimpsa``,
    ``mamba_ssm`` or ``transformers``), ``source``, ``source_kind``, ``run`` (the training run's name or None),
    ``base_model``, ``upgraded_layers``, ``beta``, ``dtype``, ``evaluation`` and, for the plain Mamba2 formats,
    ``to_mamba2`` / ``to_hf_mamba2`` (what dropping beta cost). ``recipe`` is the run's recipe (YAML text, its
    local paths cut), ``tokenizer`` whether the directory holds one."""
    model_format = report["format"]
    plain = model_format != "palimpsa"
    name = display_name(report["base_model"])
    title = "Palimpsa model" if not plain else "Mamba2 (beta dropped)" if report["upgraded_layers"] else "Mamba2"
    lines = [front_matter(base_model=report["base_model"], license=license,
                          library_name=None if model_format == "mamba_ssm" else "transformers"),
             f"# {title} from {name}", "",
             f"- Base model: {name}",
             f"- Source: {_describe_source(report)}"]
    if report["upgraded_layers"] or not plain:
        beta = report["beta"]
        lines += [f"- Upgraded layers: {report['upgraded_layers']}",
                  f"- Beta: gain init {beta['init']:g}, rank {beta['rank']}, scale {beta['scale']:g}"]
    lines += [f"- Weights: {report['dtype']}, checksums in export_report.json", ""]
    if plain:
        diff = report.get("to_mamba2") or report["to_hf_mamba2"]
        kind = ("mamba_ssm-format Mamba2" if model_format == "mamba_ssm" else
                "Mamba2 in transformers' format (`Mamba2ForCausalLM` loads it, no palimpsa or remote code needed)")
        figures = (f"at most {diff['max_abs_diff']:.3g} (mean KL {diff['mean_kl']:.3g} nats, top-1 agreement "
                   f"{diff['top1_agreement']:.1%}) on a {diff['probe']} probe")
        lines += [f"This is a plain {kind}: the Palimpsa layers' beta parameters were dropped, which changes the "
                  f"logits by {figures}." if report["upgraded_layers"] else
                  f"This is a plain {kind}, converted from another Mamba2 format; read back, its logits differ "
                  f"from the source's by {figures}.", ""]
    lines += usage(repo_id, model_format, tokenizer)
    if report.get("evaluation"):
        lines += ["## Evaluation", "", "```json", json.dumps(report["evaluation"], indent=2), "```", ""]
    if recipe:
        lines += ["## Training recipe", "", "```yaml", without_local_paths(recipe).rstrip(), "```", ""]
    return "\n".join(lines)
