"""Run one cell (one engine configuration): setup -> iterations -> cleanup, writing results as it
goes.

The loop is `run_cell`'s: per iteration, the schedule's `run_iteration` (engines/schedules/), then
what the iteration leaves in the result files (bench/run/iteration_log.py). An interrupted or failed
cell still writes results.json with status "interrupted"/"failed" and every iteration it finished.
"""
from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from rlbench.core import schedules
from rlbench.core.devices import device as dev
from rlbench.core.devices import placement, starting
from rlbench.core.errors import UserError
from rlbench.core.record import lifecycle, profiling
from rlbench.core.record.hostcpu import HostCPU
from rlbench.core.record.lifecycle import Lifecycle, Phase
from rlbench.core.record.stages import Role, now
from rlbench.core.results import metrics, utilisation
from rlbench.core.results.writer import CellWriter
from rlbench.engines import launch
from rlbench.engines.data.source import load_dataset
from rlbench.engines.factory import build_schedule, iteration_input
from rlbench.engines.model.weight_file import policy_once
from rlbench.planted import pause, slowdown
from rlbench.run.board import Reporter
from rlbench.run.interleave import Pacer
from rlbench.run.iteration_log import IterationLog


class CellRun:
    """State of one cell while it runs; `results()` is valid at any point."""

    def __init__(self, cfg, folder: Path, name: str):
        self.cfg, self.folder, self.name = cfg, Path(folder), name
        self.writer = CellWriter(self.folder)
        self.iterations: list[dict] = []
        self.evals: list[dict] = []
        self.rollout_stats: list[dict] = []
        self.provenance: dict = {}
        self.status, self.error = "running", None
        self.t0 = now()
        self.model_info: dict = {}
        self.params_sha256: str | None = None
        self.placement = None  # core/devices/placement.py Placement, once planned
        # the model's shape for the per-stage work counts (core/results/utilisation.py)
        self.shape: dict = {}
        # RLBENCH_SLOW's stages for this cell (bench/planted/slowdown.py); empty normally
        self.planted: dict = {}
        self.host_cpu = None  # core/record/hostcpu.py HostCPU once the workers run
        self.schedule = None  # the engine (engines/schedules/), once built: closed at the end
        # start-up, CPU, peak memory (core/record/lifecycle.py): `check --against`
        self.lifecycle = Lifecycle()

    def results(self) -> dict:
        return metrics.cell_result(
            cell=self.name, switches=self.cfg.switches(), config=self.cfg.model_dump(mode="json"),
            provenance=self.provenance, status=self.status, error=self.error, model=self.model_info,
            iterations=self.iterations, evals=self.evals, rollout_stats=self.rollout_stats,
            placement=self.placement.records() if self.placement else [],
            devices=self.placement.devices if self.placement else None,
            wall_s_total=now() - self.t0, final_params_sha256=self.params_sha256,
            # system-wide monotonic clock at the cell's time 0: cells on one time axis
            clock_t0=self.t0,
            lifecycle=self.lifecycle.record,
            **({"planted_slowdown": self.planted} if self.planted else {}),
            **({"clocks": dict(self.placement.clocks)} if self.placement and self.placement.clocks
               else {}))

    def save(self) -> Path:
        return self.writer.results(self.results())


def run_cell(cfg, folder: Path, name: str, progress=None, pacer=None,
             own_process: bool = False) -> dict:
    """Run one cell in this process; returns its results dict (also written to folder/results.json).
    progress: a Reporter (bench/run/board.py) to the run's progress lines; anything else shows none.
    pacer (bench/run/interleave.py): when the cell takes turns with other cells; none when it runs
    alone. own_process: this process was started for the cell (its start-up phases count from the
    process's start)."""
    lifecycle.begin_phases(own_process)
    run, pacer, progress = CellRun(cfg, folder, name), pacer or Pacer(), Reporter.of(progress)
    progress.phase("setting up")
    with _outcome(run, pacer):
        schedule, evaluator, dataset, tok = _setup(cfg, run, pacer, progress)
        # evaluates before iteration 0
        with IterationLog(cfg, run, evaluator, dataset, tok, progress) as log:
            pacer.ready()
            warmup = _Warmup(run, pacer)
            for k in range(cfg.run.iterations):
                pause.before(k)  # RLBENCH_PAUSE only: a planted gap between iterations
                pacer.before(k)
                warmup.before(k, cfg.run.warmup_iterations)
                # the first measured iteration: start-up ends here
                if k == cfg.run.warmup_iterations:
                    run.lifecycle.first_measured(pacer.waited_s, run.host_cpu)
                inp = iteration_input(cfg, dataset, tok, k)
                run.host_cpu.start()
                out = schedule.run_iteration(inp)
                used = run.host_cpu.stop()  # every process's CPU seconds in the iteration
                if k == cfg.run.iterations - 1:
                    run.lifecycle.last_measured(run.host_cpu)
                log.record(k, out, used)
                pacer.after(k)
                log.prof.step()
        pacer.leave(wait_for_others=True)  # no teardown while another cell is being timed
        run.params_sha256 = params_digest(schedule.trainer.policy)
    return run.results()


class _Warmup:
    """The start of the first iteration (lifecycle `first_iteration_s`) and the warm-up phase: from
    there to the first measured iteration, less the turn ring's waits."""

    def __init__(self, run: CellRun, pacer):
        self.run, self.pacer = run, pacer
        self.started, self.waited = None, 0.0

    def before(self, k: int, warmup_iterations: int) -> None:
        if k == 0:
            self.run.lifecycle.first_iteration(self.pacer.waited_s,
                                               lifecycle.phases().get(Phase.FIRST_EVAL.value, 0.0))
            self.started, self.waited = now(), self.pacer.waited_s
        if k == warmup_iterations and k > 0:
            lifecycle.record_phase(Phase.WARMUP,
                                   now() - self.started - (self.pacer.waited_s - self.waited))


@contextlib.contextmanager
def _outcome(run: CellRun, pacer):
    """The cell's status whatever happens (complete, interrupted, rejected, failed), results.json
    saved before the workers close (a stop that cuts the closing short loses nothing), then the
    workers closed."""
    try:
        yield
        run.status = "complete"
    except KeyboardInterrupt:
        run.status, run.error = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
        raise
    except UserError:
        run.status = "rejected"  # bad input: nothing measured, nothing presented as a result
        raise
    except BaseException as e:
        run.status, run.error = "failed", f"{type(e).__name__}: {e}"
        raise
    finally:
        try:
            pacer.leave()  # a failed cell's turns pass to the others
        # the ring failing as the cell leaves it: the cell fails, with this error
        except BaseException as e:
            if run.status == "complete":
                run.status, run.error = "failed", f"{type(e).__name__}: {e}"
            raise
        finally:  # the turn ring failing too (its folder gone, a pipe) loses nothing measured
            _save_and_close(run)


def _save_and_close(run: CellRun) -> None:
    """results.json saved before the workers close (a stop that cuts the closing short loses
    nothing), then the workers closed."""
    if run.placement is not None:
        run.placement.observed[Role.DRIVER.value] = launch.observe_driver()
    if run.host_cpu is not None:  # peaks so far, the workers still up (they close below)
        # a measurement must never keep the workers from closing
        with contextlib.suppress(Exception):
            run.lifecycle.peaks(run.host_cpu.pids)
    run.lifecycle.add_phases(lifecycle.by_process())
    if run.status != "rejected" or run.iterations:
        run.save()
    if run.schedule is not None:
        run.schedule.close()
    run.writer.close()


def _setup(cfg, run: CellRun, pacer, progress: Reporter):
    """Planted slowdowns, placement, model and engine; -> (schedule, evaluator, dataset,
    tokenizer)."""
    run.planted = slowdown.activate(run.name, cfg.switches())  # before any worker starts
    pause.check()
    pacer.setup()
    with lifecycle.phase(Phase.DEVICE):
        device = dev.resolve(cfg.engine.device)
        run.placement = _placement(cfg, device.type)
    if cfg.run.profile:  # rollout worker processes inherit this and trace the same iterations
        profiling.export_env(str(run.folder / "traces"), cfg.run.warmup_iterations,
                             cfg.run.profile_iterations)
    # the workers' fork server imports while the model loads; after every variable the workers
    # inherit
    starting.warm(device.type != "npu" and cfg.engine.launcher == "local")
    with lifecycle.phase(Phase.MODEL):
        dataset, policy, tok, weights = _setup_model(cfg, run, progress)
    run.schedule, evaluator = build_schedule(cfg, policy, tok, run.t0, run.writer.event, device,
                                          dataset=dataset, placement=run.placement, weights=weights)
    # the device's description and peak (one device, one thread), asked of a worker that holds it
    run.provenance = launch.provenance(run.schedule, device, next(policy.parameters()).dtype)
    run.host_cpu = HostCPU({w: o.get("pid") for w, o in run.placement.observed.items()})
    return run.schedule, evaluator, dataset, tok


def _placement(cfg, kind: str):
    """Where every worker runs (core/devices/placement.py); refuses more devices than this machine
    (or a running Ray cluster's run, checked before) may claim."""
    available = placement.claimable(cfg.engine, dev.available(kind))
    # one process with every device (the schedule's record says)
    if schedules.of(cfg).in_process(cfg):
        return placement.single_process(cfg.engine, kind, available)
    return placement.plan(cfg.engine, kind, available)


def _setup_model(cfg, run: CellRun, progress: Reporter):
    """-> (dataset, policy on the CPU mapped from the run's weight file, tokenizer, that
    WeightFile): the run's first cell of this model builds the file
    (engines/model/weight_file.py)."""
    dataset = load_dataset(cfg.data, cfg.run.seed)
    policy, tok, info, weights = policy_once(
        cfg, dataset, run.folder.parent,
        progress=lambda i, n, loss: progress.count("warm-start step", i, n, f"loss {loss:.3f}"))
    progress.phase("setting up")
    run.model_info = {"kind": cfg.model.kind, **info,
                      "parameters": sum(p.numel() for p in policy.parameters())}
    run.shape = utilisation.model_shape(policy)
    # the speedup prediction's training work (costmodel/predict.py)
    run.model_info["shape"] = run.shape
    return dataset, policy, tok, weights


def params_digest(model) -> str | None:
    """sha256 over the parameters' bytes: same seed + same config must give the same digest."""
    if sum(p.numel() for p in model.parameters()) > 500_000_000:
        return None  # too slow to be worth it on big models
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
