"""Evaluation between iterations, run where the weights are: on a worker, never on the driver's
device.

The driver holds no accelerator (docs/architecture/process-model.md), so when the trainer runs in
worker processes its rank 0 generates the greedy evaluation answers on its own device with the
built-in sampler (the same sampler for every schedule) and returns token ids; the driver only scores
them (GSM8K's strict rule). When the trainer runs in this process (the tests' in-process reference,
engine.sync_layout=single_process) this process is the worker and evaluates here. The runner times
the call as the `eval` stage, outside every iteration, so it is excluded from TPSPD.
"""
from __future__ import annotations

import re

from rlbench.engines.data.reward import any_format_correct, extract_solution, gsm8k_reward
from rlbench.engines.rollout.base import PromptRequest, SamplingParams


WORKED = re.compile(r"\d\s*[-+*x/]\s*\d+\s*=")  # a worked step, `47+2=` (an answer alone has none)


def _problems(dataset) -> list:
    """The evaluation problems in one list: the eval split, then (split fact) the seen-fact set,
    which rides along in the same generate call."""
    return dataset.eval + dataset.seen


def eval_inputs(cfg, dataset, tok) -> tuple[list[PromptRequest], SamplingParams]:
    """The evaluation problems' prompts and the greedy sampling every evaluation uses."""
    requests = [PromptRequest(i, tok.prompt_ids(dataset.prompt_text(p)))
                for i, p in enumerate(_problems(dataset))]
    sampling = SamplingParams(n=1, temperature=1.0,
                              max_new_tokens=eval_max_new_tokens(cfg, len(requests)),
                              seed=cfg.run.seed, greedy=True)
    return requests, sampling


def eval_max_new_tokens(cfg, problems: int) -> int:
    """The longest evaluation response: rollout.max_new_tokens, cut so that `problems` responses
    stay within run.eval_token_budget where one is set."""
    budget = cfg.run.eval_token_budget
    longest = cfg.rollout.max_new_tokens
    return longest if budget is None else max(1, min(longest, budget // max(1, problems)))


def score(groups, dataset, tok) -> dict:
    """Greedy pass@1 with the GSM8K strict rule (accuracy), plus three diagnostics: the share of
    responses the strict rule can read an answer from (format_rate), pass@1 whatever the answer's
    format (accuracy_any_format), and the share that work a step out before answering (worked_rate).
    With data.split=fact, `accuracy` is on held-out facts and `accuracy_seen` on facts trained
    on."""
    problems = _problems(dataset)
    texts = [(tok.decode(g.responses[0]), problems[g.prompt_index].answer)
             for g in sorted(groups, key=lambda g: g.prompt_index)]
    n = len(dataset.eval)
    texts, seen = texts[:n], texts[n:]
    out = {"accuracy": sum(gsm8k_reward(t, a) for t, a in texts) / n, "n": n,
           "format_rate": sum(extract_solution(t) is not None for t, _ in texts) / n,
           "accuracy_any_format": sum(any_format_correct(t, a) for t, a in texts) / n,
           "worked_rate": sum(bool(WORKED.search(t)) for t, _ in texts) / n}
    if seen:
        out.update(accuracy_seen=sum(gsm8k_reward(t, a) for t, a in seen) / len(seen),
                   n_seen=len(seen))
    return out


class InProcessEval:
    """This process holds the trainer (and its device): evaluate here with a sampler of its own."""

    def __init__(self, sampler, trainer, device):
        self.sampler, self.trainer, self.device = sampler, trainer, device

    def __call__(self, cfg, dataset, tok) -> dict:
        self.sampler.load_weights(self.trainer.weights(), self.trainer.version)
        requests, sampling = eval_inputs(cfg, dataset, tok)
        return score(self.sampler.generate(requests, sampling), dataset, tok)


class WorkerEval:
    """The trainer's rank 0 generates the answers on its device (TrainerRank.evaluate); the driver
    scores."""

    device = None  # nothing to synchronise in the driver: the call returns when the worker is done

    def __init__(self, trainer):
        self.trainer = trainer  # a DataParallelTrainer

    def __call__(self, cfg, dataset, tok) -> dict:
        requests, sampling = eval_inputs(cfg, dataset, tok)
        return score(self.trainer.evaluate(requests, sampling), dataset, tok)
