"""The CPU default's model: a tiny Qwen2/Llama causal LM over characters, warm-started by a short
deterministic supervised pass on the built-in task so RL starts from "sometimes right".

Like an instruct model before RL, it learns two ways to end a solution: GSM8K's `#### 6` (a share
model.warmstart_gsm8k_share of the warm-start solutions) and `The answer is 6.` (the rest), and,
with model.warmstart_direct_share, two ways to answer: working each step out first, or the answer
alone. The strict GSM8K reward accepts only the first, so RL has two things to learn: the answer
format the reward checks (fast) and the arithmetic (slowly). Evaluation reports both (accuracy,
accuracy_any_format).

The warm-started weights are cached (keyed by everything that shapes them), so only a first run
pays; the default config's ship in the package (SHIPPED, built by engines/model/shipped.py), so not
even that one.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM
from transformers.utils import logging as hf_logging

from rlbench.engines import data, model
from rlbench.engines.data import facts
from rlbench.engines.data.task import Problem, answer_only
from rlbench.engines.model.shape import tiny_config
from rlbench.engines.model.tokenizer import CharTokenizer


# the default config's warm start (engines/model/shipped.py)
SHIPPED = Path(__file__).parent / "warmstart"
# The warm start's intra-op threads, whatever the process had: it runs before a cell's workers
# start, while the other core idles (1.6x faster than one thread on 2 cores, and the same bits as
# one thread on the CPUs measured: docs/results/startup.md).
THREADS = 2


def quiet_transformers() -> None:
    """No per-load progress bars from transformers in our own progress output."""
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def cache_root() -> Path:
    return Path(os.environ.get("RLBENCH_CACHE", Path.home() / ".cache" / "rlbench"))


def build_tiny(mcfg, vocab_size: int, seed: int):
    """Randomly initialised tiny model of the configured architecture (fp32, SDPA attention)."""
    cls_model = Qwen2ForCausalLM if mcfg.arch == "qwen2" else LlamaForCausalLM
    torch.manual_seed(seed)
    model = cls_model(tiny_config(mcfg, vocab_size))
    return model.float().eval()


def chat_style(solution: str, answer: str) -> str:
    """The solution with its `#### N` line replaced by a chat model's ending, which the strict
    GSM8K rule scores 0."""
    worked, _, _ = solution.rpartition("\n")  # empty for a direct answer: the ending alone
    return f"{worked}\nThe answer is {answer}." if worked else f"The answer is {answer}."


def _sft_batch(tok: CharTokenizer, problems, format_prompt, gsm8k_style: list[bool]):
    """-> right-padded [B, L] ids and labels (-100 outside the solution + EOS); gsm8k_style[i]:
    whether problem i's solution keeps its `#### N` ending."""
    rows, labels = [], []
    for p, gsm8k in zip(problems, gsm8k_style):
        prompt = tok.prompt_ids(format_prompt(p.question))
        target = tok.encode(p.solution if gsm8k else chat_style(p.solution,
                                                                p.answer)) + [tok.eos_token_id]
        rows.append(prompt + target)
        labels.append([-100] * len(prompt) + target)
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    lab = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
    return ids, lab


def warm_start(model, tok: CharTokenizer, problems, format_prompt, steps: int, lr: float,
               batch: int,
               seed: int, gsm8k_share: float = 1.0, progress=None,
               direct_share: float = 0.0) -> list[float]:
    """Deterministic supervised pass (fixed order, fixed seed); returns the loss curve.

    gsm8k_share: each solution ends GSM8K-style (`#### N`) with this probability, else chat-style.
    direct_share: this share of the problems is answered directly, the working left out
    (task.answer_only)."""
    rng = random.Random(seed)
    if direct_share:
        problems = _answer_directly(problems, direct_share, random.Random(f"direct:{seed}"))
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return _train(model, tok, problems, format_prompt, steps, lr, batch, rng, gsm8k_share,
                      progress)
    finally:
        torch.set_num_threads(threads)
        model.eval()


def _train(model, tok, problems, format_prompt, steps: int, lr: float, batch: int,
           rng: random.Random,
           gsm8k_share: float, progress) -> list[float]:
    """warm_start's loop: AdamW with a 20-step warm-up and a linear decay; -> the loss per step."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.05,
                                                                                          1 - s
                                                                                          / steps))
    model.train()
    losses = []
    for step in range(steps):
        drawn = rng.sample(problems, batch)
        ids, lab = _sft_batch(tok, drawn, format_prompt,
                              [rng.random() < gsm8k_share for _ in drawn])
        loss = model(input_ids=ids, attention_mask=(ids != tok.pad_token_id) | (lab != -100),
                     labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if progress is not None:
            progress(step + 1, steps, losses[-1])
    return losses


def _answer_directly(problems, share: float, rng: random.Random) -> list:
    """The warm start's copy of the problems with a `share` of them answered without the working
    (the same problems every epoch: which questions the teacher answers directly is fixed, not
    redrawn per step)."""
    return [Problem(p.question, answer_only(p.solution),
                    p.answer) if rng.random() < share else p for p in problems]


def warmstart_sources() -> list[Path]:
    """Source files whose code can shape the warm-started weights: every module of the data package
    (task, fact split, data source and prompt format, GSM8K files) and of the model package
    (tokenizer, this warm start, the loader). Over-inclusive on purpose: a stale cache hit is a
    wrong result, a miss costs one warm start."""
    return sorted(p for pkg in (data, model) for p in Path(pkg.__file__).parent.glob("*.py"))


def code_digest(path: Path) -> str:
    """A digest of a module's code: its syntax tree without docstrings, so a comment or a docstring
    edited (a path renamed in prose) keeps the warm start, cached or shipped, that the code itself
    still gives."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node,
                       (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:12]


def cache_key(cfg, libraries: bool = True) -> str:
    """Everything that changes the warm-started weights: the model and data config, the seed, the
    code (warmstart_sources), the fact split's rule version and (libraries) the torch and
    transformers versions."""
    # Every data key shapes the train split (eval_size too: train skips the eval questions), except
    # few_shot: the warm-start prompts are zero-shot. Local data files count by content.
    data = cfg.data.model_dump(mode="json", exclude={"few_shot"})
    # a new fact rule: new split
    data["split_version"] = facts.SPLIT_VERSION if cfg.data.split == "fact" else None
    data["files"] = [hashlib.sha256(Path(f).read_bytes()).hexdigest()[:16] if Path(f).is_file()
                     else f
                     for f in (cfg.data.path, cfg.data.eval_path) if f]
    parts = {"model": cfg.model.model_dump(mode="json"), "data": data, "seed": cfg.run.seed,
             "code": {f"{f.parent.name}/{f.name}": code_digest(f) for f in warmstart_sources()}}
    if libraries:
        parts.update(torch=torch.__version__.split("+")[0], transformers=transformers.__version__)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def shipped_for(cfg) -> Path | None:
    """The shipped warm start's folder where it serves cfg (its key is cfg's, libraries aside), else
    None."""
    info = SHIPPED / "warmstart.json"
    if cfg.model.kind != "tiny" or not info.is_file():
        return None
    return (SHIPPED if json.loads(info.read_text()).get("key") == cache_key(cfg, libraries=False)
            else None)


def load_or_warm_start(cfg, train_problems, format_prompt, progress=None):
    """The warm-started tiny model from the cache or the package (shipped_for), training and caching
    it where neither has it."""
    quiet_transformers()
    tok = CharTokenizer()
    folder = cache_root() / f"tiny-{cache_key(cfg)}"
    for ready, shipped in ((folder, False), (shipped_for(cfg), True)):
        if ready is not None and (ready / "config.json").is_file():
            model = AutoModelForCausalLM.from_pretrained(ready,
                                                         attn_implementation="sdpa").float().eval()
            info = json.loads((ready / "warmstart.json").read_text())
            return model, tok, {"steps": info["steps"], "final_loss": info["final_loss"],
                                "cached": True,
                                **({"shipped": True} if shipped else {})}
    model = build_tiny(cfg.model, tok.vocab_size, cfg.run.seed)
    losses = warm_start(model, tok, train_problems, format_prompt, cfg.model.warmstart_steps,
                        cfg.model.warmstart_lr, cfg.model.warmstart_batch, cfg.run.seed,
                        cfg.model.warmstart_gsm8k_share, progress, cfg.model.warmstart_direct_share)
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    info = {"steps": cfg.model.warmstart_steps, "final_loss": losses[-1] if losses else None,
            "cached": False}
    (tmp / "warmstart.json").write_text(json.dumps({**info, "cached": True}))
    publish(tmp, folder)
    return model, tok, info


def publish(tmp: Path, folder: Path) -> None:
    """Move a finished warm start into the cache, or, where another run's got there first (the same
    key: the same weights), drop this one: its temporary folder never stays behind."""
    try:
        if not folder.exists():
            # a directory onto an existing one fails (not empty): the race lost
            os.replace(tmp, folder)
    except OSError:
        if not folder.is_dir():
            raise
    if tmp.exists():
        shutil.rmtree(tmp, ignore_errors=True)
