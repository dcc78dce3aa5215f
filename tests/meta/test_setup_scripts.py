"""scripts/uv_install.sh, which scripts/setup.sh and setup_vllm.sh install with: uv is handed the settings of
pip's configuration that decide what is installed (indexes, wheel folders, constraint files), as
`pip config list` prints them. Run against a stand-in venv whose python prints a configuration and whose uv
records its arguments."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

CONFIG = """global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='{cap}'
global.extra-index-url='file:///mirror/a file:///mirror/b'
global.find-links='/wheels'
:env:.index-url='https://pypi.example/simple'
:env:.constraint='/no/such/constraints.txt'
"""


def _venv(tmp_path: Path, uv_version: str) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    cap = tmp_path / "cap.txt"
    cap.write_text("torch<=2.14.1\n")
    (tmp_path / "config.txt").write_text(CONFIG.format(cap=cap))
    python = venv / "bin" / "python"
    python.write_text(f"""#!/bin/sh
case "$*" in
    "-m pip config list") cat {tmp_path}/config.txt ;;
    "-m pip install"*) echo "$*" >> {tmp_path}/pip.txt
        printf '#!/bin/sh\\n[ "$1" = --version ] && echo "uv {uv_version} (x86_64-unknown-linux-gnu)" && exit 0\\n' > {venv}/bin/uv
        printf 'echo "$@" > {tmp_path}/uv.txt\\n' >> {venv}/bin/uv; chmod +x {venv}/bin/uv ;;
esac
""")
    python.chmod(0o755)
    return venv


def _install(venv: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return subprocess.run(["bash", "-c", f'source scripts/uv_install.sh && uv_install "{venv}" -e .'], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=30)


def test_uv_gets_the_indexes_wheel_folders_and_existing_constraint_files_of_pips_configuration(tmp_path):
    venv = _venv(tmp_path, "0.13.9")
    proc = _install(venv)
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "uv.txt").read_text().split()
    assert args[:2] == ["pip", "install"] and args[-2:] == ["-e", "."]
    assert args[args.index("--python") + 1] == str(venv / "bin" / "python")
    assert "--compile-bytecode" in args and args[args.index("--index-strategy") + 1] == "unsafe-best-match"
    assert subprocess.run(["bash", "-c", f'source scripts/uv_install.sh && UV_INSTALL_COMPILE=0 uv_install "{venv}" -e .'],
                          cwd=ROOT, capture_output=True, timeout=30).returncode == 0
    assert "--compile-bytecode" not in (tmp_path / "uv.txt").read_text().split()  # setup.sh compiles its own
    pairs = list(zip(args, args[1:]))
    assert ("--find-links", "/wheels") in pairs and ("--index-url", "https://pypi.example/simple") in pairs
    assert ("--extra-index-url", "file:///mirror/a") in pairs and ("--extra-index-url", "file:///mirror/b") in pairs
    assert ("-c", str(tmp_path / "cap.txt")) in pairs and "/no/such/constraints.txt" not in args
    assert "--cert" not in " ".join(args)


def test_uv_is_installed_into_the_venv_only_where_it_is_not_the_pinned_version(tmp_path):
    pinned = next(line.split("=", 1)[1] for line in (ROOT / "scripts" / "uv_install.sh").read_text().splitlines()
                  if line.startswith("UV_VERSION="))
    venv = _venv(tmp_path, pinned)
    assert _install(venv).returncode == 0 and _install(venv).returncode == 0
    installs = (tmp_path / "pip.txt").read_text().splitlines()
    assert installs == [f"-m pip install -q --disable-pip-version-check uv=={pinned}"]  # the first call only



def _compile_imports():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import compile_imports
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return compile_imports


def test_compile_imports_writes_the_bytecode_of_what_a_group_imports_and_names_a_group_that_fails(tmp_path):
    """scripts/compile_imports.py: a group's modules get their .pyc even where PYTHONDONTWRITEBYTECODE is set
    (as on the project's machines); a module that is missing fails its group, not the others."""
    (tmp_path / "made_here.py").write_text("X = 1\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)}
    failed = _compile_imports().compile_groups({"ours": ("made_here",), "absent": ("no_such_module_here",)},
                                               environ=env)
    assert failed == ["absent"]
    assert [p.name.split(".")[0] for p in (tmp_path / "__pycache__").iterdir()] == ["made_here"]


def test_the_modules_compile_imports_names_exist():
    """A module renamed or moved would silently lose its bytecode: every name is a file of this (the --dev)
    environment, found without importing it."""
    ci = _compile_imports()
    names = [m for group in (ci.RUN, ci.DEV) for mods in group.values() for m in mods]
    missing = [m for m in names if not _module_file(m)]
    assert not missing


def _module_file(name: str) -> bool:
    if name.startswith("rlbench."):  # its packages map to three folders; importing them is cheap
        return importlib.util.find_spec(name) is not None
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)  # a top-level name: its package is not imported
    if spec is None or not rest:
        return spec is not None
    base = Path(next(iter(spec.submodule_search_locations)), *rest)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()
