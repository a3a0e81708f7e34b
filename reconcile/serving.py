"""An HTTP server whose shutdown() returns at once instead of at the next poll.

socketserver's serve_forever() only notices shutdown() when its select() times out (every
`poll_interval`), so every stop of a server costs up to a poll interval of waiting. Here
shutdown() also writes to a socket pair the loop selects on: the loop wakes and ends now.
Everything else is ThreadingHTTPServer's.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from http.server import ThreadingHTTPServer
from typing import Any


class PromptHTTPServer(ThreadingHTTPServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._shutdown_requested = False
        self._is_shut_down = threading.Event()
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            self._wake_reader.close()
            self._wake_writer.close()
            raise

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self._is_shut_down.clear()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_READ)
                selector.register(self._wake_reader, selectors.EVENT_READ)
                while not self._shutdown_requested:
                    ready = selector.select(poll_interval)
                    if self._shutdown_requested:
                        break
                    for key, _ in ready:
                        if key.fileobj is self:
                            # socketserver's own step (accept, verify, process); typeshed omits it
                            self._handle_request_noblock()  # type: ignore[attr-defined]
                        else:  # a stale wake-up from an earlier shutdown()
                            with contextlib.suppress(OSError):
                                self._wake_reader.recv(64)
                    self.service_actions()
        finally:
            self._shutdown_requested = False
            self._is_shut_down.set()

    def shutdown(self) -> None:
        """Stop the serve_forever() loop and wait until it has ended (as socketserver's:
        call it while serve_forever() runs in another thread)."""
        self._shutdown_requested = True
        with contextlib.suppress(OSError):  # closed already: the loop ends at its next poll
            self._wake_writer.send(b"\0")
        self._is_shut_down.wait()

    def server_close(self) -> None:
        super().server_close()
        self._wake_reader.close()
        self._wake_writer.close()
