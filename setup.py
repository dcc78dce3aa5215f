"""The package list, found rather than written by hand: every folder with an __init__.py under the three
source folders, named under `rlbench` as the package-dir mapping names them (bench/ is rlbench, engines/
rlbench.engines, reports/ rlbench.reports), plus the shipped configs as rlbench.configs. Metadata, the
mapping's roots and the package data are in pyproject.toml."""
from setuptools import find_packages, setup

ROOTS = {"rlbench": "bench", "rlbench.engines": "engines", "rlbench.reports": "reports",
         "rlbench.configs": "configs"}

packages = [pkg for name, folder in ROOTS.items()
            for pkg in [name, *(f"{name}.{sub}" for sub in find_packages(folder))]]
setup(packages=packages, package_dir=ROOTS)
