"""Validated run configuration: one model per concern, defaults defined once, here (the model and
data sections: core/config_inputs.py).

YAML files in configs/ hold overrides only; `--set key=value` overrides those (reading them, and a
result file's config, into these models: core/config_files.py).
Every field's description is its documentation (`rlbench config --docs` lists them).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field, create_model, field_validator, model_validator
from rlbench.core import components, schedules
from rlbench.core.config_inputs import DataConfig, ModelConfig, Section
from rlbench.core.devices import cluster
from rlbench.core.schedules.spec import REFERENCE


class _RolloutSection(Section):
    backend: Literal[tuple(components.BACKENDS)] = Field(
        next(iter(components.BACKENDS)),
        description="Rollout backend: " + "; ".join(f"{c.name}: {c.summary}"
                                                              for c
                                                    in components.BACKENDS.values()) + ".")
    group_size: int = Field(8, ge=1, description="G: responses sampled per prompt (GRPO group).")
    temperature: float = Field(1.0, gt=0,
                               description="Sampling temperature (also applied to trainer "
                                           "log-probs).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    max_new_tokens: int = Field(96, ge=1, description="Longest response in tokens.")
    max_num_seqs: int = Field(16, ge=1,
                              description="Sequences in flight per rollout worker (continuous "
                                          "batching).")
    response_length: Literal["eos", "fixed", "lognormal"] = Field(
        "eos",
        description="eos: a response ends at EOS or max_new_tokens; fixed / lognormal: its length "
                    "is "
        "drawn per sample (seeded like its tokens, clipped to [1, max_new_tokens]) and EOS is "
        "ignored, for throughput runs of randomly initialised models (no EOS) with a realistic "
        "long tail.")
    response_length_mean: float = Field(
        64.0, gt=0, description="fixed: the length of every response; lognormal: the mean length.")
    response_length_sigma: float = Field(
        1.0, ge=0,
        description="lognormal: sigma of log(length) (0 = every length the mean; 1 = long tail).")


class _TrainSection(Section):
    prompts_per_iteration: int = Field(8, ge=1,
                                       description="Prompts per iteration; the batch is this x "
                                                   "group_size.")
    micro_batch_size: int = Field(4, ge=1,
                                  description="Sequences per forward/backward; must divide "
                                              "group_size.")
    micro_batch_tokens: int | None = Field(
        None, ge=1,
        description="Micro-batches by token budget instead of micro_batch_size: the responses of "
        "the groups at hand (sync: the whole batch; periodic-async: the groups that have arrived) "
        "packed, in order and across groups, into streams of at most this many tokens, sequences "
        "concatenated without padding (position ids restarting per sequence, attention kept within "
        "each; a shared-prompt group's prompt once per stream), as VERL's use_remove_padding + "
        "use_dynamic_bsz (ppo_max_token_len_per_gpu). The loss is the same token sum; must be at "
        "least the longest prompt + rollout.max_new_tokens. null: micro_batch_size responses of "
        "one group per micro-batch, padded.")
    ppo_mini_batches: int = Field(1, ge=1,
                                  description="Optimizer steps per iteration (periodic-async needs "
                                              "1).")
    lr: float = Field(2e-4, gt=0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    clip_ratio: float = Field(0.2, gt=0, description="PPO clip epsilon.")
    clip_ratio_c: float | None = Field(
        3.0, gt=1,
        description="Dual-clip bound for negative advantages (VERL's clip_ratio_c): the per-token "
        "loss of a token with A < 0 is at most -A * clip_ratio_c; null: plain PPO-clip. Sync and "
        "periodic-async use it; bounded_async's decoupled loss has none (AReaL's default).")
    kl_coef: float = Field(0.001, ge=0,
                           description="KL-to-reference coefficient (low_var_kl, VERL's k3).")
    kl_type: Literal["low_var_kl", "kl", "mse"] = Field("low_var_kl", description="KL estimator.")
    adv_eps: float = Field(1e-6, gt=0, description="Epsilon in the group std normalisation.")
    behav_imp_weight_cap: float | None = Field(
        5.0, gt=1,
        description="bounded_async: tokens whose behaviour importance weight pi_prox / pi_behav "
        "exceeds this are masked out of the loss (AReaL's behav_imp_weight_cap); null: no cap.")


class _EngineSection(Section):
    schedule: Literal[tuple(schedules.SCHEDULES)] = Field(
        schedules.name_of(REFERENCE), description="; ".join(f"{c.name}: {c.summary}"
                                                            for c in schedules.SCHEDULES.values())
                                      + ".")
    device: Literal["cpu", "cuda", "npu", "auto"] = Field("cpu", description="Accelerator type.")
    rollout_devices: int = Field(1, ge=1,
                                 description="Devices (CPU: cores) of the rollout pool: one "
                                             "rollout "
                                 "worker process per device. sync uses rollout_devices + "
                                 "train_devices colocated workers, so both schedules occupy the "
                                 "same devices.")
    train_devices: int = Field(1, ge=1,
                               description="Devices (CPU: cores) of the training pool: one "
                               "data-parallel trainer rank per device.")
    share_devices: bool = Field(
        False, description="The rollout and training pools share devices 0..max(rollout_devices, "
        "train_devices)-1 instead of taking disjoint ones (needed on a single GPU); the run then "
        "occupies max(rollout_devices, train_devices) physical devices, and TPSPD divides by that.")
    tri_model: bool = Field(False,
                            description="Policy/old/ref log-probs in one module and one pass.")
    shared_prompt: bool | Literal["auto"] = Field(
        False,
        description="Pack prompt|resp_1..resp_G into one sequence for training (true), never "
        "(false), or per group where the cost model predicts the packed pass cheaper on this "
        "device (auto: the layouts' matmul and attention FLOPs, memory traffic and operators "
        "against the device's measured peaks and per-op launch cost; core/costmodel/packing.py), "
        "the choice and its reason recorded per iteration "
        "(docs/architecture/schedules.md, 'Shared-prompt attention').")
    shared_prompt_impl: Literal[tuple(components.PACKING_IMPLS)] = Field(
        "dense",
        description="How a packed group is computed (engines/trainer/packing*.py). dense: the "
                    "prompt "
        "once, the G responses a batch attending [prompt K/V; own K/V] under a lower-right causal "
        "bias, dense SDPA kernels only; gather: the same attention on the unpadded stream, "
        "responses gathered into a padded batch and back (an explicit [R, P+R] mask); mask4d: the "
        "HF forward with an [L, L] mask; flex: FlexAttention with a block mask (CUDA only: it has "
        "no backward elsewhere).")
    compile: Literal["off", "decode", "train", "all"] | None = Field(
        None,
        description="torch.compile (inductor) of the built-in engine's hot code: decode: the "
                    "sampler's "
        "prefill and decode step (each layer's code around its attention: norms, RoPE, residual "
        "adds, MLP; captured in the CUDA graphs as before); train: the trainer's "
        "policy and reference models (each decoder layer, forward and backward of the log-prob and "
        "update passes); all: both (vLLM "
        "compiles its own decode whatever this says); "
        "off: eager. Shapes are dynamic, so a run compiles a bounded number of times; "
        "compilations, recompilations and their seconds are recorded (results.json lifecycle "
        "`compile`, the start-up phase `compile`). null: all on CUDA, off elsewhere. Needs Triton "
        "on CUDA, a C++ compiler on the CPU.")
    queue_timeout_s: float = Field(
        300.0, gt=0,
        description="Longest a worker process (or Ray actor) may take to start, and the longest "
                    "the "
        "async trainer waits for the next rollout group, before the run fails.")
    hang_timeout_s: float | None = Field(
        None, gt=0,
        description="Hang watchdog: a worker that is asked to do something and shows no progress "
        "(no stage starting or ending, no finished group, no decode step or micro-batch) for this "
        "many seconds ends the run (exit 3) with a message naming the worker and its stage; "
        "measured iterations are kept. null: 10x the longest stage measured so far, at least "
        "hang_floor_s.")
    hang_floor_s: float = Field(
        120.0, gt=0,
        description="Hang watchdog: the shortest automatic limit (used until stages have been "
        "measured, and while they are short); see hang_timeout_s.")
    launcher: Literal["local", "ray"] = Field(
        "local",
        description="How the workers are hosted. local: every worker (colocated worker, rollout "
                    "worker, "
        "trainer rank) is a local process pinned to its device; ray: the same workers are Ray "
        "actors holding their devices as Ray resources (needs `pip install 'rlbench[ray]'`).")
    ray_address: str | None = Field(
        None,
        description="launcher=ray: address of a running Ray cluster to attach to (e.g. 'auto', "
        "'ray://head:10001'); unset: start a local Ray instance for the run and stop it "
        "afterwards.")
    placement: dict[str, str | list[str]] = Field(
        {}, description="launcher=ray: the nodes the workers run on, by role (colocated, rollout, "
                        "trainer): "
        "{rollout: n1, trainer: n2} puts every rollout worker on a node holding the Ray resource "
        "n1 and every trainer rank on one holding n2; a list names one per worker ({colocated: "
        "[n1, n2]}). A name is a resource a node holds: a custom one (`ray start "
        "--resources='{\"n1\": 1}'`) or Ray's own node:<ip>. Checked against the cluster before "
        "any work (exit 2 naming what is missing); results.json records each worker's node. Empty: "
        "Ray places them (docs/platforms/ray.md).")
    verl_python: str | None = Field(
        None,
        description="--engine verl: the Python of the venv VERL is installed in (VERL pins an "
                    "older "
        "transformers, so it lives in a venv of its own); unset: the checkout's .venv-verl (`bash "
        "scripts/setup.sh --verl`), else this Python when VERL is installed in it.")

    @field_validator("shared_prompt", mode="before")
    @classmethod
    def _on_off_auto(cls, value):
        """true / false / auto (YAML's on/off and yes/no read as booleans already); anything else is
        refused with the choices, not with pydantic's two errors of a union."""
        if isinstance(value, bool) or value == "auto":
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "auto"):
            return {"true": True, "false": False, "auto": "auto"}[value.lower()]
        raise ValueError(f"allowed: true, false, auto; got {value!r}")

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_off(cls, value):
        """YAML reads `off` (and `no`, `false`) as false, and `on` / `true` as true: off and all."""
        return {False: "off", True: "all"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _check(self) -> "_EngineSection":
        if self.ray_address and self.launcher != "ray":
            raise ValueError("engine.ray_address is only used with engine.launcher=ray")
        if self.placement and not (self.launcher == "ray" and self.ray_address):
            raise ValueError("engine.placement needs engine.launcher=ray and engine.ray_address: a "
                             "running cluster whose nodes hold the resources it names")
        problem = cluster.placement_problem(self.placement,
                                            {"rollout": self.rollout_devices, "trainer":
                                                             self.train_devices,
                                             "colocated": self.num_devices})
        if problem:
            raise ValueError(problem)
        if self.shared_prompt is not False and self.device != "auto":  # auto: checked once resolved
            problem = components.packing_impl_problem(self.shared_prompt_impl, self.device)
            if problem:
                raise ValueError(problem)
        return self

    @property
    def num_devices(self) -> int:
        """Physical devices the run occupies; TPSPD divides by this for every schedule."""
        return max(self.rollout_devices, self.train_devices) if self.share_devices \
            else self.rollout_devices + self.train_devices


def _with_options(name: str, base: type, fields: dict) -> type:
    """The config section `name`: its own fields (base) and the options of the components read under
    it, declared by the components themselves (a schedule's in engines/schedules/<name>/, a rollout
    backend's in core/components.py): each default and help text is written once, there."""
    return create_model(name, __base__=base, __module__=__name__, **fields)


RolloutConfig = _with_options("RolloutConfig", _RolloutSection,
                              components.option_fields(components.BACKENDS.values(), "rollout"))
TrainConfig = _with_options("TrainConfig", _TrainSection, schedules.option_fields("train"))
EngineConfig = _with_options("EngineConfig", _EngineSection, schedules.option_fields("engine"))

LOGGERS = ("tensorboard", "wandb")  # run.logger's values; bench/run/curves.py writes them


def parse_loggers(value) -> list[str]:
    """'tensorboard,wandb', ['tensorboard', 'wandb'], '' or None -> the loggers in order, each once;
    ValueError naming the allowed values for anything else."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) for x in items):
        raise ValueError(f"expected a list of logger names or one comma-separated string, got "
                         f"{value!r}")
    names = [x.strip().lower() for x in items if x.strip()]
    bad = [x for x in names if x not in LOGGERS]
    if bad:
        raise ValueError(f"{', '.join(map(repr, bad))}: allowed: {', '.join(LOGGERS)} (or both: "
                         f"tensorboard,wandb)")
    return list(dict.fromkeys(names))


class RunSection(Section):
    seed: int = Field(0, description="Seed for data, sampling and initialisation.")
    iterations: int = Field(30, ge=1, description="Training iterations.")
    warmup_iterations: int = Field(3, ge=0, description="Iterations excluded from aggregates.")
    eval_every: int = Field(10, ge=0,
                            description="Evaluate every N iterations (0: only before and after).")
    eval_token_budget: int | None = Field(
        None, ge=1,
        description="The most tokens one evaluation generates (its problems x "
                    "rollout.max_new_tokens). "
        "Where more are asked, every evaluation's responses stop at budget // problems tokens (at "
        "least 1), so that a large model's evaluation is not most of its cell; an answer cut short "
        "is scored as it stands, so set it for a shape-only model (random weights: its accuracy "
        "means nothing) or a first look. None (the default): no bound.")
    name: str = Field("run", description="Name used in the run folder.")
    workload: str | None = Field(None,
                                 description="Set by `--ablation regime`: the workload this cell "
                                             "runs "
                                 "(its overrides are already applied); reports group cells by it.")
    profile: bool = Field(False,
                          description="Record torch.profiler traces per worker into <cell>/traces.")
    profile_iterations: int = Field(2, ge=1,
                                    description="Iterations traced (after the warm-up ones).")
    interleave: bool = Field(True,
                             description="Ablations: run the cells side by side, taking turns by "
                             "iteration (cell 1 iteration k, cell 2 iteration k, ...), so a shared "
                             "machine's drift hits every cell alike and `rlbench check` can pair "
                             "their iterations. A schedule whose rollout runs ahead holds its "
                             "rollout workers during the other cells' turns (docs/metrics.md). "
                             "false: the cells run one after another, each alone (for a device "
                             "that cannot hold every cell's state at once); their ratios are then "
                             "exposed to the machine's drift between cells, and the verdict says "
                             "so.")
    interleave_pairs: bool = Field(
        False,
        description="Ablations: run.interleave, in pairs: the first (reference) cell takes turns "
                    "with one "
        "other cell at a time instead of all cells at once, and runs once beside each other cell "
        "(named <reference>@<other>); the pairs run one after another. Every ratio to the "
        "reference still comes from one machine state, with two cells' processes alive at once "
        "(for models whose cells would not fit in memory together).")
    turn_group: str | None = Field(None,
                                   description="Set by run.interleave_pairs: the cells of one turn "
                                               "group "
                                   "take turns together, the groups one after another; reports "
                                   "compare a cell with the reference of its group.")
    logger: list[str] = Field(
        [], description="Per-iteration curves besides the result files (`rlbench run --logger`): "
                        "tensorboard "
        "(<run folder>/tensorboard/<cell>), wandb (Weights & Biases in offline mode, <run "
        "folder>/wandb/<cell>), or both, as a list or one comma-separated string; VERL's metric "
        "names where VERL has one (docs/metrics.md). They do not change what is measured.")

    @field_validator("logger", mode="before")
    @classmethod
    def _loggers(cls, value):
        return parse_loggers(value)


class RunConfig(Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    run: RunSection = Field(default_factory=RunSection)

    @model_validator(mode="after")
    def _check(self) -> "RunConfig":
        g, mbs = self.rollout.group_size, self.train.micro_batch_size
        if g % mbs:
            raise ValueError(
                f"train.micro_batch_size={mbs} must divide rollout.group_size={g}: micro-batches "
                "never straddle groups, so both schedules split the batch the same way")
        for problem in (schedules.of(self).problems(self) + schedules.foreign_options(self)
                        + components.BACKENDS[self.rollout.backend].problems(self)):
            raise ValueError(problem)
        if self.run.warmup_iterations >= self.run.iterations:
            raise ValueError("run.warmup_iterations must be smaller than run.iterations")
        return self

    @property
    def batch_size(self) -> int:
        """Sequences per iteration: prompts x G."""
        return self.train.prompts_per_iteration * self.rollout.group_size

    def switches(self) -> dict:
        """What an ablation varies, as results.json records it (core/schedules/)."""
        return schedules.switches(self)


def documented_keys() -> list[str]:
    """`section.key = default  # description` for every key (`rlbench config --docs`)."""
    return [f"{sec_name}.{key} = {f.default!r}  # {f.description}"
            for sec_name, sec in RunConfig.model_fields.items()
            for key, f in sec.annotation.model_fields.items()]
