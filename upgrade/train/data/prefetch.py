"""Batches made ahead on a background thread, so that tokenising and generating documents overlaps the accelerator's
work."""

from __future__ import annotations

import queue
import threading

from .packing import Batch, TokenStream


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
