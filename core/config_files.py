"""Config files into the validated RunConfig (core/config.py): the configs that ship with rlbench, a
YAML file with `--set key=value` overrides laid over it, and the config a results.json recorded;
whatever does not validate exits 2 with one line per bad key (UserError).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import rlbench.configs
import yaml
from pydantic import ValidationError
from rlbench.core.config import RunConfig
from rlbench.core.errors import UserError
from rlbench.core.results.schema import RESULTS

# configs/ in a checkout, package data installed
CONFIG_DIR = Path(rlbench.configs.__file__).resolve().parent
DEFAULT_CONFIG = CONFIG_DIR / "cpu-default.yaml"


def shipped_configs() -> dict[str, str]:
    """name -> the first sentence of the opening comment of every config that ships with rlbench, at
    most 70 characters (`rlbench config --list`)."""
    out = {}
    for f in sorted(CONFIG_DIR.glob("*.yaml")):
        lines = f.read_text().splitlines()
        head = " ".join(line.lstrip("# ").strip() for line in lines[:next(
            (i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))])
        first = re.sub(r"\s*\([^()]*\)", "", head).split(". ")[0].split(": ")[0].rstrip(".")
        out[f.stem] = first if len(first) <= 70 else first[:69].rstrip() + "…"
    return out


def config_path(spec: str | Path) -> Path:
    """--config: a YAML file as given, else the name of a shipped config (cpu-default, or
    cpu-default.yaml); neither -> exit 2 naming both and the shipped names."""
    path = Path(spec)
    if path.is_file():
        return path
    named = CONFIG_DIR / (path.name if path.suffix in (".yaml", ".yml") else f"{path.name}.yaml")
    if path.parent == Path(".") and named.is_file():
        return named
    raise UserError(f"--config {spec}: no such file, and no shipped config of that name (shipped: "
                    f"{', '.join(shipped_configs())}; `rlbench config --list` describes them)")


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise UserError(f"--set {dotted}: '{k}' is not a section")
    node[keys[-1]] = value


def parse_overrides(pairs: list[str]) -> dict:
    """['a.b=3', 'c.d=true'] -> nested dict; values parsed as YAML scalars."""
    tree: dict = {}
    for pair in pairs:
        if "=" not in pair:
            raise UserError(f"--set expects key=value, got '{pair}'")
        key, raw = pair.split("=", 1)
        _set_dotted(tree, key.strip(), _scalar(raw))
    return tree


def _scalar(raw: str) -> Any:
    value = yaml.safe_load(raw) if raw else ""
    if isinstance(value, str):  # YAML 1.1 reads '1e-3' as a string
        try:
            return float(value)
        except ValueError:
            pass
    return value


def merge_trees(base: dict, over: dict) -> dict:
    """base with over laid on it, section by section (nested dicts merge, other values replace)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge_trees(out[k], v) if isinstance(v, dict) and isinstance(out.get(k),
                                                                              dict) else v
    return out


# Keys renamed since (old -> new). A config that still uses the old name is refused with the new
# one; result files and baselines written before keep the old name, which `rlbench check` and
# recorded_config read as the new.
RENAMED_KEYS = {"engine.backend": "engine.launcher"}  # "backend" is the rollout's (rollout.backend)
# Keys that existed once: say what replaced them instead of only "unknown key".
REMOVED_KEYS = {
    "engine.train_ranks": "removed: there is one data-parallel trainer rank per training device "
                          "now (engine.train_devices; under sync, one colocated worker per device)",
    **{old: f"renamed to {new} (same values)" for old, new in RENAMED_KEYS.items()},
}


def _format_error(err: ValidationError, source: str, prefix: str = "") -> str:
    lines = [f"invalid configuration ({source}):"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = REMOVED_KEYS.get(key, "unknown key")
        elif e["type"] == "literal_error":
            msg = f"{msg}, got {e.get('input')!r}"
        lines.append(f"  {prefix + key if key else prefix.rstrip('.') or '(top level)'}: {msg}")
    return "\n".join(lines)


def read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level must be a mapping of sections")
    return data


def build_config(tree: dict, source: str = "config", prefix: str = "") -> RunConfig:
    """tree -> RunConfig; exit 2 naming source and every bad key (under prefix, e.g. 'config.')."""
    try:
        return RunConfig.model_validate(tree)
    except ValidationError as e:
        raise UserError(_format_error(e, source, prefix)) from None


def recorded_config(result: dict) -> RunConfig:
    """A cell's results.json `config` (the resolved config, model_dump'ed) as the RunConfig it was,
    a key renamed since read under its name now; exit 2 naming the file and the key where it does
    not validate (a hand-edited or foreign file, or one written before a key was removed)."""
    where = (Path(result["_dir"]) / RESULTS if result.get("_dir")
             else f"results of cell {result.get('cell')!r}")
    tree = result.get("config")
    if not isinstance(tree, dict):
        raise UserError(f"{where}: no `config` mapping (every results.json records the resolved "
                        f"config)")
    for old, new in RENAMED_KEYS.items():
        (sec, was), (_, now) = old.split("."), new.split(".")
        if was in (tree.get(sec) or {}):
            section = dict(tree[sec])
            section.setdefault(now, section.pop(was))
            tree = {**tree, sec: section}
    return build_config(tree, source=str(where), prefix="config.")


def load_config(path: str | Path | None = None,
                overrides: list[str] | dict | None = None) -> RunConfig:
    """YAML file (default: configs/cpu-default.yaml) + `--set` overrides -> validated RunConfig."""
    path = config_path(path) if path else DEFAULT_CONFIG
    tree = read_yaml(path)
    extra = overrides if isinstance(overrides, dict) else parse_overrides(overrides or [])
    return build_config(merge_trees(tree, extra), source=str(path))


def with_overrides(cfg: RunConfig, over: dict) -> RunConfig:
    """A copy of cfg with nested overrides applied and re-validated."""
    return build_config(merge_trees(cfg.model_dump(mode="json"), over), source="ablation cell")
