"""Turns across a pipe: TRL's rank 0 asks its parent (the cell process) before and after each
iteration.

A cell that takes turns with other cells (run.interleave) holds a pacer in the cell process; the TRL
ranks are processes of their own, so rank 0 sends one line per event on a pipe and waits for "go":

    ready        set up and evaluated: turns may start       -> pacer.ready()
    before K     about to start iteration K                  -> pacer.before(K)   (blocks until its
        turn)
    after K      iteration K and its evaluation are done     -> pacer.after(K)
    leave        trained: no more turns                      -> pacer.leave(wait_for_others=True)

The parent answers every line, so rank 0 and the ring stay in step; alone (no pacer) it answers at
once.
"""
from __future__ import annotations

import os
import select


class RankGate:
    """Rank 0's end: write a request, block until the parent's reply."""

    def __init__(self, fd_request: int, fd_reply: int):
        self._w, self._r = fd_request, fd_reply

    def _ask(self, line: str) -> None:
        os.write(self._w, (line + "\n").encode())
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = os.read(self._r, 64)
            if not chunk:
                raise RuntimeError("the cell process closed the turn pipe")
            reply += chunk

    def ready(self) -> None:
        self._ask("ready")

    def before(self, k: int) -> None:
        self._ask(f"before {k}")

    def after(self, k: int) -> None:
        self._ask(f"after {k}")

    def leave(self) -> None:
        self._ask("leave")


class GateServer:
    """The parent's end: two pipes, the child's two fds (pass_fds), and `serve` for each request
    line."""

    def __init__(self, pacer):
        self.pacer = pacer
        self._req_r, self.child_request = os.pipe()
        self.child_reply, self._rep_w = os.pipe()
        self._buffer = b""
        self._open = True  # False once rank 0 is gone (end of file)

    @property
    def child_fds(self) -> tuple[int, int]:
        return self.child_request, self.child_reply

    def child_started(self) -> None:
        """The child holds its ends now: close ours, so its death reads as end-of-file here."""
        for fd in self.child_fds:
            os.close(fd)

    def serve(self, timeout_s: float) -> bool:
        """Answer the requests that arrive within timeout_s (none: return after the timeout). ->
        whether one was answered."""
        if not self._open:
            select.select([], [], [], timeout_s)
            return False
        if not select.select([self._req_r], [], [], timeout_s)[0]:
            return False
        chunk = os.read(self._req_r, 4096)
        if not chunk:  # rank 0 ended; its exit code tells how
            self._open = False
            return False
        self._buffer += chunk
        answered = False
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            self._handle(line.decode().split())
            answered = True
        return answered

    def _handle(self, words: list[str]) -> None:
        what, args = words[0], [int(w) for w in words[1:]]
        if what == "leave":
            self.pacer.leave(wait_for_others=True)
        else:
            getattr(self.pacer, what)(*args)
        os.write(self._rep_w, b"go\n")

    def close(self) -> None:
        for fd in (self._req_r, self._rep_w):
            try:
                os.close(fd)
            except OSError:
                pass
