"""`rlbench run --engine verl` and the VERL cells of `--ablation verl`: VERL's own GRPO trainer
(`python -m verl.trainer.main_ppo`, or a recipe's entry point) on rlbench's workload, its metrics written as an
rlbench cell (results.json) whatever happened.

set up (VERL's venv and versions checked, the policy exported, the prompts as VERL's parquet) -> the driver on the
run's devices (launch.py; on CPU with rlbench's CPU layer loaded into every VERL process: cpu/) -> VERL's file
logger read into rlbench's schema (metrics.py), the start-up's phases beside it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from rlbench.core.devices import device as dev
from rlbench.core.errors import UserError, WorkerError
from rlbench.core.record.stages import now
from rlbench.core.results import provenance, schema
from rlbench.engines.data.source import load_dataset
from rlbench.engines.external.verl import command, recipes, venv
from rlbench.engines.external.verl.names import TOKENIZER_ENV
from rlbench.engines.external.verl.data import workload_files, workload_problems
from rlbench.engines.external.verl.export import export_for_verl
from rlbench.engines.external.verl.launch import VerlProcess, wait
from rlbench.engines.external.verl.metrics import FILE_LOGGER_ENV, parse_verl_jsonl, read_verl_jsonl
from rlbench.engines.external.verl.recipes import VerlOptions

# console lines that mark the start-up's phases (VERL 0.9.1's own prints): when each first arrives
MARKERS = {"ray": "Started a local Ray instance", "config": "'actor_rollout_ref':",
           "validation": "Initial validation metrics", "first_step": "step:1 -"}


def run_verl(cfg, out_dir, *, name: str = "verl", pacer=None, progress: bool = False,
             options: dict | None = None, echo: bool = False) -> dict:
    """VERL GRPO on cfg's workload, on cfg.engine.num_devices devices (CPU cores, or GPUs); writes out_dir's
    results.json and returns it. UserError (exit 2) before anything runs when VERL cannot run the config;
    WorkerError (exit 3) when VERL fails or hangs (the steps it logged are kept)."""
    kind = dev.resolve_kind(cfg.engine.device)
    if kind not in ("cpu", "cuda"):
        raise UserError(f"--engine verl runs on engine.device=cpu or cuda (got {cfg.engine.device})")
    python = venv.find_python(cfg.engine.verl_python)
    versions = venv.check(python, cpu=kind == "cpu")
    devices = cfg.engine.num_devices
    if devices > dev.available(kind):
        raise UserError(f"--engine verl: {devices} devices (engine.rollout_devices + engine.train_devices) but this "
                        f"machine has {dev.available(kind)} {'cores' if kind == 'cpu' else 'GPUs'}")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    run = _Setup(cfg, out, name, python, kind, devices, VerlOptions(**(options or {}))).prepare()
    return run.go(versions, echo)


class _Setup:
    """One VERL cell: its files, its command, and its results."""

    def __init__(self, cfg, out: Path, name: str, python: Path, kind: str, devices: int,
                 options: VerlOptions = VerlOptions()):
        self.cfg, self.out, self.name, self.python, self.kind, self.devices = cfg, out, name, python, kind, devices
        self.options = options
        self.metrics = out / "verl_metrics.jsonl"
        self.cores = dev.cpu_cores()[:devices] if kind == "cpu" else None
        self.argv: list[str] = []
        self.schedule = "verl" if options.recipe == "sync" else f"verl_{options.recipe}"
        self.env: dict[str, str] = {}

    def prepare(self) -> "_Setup":
        cfg = self.cfg
        dataset = load_dataset(cfg.data, cfg.run.seed)
        model_dir, tok_dir = export_for_verl(cfg, dataset)
        problems = workload_problems(cfg, dataset)
        train, val = workload_files(problems, dataset, self.out / "data")
        prompt_len = longest_prompt(tok_dir, [dataset.prompt_text(p) for p in [*problems, *dataset.eval]])
        self.env = {FILE_LOGGER_ENV: str(self.metrics)}
        extra = {"hydra.run.dir": str(self.out / "hydra")}  # Hydra's own log and config, in the cell's folder
        if self.kind == "cpu":
            self.env.update(command.cpu_env(self.cores))
            self.env[TOKENIZER_ENV] = f"{model_dir}={tok_dir}"
            extra.update(command.cpu_overrides(cfg, self.devices, tok_dir))
        extra.update(recipes.overrides(self.options, cfg, self.kind))
        extra.update(command.env_overrides(self.env))
        self.argv = command.verl_command(cfg.model_copy(update={"model": cfg.model.model_copy(
            update={"path": str(model_dir)})}), train, val, self.metrics, self.devices,
            max_prompt_length=prompt_len, python=str(self.python), extra=extra,
            module=recipes.MODULES[self.options.recipe])
        return self

    def go(self, versions: dict, echo: bool) -> dict:
        self.metrics.unlink(missing_ok=True)
        t0 = now()
        run = VerlProcess(self.argv, self.out / "verl.log", self.env, self.out, self.cores, echo)
        status, error = "failed", None
        try:
            run.watch_for(MARKERS)
            code = wait(run, lambda: len(read_verl_jsonl(self.metrics)), lambda: self._hang_s())
            status, error = _outcome(code, run, self.out / "verl.log")
        except KeyboardInterrupt:
            status, error = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
            raise
        finally:
            left = run.stop()
            res = self._results(status, error, versions, run, t0, left)
        if status == "failed":
            raise WorkerError(error)
        return res

    def _hang_s(self) -> float:
        e = self.cfg.engine
        if e.hang_timeout_s:
            return e.hang_timeout_s
        steps = [float(d.get("timing_s/step", 0)) for _, d in read_verl_jsonl(self.metrics)]
        return max(e.hang_floor_s, 10 * max(steps, default=0.0), e.queue_timeout_s if not steps else 0.0)

    def _results(self, status, error, versions, run: VerlProcess, t0: float, left: list[int]) -> dict:
        res = parse_verl_jsonl(self.metrics, self.cfg, self.devices, version=versions.get("verl"), cell=self.name,
                               schedule=self.schedule, verl_gpus=recipes.throughput_gpus(self.options, self.cfg))
        if status != "complete":
            res["status"] = status
        elif res["status"] != "complete":
            status = "incomplete"
        res["error"] = error
        res["provenance"] = {**provenance.collect(), **res["provenance"], "verl_venv": versions,
                             "checked_with": venv.CHECKED, "device_kind": self.kind}
        res["external"].update({"command": self.argv, "cores": self.cores,
                                "startup_s": {k: t - t0 for k, t in sorted(run.first_seen.items(),
                                                                          key=lambda kv: kv[1])},
                                "left_alive": left})
        schema.atomic_write_json(self.out / schema.RESULTS, res)
        return res


def _outcome(code: int | None, run: VerlProcess, log: Path) -> tuple[str, str | None]:
    """(status, error) from the driver's exit code (None: the watchdog found it hung)."""
    if code == 0:
        return "complete", None
    what = "showed no progress (no output, no step) for the watchdog's time" if code is None else \
        f"exited with code {code}"
    return "failed", f"VERL {what}; its output is in {log}. Its last lines:\n{run.tail()}"


def longest_prompt(tok_dir: Path, texts: list[str]) -> int:
    """The longest prompt in tokens as VERL builds it (the chat template, its generation prompt): VERL pads
    every prompt to data.max_prompt_length when it does not remove padding, so no longer than needed."""
    from transformers import AutoTokenizer  # inside: the driver's only use of transformers here

    tok = AutoTokenizer.from_pretrained(tok_dir)

    def length(text: str) -> int:
        ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                      tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    return max(length(t) for t in texts)
