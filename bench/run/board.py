"""The run's progress: one line per running cell in a terminal, a few plain lines elsewhere.

Every cell runs in its own process (bench/run/processes.py). Each draws nothing itself: it sends
what it is doing (`Reporter`: setting up, the warm start's step, the iteration with its TPSPD,
reward and pass@1) over a pipe to `rlbench run`, whose `Board` draws the lines. Cells that take
turns (the interleaved default) would otherwise each redraw the same terminal line over the others'.

On a terminal the board redraws a block of lines in place, one per running cell, each at most 100
columns (less on a narrower window); a cell that ends leaves its last line above the block, and so
does any text printed meanwhile: every write to the standard error of `rlbench run` and of its cells
(their workers' too) passes through the board, which prints it above the block instead of under it,
where the next redraw would overwrite it. Anywhere else (a pipe, a log file, CI) it prints one plain
line when a cell starts its warm start or its iterations and when it ends: no control characters, no
per-step lines.
"""
from __future__ import annotations

import io
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import wait

WIDTH = 100  # the widest line drawn, whatever the terminal's width
SEND_EVERY_S = 0.2  # a cell sends a count at most this often (its last one always)
# the lines are redrawn this often, whether or not a cell reported (their clocks move)
REDRAW_S = 0.2


class Reporter:
    """A cell's side: what it is doing, sent to the board of `rlbench run`. Without a channel
    (progress off, or a cell run in-process by a test) every call does nothing, and the reporter is
    false."""

    def __init__(self, conn=None):
        self.conn, self._sent, self._what = conn, 0.0, None

    @classmethod
    def of(cls, progress) -> "Reporter":
        """progress: a Reporter, or anything else (False, None: progress off)."""
        return progress if isinstance(progress, Reporter) else cls()

    def __bool__(self) -> bool:
        return self.conn is not None

    def phase(self, text: str) -> None:
        """A step without a count (setting up, evaluating)."""
        self._send((text, None, None, ""))

    def count(self, what: str, done: int, total: int, note: str = "") -> None:
        """done of total `what` (warm-start steps, iterations); note: the latest values (TPSPD,
        reward)."""
        if what == self._what and done < total and time.monotonic() - self._sent < SEND_EVERY_S:
            return
        self._send((what, done, total, note))

    def _send(self, msg: tuple) -> None:
        if self.conn is None:
            return
        try:
            self.conn.send(msg)
            self._sent, self._what = time.monotonic(), msg[0]
        except OSError:  # the board is gone (rlbench run ended): the cell goes on without it
            self.conn = None


@dataclass
class Channel:
    """What a cell process is started with: the write ends of its pipes to the board (picklable: a
    process started by a fork server receives duplicates of the descriptors)."""

    reports: object  # multiprocessing Connection: Reporter messages
    # on a terminal: a Connection whose descriptor becomes the cell's standard error
    stderr: object | None

    def attach(self) -> Reporter:
        """In the cell's process, first thing: its standard error (and its workers', which inherit
        it) into the board's pipe; -> its Reporter."""
        if self.stderr is not None:
            sys.stderr.flush()
            os.dup2(self.stderr.fileno(), 2)
            self.stderr.close()
        return Reporter(self.reports)


def attach(channel) -> Reporter:
    """A cell process's Reporter from what it was started with (a Channel, or a bool: no board)."""
    return channel.attach() if isinstance(channel, Channel) else Reporter()


@dataclass
class _Cell:
    name: str
    started: float = field(default_factory=time.monotonic)
    what: str = "starting"
    done: int | None = None
    total: int | None = None
    note: str = ""
    # the last (done, total) iterations: the cell's final line
    iterations: tuple[int, int] | None = None
    ended: int | None = None  # exit code


class Board:
    """`rlbench run`'s side (a context manager around the cells' processes): open a Channel per cell
    before its process starts, `started` once it has, `ended` with its exit code."""

    def __init__(self, enabled: bool, stream=None):
        """stream: where to draw (default: this process's standard error, which the board then holds
        while it lives: see _hold_stderr)."""
        self.stream = stream or sys.stderr
        self._holds = stream is None
        self.enabled = enabled
        self.live = enabled and _is_terminal(self.stream)
        self.cells: dict[str, _Cell] = {}
        self._readers: dict = {}  # Connection -> (cell name, "reports" | "stderr")
        # stderr Connection -> its text after the last new line, not printed yet
        self._partial: dict = {}
        # the parent's copies of the write ends, closed once started
        self._ends: dict[str, Channel] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._drawn = 0  # lines of the block on the screen
        self._thread = None
        # the terminal's descriptor while the board holds the standard error of rlbench run
        self._out = None
        self._name_width = 10

    # ------------------------------------------------------------- rlbench run's calls

    def __enter__(self) -> "Board":
        if self.live and self._holds:
            self._hold_stderr()
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, name="rlbench-board", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        """Every cell still running (the run interrupted) leaves its line as it stands; pipes
        closed."""
        if self._thread is not None:
            if self._out is not None:
                self._release_stderr()
            self._stop.set()
            self._thread.join(5)
        for name, cell in list(self.cells.items()):
            if cell.ended is None:
                self.ended(name, None)
        with self._lock:
            self._erase()
            for conn in list(self._readers):
                conn.close()
            self._readers.clear()

    def open(self, name: str) -> Channel | None:
        """The channel to start cell `name`'s process with (None when progress is off)."""
        if not self.enabled:
            return None
        reports_r, reports_w = Pipe(duplex=False)
        err_r, err_w = Pipe(duplex=False) if self.live else (None, None)
        with self._lock:
            self.cells[name] = _Cell(name)
            self._name_width = min(24, max(self._name_width, len(name)))
            self._readers[reports_r] = (name, "reports")
            if err_r is not None:
                self._readers[err_r] = (name, "stderr")
            self._ends[name] = Channel(reports_w, err_w)
        return self._ends[name]

    def started(self, name: str) -> None:
        """The process has its copies of the write ends: the board's are closed (so a cell's end,
        and its workers', reads as the pipe's end)."""
        with self._lock:
            chan = self._ends.pop(name, None)
        if chan is not None:
            for end in (chan.reports, chan.stderr):
                if end is not None:
                    end.close()

    def ended(self, name: str, code: int | None) -> None:
        """The cell's process ended with exit code `code`: its last line leaves the block."""
        self.started(name)  # a process that never started
        self._drain(name)
        with self._lock:
            cell = self.cells.get(name)
            if cell is None or cell.ended is not None:
                return
            cell.ended = code
            self._print(self._final_line(cell))
            self._redraw()

    # ------------------------------------------------------------- the board's thread

    def _loop(self) -> None:
        """Read what the cells send, redraw at most every REDRAW_S (and at least: the clocks move);
        once stopped, read what is left and end (a pipe an orphaned worker still holds is not waited
        for)."""
        last = 0.0
        while True:
            with self._lock:
                readers = [c for c in self._readers if not c.closed]
            if not readers and self._stop.is_set():
                return
            ready = []
            try:
                if readers:
                    ready = wait(readers, timeout=REDRAW_S)
                else:
                    time.sleep(REDRAW_S)
            except OSError:  # a pipe closed meanwhile: a cell's last messages read by `ended`
                continue
            for conn in ready:
                self._read(conn)
            if self.live and time.monotonic() - last >= REDRAW_S:
                with self._lock:
                    self._redraw()
                last = time.monotonic()
            if self._stop.is_set() and not ready:
                return

    def _read(self, conn) -> None:
        """One message or chunk of text from a cell (or from rlbench run's own standard error)."""
        with self._lock:
            if conn not in self._readers:
                return
            name, kind = self._readers[conn]
            try:
                if kind == "reports":
                    msg = conn.recv()
                else:
                    text = os.read(conn.fileno(), 65536)
                    if not text:
                        raise EOFError
            except (EOFError, OSError):
                self._readers.pop(conn, None)
                conn.close()
                if self._partial.get(conn):  # a last line without its new line
                    self._print(self._partial.pop(conn) + "\n")
                return
            if kind == "stderr":
                self._print_lines(conn, text.decode(errors="replace"))
            else:
                self._update(self.cells[name], *msg)

    def _print_lines(self, conn, text: str) -> None:
        """The whole lines of what a process wrote (a line the board drew under a half-written one
        would split it); the rest waits for its new line. A line redrawn with carriage returns (a
        bar a library draws itself) counts as its last drawing: only that would stay on a
        terminal."""
        *whole, rest = (self._partial.pop(conn, "") + text).split("\n")
        if rest.rpartition("\r")[2]:
            self._partial[conn] = rest.rpartition("\r")[2]
        lines = [line.rpartition("\r")[2] for line in whole]
        if lines:
            self._print("".join(f"{line}\n" for line in lines))

    def _drain(self, name: str) -> None:
        """What a cell that has ended sent and the board's thread has not read yet: before its last
        line."""
        with self._lock:
            mine = [c for c, (n, _) in self._readers.items() if n == name]
        for conn in mine:
            while conn in self._readers and conn.poll(0.05):
                self._read(conn)

    def _update(self, cell: _Cell, what: str, done, total, note: str) -> None:
        """A new step (not a new count of the same) prints a plain line where the board is not
        live."""
        new_step = what != cell.what
        cell.what, cell.done, cell.total, cell.note = what, done, total, note
        if what == "iteration" and done is not None:
            cell.iterations = (done, total)
        if new_step and not self.live and total:
            self._print(f"{cell.name}: {what} {done}/{total}  {_clock(cell)}\n")

    # ------------------------------------------------------------- drawing

    def _line(self, cell: _Cell) -> str:
        """One cell's line: name, bar, count, clock, the latest values; cut to the window's
        width."""
        head = f"{cell.name[:self._name_width]:<{self._name_width}}"
        if cell.total:
            count = f"{_bar(cell.done / cell.total, 12)} {cell.what} {cell.done}/{cell.total}"
            return self._fit(f"{head}  {count}  {_clock(cell)}", cell.note)
        return self._fit(f"{head}  {cell.what}  {_clock(cell)}", "")

    def _final_line(self, cell: _Cell) -> str:
        """The line a cell leaves when it ends: its outcome, iterations and time, its last
        values."""
        outcome = {0: "done", None: "stopped"}.get(cell.ended, f"ended with exit code {cell.ended}")
        its = (f"{cell.iterations[0]}/{cell.iterations[1]} iterations" if cell.iterations
               else "no iteration")
        head = f"{cell.name[:self._name_width]:<{self._name_width}}"
        note = cell.note if cell.iterations else ""
        return self._fit(f"{head}  {outcome}: {its} in {_clock(cell)}", note) + "\n"

    def _fit(self, text: str, note: str) -> str:
        """text and as many of the note's values (", "-separated) as the width holds; text cut if it
        alone is wider."""
        width, items = self._width(), note.split(", ") if note else []
        while items and len(f"{text}  {', '.join(items)}") > width:
            items.pop()
        return (f"{text}  {', '.join(items)}" if items else text)[:width]

    def _width(self) -> int:
        """The widest line for the terminal drawn on (one column short of its width: a line that
        fills it moves some terminals' cursor to the next line), never past WIDTH; WIDTH where it is
        no terminal."""
        if not self.live:
            return WIDTH
        try:
            fd = self._out if self._out is not None else self.stream.fileno()
            columns = os.get_terminal_size(fd).columns
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            columns = 0  # not a terminal, or one that does not say
        return min(WIDTH, (columns or shutil.get_terminal_size((WIDTH + 1, 24)).columns) - 1)

    def _redraw(self) -> None:
        if not self.live:
            return
        running = [c for c in self.cells.values() if c.ended is None]
        lines = [self._line(c) for c in running]
        self._erase()
        self._write("".join(f"{line}\n" for line in lines))
        self._drawn = len(lines)

    def _erase(self) -> None:
        """Move up over the block and clear it (the cursor then stands where it began)."""
        if self._drawn:
            self._write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _print(self, text: str) -> None:
        """Text that stays: above the block on a terminal (the block is redrawn under it)."""
        if self.live:
            self._erase()
        self._write(text)
        if self.live:
            self._redraw()

    def _write(self, text: str) -> None:
        if self._out is not None:
            os.write(self._out, text.encode())
        else:
            self.stream.write(text)
            self.stream.flush()

    # ------------------------------------------------------------- rlbench run's own standard error

    def _hold_stderr(self) -> None:
        """rlbench run's descriptor 2 into a pipe the board reads (a warning printed while cells run
        goes above the block); the terminal kept on a descriptor of the board's own."""
        sys.stderr.flush()
        self._out = os.dup(2)
        r, w = Pipe(duplex=False)
        os.dup2(w.fileno(), 2)
        w.close()
        self._readers[r] = ("rlbench run", "stderr")

    def _release_stderr(self) -> None:
        sys.stderr.flush()
        # the pipe's last write end closes: the board reads what is left, then its end
        os.dup2(self._out, 2)
        deadline = time.monotonic() + 2
        own = ("rlbench run", "stderr")
        while own in self._readers.values() and time.monotonic() < deadline:
            time.sleep(0.02)
        with self._lock:
            self._erase()
            os.close(self._out)
            self._out = None


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty() and os.environ.get("TERM", "") != "dumb"
    except (AttributeError, ValueError):
        return False


def _bar(share: float, width: int) -> str:
    """A bar of `width` characters, eighths of a block at its edge."""
    eighths = round(max(0.0, min(1.0, share)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")).ljust(width, "·")


def _clock(cell: _Cell) -> str:
    s = int(time.monotonic() - cell.started)
    return f"{s // 60}:{s % 60:02d}"
