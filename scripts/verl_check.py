"""Check rlbench's VERL artefacts with VERL's own code, on CPU (run with .venv-verl/bin/python).

    .venv-verl/bin/python scripts/verl_check.py command < argv.json
        argv.json: the JSON list verl_command() returns. Composes VERL's real Hydra config
        (verl/trainer/config/ppo_trainer.yaml) with those overrides exactly as
        `python -m verl.trainer.main_ppo` does, runs VERL's validate_config on it, and prints the
        resolved value of every overridden key, and the whole resolved config, as JSON. A key VERL does
        not have fails here.
    .venv-verl/bin/python scripts/verl_check.py parquet FILE.parquet
        Loads the file with VERL's RLHFDataset (the class VERL's trainer reads data with; a tiny
        in-memory tokenizer stands in for the model's) and scores each row's ground truth with
        VERL's default_compute_score; prints one JSON object per row.
Nothing here imports rlbench.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import verl


def check_command(argv: list[str]) -> dict:
    """Hydra-compose VERL's ppo_trainer config with argv's overrides and validate it."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    i = argv.index("verl.trainer.main_ppo")
    overrides = argv[i + 1:]
    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    resolved = {}
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+")
        resolved[key] = OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(cfg, key)}))["v"]
    return {"resolved": resolved, "use_reference_policy": bool(need_reference_policy(cfg)),
            "use_critic": bool(need_critic(cfg)), "config": OmegaConf.to_container(cfg, resolve=True)}


def tiny_tokenizer():
    """A whitespace word-level tokenizer with a chat template: enough for RLHFDataset's length filter."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "<pad>": 1}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")
    fast.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|> {% endif %}")
    return fast


def check_parquet(path: str) -> list[dict]:
    """Every row as VERL's RLHFDataset yields it, plus VERL's reward for the row's own answer."""
    from omegaconf import OmegaConf

    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.reward_score import default_compute_score

    conf = OmegaConf.create({"max_prompt_length": 1024, "filter_overlong_prompts": True,
                             "truncation": "error", "cache_dir": str(Path(path).parent / ".verl-cache")})
    ds = RLHFDataset(data_files=[path], tokenizer=tiny_tokenizer(), config=conf)
    rows = []
    for i in range(len(ds)):
        item = ds[i]
        truth = item["reward_model"]["ground_truth"]
        rows.append({"data_source": item["data_source"], "raw_prompt": list(item["raw_prompt"]),
                     "ground_truth": truth, "extra_info": dict(item["extra_info"]),
                     "score_of_own_answer": float(default_compute_score(
                         item["data_source"], f"{item['extra_info']['answer']}", truth))})
    return rows


def loss_cases() -> dict:
    """VERL's default policy loss and GRPO advantages on seeded inputs (inputs kept in the output)."""
    import torch
    from omegaconf import OmegaConf

    from verl.trainer.ppo import core_algos

    g = torch.Generator().manual_seed(0)
    B, R = 6, 5
    old = -torch.rand(B, R, generator=g) * 3
    new = old + torch.randn(B, R, generator=g) * 1.5  # ratios far outside [0.8, 1.2], some above 3
    adv_seq = torch.randn(B, generator=g)
    lengths = [5, 3, 1, 5, 4, 2]
    mask = torch.tensor([[1.0] * n + [0.0] * (R - n) for n in lengths])
    adv = adv_seq[:, None].expand(B, R).contiguous()
    cfg = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2,
                            "clip_ratio_c": 3.0, "global_batch_info": {}})
    batch, metrics = core_algos.compute_policy_loss_vanilla(old, new, adv, mask, "token-mean", cfg)
    per_token = torch.zeros(B, R)
    for i in range(B):
        for t in range(lengths[i]):
            one = torch.zeros(B, R)
            one[i, t] = 1.0
            per_token[i, t] = core_algos.compute_policy_loss_vanilla(old, new, adv, one, "token-mean", cfg)[0]
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]  # groups: [0] alone, [1..3], [4..7]
    uid = ["a", "b", "b", "b", "c", "c", "c", "c"]
    scores = torch.zeros(len(rewards), 3)
    scores[:, -1] = torch.tensor(rewards)
    grpo_adv, _ = core_algos.compute_grpo_outcome_advantage(scores, torch.ones(len(rewards), 3),
                                                            __import__("numpy").array(uid, dtype=object))
    return {"verl_version": verl.__version__, "clip_ratio": 0.2, "clip_ratio_c": 3.0,
            "old": old.tolist(), "new": new.tolist(), "adv": adv_seq.tolist(), "lengths": lengths,
            "pg_loss_token_mean": batch.item(), "pg_loss_per_token": per_token.tolist(),
            "pg_clipfrac_lower": metrics["actor/pg_clipfrac_lower"],
            "rewards": rewards, "uid": uid, "grpo_advantages": grpo_adv[:, 0].tolist()}


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "command":
        print(json.dumps(check_command(json.load(sys.stdin))))
    elif what == "loss":
        print(json.dumps(loss_cases(), indent=1))
    elif what == "parquet" and len(sys.argv) > 2:
        print(json.dumps(check_parquet(sys.argv[2]), default=str))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
