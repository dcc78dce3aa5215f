"""MindSpeed-RL's own code, on CPU, for the adapter's fixture and config check (run with .venv-verl/bin/python,
which has torch, ray, omegaconf, hydra and codetiming; MINDSPEED_RL_HOME = a MindSpeed-RL checkout).

    export MINDSPEED_RL_HOME=~/MindSpeed-RL
    .venv-verl/bin/python scripts/make_mindspeed_fixture.py fixture tests/fixtures/external
        Writes mindspeed_grpo.log (and mindspeed_grpo_max.log: the same run logged with MindSpeed-RL's default
        rl_config.log_max_throughput=True, e2e_tps from the batch's maximum lengths): a short GRPO run's iteration lines produced by MindSpeed-RL's
        Metric, metrics_post_processing, metrics_sort, compute_tps (e2e_tps, update_tps, vllm_tps) and
        Loggers (utils/loggers.py handle_msg + its logging format), with stage times measured by
        codetiming.Timer / time.time() around sleeps, as trainer/grpo_trainer_hybrid.py fit() does.
        The grpo/score, response_length and prompt_length metrics are built by this script with the
        expressions of trainer/utils/compute_utils.py compute_grpo_data_metrics (that function itself
        reads Ray's transfer dock); no model runs.
    ... make_mindspeed_fixture.py check-config CONFIG.yaml
        Composes the YAML with Hydra against the checkout's configs/ (as cli/train_grpo.py does), builds
        MindSpeed-RL's MegatronConfig / RLConfig / GenerateConfig from it (unknown keys are errors there)
        and runs validate_rl_args; prints the derived values as JSON.
torch_npu is replaced by an empty module; Ascend code paths are not executed. The fixture's commit
is the checkout's (git rev-parse) or, for an exported tree, MINDSPEED_RL_COMMIT.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

GBS, N_SAMPLES, NPUS, ITERS = 4, 2, 2, 4


def load_mindspeed(home: Path) -> dict:
    """MindSpeed-RL's modules by file, without its package __init__ (which needs the Ascend stack)."""
    sys.modules.setdefault("torch_npu", types.ModuleType("torch_npu"))

    def package(name: str, path: Path) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__path__ = [str(path)]
        sys.modules[name] = mod
        return mod

    package("mindspeed_rl", home / "mindspeed_rl")
    utils_pkg = package("mindspeed_rl.utils", home / "mindspeed_rl" / "utils")
    loggers = importlib.import_module("mindspeed_rl.utils.loggers")
    utils_pkg.Loggers = loggers.Loggers  # config_cls/base_config.py: from mindspeed_rl.utils import Loggers
    package("mindspeed_rl.config_cls", home / "mindspeed_rl" / "config_cls")
    mods = {name: importlib.import_module(f"mindspeed_rl.{name}") for name in
            ("utils.utils", "utils.metrics", "utils.loggers", "config_cls.megatron_config",
             "config_cls.rl_config", "config_cls.generate_config", "config_cls.validate_config")}
    mods["config_cls.validate_config"].get_node_nums = lambda: 1  # ray.nodes() without a cluster
    return mods


def stage(metric, key: str, secs: float) -> None:
    """A worker-side stage: time.time() at both ends, stored as [end, start] with cumulate=True,
    except resharding, which the actor worker stores as a duration (actor_hybrid_worker.py)."""
    start = time.time()
    time.sleep(secs)
    value = [time.time() - start] if "resharding" in key else [round(time.time(), 4), round(start, 4)]
    metric.update(key, value=value, cumulate=True)


def data_metrics(torch, it: int) -> dict:
    """compute_grpo_data_metrics' dict, same expressions, on made-up lengths and scores."""
    g = torch.Generator().manual_seed(it)
    samples = GBS * N_SAMPLES
    score = (torch.rand(samples, generator=g) < 0.3 + 0.1 * it).float()
    prompt_length = torch.randint(20, 49, (GBS,), generator=g).repeat_interleave(N_SAMPLES)
    response_length = torch.randint(4, 41, (samples,), generator=g)
    return {"grpo/score/mean": torch.mean(score).item(), "grpo/score/max": torch.max(score).item(),
            "grpo/score/min": torch.min(score).item(),
            "response_length/mean": torch.mean(response_length, dtype=torch.float32).item(),
            "response_length/max": torch.max(response_length).item(),
            "response_length/min": torch.min(response_length).item(),
            "prompt_length/mean": torch.mean(prompt_length, dtype=torch.float32).item(),
            "prompt_length/max": torch.max(prompt_length).item(),
            "prompt_length/min": torch.min(prompt_length).item()}


def one_iteration(ms: dict, it: int, max_lengths: bool = False) -> dict:
    """One fit() iteration's logged dict (integrated worker, reference model, rule reward). max_lengths: the
    throughputs as MindSpeed-RL's default logs them (rl_config.log_max_throughput=True, rl_config.py:213: from
    the batch's maximum prompt and response lengths)."""
    import torch
    from codetiming import Timer

    u = ms["utils.utils"]
    strategy = ms["utils.metrics"].Metric()  # what data_strategy.get_metrics() returns
    with Timer(name="iteration", logger=None) as all_timer:
        stage(strategy, "timing/resharding_to_infer", 0.003)
        stage(strategy, "timing/rollout", 0.030 + 0.005 * it)
        stage(strategy, "timing/resharding_to_train", 0.003)
        t0 = time.time()
        stage(strategy, "timing/rule_reward", 0.002)
        strategy.update("start_time/rule_reward", value=[round(t0, 4)], cumulate=True)
        strategy.update("end_time/rule_reward", value=[round(time.time(), 4)], cumulate=True)
        stage(strategy, "timing/adv", 0.001)
        strategy.update("end_time/end_adv_time", value=[round(time.time(), 4)], cumulate=True)
        t0 = time.time()
        stage(strategy, "timing/reference_model", 0.005)
        strategy.update("start_time/reference_model", value=[round(t0, 4)], cumulate=True)
        strategy.update("end_time/reference", value=[round(time.time(), 4)], cumulate=True)
        stage(strategy, "timing/update", 0.012)
        for key, val in (("actor/pg_loss", 0.05 / it), ("actor/kl_loss", 0.001 * it), ("actor/entropy", 0.9),
                         ("actor/pg_clipfrac", 0.0), ("actor/ppo_kl", 1e-4), ("actor/grad_norm", 0.4)):
            strategy.update(key, value=[val, val * 1.1], cumulate=True)
        strategy.update("actor/lr", value=1e-6)
        strategy.update("base_acc_rewards/mean", value=[0.25 + 0.1 * it], cumulate=True)
        grpo = data_metrics(torch, it)
    result = u.metrics_sort(u.metrics_post_processing(strategy), all_timer.last)
    kwargs = {"actor_resource": {"num_npus": NPUS}, "use_integrated_worker": True}
    metrics = ms["utils.metrics"].Metric()
    metrics.update(value=result)
    metrics.update(value=grpo)
    metrics.update("e2e_tps", u.compute_tps(kwargs, grpo, GBS, N_SAMPLES, all_timer.last, max_lengths))
    metrics.update("update_tps", u.compute_tps(kwargs, grpo, GBS, N_SAMPLES, result["timing/update"], max_lengths))
    metrics.update("vllm_tps", u.compute_tps(kwargs, grpo, GBS, N_SAMPLES, result["timing/rollout"], max_lengths))
    return metrics.metric


def write_fixture(home: Path, out: Path) -> None:
    ms = load_mindspeed(home)
    logger = ms["utils.loggers"].Loggers("grpo_trainer_hybrid")
    out.mkdir(parents=True, exist_ok=True)
    for name, max_lengths in (("mindspeed_grpo.log", False), ("mindspeed_grpo_max.log", True)):
        with open(out / name, "w") as f:
            for h in logger.logger.handlers:
                h.setStream(f)
            logger.info(f"sync start grpo training at iteration: 0/{ITERS} ...")
            for it in range(1, ITERS + 1):
                logger.info(one_iteration(ms, it, max_lengths), it, ITERS)
            logger.info("after grpo training is done")
            for h in logger.logger.handlers:
                h.setStream(sys.stderr)  # not the closed file: logging flushes its handlers at exit
    git = subprocess.run(["git", "-C", str(home), "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = git.stdout.strip() if git.returncode == 0 else os.environ.get("MINDSPEED_RL_COMMIT")
    meta = {"mindspeed_rl_commit": commit, "global_batch_size": GBS,
            "n_samples_per_prompt": N_SAMPLES, "world_size": NPUS, "iterations": ITERS,
            "script": "scripts/make_mindspeed_fixture.py"}
    (out / "mindspeed_fixture_meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def check_config(home: Path, config_path: Path) -> dict:
    """Hydra compose + MindSpeed-RL's config classes and validate_rl_args on our YAML."""
    from hydra import compose, initialize_config_dir

    ms = load_mindspeed(home)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(home / "configs" / "model", Path(tmp) / "model")
        shutil.copy(config_path, Path(tmp) / config_path.name)
        with initialize_config_dir(config_dir=tmp, version_base=None):
            config = compose(config_name=config_path.stem)  # a DictConfig, as train_grpo.py passes on
    actor = ms["config_cls.megatron_config"].MegatronConfig(
        {**config["megatron_training"], **config["actor_config"]}, config["model"])
    rl = ms["config_cls.rl_config"].RLConfig(config["rl_config"])
    gen = ms["config_cls.generate_config"].GenerateConfig(config["generate_config"])
    ms["config_cls.validate_config"].validate_rl_args(actor, actor, actor, rl, gen)
    return {"global_batch_size": actor.global_batch_size, "micro_batch_size": actor.micro_batch_size,
            "seq_length": actor.seq_length, "lr": actor.lr, "n_samples_per_prompt": rl.n_samples_per_prompt,
            "mini_batch_size": rl.mini_batch_size, "init_kl_coef": rl.init_kl_coef,
            "kl_penalty": rl.kl_penalty, "clip_ratio": rl.clip_ratio,
            "num_npus": int(rl.actor_resource["num_npus"]),
            "max_tokens": int(gen.sampling_config["max_tokens"]), "max_model_len": gen.max_model_len,
            "model_layers": getattr(actor, "num_layers", None)}


def main() -> None:
    home = Path(os.environ.get("MINDSPEED_RL_HOME", ""))
    if not (home / "mindspeed_rl" / "utils" / "loggers.py").is_file():
        sys.exit("set MINDSPEED_RL_HOME to a MindSpeed-RL checkout")
    what, arg = (sys.argv[1:3] + ["", ""])[:2]
    if what == "fixture":
        write_fixture(home, Path(arg or "tests/fixtures/external"))
    elif what == "check-config" and arg:
        print(json.dumps(check_config(home, Path(arg))))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
