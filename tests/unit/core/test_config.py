"""Config validation: one clear error naming the key, exit code 2 through the real CLI."""
import pytest

from conftest import TINY
from support.cli import rlbench

from rlbench.core.config_files import CONFIG_DIR, load_config, parse_overrides
from rlbench.core.errors import UserError


def test_every_shipped_config_validates():
    files = sorted(CONFIG_DIR.glob("*.yaml"))
    assert files
    for f in files:
        load_config(f)


def test_every_accelerator_config_states_the_devices_it_occupies():
    """A GPU/NPU config says in a `# devices: N GPU(s)|NPU(s)` line how many devices it needs, and its
    placement occupies exactly that many, for every schedule (gpu-default on one GPU: pools shared)."""
    import re

    from rlbench.core.devices.placement import plan
    from rlbench.run.ablation import cells_for

    files = [f for f in sorted(CONFIG_DIR.glob("*.yaml")) if load_config(f).engine.device in ("cuda", "npu")]
    assert {"gpu-default.yaml", "gpu-2x.yaml"} <= {f.name for f in files}
    for f in files:
        found = re.search(r"^# devices: (\d+) ([GN]PU)s?\b", f.read_text(), re.M)
        assert found, f"{f.name}: no '# devices: N GPU' line"
        n, kind = int(found[1]), {"GPU": "cuda", "NPU": "npu"}[found[2]]
        cfg = load_config(f)
        assert cfg.engine.device == kind, f.name
        for cell, c in cells_for("async", cfg):
            assert plan(c.engine, kind, n).devices == n, (f.name, cell)
        with pytest.raises(UserError):  # and it does not fit on fewer
            plan(cfg.engine, kind, n - 1)


def test_overrides_parse_yaml_scalars():
    assert parse_overrides(["train.lr=1e-3", "engine.tri_model=true", "run.name=x"]) == {
        "train": {"lr": 1e-3}, "engine": {"tri_model": True}, "run": {"name": "x"}}
    cfg = load_config(None, ["train.lr=0.5", "engine.schedule=periodic_async"])
    assert cfg.train.lr == 0.5 and cfg.engine.schedule == "periodic_async"


@pytest.mark.parametrize("yaml_text, key, hint", [
    ("train:\n  learning_rate: 1\n", "train.learning_rate", "unknown key"),
    ("rollout:\n  group_size: many\n", "rollout.group_size", "integer"),
    ("engine:\n  schedule: fast\n", "engine.schedule", "'sync', 'periodic_async', 'bounded_async' or 'one_step_off'"),
    ("rollout:\n  group_size: 4\ntrain:\n  micro_batch_size: 3\n", "micro_batch_size", "must divide"),
    ("engine:\n  schedule: periodic_async\ntrain:\n  ppo_mini_batches: 2\n", "ppo_mini_batches", "on-policy"),
    ("engine:\n  train_ranks: 2\n", "engine.train_ranks", "one data-parallel trainer rank per training device"),
    ("engine:\n  backend: ray\n", "engine.backend", "renamed to engine.launcher"),
    ("engine:\n  shared_prompt_impl: fused\n", "engine.shared_prompt_impl",
     "'dense', 'gather', 'mask4d' or 'flex'"),
    ("engine:\n  shared_prompt: sometimes\n", "engine.shared_prompt", "allowed: true, false, auto"),
    # FlexAttention has no backward on CPU: refused before any work, with the choices that train there
    ("engine:\n  shared_prompt: auto\n  shared_prompt_impl: flex\n", "engine.shared_prompt_impl=flex",
     "no backward on cpu; choices on cpu: dense, gather, mask4d"),
])
def test_bad_config_names_key(tmp_path, yaml_text, key, hint):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml_text)
    with pytest.raises(UserError) as e:
        load_config(f)
    assert key in str(e.value) and hint in str(e.value) and str(f) in str(e.value)


def test_renamed_key_is_one_clear_error_exit_2(tmp_path):
    """engine.backend (how workers are hosted) is engine.launcher now; "backend" is the rollout's."""
    out = rlbench("run", "--set", "engine.backend=ray", "--out", tmp_path, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "engine.backend: renamed to engine.launcher (same values)" in out.stderr
    assert load_config(None, ["engine.launcher=ray"]).engine.launcher == "ray"


def test_shared_prompt_takes_true_false_auto():
    assert load_config(None, ["engine.shared_prompt=auto"]).engine.shared_prompt == "auto"
    assert load_config(None, ["engine.shared_prompt=true"]).engine.shared_prompt is True
    assert load_config(None, ["engine.shared_prompt=off"]).engine.shared_prompt is False  # YAML's off
    flex_unused = load_config(None, ["engine.shared_prompt=false", "engine.shared_prompt_impl=flex"])
    assert flex_unused.engine.shared_prompt_impl == "flex"  # nothing packs: nothing to refuse


def test_flex_on_cpu_exit_2_through_cli(tmp_path):
    out = rlbench("run", "--set", "engine.shared_prompt=true", "--set", "engine.shared_prompt_impl=flex",
                  "--out", tmp_path, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "engine.shared_prompt_impl=flex" in out.stderr and "choices on cpu: dense, gather, mask4d" in out.stderr
    assert "Traceback" not in out.stderr


def test_bad_config_exit_code_2_through_cli(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("train:\n  learning_rate: 1\n")
    out = rlbench("run", "--config", f, "--out", tmp_path, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "train.learning_rate" in out.stderr and "unknown key" in out.stderr
    assert not any(tmp_path.glob("*/results.json"))


@pytest.mark.e2e
def test_out_that_cannot_be_created_is_exit_2_naming_the_path(tmp_path):
    """--out under a plain file: one error naming the folder and the reason, exit 2, no traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = rlbench("run", "--config", TINY, "--out", blocker / "runs", timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"--out {blocker / 'runs'}: cannot create the run folder" in out.stderr
    assert "Not a directory" in out.stderr and "Traceback" not in out.stderr


def test_out_is_checked_before_any_work_without_making_a_folder(tmp_path):
    """The check `rlbench run` makes before it starts its fork server: a path under a file is refused,
    a new path under a writable folder passes, and the check itself creates nothing."""
    from rlbench.run.around import check_out

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(UserError, match=rf"--out {blocker / 'runs' / 'x'}: cannot create the run folder under "
                                        rf"{blocker}: Not a directory"):
        check_out(blocker / "runs" / "x")
    check_out(tmp_path / "new" / "deeper")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_missing_config_file(tmp_path):
    with pytest.raises(UserError, match=r"nope.yaml: no such file, and no shipped config .*cpu-default"):
        load_config(tmp_path / "nope.yaml")


def test_a_shipped_config_is_found_by_name_and_only_by_a_bare_name(tmp_path):
    assert load_config("cpu-tiny") == load_config(CONFIG_DIR / "cpu-tiny.yaml")
    assert load_config("cpu-tiny.yaml").run.name == "cpu-tiny"
    with pytest.raises(UserError, match="no such file"):  # a path names a file, never a shipped config
        load_config(tmp_path / "cpu-tiny.yaml")


def test_bad_set_syntax():
    with pytest.raises(UserError, match="key=value"):
        parse_overrides(["train.lr"])


def test_ppo_mini_batches_refused_by_builtin_sync_not_ignored(tmp_path):
    """sync used to ignore train.ppo_mini_batches; the built-in engines now refuse it before any cell runs."""
    out = rlbench("run", "--config", TINY, "--ablation", "none", "--set", "train.ppo_mini_batches=2",
                  "--out", tmp_path, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "train.ppo_mini_batches=2" in out.stderr and "allowed: 1" in out.stderr
    assert not any(tmp_path.iterdir())


def _leaves(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        out.update(_leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_shipped_configs_hold_only_keys_that_differ_from_the_defaults():
    """Defaults live in core/config.py alone: a YAML value equal to the default is a second copy that
    silently stops meaning anything when the default changes (write it as a comment instead)."""
    import yaml

    from rlbench.core.config import RunConfig

    defaults = _leaves(RunConfig().model_dump(mode="json"))
    for f in sorted(CONFIG_DIR.glob("*.yaml")):
        raw = _leaves(yaml.safe_load(f.read_text()) or {})
        same = [k for k, v in raw.items() if k in defaults and defaults[k] == (list(v) if isinstance(v, tuple) else v)]
        assert not same, f"{f.name}: {same} equal the defaults"
