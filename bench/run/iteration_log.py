"""What each iteration of a cell leaves behind: its samples, stage events and iteration record in
the result files (core/results/), the evaluations (before the first iteration and every
run.eval_every), the curves of run.logger (bench/run/curves.py), the run's progress line
(bench/run/board.py) and the profiler's step."""
from __future__ import annotations

from dataclasses import asdict

from rlbench.core.record import lifecycle
from rlbench.core.record.profiling import IterationProfiler
from rlbench.core.record.lifecycle import Phase, eval_seconds
from rlbench.core.record.stages import Recorder, Role, Stage
from rlbench.core.results import metrics, utilisation
from rlbench.run.curves import Curves


class IterationLog:
    """One cell's per-iteration bookkeeping (bench/run/cell.py's loop calls `record` after each
    iteration)."""

    def __init__(self, cfg, run, evaluator, dataset, tok, progress):
        """evaluator (engines/evaluation.py): on the trainer's worker, or here when the trainer is
        here; progress: the cell's Reporter (bench/run/board.py)."""
        self.cfg, self.run, self.evaluator, self.dataset, self.tok = (cfg, run, evaluator, dataset,
                                                                      tok)
        self.eval_rec = Recorder(Role.EVAL.value, run.t0, device=evaluator.device,
                                 sink=run.writer.event)
        self.curves = Curves(cfg, run.folder, run.name)
        progress.phase("evaluating")
        with lifecycle.phase(Phase.FIRST_EVAL):
            self.acc = self.evaluate(0)
        self.curves.evaluation(0, self.acc)
        self.progress = progress
        progress.count("iteration", 0, cfg.run.iterations, f"pass@1 {self.acc:.2f}")
        self.prof = _profiler(cfg, run, run.schedule, evaluator.device)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.prof.close()
        self.curves.close()

    def evaluate(self, done: int) -> float:
        """Accuracy on the eval split after `done` iterations (recorded as its eval stage)."""
        before = self.run.host_cpu.totals()
        with self.eval_rec.stage(Stage.EVAL, done):
            res = self.evaluator(self.cfg, self.dataset, self.tok)
        # the eval's stage event: its wall time
        ev = self.eval_rec.events[-1] if self.eval_rec.events else None
        self.run.evals.append({"iteration": done, **res,
                               **eval_seconds(ev, before, self.run.host_cpu.totals())})
        return res["accuracy"]

    def record(self, k: int, out, host_cpu: dict) -> None:
        """Iteration k's samples, events and record (host_cpu: core/record/hostcpu.py's for it),
        then an evaluation where one is due; results.json saved."""
        cfg, run = self.cfg, self.run
        rows = _sample_rows(k, out)
        run.writer.samples(rows)
        rec = metrics.build_iteration(k, run.writer.take_events(k), rows, run.placement.devices,
                                      out.train_stats, warmup=k < cfg.run.warmup_iterations,
                                      occupancy=_occupancy(out.rollout_stats),
                                      prev_end=run.iterations[-1]["end"] if run.iterations
                                      else None,
                                      work=utilisation.stage_work(
                                          run.shape, rows, out.rollout_stats,
                                          shared_prompt=_packed(cfg, out),
                                          tri_model=cfg.engine.tri_model, kl=cfg.train.kl_coef > 0))
        done = k + 1
        if done == cfg.run.iterations or (cfg.run.eval_every and done % cfg.run.eval_every == 0):
            self.acc = self.evaluate(done)
            rec.eval_accuracy = self.acc
        rec.host_cpu_s, rec.host_cpu_pct = host_cpu["host_cpu_s"], host_cpu["host_cpu_pct"]
        run.lifecycle.compiled(out.train_stats, out.rollout_stats)
        run.iterations.append(asdict(rec))
        run.rollout_stats.append({"iteration": k, "workers": out.rollout_stats})
        run.writer.iteration(rec)
        self.curves.iteration(run.iterations[-1])  # the record iterations.jsonl has just received
        run.save()
        self.progress.count("iteration", done, cfg.run.iterations,
                            f"last TPSPD {rec.tpspd:.0f}, reward {rec.reward_mean:.2f}, pass@1 "
                            f"{self.acc:.2f}")


def _profiler(cfg, run, schedule, device):
    """device: this process's device (None: the driver, which holds none: CPU activity only)."""
    trace_dir = str(run.folder / "traces") if cfg.run.profile else None
    worker = schedule.rec.worker
    prof = IterationProfiler(trace_dir, worker, cfg.run.warmup_iterations,
                             cfg.run.profile_iterations,
                             device.type if device is not None else "cpu")
    prof.attach(schedule.rec)  # RLBENCH_PROFILE_WINDOW=train: the training stages open and close it
    return prof


def _packed(cfg, out) -> bool | set[int]:
    """Whether the iteration's groups were packed: the config's answer, or auto's per group."""
    if cfg.engine.shared_prompt != "auto":
        return cfg.engine.shared_prompt
    return {c["prompt"] for c in (out.train_stats or {}).get("shared_prompt_choices",
                                                             []) if c["packed"]}


def _sample_rows(k: int, out) -> list[dict]:
    rows = []
    for g in out.groups:
        for j, resp in enumerate(g.responses):
            rows.append({"iteration": k, "prompt": g.prompt_index, "sample": j,
                         "prompt_len": len(g.prompt_ids),
                         "response_len": len(resp), "reward": out.rewards[g.prompt_index][j],
                         "behaviour_version": g.sample_version(j),
                         "trained_version": out.trained_version,
                         "finished": bool(g.finished[j]) if g.finished else None,
                         **_token_versions(g, j)})
    return rows


def _token_versions(g, j: int) -> dict:
    """Partial rollout: the newest version among sample j's tokens and how many tokens each version
    made (its behaviour_version is the oldest of its own tokens); nothing when every token of the
    group came from one version."""
    if g.token_versions is None:
        return {}
    v = g.token_versions[j]
    counts = {str(x): v.count(x) for x in sorted(set(v))}
    return {"behaviour_version_newest": max(v, default=g.version), "tokens_by_version": counts}


def _occupancy(stats: list[dict]) -> float | None:
    vals = [s["mean_active"] / s["max_num_seqs"] for s in stats if s and s.get("max_num_seqs")]
    return sum(vals) / len(vals) if vals else None

