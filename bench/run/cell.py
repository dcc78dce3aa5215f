"""Run one cell (one engine configuration): setup -> iterations -> cleanup, writing results as it goes.

An interrupted or failed cell still writes results.json with status "interrupted"/"failed" and every
iteration it finished.
"""
from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

from rlbench.errors import UserError
from rlbench.record.stages import Recorder, Role, Stage, now
from rlbench.results import metrics, utilisation
from rlbench.results.writer import CellWriter


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
        self.placement = None  # bench/devices/placement.py Placement, once planned
        self.shape: dict = {}  # the model's shape for the per-stage work counts (bench/results/utilisation.py)
        self.planted: dict = {}  # RLBENCH_SLOW's stages for this cell (bench/planted/slowdown.py); empty normally
        self.host_cpu = None  # bench/record/hostcpu.py HostCPU once the workers run

    def results(self) -> dict:
        return metrics.cell_result(
            cell=self.name, switches=self.cfg.switches(), config=self.cfg.model_dump(mode="json"),
            provenance=self.provenance, status=self.status, error=self.error, model=self.model_info,
            iterations=self.iterations, evals=self.evals, rollout_stats=self.rollout_stats,
            placement=self.placement.records() if self.placement else [],
            devices=self.placement.devices if self.placement else None,
            wall_s_total=now() - self.t0, final_params_sha256=self.params_sha256,
            clock_t0=self.t0,  # system-wide monotonic clock at the cell's time 0: cells on one time axis
            **({"planted_slowdown": self.planted} if self.planted else {}))

    def save(self) -> Path:
        return self.writer.results(self.results())


def run_cell(cfg, folder: Path, name: str, progress: bool = True, pacer=None) -> dict:
    """Run one cell in this process; returns its results dict (also written to folder/results.json).
    pacer (bench/run/interleave.py): when the cell takes turns with other cells; none when it runs alone."""
    from rlbench.devices import device as dev
    from rlbench.engines import launch
    from rlbench.planted import slowdown
    from rlbench.record.hostcpu import HostCPU
    from rlbench.run.interleave import Pacer

    run = CellRun(cfg, folder, name)
    schedule, pacer = None, pacer or Pacer()
    try:
        run.planted = slowdown.activate(name, cfg.switches())  # before any worker starts
        pacer.setup()
        device = dev.resolve(cfg.engine.device)
        run.placement = _placement(cfg, device.type)
        dataset, policy, tok = _setup_model(cfg, run, progress)
        from rlbench.engines.factory import make_engine

        if cfg.run.profile:  # rollout worker processes inherit this and trace the same iterations
            from rlbench.record import profiling
            profiling.export_env(str(run.folder / "traces"), cfg.run.warmup_iterations, cfg.run.profile_iterations)
        schedule, evaluator = make_engine(cfg, policy, tok, run.t0, run.writer.event, device,
                                          dataset=dataset, placement=run.placement)
        # the device's description and peak (one device, one thread), asked of a worker that holds it
        run.provenance = launch.provenance(schedule, device, next(policy.parameters()).dtype)
        run.host_cpu = HostCPU({w: o.get("pid") for w, o in run.placement.observed.items()})
        _train(cfg, run, schedule, evaluator, dataset, tok, progress, pacer)
        pacer.leave(wait_for_others=True)  # no teardown while another cell is being timed
        run.params_sha256 = params_digest(schedule.trainer.policy)
        run.status = "complete"
    except KeyboardInterrupt:
        run.status, run.error = "interrupted", "interrupted by the user (Ctrl-C)"
        raise
    except UserError:
        run.status = "rejected"  # bad input: nothing measured, nothing presented as a result
        raise
    except BaseException as e:
        run.status, run.error = "failed", f"{type(e).__name__}: {e}"
        raise
    finally:
        pacer.leave()  # a failed cell's turns pass to the others
        if run.placement is not None:
            run.placement.observed[Role.DRIVER.value] = launch.observe_driver()
        if run.status != "rejected" or run.iterations:
            run.save()  # before closing the workers: a stop that cuts the closing short loses nothing
        if schedule is not None:
            schedule.close()
        run.writer.close()
    return run.results()


def _placement(cfg, kind: str):
    """Where every worker runs (bench/devices/placement.py); refuses more devices than this machine has."""
    from rlbench import schedules
    from rlbench.devices import device as dev
    from rlbench.devices import placement

    if schedules.of(cfg).in_process(cfg):  # one process with every device (the schedule's record says)
        return placement.single_process(cfg.engine, kind, dev.available(kind))
    return placement.plan(cfg.engine, kind, dev.available(kind))


def _setup_model(cfg, run: CellRun, progress: bool):
    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.model.loader import load_policy

    dataset = load_dataset(cfg.data, cfg.run.seed)
    bar = _bar(cfg.model.warmstart_steps, f"{run.name}: warm-start (first run only)", progress)
    policy, tok, info = load_policy(cfg, dataset, progress=lambda i, n, loss: bar.update(1) if bar else None)
    if bar:
        bar.close()
    run.model_info = {"kind": cfg.model.kind, **info,
                      "parameters": sum(p.numel() for p in policy.parameters())}
    run.shape = utilisation.model_shape(policy)
    return dataset, policy, tok


def _bar(total: int, desc: str, enabled: bool):
    if not enabled or total <= 0:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True)


def _train(cfg, run: CellRun, schedule, evaluator, dataset, tok, progress: bool, pacer) -> None:
    # evaluator (engines/evaluation.py): on the trainer's worker, or here when the trainer is here
    eval_rec = Recorder(Role.EVAL.value, run.t0, device=evaluator.device, sink=run.writer.event)

    def do_eval(done: int) -> float:
        with eval_rec.stage(Stage.EVAL, done):
            res = evaluator(cfg, dataset, tok)
        run.evals.append({"iteration": done, **res})
        return res["accuracy"]

    acc = do_eval(0)
    bar = _bar(cfg.run.iterations, f"{run.name}", progress)
    prof = _profiler(cfg, run, schedule, evaluator.device)
    pacer.ready()
    try:
        for k in range(cfg.run.iterations):
            pacer.before(k)
            acc = _iteration(cfg, run, schedule, dataset, tok, k, do_eval, acc, bar)
            pacer.after(k)
            prof.step()
    finally:
        prof.close()
    if bar:
        bar.close()


def _profiler(cfg, run: CellRun, schedule, device):
    """device: this process's device (None: the driver, which holds none: CPU activity only)."""
    from rlbench.record.profiling import IterationProfiler

    trace_dir = str(run.folder / "traces") if cfg.run.profile else None
    worker = schedule.rec.worker
    return IterationProfiler(trace_dir, worker, cfg.run.warmup_iterations, cfg.run.profile_iterations,
                             device.type if device is not None else "cpu")


def _iteration(cfg, run: CellRun, schedule, dataset, tok, k: int, do_eval, acc: float, bar) -> float:
    """One training iteration plus its bookkeeping; returns the latest eval accuracy."""
    from rlbench.engines.factory import iteration_input

    inp = iteration_input(cfg, dataset, tok, k)
    run.host_cpu.start()
    out = schedule.run_iteration(inp)
    host_cpu = run.host_cpu.stop()  # every process's CPU seconds in the iteration (bench/record/hostcpu.py)
    rows = _sample_rows(k, out)
    run.writer.samples(rows)
    rec = metrics.build_iteration(k, run.writer.take_events(k), rows, run.placement.devices,
                                  out.train_stats, warmup=k < cfg.run.warmup_iterations,
                                  occupancy=_occupancy(out.rollout_stats),
                                  prev_end=run.iterations[-1]["end"] if run.iterations else None,
                                  work=utilisation.stage_work(
                                      run.shape, rows, out.rollout_stats, shared_prompt=cfg.engine.shared_prompt,
                                      tri_model=cfg.engine.tri_model, kl=cfg.train.kl_coef > 0))
    done = k + 1
    if done == cfg.run.iterations or (cfg.run.eval_every and done % cfg.run.eval_every == 0):
        acc = do_eval(done)
        rec.eval_accuracy = acc
    rec.host_cpu_s, rec.host_cpu_pct = host_cpu["host_cpu_s"], host_cpu["host_cpu_pct"]
    run.iterations.append(asdict(rec))
    run.rollout_stats.append({"iteration": k, "workers": out.rollout_stats})
    run.writer.iteration(rec)
    run.save()
    if bar:
        bar.set_postfix(tpspd=f"{rec.tpspd:.0f}", reward=f"{rec.reward_mean:.2f}", acc=f"{acc:.2f}")
        bar.update(1)
    return acc


def _sample_rows(k: int, out) -> list[dict]:
    rows = []
    for g in out.groups:
        for j, resp in enumerate(g.responses):
            rows.append({"iteration": k, "prompt": g.prompt_index, "sample": j, "prompt_len": len(g.prompt_ids),
                         "response_len": len(resp), "reward": out.rewards[g.prompt_index][j],
                         "behaviour_version": g.version, "trained_version": out.trained_version,
                         "finished": bool(g.finished[j]) if g.finished else None,
                         **_token_versions(g, j)})
    return rows


def _token_versions(g, j: int) -> dict:
    """Partial rollout: the newest version among sample j's tokens and how many tokens each version made
    (behaviour_version is the oldest); nothing when every token of the group came from one version."""
    if g.token_versions is None:
        return {}
    v = g.token_versions[j]
    counts = {str(x): v.count(x) for x in sorted(set(v))}
    return {"behaviour_version_newest": max(v, default=g.version), "tokens_by_version": counts}


def _occupancy(stats: list[dict]) -> float | None:
    vals = [s["mean_active"] / s["max_num_seqs"] for s in stats if s and s.get("max_num_seqs")]
    return sum(vals) / len(vals) if vals else None



def params_digest(model) -> str | None:
    """sha256 over the parameters' bytes: same seed + same config must give the same digest."""
    import hashlib

    if sum(p.numel() for p in model.parameters()) > 500_000_000:
        return None  # too slow to be worth it on big models
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()
