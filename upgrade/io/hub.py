"""Publishing a written model directory to the Hugging Face hub (``--push-to-hub``), through huggingface_hub's
``HfApi.create_repo`` and ``upload_folder``.

The token is huggingface_hub's usual one (``HF_TOKEN``, else the stored ``hf auth login``), the endpoint its
``HF_ENDPOINT``. What can be checked without the network (the repository id, a token, offline mode) is checked
before any work; the push itself runs after the directory is complete, so a failed push leaves the model written
and says how to push it again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import PalimpsaError


def check_repo_id(repo_id: str, option: str) -> None:
    """A hub repository id written ``namespace/name``, else PalimpsaError naming ``option``."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        valid = False
    else:
        valid = repo_id.count("/") == 1
    if not valid:
        raise PalimpsaError(f"{option} {repo_id!r} is not a hub repository id; write it as namespace/name (your user "
                            "or organisation, then the model's name)")


def hub_repository(hub_id: str | None, push_to_hub: str | None, private: bool) -> str | None:
    """The repository a model card names (``--hub-id``, or the one ``--push-to-hub`` uploads to), after refusing,
    before any work, what cannot succeed: an id that is not ``namespace/name``, two different ids, ``--private``
    without a push, a push in offline mode or without a token."""
    from huggingface_hub import constants, get_token

    for option, repo_id in (("--hub-id", hub_id), ("--push-to-hub", push_to_hub)):
        if repo_id is not None:
            check_repo_id(repo_id, option)
    if hub_id and push_to_hub and hub_id != push_to_hub:
        raise PalimpsaError(f"--hub-id {hub_id} and --push-to-hub {push_to_hub} name different repositories; give "
                            "one of them")
    if private and push_to_hub is None:
        raise PalimpsaError("--private applies to the repository --push-to-hub creates; add --push-to-hub REPO_ID")
    if push_to_hub is not None:
        if constants.HF_HUB_OFFLINE:
            raise PalimpsaError("--push-to-hub needs the hub, but offline mode is on (HF_HUB_OFFLINE=1); unset it")
        if get_token() is None:
            raise PalimpsaError("--push-to-hub needs a hub token with write access: set HF_TOKEN or run "
                                "`hf auth login`")
    return push_to_hub or hub_id


def push_directory(directory: Path, repo_id: str, *, private: bool = False, what: str = "model",
                   log: Callable[[str], None] | None = None) -> str:
    """Create the model repository ``repo_id`` (private with ``private``; an existing one is kept as it is) and
    upload every file of ``directory`` to it in one commit. Returns the repository's URL."""
    from huggingface_hub import HfApi

    say = log or (lambda _line: None)
    api = HfApi()
    say(f"pushing {directory} to the hub repository {repo_id}{' (private)' if private else ''} ...")
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(folder_path=str(directory), repo_id=repo_id, repo_type="model",
                          commit_message=f"Upload {what} written by palimpsa")
    except Exception as error:  # HTTP errors, refused tokens, unreachable hosts: huggingface_hub raises many types
        problem = " ".join(str(error).split())[:300] or type(error).__name__
        raise PalimpsaError(f"pushing to the hub repository {repo_id} failed ({problem}); the {what} is written in "
                            f"{directory}: push it again with `hf upload {repo_id} {directory}`") from None
    say(f"pushed: {url}")
    return str(url)
