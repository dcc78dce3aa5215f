"""What the simulator needs to know: per-device costs (Calibration) and the work (Workload).

Units: seconds, tokens, devices. A *rollout instance* is one inference engine (one sampler process
on CPU, one vLLM engine of `tp` devices on accelerators) running continuous batching over
`max_num_seqs` slots. The cost model, with B = sequences in flight on the instance:

    decode step (one token for each of the B sequences) = (decode_a_s + decode_b_s * B)
                                                           * (instance_devices / d) ** rollout_exponent
    training of T tokens on M devices  = train_s_per_token * T * s(M)
    optimizer step on M devices        = optimizer_step_s * s(M)
    s(M) = (R / M) ** dp_exponent      with replicas and M >= R (data parallelism across units)
         = (R / M) ** train_exponent   otherwise (one process / unit spanning the pool)
    weight sync                        = weight_sync_s (constant), plus overhead_s per iteration

where d is the devices of the simulated instance and R = train_ref_devices. Prefill is folded into
the step cost (the fit is made on rollout time including prefill). Exponent 1 = linear scaling,
0 = no speed-up from more devices; dp_exponent < 1 is data-parallel efficiency, (M / R) ** (e - 1)
of linear (0.95: 90 % at 8 R). *Replicas*: at scale a pool is made of copies of the calibrated
unit (rollout instances of `tp` devices, throughput proportional to their count; data-parallel
training); without (tp = None, how the CPU engine runs) a pool is one process using all its devices.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlbench.errors import UserError

Group = tuple[int, tuple[int, ...]]  # (prompt_len, response lengths of its G samples)


@dataclass
class Calibration:
    source: str  # run folder or preset name
    device: str  # what the costs were measured on (or assumed for)
    max_num_seqs: int  # slots per rollout instance
    instance_devices: int  # devices of the rollout instance the decode costs were measured on
    decode_a_s: float  # s per decode step, fixed part
    decode_b_s: float  # s per decode step per sequence in flight
    train_ref_devices: int  # devices the training costs were measured on
    train_s_per_token: float  # s per (prompt + response) token of all training phases, on train_ref_devices
    optimizer_step_s: float  # s per optimizer step on train_ref_devices
    weight_sync_s: float  # s per weight sync (trainer -> rollout)
    overhead_s: float = 0.0  # s per iteration not covered by any stage
    rollout_exponent: float = 1.0  # one instance on more/fewer devices (threads, tensor parallel)
    train_exponent: float = 1.0  # one training process on more/fewer devices than measured
    dp_exponent: float = 0.95  # data parallelism over replicas of the measured training unit
    tp: int | None = None  # devices per rollout instance at scale; None: one instance per pool
    notes: list[str] = field(default_factory=list)

    def step_s(self, active: int, devices: int) -> float:
        """Seconds of one decode step with `active` sequences on an instance of `devices` devices."""
        scale = (self.instance_devices / devices) ** self.rollout_exponent
        return (self.decode_a_s + self.decode_b_s * active) * scale

    def train_scale(self, devices: int, replicas: bool = True) -> float:
        """Training-time multiplier on `devices` devices relative to train_ref_devices (docstring)."""
        ratio = self.train_ref_devices / devices
        if replicas and devices >= self.train_ref_devices:
            return ratio ** self.dp_exponent
        return ratio ** self.train_exponent

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class Workload:
    """The batches to simulate: batches[i] = the groups of iteration i, in dispatch order."""

    batches: list[list[Group]]
    description: str = ""

    @property
    def group_size(self) -> int:
        return len(self.batches[0][0][1])

    @property
    def prompts(self) -> int:
        return len(self.batches[0])

    def tokens(self, i: int) -> int:
        """Prompt + response tokens of batch i (a prompt counts once per sample, as TPSPD counts)."""
        return sum(p * len(r) + sum(r) for p, r in self.batches[i])

    def resample(self, prompts: int, batches: int, seed: int = 0) -> "Workload":
        """Batches of `prompts` groups drawn (with replacement) from every group seen here."""
        pool = [g for b in self.batches for g in b]
        rng = random.Random(seed)
        return Workload([[rng.choice(pool) for _ in range(prompts)] for _ in range(batches)],
                        f"{self.description}, resampled to {prompts} prompts")

    def summary(self) -> dict:
        resp = [x for b in self.batches for _, r in b for x in r]
        prm = [p for b in self.batches for p, _ in b]
        resp_sorted = sorted(resp)
        return {"batches": len(self.batches), "prompts": self.prompts, "group_size": self.group_size,
                "prompt_len_mean": sum(prm) / len(prm), "response_len_mean": sum(resp) / len(resp),
                "response_len_p50": resp_sorted[len(resp) // 2],
                "response_len_p99": resp_sorted[min(len(resp) - 1, int(0.99 * len(resp)))],
                "response_len_max": resp_sorted[-1], "description": self.description}

    def to_dict(self) -> dict:
        return {"description": self.description,
                "batches": [[[p, list(r)] for p, r in b] for b in self.batches]}

    @classmethod
    def from_dict(cls, d: dict) -> "Workload":
        return cls([[(int(p), tuple(int(x) for x in r)) for p, r in b] for b in d["batches"]],
                   d.get("description", ""))

    @classmethod
    def from_samples(cls, samples: list[dict], iterations: list[int] | None = None) -> "Workload":
        """samples.jsonl rows -> one batch per iteration (groups in prompt order)."""
        by_iter: dict[int, dict[int, list[dict]]] = {}
        for s in samples:
            by_iter.setdefault(int(s["iteration"]), {}).setdefault(int(s["prompt"]), []).append(s)
        keep = [k for k in sorted(by_iter) if iterations is None or k in iterations] or sorted(by_iter)
        batches = []
        for k in keep:
            groups = by_iter[k]
            batches.append([(int(rows[0]["prompt_len"]),
                             tuple(max(1, int(r["response_len"])) for r in sorted(rows, key=lambda r: r["sample"])))
                            for _, rows in sorted(groups.items())])
        if not batches:
            raise UserError("no samples to build a workload from (samples.jsonl is empty or missing)")
        return cls(batches, f"measured lengths of iterations {keep}")

    @classmethod
    def lognormal(cls, prompts: int, group_size: int, response_mean: float, sigma: float,
                  max_response: int, prompt_mean: float, prompt_sd: float, batches: int = 3,
                  seed: int = 0) -> "Workload":
        """Synthetic batches: prompt ~ Normal(prompt_mean, prompt_sd) (>= 16 tokens); responses
        ~ LogNormal with the given mean and shape sigma, cut at max_response (unfinished answers)."""
        rng = random.Random(seed)
        mu = math.log(response_mean) - sigma ** 2 / 2  # so that the uncut mean is response_mean
        out = []
        for _ in range(batches):
            out.append([(max(16, round(rng.gauss(prompt_mean, prompt_sd))),
                         tuple(min(max_response, max(1, round(rng.lognormvariate(mu, sigma))))
                               for _ in range(group_size)))
                        for _ in range(prompts)])
        return cls(out, f"lognormal responses (mean {response_mean}, sigma {sigma}, cut at "
                        f"{max_response}), prompts ~ N({prompt_mean}, {prompt_sd})")


def save_calibration(path: Path, cal: Calibration, workload: Workload) -> Path:
    from rlbench.schema import atomic_write_json

    atomic_write_json(Path(path), {"kind": "simulate_calibration", "calibration": cal.to_dict(),
                                   "workload": workload.to_dict(), "workload_summary": workload.summary()})
    return Path(path)


def load_calibration(path: Path) -> tuple[Calibration, Workload]:
    path = Path(path)
    try:
        d = json.loads(path.read_text())
        return Calibration.from_dict(d["calibration"]), Workload.from_dict(d["workload"])
    except FileNotFoundError:
        raise UserError(f"{path}: calibration file not found") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise UserError(f"{path}: not a simulate calibration file ({e})") from None
