"""The roofline numbers a plan may use where a log is silent: a model's weight and KV-cache bytes
from its Hugging Face config.json (`--model`), a device's memory and link bandwidths from its
datasheet (`--device`), or the host-copy bandwidth `rlbench env` measured on this machine (its peak
cache, core/devices/peak.py).

Datasheet figures (dense bf16, per GPU; SXM parts): what the vendor publishes, not measured here.
Link: one direction of the GPU-to-GPU link (NVLink, HCCS); host: one direction of the host link
(PCIe).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rlbench.core.devices.peak import cache_path
from rlbench.core.errors import UserError

BYTES_PER_PARAM = 2  # bf16 weights and KV cache


@dataclass(frozen=True)
class Device:
    name: str
    hbm_bytes_per_s: float
    link_bytes_per_s: float
    host_bytes_per_s: float


DEVICES = {d.name.lower(): d for d in (  # vendor datasheets
    Device("A100", 2.039e12, 300e9, 32e9), Device("H100", 3.35e12, 450e9, 64e9),
    Device("H200", 4.8e12, 450e9, 64e9), Device("H20", 4.0e12, 450e9, 64e9),
    Device("B200", 8.0e12, 900e9, 64e9), Device("L40S", 0.864e12, 32e9, 32e9),
    Device("910B", 1.6e12, 196e9, 64e9))}


def device(name: str) -> Device:
    """A datasheet entry by name (case-insensitive; 'NVIDIA H100 80GB HBM3' finds H100)."""
    key = name.lower()
    for k in sorted(DEVICES, key=len, reverse=True):
        if k in key:
            return DEVICES[k]
    raise UserError(f"--device {name!r}: allowed {', '.join(d.name for d in DEVICES.values())}")


@dataclass(frozen=True)
class ModelShape:
    parameters: float
    layers: int
    kv_heads: int
    head_dim: int

    @property
    def weight_bytes(self) -> float:
        return self.parameters * BYTES_PER_PARAM

    def kv_bytes(self, tokens: float) -> float:
        """KV cache of one sequence of `tokens` tokens: keys and values of every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * BYTES_PER_PARAM * tokens


def model_shape(path: Path) -> ModelShape:
    """A Hugging Face config.json (or a folder holding one) -> parameters and KV shape
    (Llama/Qwen-style decoder: attention q, k, v, o; gated MLP, or num_experts of them with a
    router; embeddings, tied or not)."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    try:
        cfg = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"--model {path}: not a readable config.json ({e})") from None
    need = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "vocab_size")
    for key in need:
        if key not in cfg:
            raise UserError(f"--model {file}: no {key!r} (a Hugging Face config.json needs "
                            f"{', '.join(need)})")
    h, L, heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    kv, hd = cfg.get("num_key_value_heads", heads), cfg.get("head_dim") or h // heads
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    mlp = 3 * h * cfg["intermediate_size"]
    # a mixture of experts (Qwen-MoE style): every expert's weights count
    if cfg.get("num_experts"):
        mlp = 3 * h * cfg["moe_intermediate_size"] * cfg["num_experts"] + h * cfg["num_experts"]
    emb = cfg["vocab_size"] * h * (1 if cfg.get("tie_word_embeddings") else 2)
    return ModelShape(L * (attn + mlp) + emb, L, kv, hd)


def measured_host_copy(name: str | None) -> tuple[float, str] | None:
    """(bytes/s, device) of the host-copy probe `rlbench env` cached on this machine for a device
    whose name holds `name` (any accelerator where name is None); None where it measured none."""
    path = cache_path()
    if not path.is_file():
        return None
    try:
        entries = json.loads(path.read_text()).values()
    except ValueError:
        return None
    for e in entries:
        rate, dev = e.get("host_copy_bytes_per_s"), str(e.get("device", ""))
        if rate and (name is None or name.lower() in dev.lower()):
            return float(rate), dev
    return None
