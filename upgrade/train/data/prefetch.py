"""Batches made ahead on a background thread, so that tokenising and generating documents overlaps the accelerator's
work; with ``data.workers``, the documents themselves made by worker processes."""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import TYPE_CHECKING

from ...errors import PalimpsaError
from .packing import Batch, TokenStream

if TYPE_CHECKING:
    from .mixture import Document, DocumentSource


class Prefetcher:
    """Makes the batches of a :class:`TokenStream` on a background thread, ``depth`` ahead, so tokenising and
    generating documents overlaps the accelerator's work. ``state_dict()`` is the stream's position after the last
    batch handed out (not after the ones made ahead), so a checkpoint resumes exactly where training stands. An
    error on the thread is raised by the ``next()`` that would have returned its batch."""

    def __init__(self, stream: TokenStream, depth: int = 4):
        self.stream, self._state = stream, stream.state_dict()
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="palimpsa-data", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                item = (next(self.stream), self.stream.state_dict(), None)
            except BaseException as error:  # handed to the consumer, which raises it
                item = (None, None, error)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if item[2] is not None:
                return

    def __iter__(self) -> Prefetcher:
        return self

    def __next__(self) -> Batch:
        batch, state, error = self._queue.get()
        if error is not None:
            raise error
        self._state = state
        return batch

    def state_dict(self) -> dict:
        return self._state

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        close = getattr(getattr(self.stream, "documents", None), "close", None)  # data.workers' processes
        if close is not None:
            close()


class ParallelDocuments:
    """A :class:`~.mixture.DocumentSource` whose documents are made by ``workers`` processes: this process only
    decides which document comes next (cheap: a seeded draw and a cursor), the workers read and tokenise it (the
    expensive part: generating synthetic prompts, fitting them to their length). The documents come back in order,
    so the stream is exactly the one the source makes on its own, for any number of workers, and its position is
    the source's position after the last document handed out. Finite sources only (an ``hf`` stream cannot be read
    from an address)."""

    def __init__(self, documents: DocumentSource, make: tuple, workers: int, chunk: int = 16):
        import multiprocessing

        if not documents.addressable:
            raise PalimpsaError("data.workers needs finite sources: an hf stream is read in order on one thread; "
                                "set data.workers: 0")
        self.documents, self.pad_id, self.heldout = documents, documents.pad_id, documents.heldout
        self.chunk, self.ahead = chunk, 4 * workers
        # fork where there is one (as torch's DataLoader): no re-import of the main module, a quick start
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        context = multiprocessing.get_context(method)
        self._pool = context.Pool(workers, initializer=_start_worker, initargs=(make,))
        self._pending: deque = deque()  # (a chunk's result, its addresses, the position after each of them)
        self._ready: deque = deque()  # (address, document, position after it)
        self._submitted: deque = deque()  # every chunk's result not known finished, dropped ones too (close)
        self._position = documents.state_dict()

    def _submit(self) -> None:
        addresses, positions = [], []
        for _ in range(self.chunk):
            addresses.append(self.documents.next_address())
            positions.append(self.documents.state_dict())
        result = self._pool.apply_async(_make_documents, (addresses,))
        self._pending.append((result, addresses, positions))
        while self._submitted and self._submitted[0].ready():
            self._submitted.popleft()
        self._submitted.append(result)

    def next_document(self) -> Document:
        while True:
            while len(self._pending) < self.ahead:
                self._submit()
            if not self._ready:
                result, addresses, positions = self._pending.popleft()
                self._ready.extend(zip(addresses, result.get(), positions))
            address, document, self._position = self._ready.popleft()
            if self.documents.accept(address[0], document):
                return document

    def __iter__(self):
        while True:
            yield self.next_document()

    def state_dict(self) -> dict:
        return self._position

    def load_state_dict(self, state: dict) -> None:
        self.documents.load_state_dict(state)
        self._pending.clear()  # made for the old position; their results are dropped
        self._ready.clear()
        self._position = self.documents.state_dict()

    def document_at(self, state: dict) -> Document:
        return self.documents.document_at(state)

    def close(self, timeout: float = 60.0) -> None:
        """End the workers, once the chunks they were given are finished (``timeout`` seconds at most): a worker
        killed while it writes a result leaves part of a message in the results pipe, and ``Pool.terminate``
        then waits on the rest forever."""
        deadline = time.monotonic() + timeout
        for result in self._submitted:
            result.wait(max(0.0, deadline - time.monotonic()))
        self._pool.terminate()


_WORKER_SOURCE = None


def _start_worker(make: tuple) -> None:
    global _WORKER_SOURCE
    import signal

    from .mixture import DocumentSource

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle; it ends the pool
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the pool ends its workers with SIGTERM: no handler of ours

    sources, tokenizer, kwargs = make
    _WORKER_SOURCE = DocumentSource(sources, tokenizer, **kwargs)


def _make_documents(addresses: list) -> list:
    from .packing import document_arrays

    documents = [_WORKER_SOURCE.document_from(address) for address in addresses]
    for document in documents:  # the arrays that packing reads, made here rather than in the training process
        document_arrays(document)
    return documents
