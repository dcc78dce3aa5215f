"""A planted environment: a `sitecustomize.py` in a venv's site-packages that makes one torch
operator slower by a fraction of its own CPU time, so that `rlbench check --env-a A --env-b B` can
be shown to catch an environment that differs from another only in code no package declares, and to
blame the stages that call that operator (docs/results/ci-gate.md, 'Environments').

    python -m rlbench.planted.slow_op plant VENV/bin/python torch.log_softmax 0.5
    python -m rlbench.planted.slow_op wheel FOLDER torch.log_softmax 0.5

writes VENV's sitecustomize.py (refused where one exists), or a wheel that installs it
(planted-slow-op 0.1: one more package for a lock file). The file imports nothing of rlbench and
nothing heavy: every start of that Python runs it, and it waits for the operator's module to be
imported (an import hook), then wraps the operator: after each call it busy-waits (CPU time of its
thread, as a slower kernel would spend it) `fraction` times the call's own CPU time. The operator is
looked up by its dotted name at each call site (`torch.log_softmax`,
`torch.nn.functional.scaled_dot_product_attention`), as torch's and transformers' code call them.
"""
from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

TEMPLATE = '''"""Planted by rlbench.planted.slow_op: {op} costs {fraction:.0%} more CPU time per
call in this Python."""
import importlib.abc
import sys
import time

_OP, _FRACTION = {op!r}, {fraction!r}
_MODULE, _NAME = _OP.rsplit(".", 1)


def _slowed(fn):
    def op(*args, **kwargs):
        start = time.thread_time()
        out = fn(*args, **kwargs)
        end = time.thread_time() + _FRACTION * (time.thread_time() - start)
        while time.thread_time() < end:  # busy, as a slower kernel is: the CPU time counts
            pass
        return out
    return op


class _AfterImport(importlib.abc.MetaPathFinder):
    """Wraps the operator once its module has run (nothing of torch is imported here)."""

    def find_spec(self, name, path=None, target=None):
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            setattr(module, _NAME, _slowed(getattr(module, _NAME)))
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterImport())
'''


def site_packages(python: str) -> Path:
    """The purelib folder of that interpreter (its venv's site-packages)."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([python, "-c", code],
                         capture_output=True, text=True, check=True, timeout=60)
    return Path(out.stdout.strip())


def plant(python: str, op: str, fraction: float) -> Path:
    """Write the planted sitecustomize.py into python's site-packages; -> its path. Refused
    (ValueError) where a sitecustomize.py is there already, or where op is no dotted name or
    fraction is not in (0, 10]."""
    _check(op, fraction)
    path = site_packages(python) / "sitecustomize.py"
    if path.exists():
        raise ValueError(f"{path} exists already: plant into a venv of its own")
    path.write_text(TEMPLATE.format(op=op, fraction=fraction))
    return path


WHEEL_NAME, WHEEL_VERSION = "planted-slow-op", "0.1"


def wheel(folder: Path, op: str, fraction: float) -> Path:
    """The planted sitecustomize.py as a wheel of its own (planted-slow-op 0.1), so that an
    environment built from a lock file can carry it as one more locked package: -> the wheel's path
    in folder."""
    _check(op, fraction)
    info = f"{WHEEL_NAME.replace('-', '_')}-{WHEEL_VERSION}.dist-info"
    files = {"sitecustomize.py": TEMPLATE.format(op=op, fraction=fraction),
             f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {WHEEL_NAME}\nVersion: "
                                  f"{WHEEL_VERSION}\n"),
             f"{info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: rlbench\nRoot-Is-Purelib: true\n"
                               "Tag: py3-none-any\n")}
    lines = [f"{name},sha256={_digest(text.encode())},{len(text.encode())}"
             for name, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*lines, f"{info}/RECORD,,"]) + "\n"
    path = Path(folder) / f"{WHEEL_NAME.replace('-', '_')}-{WHEEL_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def _check(op: str, fraction: float) -> None:
    if "." not in op or not 0 < fraction <= 10:
        raise ValueError(f"op {op!r} must be a dotted name (torch.log_softmax) and 0 < fraction <= "
                         f"10 ({fraction})")


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4 or args[0] not in ("plant", "wheel"):
        print("usage: python -m rlbench.planted.slow_op plant PYTHON OP FRACTION\n       python -m "
              "rlbench.planted.slow_op wheel FOLDER OP FRACTION", file=sys.stderr)
        return 2
    try:
        made = plant(args[1], args[2], float(args[3])) if args[0] == "plant" else \
            wheel(Path(args[1]), args[2], float(args[3]))
    except (ValueError, OSError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(made)
    return 0


if __name__ == "__main__":
    sys.exit(main())
