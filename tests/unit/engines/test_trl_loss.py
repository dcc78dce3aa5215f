"""TRL's GRPO loss and gradient equal rlbench's on one fixed batch, when both are configured alike.

The batch: two prompts of the built-in task x G=4 fixed responses (right answers, wrong ones, a chat-style
ending, one cut before EOS), rewarded by each engine's own path (TRL calls rlbench's strict rule as its
reward function, rlbench its trainer), a policy perturbed away from the reference (so the KL term is not
zero), and old log-probs offset from the policy's (so ratios reach both PPO clip bounds and VERL's dual clip).
Each engine runs its own code on it: rlbench's Trainer (micro-batches, reference pass, PPOLoss, gradient
accumulation of the token sum, the one division by the token count) and TRL's GRPOTrainer
(_generate_and_score_completions through a rollout_func that returns the fixed responses: TRL's rewards,
advantages and reference pass; then compute_loss and backward per micro-batch, as its training step does).

Tolerance (float32): loss within 1e-6 relative, every gradient element within 1e-6 + 1e-5 x |g| (measured:
1.8e-7 at most, for |g| up to 0.23). The same on two gloo ranks, each engine data parallel its own way
(tests/support/trl_ranks.py), the gradients compared after their all-reduce. Where TRL's defaults differ from VERL's, ALIGN names the setting that
aligns them and a test shows the gradient moves when that one setting is left at TRL's default.
"""
import contextlib

import pytest

from conftest import TESTS

pytest.importorskip("trl")

G, TEMPERATURE, KL_COEF, SEED = 4, 0.8, 0.05, 0
LOSS_RTOL = 1e-6
GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-5
# What each alignment is: (TRL keyword at its default, rlbench config at VERL's default). The aligned
# values: loss_type "dapo" (TRL's default: token mean over the batch), delta = train.clip_ratio_c (VERL's
# dual clip), epsilon_high = epsilon (symmetric clip), beta = train.kl_coef on k3 = low_var_kl without
# TRL's importance-ratio factor on the KL term, and rlbench's train.adv_eps = 1e-4 (TRL's fixed epsilon).
ALIGN = {
    "dual clip: delta = train.clip_ratio_c": ({"delta": None}, {}),
    "advantage epsilon: train.adv_eps = 1e-4": ({}, {"train.adv_eps": 1e-6}),
    "loss aggregation: loss_type = dapo (token mean)": ({"loss_type": "grpo"}, {}),
    "KL estimator: train.kl_type = low_var_kl (TRL's k3)": ({}, {"train.kl_type": "kl"}),
    "KL coefficient: beta = train.kl_coef": ({"beta": 0.0}, {}),
    "KL gradient: use_bias_correction_kl = False": ({"use_bias_correction_kl": True}, {}),
    "asymmetric clip: epsilon_high = epsilon": ({"epsilon_high": 0.28}, {}),
}
RESPONSES = ["{sol}", "{sol}", "{wrong}", "The answer is {ans}.", "{sol}", "{wrong}", "{wrong}", "{cut}"]


def config(**over):
    from rlbench.core.config_files import load_config

    sets = [f"rollout.group_size={G}", "train.prompts_per_iteration=2", "train.micro_batch_size=2",
            f"rollout.temperature={TEMPERATURE}", f"train.kl_coef={KL_COEF}", "train.adv_eps=1e-4",
            "engine.rollout_devices=1", "engine.train_devices=1"]
    return load_config(None, sets + [f"{k}={v}" for k, v in over.items()])


@pytest.fixture(scope="module")
def batch(tmp_path_factory, one_thread):
    return make_batch(tmp_path_factory.mktemp("policy"))


def make_batch(folder) -> dict:
    """The policy directory (random tiny model + character tokenizer, written into folder unless it is
    there), the problems and fixed responses: the same on every rank that builds it."""
    import torch

    from rlbench.engines.data.source import load_dataset
    from rlbench.engines.external.trl.export import char_tokenizer
    from rlbench.engines.model.tiny import build_tiny
    from rlbench.engines.model.tokenizer import CharTokenizer

    cfg, tok = config(), CharTokenizer()
    if not (folder / "config.json").is_file():
        build_tiny(cfg.model, tok.vocab_size, SEED).save_pretrained(folder)
        char_tokenizer().save_pretrained(folder)
    dataset = load_dataset(cfg.data, SEED)
    problems = dataset.train[:2]
    responses = []
    for i, text in enumerate(RESPONSES):
        p = problems[i // G]
        wrong = p.solution.rsplit(" ", 1)[0] + f" {int(p.answer) + 1}"
        ids = tok.encode(text.format(sol=p.solution, wrong=wrong, ans=p.answer, cut=p.solution[:-2]))
        responses.append(ids if text == "{cut}" else ids + [tok.eos_token_id])
    g = torch.Generator().manual_seed(SEED + 1)
    offsets = [(torch.rand(len(r), generator=g) * 3 - 1.5) for r in responses]  # old = policy + offset
    return {"folder": folder, "dataset": dataset, "problems": problems, "responses": responses,
            "offsets": offsets, "prompts": [dataset.prompt_text(p) for p in problems]}


def perturb(model) -> None:
    """The same seeded step away from the reference for both engines' policy."""
    import torch

    g = torch.Generator().manual_seed(SEED + 2)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.add_(torch.randn(p.shape, generator=g) * 0.05)


def rlbench_side(batch, rank: int = 0, world: int = 1, **over) -> dict:
    """rlbench's Trainer on the batch (world > 1: this rank's prompts, rank::world, gradients and sums
    all-reduced as its data-parallel step does): loss, gradients, per-sample advantages and reference
    log-probs."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlbench.engines.model.tokenizer import CharTokenizer
    from rlbench.engines.rollout.base import Group
    from rlbench.engines.trainer.trainer import Trainer

    cfg, tok = config(**over), CharTokenizer()
    policy = AutoModelForCausalLM.from_pretrained(batch["folder"], attn_implementation="sdpa").float()
    trainer = Trainer(policy, cfg, tok, world)  # its reference: a copy of these weights
    perturb(trainer.policy)
    trainer.begin()
    advantages, refs, counts = [], [], {}
    for i, p in list(enumerate(batch["problems"]))[rank::world]:
        rows = batch["responses"][i * G:(i + 1) * G]
        group = Group(i, tok.prompt_ids(batch["prompts"][i]), rows, [[0.0] * len(r) for r in rows])
        adv = trainer.advantages(trainer.rewards(group, p.answer))
        advantages += adv.tolist()
        for j, mb in enumerate(trainer.micro_batches(group, adv)):
            first = i * G + j * cfg.train.micro_batch_size
            trainer.ref_logprobs(mb)
            with torch.no_grad():
                logp = trainer.plan.fn(trainer.policy, mb.prompt_ids, mb.responses, TEMPERATURE)
            mb.old = [lp.detach() + batch["offsets"][first + n] for n, lp in enumerate(logp)]
            refs += [r.tolist() for r in mb.ref]
            trainer.accumulate(mb)
    if world > 1:
        trainer.all_reduce()  # as its optimizer step does: token counts, sums, one flat gradient buffer
    n = trainer.tokens
    grads = {name: p.grad / n for name, p in trainer.policy.named_parameters()}
    return {"loss": trainer.loss_sum / n, "grads": grads, "advantages": advantages, "ref": refs, "tokens": n}


def trl_side(batch, rank: int = 0, world: int = 1, **trl_over) -> dict:
    """TRL's GRPOTrainer on the batch (settings.grpo_kwargs for `world` ranks, `trl_over` laid over it). With
    world > 1 (this process one of them, accelerate's process group from the environment): this rank's
    prompts (rank::world, their samples), TRL's advantages and token count over the whole generation
    batch, and its micro-batches through the DDP-wrapped model, the gradient all-reduced during the last
    backward as in its training step; the loss summed over the ranks."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import split_tensor_dict

    from rlbench.engines.external.trl import settings
    from rlbench.engines.external.trl.data import strict_gsm8k
    from rlbench.engines.external.trl.export import char_tokenizer

    cfg, tok = config(), char_tokenizer()
    translation = settings.named_for(GRPOConfig, settings.grpo_kwargs(cfg, world, str(batch["folder"] / f"trl{rank}")))
    args = GRPOConfig(**{**translation, **trl_over})
    mine = [i for i in range(2 * G) if (i // G) % world == rank]  # this rank's samples, group by group
    rows = [{"prompt": batch["prompts"][i // G], "answer": batch["problems"][i // G].answer} for i in mine]

    def fixed(prompts, trainer):  # TRL's hook for a rollout of one's own: here, the fixed responses
        return {"prompt_ids": [tok(p)["input_ids"] for p in prompts],
                "completion_ids": [list(batch["responses"][i]) for i in mine], "logprobs": None}

    trainer = GRPOTrainer(model=str(batch["folder"]), reward_funcs=[strict_gsm8k], args=args,
                          train_dataset=Dataset.from_list(rows), processing_class=tok, rollout_func=fixed)
    perturb(trainer.model)
    trainer.model.train()
    model = trainer.accelerator.prepare_model(trainer.model) if world > 1 else trainer.model  # DDP, as train()
    out = trainer._generate_and_score_completions(rows)
    mask = out["completion_mask"].bool()
    with torch.no_grad():
        logp = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([out["prompt_ids"], out["completion_ids"]], 1),
            torch.cat([out["prompt_mask"], out["completion_mask"]], 1), out["completion_ids"].size(1))[0]
    old = torch.zeros_like(logp)
    for row, i in enumerate(mine):
        off = batch["offsets"][i]
        old[row, :len(off)] = logp[row, :len(off)] + off
    out["old_per_token_logps"] = old
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps
    losses = []
    chunks = split_tensor_dict(out, args.steps_per_generation)  # micro-batches, as its training step
    for j, chunk in enumerate(chunks):  # DDP all-reduces in the last backward only (accelerate's accumulate)
        with contextlib.nullcontext() if world == 1 or j == len(chunks) - 1 else model.no_sync():
            loss = trainer.compute_loss(model, chunk)
            loss.backward()
        losses.append(loss.item())
    return {"loss": _summed(sum(losses), world) / world,
            "grads": {n: p.grad for n, p in trainer.model.named_parameters()},
            "advantages": out["advantages"].tolist(), "tokens": int(_summed(int(mask.sum()), world)),
            "ref": [r[m].tolist() for r, m in zip(out.get("ref_per_token_logps", []), mask)],  # beta 0: none
            "logp": [r[m] for r, m in zip(logp, mask)], "old": [r[m] for r, m in zip(old, mask)]}


def _summed(value: float, world: int) -> float:
    """value summed over the ranks (as is, on one)."""
    if world == 1:
        return value
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t.item())


@pytest.fixture(scope="module")
def aligned(batch):
    return rlbench_side(batch), trl_side(batch)


def max_grad_excess(a: dict, b: dict) -> float:
    """The largest |a - b| beyond the tolerance GRAD_ATOL + GRAD_RTOL |b|, over every parameter (<= 0: within)."""
    return max(float(((a[n] - b[n]).abs() - GRAD_ATOL - GRAD_RTOL * b[n].abs()).max()) for n in b)


def test_the_batch_reaches_every_branch_of_the_loss(aligned, batch):
    """Not a vacuous equality: rewards differ within each group, ratios pass both clip bounds and the dual
    clip, the KL term is not zero, and the clamps rlbench has and TRL has not never bind."""
    import torch

    ours, trl = aligned
    adv = torch.tensor(ours["advantages"]).repeat_interleave(torch.tensor([len(r) for r in batch["responses"]]))
    ratio = torch.cat([torch.exp(lp - o) for lp, o in zip(trl["logp"], trl["old"])])
    assert (adv > 0).any() and (adv < 0).any()
    assert (ratio > 1.2).any() and (ratio < 0.8).any() and ((ratio > 3.0) & (adv < 0)).any()
    log_ratio = torch.cat([torch.tensor(r) for r in trl["ref"]]) - torch.cat(trl["logp"])
    kl = log_ratio.exp() - log_ratio - 1
    assert log_ratio.abs().max() < 20 and kl.max() < 10 and kl.max() > 1e-3


def test_rewards_advantages_and_reference_are_the_same(aligned):
    ours, trl = aligned
    assert ours["tokens"] == trl["tokens"]
    assert trl["advantages"] == pytest.approx(ours["advantages"], abs=1e-6)
    for a, b in zip(ours["ref"], trl["ref"]):
        assert b == pytest.approx(a, rel=1e-5, abs=1e-5)


def test_loss_and_gradient_are_equal(aligned):
    ours, trl = aligned
    assert trl["loss"] == pytest.approx(ours["loss"], rel=LOSS_RTOL)
    assert max_grad_excess(trl["grads"], ours["grads"]) <= 0


@pytest.mark.parametrize("setting", sorted(ALIGN))
def test_each_alignment_is_needed(setting, aligned, batch):
    """Left at TRL's default (or rlbench's at VERL's), that one setting moves the gradient off rlbench's."""
    trl_over, ours_over = ALIGN[setting]
    ours = rlbench_side(batch, **ours_over) if ours_over else aligned[0]
    trl = trl_side(batch, **trl_over) if trl_over else aligned[1]
    assert max_grad_excess(trl["grads"], ours["grads"]) > 0


RANKS = 2


@pytest.mark.e2e
def test_two_ranks_give_the_same_gradient_after_the_all_reduce(batch, aligned, tmp_path):
    """Data parallel on 2 gloo ranks, each engine its own way (rlbench: each rank trains its prompts, one flat
    all-reduce of gradients and token counts before the step; TRL under accelerate: DDP over the ranks, its
    dapo normaliser the generation batch's tokens over all ranks, the all-reduce in the last backward): on
    every rank, the loss and the gradient after the all-reduce are equal within the one-rank tolerance, and
    equal to the one-rank gradient of the whole batch."""
    import os
    import socket
    import subprocess
    import sys

    import torch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = TESTS / "support" / "trl_ranks.py"
    procs = [subprocess.Popen(
        [sys.executable, str(script), str(batch["folder"]), str(tmp_path)],
        env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(RANKS),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(RANKS)]
    try:
        logs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0] * RANKS, "\n".join(log[-3000:] for log in logs)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(RANKS)]
    whole = aligned[0]  # rlbench on one rank, the whole batch
    for res in ranks:
        ours, trl = res["rlbench"], res["trl"]
        assert ours["tokens"] == trl["tokens"] == whole["tokens"]
        assert trl["loss"] == pytest.approx(ours["loss"], rel=LOSS_RTOL)
        assert max_grad_excess(trl["grads"], ours["grads"]) <= 0
        assert max_grad_excess(ours["grads"], whole["grads"]) <= 0  # the same update as one rank
    assert sum((r["trl"]["advantages"] for r in ranks), []) == pytest.approx(whole["advantages"], abs=1e-6)
    assert sum((r["rlbench"]["advantages"] for r in ranks), []) == pytest.approx(whole["advantages"], abs=1e-6)
