"""Fine-tuning data: sources -> a seeded weighted mixture of tokenised documents -> packed or state-passing batches.

``sources`` reads the document sources of a recipe, ``mixture`` draws documents from them by weight and tokenises
them, ``packing`` makes batches (a resumable training stream, and evaluation batches once), ``prefetch`` makes them
ahead on a thread (and, with ``data.workers``, the documents in worker processes), ``seeds`` gives every random
choice its counter-based seed. Both batch modes are deterministic functions of the data and ``data.seed`` (for any
number of workers); ``state_dict()`` is a small JSON-serialisable position from which a fresh
stream continues with exactly the next batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .mixture import DocumentSource
from .packing import Batch, TokenStream, pack_documents
from .prefetch import ParallelDocuments, Prefetcher

if TYPE_CHECKING:
    from ..recipe import DataSection

__all__ = ["Batch", "DocumentSource", "ParallelDocuments", "Prefetcher", "TokenStream", "build_data", "pack_documents"]


def build_data(data: DataSection, tokenizer, *, vocab_size: int | None = None,
               max_eval_batches: int | None = None) -> tuple[TokenStream, list[Batch]]:
    """Train stream and a fixed list of held-out evaluation batches (from ``data.eval_documents`` documents taken
    out of the first source before training; packed mode, no state passing)."""
    sources = data.resolved_sources()
    names = ["data.path"] if data.path and not data.sources else None
    documents = DocumentSource(sources, tokenizer, seq_len=data.seq_len, seed=data.seed, vocab_size=vocab_size,
                               holdout=data.eval_documents, names=names)
    source = documents
    if data.workers:
        make = (sources, tokenizer, {"seq_len": data.seq_len, "seed": data.seed, "vocab_size": vocab_size,
                                     "names": names})
        source = ParallelDocuments(documents, make, data.workers)
    stream = TokenStream(source, data.seq_len, data.batch_size, state_passing=data.state_passing)
    eval_batches = pack_documents(documents.heldout, data.seq_len, data.batch_size, documents.pad_id,
                                  max_batches=max_eval_batches)
    return stream, eval_batches
