"""`rlbench run --engine verl` and the VERL cells of `--ablation verl`: VERL's own GRPO trainer
(`python -m verl.trainer.main_ppo`, or a recipe's entry point) on rlbench's workload, its metrics
written as an rlbench cell (results.json) whatever happened.

set up (VERL's venv and versions checked, the policy exported, the prompts as VERL's parquet) -> the
driver on the run's devices (launch.py; on CPU with rlbench's CPU layer loaded into every VERL
process: cpu/) -> VERL's file logger read into rlbench's schema (metrics.py), the start-up's phases
beside it.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

from rlbench.core.devices import device as dev
from rlbench.core.errors import UserError, WorkerError
from rlbench.core.record.stages import now
from rlbench.core.results import provenance, schema
from rlbench.engines.data.source import load_dataset
from rlbench.engines.external.verl import command, cost_settings, launch, recipes, venv
from rlbench.engines.external.verl.names import (CONFIG_ENV, GATE_ENV, PLUGIN, PROBE, STEPS_ENV,
                                                 TOKENIZER_ENV,
                                                 is_training_step)
from rlbench.engines.external.verl.data import workload_files, workload_problems
from rlbench.engines.external.verl.export import export_for_verl
from rlbench.engines.external.verl.turns import FifoGate, Frozen
from rlbench.engines.external.verl.metrics import FILE_LOGGER_ENV, parse_verl_jsonl, read_verl_jsonl
from rlbench.engines.external.verl.recipes import VerlOptions

# console lines that mark the start-up's phases (VERL 0.9.1's own prints): when each first arrives
MARKERS = {"ray": "Started a local Ray instance", "config": "'actor_rollout_ref':",
           "validation": "Initial validation metrics", "first_step": "step:1 -"}


def run_verl(cfg, out_dir, *, name: str = "verl", pacer=None, progress: bool = False,
             options: dict | None = None, echo: bool = False) -> dict:
    """VERL GRPO on cfg's workload, on cfg.engine.num_devices devices (CPU cores, or GPUs); writes
    out_dir's results.json and returns it. options: VERL's own settings the cell varies
    (recipes.VerlOptions: the recipe, its staleness, partial rollout). UserError (exit 2) before
    anything runs when VERL cannot run the config; WorkerError (exit 3) when VERL fails or hangs
    (the steps it logged are kept)."""
    python, versions, kind = preflight(cfg, options)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    run = _Setup(cfg, out, name, python, kind, cfg.engine.num_devices,
                 VerlOptions(**(options or {}))).prepare()
    return run.go(versions, echo, pacer, progress)


def preflight(cfg, options: dict | None = None) -> tuple[Path, dict, str]:
    """The checks before any cell runs: the device, VERL's venv and its versions, the recipe and the
    devices. -> (VERL's Python, the versions there, the device kind). UserError (exit 2) where one
    fails."""
    kind = dev.resolve_kind(cfg.engine.device)
    if kind not in ("cpu", "cuda"):
        raise UserError(
            f"--engine verl runs on engine.device=cpu or cuda (got {cfg.engine.device})"
        )
    VerlOptions(**(options or {}))  # a recipe VERL has
    python = venv.find_python(cfg.engine.verl_python)
    versions = venv.check(python, cpu=kind == "cpu")
    devices = cfg.engine.num_devices
    if devices > dev.available(kind):
        raise UserError(f"--engine verl: {devices} devices (engine.rollout_devices + "
                        f"engine.train_devices) but this machine has {dev.available(kind)} "
                        f"{'cores' if kind == 'cpu' else 'GPUs'}")
    return python, versions, kind


class _Setup:
    """One VERL cell: its files, its command, and its results."""

    def __init__(self, cfg, out: Path, name: str, python: Path, kind: str, devices: int,
                 options: VerlOptions = VerlOptions()):
        self.cfg, self.out, self.name, self.python, self.kind, self.devices = (cfg, out, name,
                                                                               python, kind,
                                                                               devices)
        self.options = options
        self.metrics = out / "verl_metrics.jsonl"
        self.cores = dev.cpu_cores()[:devices] if kind == "cpu" else None
        self.argv: list[str] = []
        self.command = None  # env -> argv, made by prepare()
        self.schedule = "verl" if options.recipe == "sync" else f"verl_{options.recipe}"
        self.env: dict[str, str] = {}

    def prepare(self) -> "_Setup":
        """The cell's files (the exported policy, the prompts as parquet) and VERL's settings; the
        command is made when the cell starts (go), with the environment of its turns."""
        cfg = self.cfg
        dataset = load_dataset(cfg.data, cfg.run.seed)
        model_dir, tok_dir = export_for_verl(cfg, dataset)
        problems = workload_problems(cfg, dataset,
                                     cfg.run.iterations + recipes.reads_ahead(self.options))
        train, val = workload_files(problems, dataset, self.out / "data")
        prompt_len = longest_prompt(tok_dir,
                                    [dataset.prompt_text(p) for p in [*problems, *dataset.eval]])
        plugins = [PLUGIN, PROBE] if self.kind == "cpu" else [PROBE]
        self.env = {FILE_LOGGER_ENV: str(self.metrics),
                    CONFIG_ENV: str(self.out / "verl_config.json"),
                    STEPS_ENV: str(cfg.run.iterations)}
        # Hydra's own log and config, in the cell's folder
        extra = {"hydra.run.dir": str(self.out / "hydra")}
        if self.kind == "cpu":
            self.env.update(command.cpu_env(self.cores))
            self.env[TOKENIZER_ENV] = f"{model_dir}={tok_dir}"
            extra.update(command.cpu_overrides(cfg, self.devices, tok_dir))
        self.env["VERL_USE_EXTERNAL_MODULES"] = ",".join(plugins)
        extra.update(recipes.overrides(self.options, cfg, self.kind))
        policy = cfg.model_copy(
            update={"model": cfg.model.model_copy(update={"path": str(model_dir)})}
        )
        self.command = lambda env: command.verl_command(
            policy, train, val, self.metrics, self.devices, max_prompt_length=prompt_len,
            python=str(self.python),
            extra={**extra, **command.env_overrides(env)},
            module=recipes.MODULES[self.options.recipe])
        return self

    def go(self, versions: dict, echo: bool, pacer=None, progress: bool = False) -> dict:
        """Launch, watch and end VERL; its results.json whatever happened. pacer
        (bench/run/interleave.py Pacer): the cell's turns, taken between VERL's steps (probe.py,
        turns.py) when it has a seat in a ring."""
        self.metrics.unlink(missing_ok=True)
        self.token = token = launch.new_token()  # every process of this run carries it (launch.py)
        gate = None
        if getattr(pacer, "seat", None) is not None:
            gate = FifoGate(Frozen(pacer, lambda: launch.pids(token)), self.out / "turns")
            self.env[GATE_ENV] = str(gate.folder)
        if pacer is not None:
            pacer.setup()
        if self.command is not None:
            self.argv = self.command(self.env)
        t0 = now()
        run = launch.VerlProcess(self.argv, self.out / "verl.log", self.env, self.out, self.cores,
                                 echo, token=token)
        status, error = "failed", None
        try:
            run.watch_for(MARKERS)
            code = launch.wait(run, lambda: len(read_verl_jsonl(self.metrics)), self._hang_s,
                               _ticker(gate, run, self.cfg.run.iterations, self.name, self.metrics,
                                       progress))
            status, error = _outcome(code, run, self.out / "verl.log")
        except KeyboardInterrupt:
            status, error = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
            raise
        finally:
            left = run.stop()
            if gate is not None:
                gate.close()
            if pacer is not None:
                pacer.leave()
            res = self._results(status, error, versions, run, t0, left)
        if status == "failed":
            raise WorkerError(error)
        return res

    def _hang_s(self) -> float:
        e = self.cfg.engine
        if e.hang_timeout_s:
            return e.hang_timeout_s
        steps = [float(d.get("timing_s/step", 0)) for _, d in read_verl_jsonl(self.metrics)]
        return max(e.hang_floor_s, 10 * max(steps, default=0.0),
                   e.queue_timeout_s if not steps else 0.0)

    def _results(self, status, error, versions, run, t0: float, left: list[int]) -> dict:
        res = parse_verl_jsonl(self.metrics, self.cfg, self.devices, version=versions.get("verl"),
                               cell=self.name,
                               schedule=self.schedule,
                               verl_gpus=recipes.throughput_gpus(self.options, self.cfg),
                               recipe=self.options.recipe,
                               stage_devices=recipes.stage_devices(self.options, self.cfg))
        if status != "complete":
            res["status"] = status
        elif res["status"] != "complete":
            status = "incomplete"
        res["error"] = error
        res["provenance"] = {**provenance.collect(), **res["provenance"], "verl_venv": versions,
                             "checked_with": venv.CHECKED, "device_kind": self.kind}
        config_file = self.out / "verl_config.json"
        resolved = json.loads(config_file.read_text()) if config_file.is_file() else None
        costs = cost_settings.compare(resolved, self.cfg)
        res["warnings"] += [f"VERL's cost setting differs from rlbench's without a listed reason: "
                            f"{u}"
                            for u in cost_settings.unlisted(costs)]
        res["switches"].update(self.options.as_dict())
        res["external"].update({"cost_settings": costs, "differences": cost_settings.DIFFERENCES,
                                "overridden": cost_settings.OVERRIDDEN,
                                "command": self.argv, "cores": self.cores,
                                "startup_s": {k: t - t0 for k, t in sorted(run.first_seen.items(),
                                                                          key=lambda kv: kv[1])},
                                "left_alive": left})
        schema.atomic_write_json(self.out / schema.RESULTS, res)
        return res


def _ticker(gate, run, steps: int, name: str, metrics: Path, progress: bool):
    """The wait loop's tick: answer the cell's turn requests (-> True when one was answered: time
    spent waiting for a turn is no sign of a hang), and show the steps done, and before the first
    one the start-up's phase."""
    bar = tqdm(total=steps, desc=f"{name} (starting)", file=sys.stderr, leave=False,
               dynamic_ncols=True) \
        if progress else None

    def tick(timeout_s: float) -> bool:
        served = gate.serve(timeout_s) if gate is not None else time.sleep(timeout_s)
        if bar is not None:
            done = min(steps, sum(is_training_step(d) for _, d in read_verl_jsonl(metrics)))
            phase = max(run.first_seen, key=run.first_seen.get, default=None)
            bar.set_description_str(name if done else f"{name} ({phase} done)" if phase
                                    else f"{name} (starting)",
                                    refresh=False)
            bar.update(done - bar.n)
        return bool(served)

    return tick


def _outcome(code: int | None, run, log: Path) -> tuple[str, str | None]:
    """(status, error) from the driver's exit code (None: the watchdog found it hung)."""
    if code == 0:
        return "complete", None
    what = "showed no progress (no output, no step) for the watchdog's time" if code is None else \
        f"exited with code {code}"
    return "failed", f"VERL {what}; its output is in {log}. Its last lines:\n{run.tail()}"


def longest_prompt(tok_dir: Path, texts: list[str]) -> int:
    """The longest prompt in tokens as VERL builds it (the chat template, its generation prompt):
    VERL pads every prompt to data.max_prompt_length when it does not remove padding, so no longer
    than needed."""
    from transformers import AutoTokenizer  # inside: the driver's only use of transformers here

    tok = AutoTokenizer.from_pretrained(tok_dir)

    def length(text: str) -> int:
        ids = tok.apply_chat_template([{"role": "user", "content": text}],
                                      add_generation_prompt=True,
                                      tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    return max(length(t) for t in texts)
