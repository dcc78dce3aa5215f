"""`rlbench run --engine trl` and the TRL cells of `--ablation peers`: TRL's GRPOTrainer on
rlbench's workload, placement and measurements, written as an rlbench cell (results.json,
events.jsonl, ...).

setup (the policy as a Hugging Face directory, export.py) -> the ranks (launch.py, worker.py),
taking turns with other cells through rank 0's pipe (gate.py) -> their files read into rlbench's
schema (results.py), whatever happened: a failed or interrupted run keeps the iterations it
finished.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path


from rlbench.core.devices import device as dev
from rlbench.core.errors import UserError, WorkerError
from rlbench.core.record.stages import now
from rlbench.engines.data.source import load_dataset
from rlbench.engines.external.trl import settings
from rlbench.engines.external.trl.export import export_policy
from rlbench.engines.external.trl.gate import GateServer
from rlbench.engines.external.trl.launch import log_tail, start_ranks, stop_ranks, wait_ranks
from rlbench.engines.external.trl.record import cell_results, write_cell

PACKAGES = ("trl", "accelerate", "datasets")
NOT_INSTALLED = ("--engine trl needs TRL, accelerate and datasets: pip install -c constraints.txt "
                 "'rlbench[trl]' (bash scripts/setup.sh --dev installs them); missing here: {}")
FRAMEWORK = "trl"


def require_trl() -> None:
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        raise UserError(NOT_INSTALLED.format(", ".join(missing)))


class _Alone:
    """The pacer of a cell that takes no turns."""

    def setup(self): pass
    def ready(self): pass
    def before(self, k): pass
    def after(self, k): pass
    def leave(self, wait_for_others=False): pass


def run_trl(cfg, out_dir, *, name: str = FRAMEWORK, pacer=None, progress=None,
            options: dict | None = None) -> dict:
    """TRL's GRPO on cfg's workload, one pinned rank per device; writes out_dir's result files and
    returns results.json's dict. pacer (bench/run/interleave.py Pacer): the cell's turns, when it
    takes them; progress: the cell's Reporter to the run's progress lines (bench/run/board.py), or
    None; options: TRL's own settings the cell varies (settings.TrlOptions, e.g.
    continuous_batching). Raises UserError (exit 2) before anything runs when TRL is missing or
    cannot run the config, and WorkerError (exit 3) when a rank fails."""
    require_trl()
    world = cfg.engine.num_devices
    settings.check(cfg, world)
    opts = settings.TrlOptions(**(options or {}))
    kind = dev.resolve_kind(cfg.engine.device)
    if world > dev.available(kind):
        what = "cores" if kind == "cpu" else f"{kind} devices"
        raise UserError(f"--engine trl: {world} devices (engine.rollout_devices + "
                        f"engine.train_devices) but this machine has {dev.available(kind)} {what}")
    pacer = pacer or _Alone()
    pacer.setup()
    run = TrlRun(cfg, Path(out_dir).resolve(), name, world, opts, kind)
    try:
        run.start(pacer)
        run.wait(progress)
    except Exception as e:  # a failure of ours (export, launch): the cell records it, then fails
        run.error = run.error or f"{type(e).__name__}: {e}"
        raise
    finally:
        run.stop()
        pacer.leave()
        results = run.save()
    if run.status == "failed":
        raise WorkerError(run.error)
    return results


class TrlRun:
    """One TRL cell while it runs: its ranks, its status, and its result files."""

    def __init__(self, cfg, out: Path, name: str, world: int, options, kind: str = "cpu"):
        self.cfg, self.out, self.name, self.world, self.options = cfg, out, name, world, options
        self.kind = kind  # the ranks' device kind: cpu (a core each) or cuda (a GPU each)
        self.folder = out / "trl"  # the ranks' own files (files.py) and logs
        self.folder.mkdir(parents=True, exist_ok=True)
        self.t0 = now()
        self.procs: list = []
        self.status, self.error = "failed", None
        self.model_dir: Path | None = None
        self.gate = None

    def start(self, pacer) -> None:
        self.model_dir = export_policy(self.cfg, load_dataset(self.cfg.data, self.cfg.run.seed))
        self.gate = GateServer(pacer)
        spec = {"config": self.cfg.model_dump(mode="json"), "world": self.world,
                "model_dir": str(self.model_dir),
                "folder": str(self.folder), "t0": self.t0, "gate": list(self.gate.child_fds),
                "options": self.options.as_dict(), "kind": self.kind}
        spec_path = self.folder / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        self.procs = start_ranks(spec_path, self.world, self.folder, self.gate.child_fds, self.kind)
        self.gate.child_started()

    def wait(self, progress) -> None:
        try:
            codes = wait_ranks(self.procs, self._serving(progress))
        except KeyboardInterrupt:
            self.status, self.error = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
            raise
        failed = [r for r, c in enumerate(codes) if c != 0]
        if not failed:
            self.status = "complete"
            return
        r = failed[0]
        self.error = (f"TRL rank {r} exited with code {codes[r]}; its output is in "
                      f"{self.folder}/rank{r}.log:\n"
                      + log_tail(self.folder, r))

    def _serving(self, progress):
        """The wait loop's tick: answer rank 0's turn requests, and report the iterations done (rank
        0's timing windows, one line per iteration) to the progress lines."""
        windows = self.folder / "rank0" / "windows.jsonl"

        def serve(timeout_s: float) -> None:
            self.gate.serve(timeout_s)
            if progress and windows.is_file():
                with open(windows) as f:
                    progress.count("iteration", sum(1 for _ in f), self.cfg.run.iterations)

        return serve

    def stop(self) -> None:
        stop_ranks(self.procs)
        if self.gate is not None:
            self.gate.close()

    def save(self) -> dict:
        """results.json (and events/iterations/samples JSONL) from what the ranks wrote."""
        res, streams = cell_results(self)
        write_cell(self.out, res, streams)
        return res

