"""scripts/uv_install.sh, which scripts/setup.sh and setup_vllm.sh install with: uv is handed the settings of
pip's configuration that decide what is installed (indexes, wheel folders, constraint files), as
`pip config list` prints them. Run against a stand-in venv whose python prints a configuration and whose uv
records its arguments."""
import os
import subprocess
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
        printf '#!/bin/sh\\n[ "$1" = --version ] && echo "uv {uv_version}" && exit 0\\n' > {venv}/bin/uv
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
