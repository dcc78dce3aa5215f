"""Shared parts of the external-baseline adapters (VERL, MindSpeed-RL): one result shape, one TPSPD.

An adapter turns the peer framework's own per-iteration metrics into rlbench IterationRecords, so
reports, `compare` and `check` read a VERL or MindSpeed-RL run exactly like an rlbench cell. TPSPD
is always recomputed here with rlbench's formula (docs/metrics.md, 'TPSPD'),

    tpspd = (prompt + response tokens of the iteration's trained samples) / (iteration wall s *
    devices)

and the framework's own figure (VERL `perf/throughput`, MindSpeed-RL `e2e_tps`) is kept beside it
under `external`; when the two differ by more than TPSPD_TOLERANCE the iteration is flagged and the
cell gets a warning, because then the device count or the token count is not what we think it is.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from rlbench.core import schedules
from rlbench.core.errors import UserError
from rlbench.core.record.stages import TRAIN_STAGES, Stage
from rlbench.core.results import metrics, provenance, schema
from rlbench.core.schedules.spec import REFERENCE

log = logging.getLogger(__name__)

TPSPD_TOLERANCE = 0.01  # relative; beyond this our TPSPD and the framework's disagree


def not_installed(message: str) -> UserError:
    """The one error for 'this framework is not here' (exit code 2, no traceback)."""
    return UserError(message)


def tpspd_check(ours: float, reported: float | None) -> dict:
    """Our TPSPD against the framework's own figure: {reported, rel_diff, agree}."""
    if reported is None:
        return {"reported": None, "rel_diff": None, "agree": None}
    rel = abs(ours - reported) / abs(reported) if reported else (0.0 if ours == 0 else float("inf"))
    return {"reported": reported, "rel_diff": rel, "agree": rel <= TPSPD_TOLERANCE}


def make_iteration(*, iteration: int, start: float, wall_s: float, num_samples: int,
                   prompt_tokens: int,
                   response_tokens: int, devices: int, stage_s: dict[str, float],
                   reward_mean: float,
                   response_len_mean: float, response_len_max: int, loss: float, grad_norm: float,
                   kl: float, warmup: bool, eval_accuracy: float | None, external: dict,
                   staleness_max: int = 0, staleness_mean: float = 0.0) -> dict:
    """An IterationRecord dict (rlbench's formulas) plus the framework's raw figures under
    `external`.

    Token counts are sums over the iteration's samples; wall_s is the framework's iteration time
    (evaluation excluded, as in rlbench); devices are all devices of the run.
    """
    rec = metrics.record(
        iteration=iteration, start=start, wall_s=wall_s, num_samples=num_samples,
        prompt_tokens=prompt_tokens,
        response_tokens=response_tokens, devices=devices,
        rollout_s=stage_s.get(Stage.ROLLOUT.value, 0.0),
        train_s=sum(v for k, v in stage_s.items() if k in TRAIN_STAGES), reward_mean=reward_mean,
        response_len_mean=response_len_mean,
        response_len_max=int(response_len_max), staleness_max=staleness_max,
        staleness_mean=staleness_mean,
        loss=loss, grad_norm=grad_norm, kl=kl, stage_s=stage_s, idle_frac={},
        rollout_occupancy=None, warmup=warmup, eval_accuracy=eval_accuracy)
    out = asdict(rec)
    out["external"] = external
    return out


def flag_tpspd(iterations: list[dict], framework_key: str,
               framework_devices: int | None = None) -> list[str]:
    """Adds external['tpspd_check'] to every iteration; returns one warning per disagreement.
    framework_devices: the devices the framework's own figure divides by, where that is not every
    device of the run (VERL's separated recipes count their trainer's only): rlbench's TPSPD is
    compared at that divisor."""
    warnings = []
    for it in iterations:
        scale = it["devices"] / framework_devices if framework_devices else 1.0
        check = tpspd_check(it["tpspd"] * scale, it["external"].get(framework_key))
        it["external"]["tpspd_check"] = {**check,
                                         "framework_devices": framework_devices or it["devices"]}
        if check["agree"] is False:
            warnings.append(
                f"iteration {it['iteration']}: rlbench TPSPD {it['tpspd'] * scale:.4g} vs "
                f"{framework_key} {check['reported']:.4g} differ by {100 * check['rel_diff']:.2f}% "
                f"(> {100 * TPSPD_TOLERANCE:.0f}%): the device count given to rlbench "
                f"({framework_devices or it['devices']}) or the token count is not the framework's")
    for w in warnings:
        log.warning(w)
    return warnings


def _reference() -> str:
    """The peers' GRPO examples run the synchronous hybrid engine: the reference schedule's name."""
    return schedules.name_of(REFERENCE)


def cell_results(cfg, *, cell: str, framework: str, version: str | None, iterations: list[dict],
                 evals: list[dict], status: str, error: str | None = None,
                 warnings: list[str] | None = None, external: dict | None = None,
                 schedule: str | None = None) -> dict:
    """A results.json dict with the keys of rlbench's own cells (bench/run/cell.py CellRun.results).
    schedule: what the framework ran, where it names it (VERL's trainer or recipe); else rlbench's
    reference."""
    return metrics.cell_result(
        cell=cell,
        switches={"engine": framework, "schedule": schedule or _reference(), "tri_model": False,
                             "shared_prompt": False},
        config=cfg.model_dump(mode="json"), provenance={"framework": framework, "version": version},
        status=status, error=error, model={"kind": cfg.model.kind, "path": cfg.model.path},
        iterations=iterations, evals=evals,
        # The framework places its own workers; TPSPD divides by every device of its resource pools.
        placement=[], devices=iterations[0]["devices"] if iterations else None,
        wall_s_total=sum(it["wall_s"] for it in iterations), warnings=warnings or [],
        external=external or {})


def run_logged(argv: list[str], log_path: Path, env: dict | None = None, cwd: Path | None = None,
               echo: bool = True) -> int:
    """Runs argv with stdout+stderr streamed line by line to log_path (and to our stderr if echo).

    The child gets its own process group, so Ctrl-C here ends it (and only it) before re-raising.
    """
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", buffering=1) as out:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
        try:
            for line in proc.stdout:
                out.write(line)
                if echo:
                    sys.stderr.write(line)
            return proc.wait()
        except BaseException:
            _stop(proc)
            raise


def _stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM to the child's own process group, SIGKILL after a grace period."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def launch_and_record(argv: list[str], out: Path, log_path: Path, framework: str, parse, *,
                      env: dict | None = None, cwd: Path | None = None, echo: bool = True) -> dict:
    """Runs a peer framework, then parses what it logged and writes results.json whatever happened:
    a failed or interrupted run keeps the steps it finished. `parse()` -> cell results dict."""
    status, error = "failed", None
    try:
        rc = run_logged(argv, log_path, env=env, cwd=cwd, echo=echo)
        status = "complete" if rc == 0 else "failed"
        error = (None if rc == 0
                 else f"{framework} exited with code {rc}; its output is in {log_path}")
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
        raise
    finally:
        res = parse()
        # else the parser's complete/incomplete (fewer steps than asked) stands
        if status != "complete":
            res["status"] = status
        res["error"] = error
        res["provenance"] = {**provenance.collect(), **res["provenance"]}
        res["external"]["command"] = argv
        schema.atomic_write_json(out / schema.RESULTS, res)
    return res
