"""The run's progress lines (bench/run/board.py): on a terminal one line per running cell, redrawn in place,
at most 100 columns, with whatever a cell prints kept above them; elsewhere a few plain lines. The cells
here are real processes reporting over the board's pipes; the terminal is a pseudo-terminal, read through
a small screen model that understands the three things the board writes (text, new line, and the escape
sequences that move up and clear)."""
from __future__ import annotations

import fcntl
import io
import multiprocessing
import os
import re
import struct
import sys
import termios
import threading
import time

import pytest

from rlbench.run.board import WIDTH, Board, Reporter, attach

CELLS = ("sync", "periodic_async_barrier", "periodic_async")


class Screen:
    """What a terminal shows after the bytes the board wrote: rows of text and the cursor's row."""

    def __init__(self):
        self.rows, self.row, self.col = [""], 0, 0

    def feed(self, text: str) -> None:
        for part in re.split(r"(\x1b\[\d*[A-Za-z]|\n|\r)", text):
            if part == "\n":
                self.row, self.col = self.row + 1, 0
                if self.row == len(self.rows):
                    self.rows.append("")
            elif part == "\r":
                self.col = 0
            elif part.startswith("\x1b["):
                self._escape(int(part[2:-1] or 1), part[-1])
            elif part:
                line = self.rows[self.row].ljust(self.col)
                self.rows[self.row] = line[:self.col] + part + line[self.col + len(part):]
                self.col += len(part)

    def _escape(self, n: int, code: str) -> None:
        if code == "F":  # n lines up, to the first column
            self.row, self.col = max(0, self.row - n), 0
        elif code == "J":  # clear from the cursor to the end of the screen
            self.rows[self.row] = self.rows[self.row][:self.col]
            del self.rows[self.row + 1:]
        else:
            raise AssertionError(f"the board wrote an escape sequence it should not: {code!r}")

    def text(self) -> list[str]:
        return [r for r in self.rows if r]


def _cell(channel, name: str, go, done) -> None:
    """A cell process: a warm start, then iterations; a warning on its standard error half-way."""
    rep = attach(channel)
    sys.stderr = open(2, "w", closefd=False)  # as in a cell: pytest's capture of this one writes elsewhere
    for i in range(1, 6):
        rep.count("warm-start step", i, 5, f"loss {1 / i:.3f}")
    rep.phase("setting up")
    rep.count("iteration", 1, 4, "TPSPD 3529, reward 0.41, pass@1 0.13")
    print("warning from", end=" ", file=sys.stderr, flush=True)  # half a line, the board redrawing meanwhile
    time.sleep(0.5)
    print(name, file=sys.stderr, flush=True)
    for i in range(3):  # a bar a library draws itself with carriage returns, then clears (tqdm, leave=False)
        print(f"\rits own bar {i}/3", end="", file=sys.stderr, flush=True)
    print("\r" + " " * 20 + "\r", end="", file=sys.stderr, flush=True)
    go.wait(30)
    rep.count("iteration", 4, 4, "TPSPD 3600, reward 0.55, pass@1 0.48")
    done.set()


def _run_cells(board: Board, while_running=None) -> None:
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    cells = []
    for name in CELLS:
        done = ctx.Event()
        proc = ctx.Process(target=_cell, args=(board.open(name), name, go, done))
        proc.start()
        board.started(name)
        cells.append((name, proc, done))
    if while_running:
        while_running()
    go.set()
    for name, proc, done in cells:
        proc.join(30)
        board.ended(name, proc.exitcode)


def _pty_board():
    """(a Board drawing on a pseudo-terminal, a function -> the screen so far)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))  # a 100 x 30 window
    stream = os.fdopen(slave, "w", encoding="utf-8")
    screen, lock = Screen(), threading.Lock()

    def pump():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            with lock:
                screen.feed(data.decode(errors="replace"))

    threading.Thread(target=pump, daemon=True).start()

    def seen() -> list[str]:
        time.sleep(0.3)
        with lock:
            return screen.text()

    return Board(True, stream=stream), seen


def test_a_terminal_shows_one_line_per_running_cell_then_what_each_left():
    board, seen = _pty_board()
    during = {}

    def look():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:  # every cell at its first iteration, each warning printed
            rows = seen()
            if sum("iteration 1/4" in r for r in rows) == 3 and sum("warning from" in r for r in rows) == 3:
                break
        during["rows"] = rows

    with board:
        _run_cells(board, look)
    rows, final = during["rows"], seen()
    block = [r for r in rows if "iteration 1/4" in r]
    assert [r.split()[0] for r in block] == list(CELLS)  # one line each, in the order they started
    assert all("TPSPD 3529, reward 0.41, pass@1 0.13" in r for r in block)
    assert rows[-3:] == block  # the block last: the warnings above it, none overwritten
    assert sorted(r for r in rows if r.startswith("warning")) == sorted(f"warning from {c}" for c in CELLS)
    assert not any("its own bar" in r for r in rows + final)  # no half-drawn bar left among the lines
    assert all(len(r) <= WIDTH for r in rows + final)
    ended = [r for r in final if "done: 4/4 iterations" in r]
    assert [r.split()[0] for r in ended] == list(CELLS)
    assert all("pass@1 0.48" in r for r in ended)
    assert not any("iteration 1/4" in r for r in final)  # the block is gone: nothing left to redraw


def test_a_pipe_gets_a_few_plain_lines():
    out = io.StringIO()
    with Board(True, stream=out) as board:
        _run_cells(board)
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    lines = text.splitlines()
    for cell in CELLS:
        mine = [line for line in lines if line.split(":")[0].split()[0] == cell]
        assert len(mine) == 3, mine  # the warm start begun, the iterations begun, the end
        assert mine[0].startswith(f"{cell}: warm-start step ") and mine[1].startswith(f"{cell}: iteration ")
        assert "done: 4/4 iterations" in mine[2]
    assert all(len(line) <= WIDTH for line in lines)


def test_progress_off_sends_and_draws_nothing():
    out = io.StringIO()
    with Board(False, stream=out) as board:
        assert board.open("sync") is None
        board.ended("sync", 0)
    assert out.getvalue() == ""
    rep = attach(None)
    assert not rep and not Reporter.of(False)
    rep.count("iteration", 1, 2)  # no channel: nothing happens, nothing raises


def test_an_interrupted_run_leaves_each_cells_line_as_it_stood():
    out = io.StringIO()
    with Board(True, stream=out) as board:
        for name in CELLS:
            board.open(name)
            board.started(name)
            board._update(board.cells[name], "iteration", 3, 20, "TPSPD 3529")
    lines = out.getvalue().splitlines()
    assert [line.split()[:2] for line in lines if "stopped" in line] == [[c, "stopped:"] for c in CELLS]
    stopped = [line for line in lines if "stopped" in line]
    assert all("3/20 iterations" in line and line.endswith("TPSPD 3529") for line in stopped)


def test_a_cell_that_fails_says_so(monkeypatch):
    out = io.StringIO()
    with Board(True, stream=out) as board:
        board.open("sync")
        board.started("sync")
        board.ended("sync", 3)
    assert out.getvalue().split() == ["sync", "ended", "with", "exit", "code", "3:", "no", "iteration", "in",
                                      "0:00"]


@pytest.mark.parametrize("columns", [60, 100, 200])
def test_lines_fit_the_window_and_never_pass_100_columns(monkeypatch, columns):
    monkeypatch.setattr("shutil.get_terminal_size", lambda fallback=None: os.terminal_size((columns, 24)))
    board = Board(True, stream=io.StringIO())
    board.live = True  # drawn on a terminal of that width (whose size only the environment says)
    board.open("periodic_async_barrier_with_a_long_name")
    cell = board.cells["periodic_async_barrier_with_a_long_name"]
    note = "TPSPD 3529, reward 0.41, pass@1 0.13, and a value too many to fit, one more"
    board._update(cell, "iteration", 12, 20, note)
    line = board._line(cell)
    assert len(line) <= min(columns - 1, WIDTH) and "iteration 12/20" in line
    shown = line.partition("0:00")[2].strip()
    assert all(value in note.split(", ") for value in shown.split(", ") if shown)  # whole values only
    assert ("pass@1 0.13" in shown) == (columns > 60)  # as many as fit
