"""Reads started early on threads of their own, each taken once by whoever asks first."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from reconcile.diagnostics import ReconcileError


class ReadStopped(ReconcileError):
    """A read ahead was stopped before it finished (its caller needs it no more)."""


class ReadAhead:
    """Named reads, each made on a thread of its own at once. Every read is given the
    stop event, set by `stop()`; a long read checks it between its requests. Each is
    taken once; after that the caller asks the cluster again."""

    def __init__(self, reads: Mapping[str, Callable[[threading.Event], Any]]) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._reads: dict[str, Future[Any]] = {name: Future() for name in reads}
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(self._reads[name], name, read),
                name=f"reconcile-read-{name}",
                daemon=True,
            )
            for name, read in reads.items()
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, future: Future[Any], name: str, read: Callable[[threading.Event], Any]) -> None:
        try:
            if self._stop.is_set():
                raise ReadStopped(f"the read of {name} was stopped")
            future.set_result(read(self._stop))
        except BaseException as e:  # the taker sees it, as if it had asked itself
            future.set_exception(e)

    def take(self, name: str) -> Future[Any] | None:
        """The read of `name`, once (None when it was taken already)."""
        with self._lock:
            return self._reads.pop(name, None)

    def stop(self, *, wait: bool = True) -> None:
        """Tell every read to stop; with `wait`, return once their threads have ended."""
        self._stop.set()
        if wait:
            for thread in self._threads:
                thread.join()
