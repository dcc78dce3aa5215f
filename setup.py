"""The package list, found rather than written by hand: every folder with an __init__.py under the source
folders, named under `rlbench` by one rule: rlbench.X is the top-level folder X/ where there is one (core/,
engines/, analysis/, reports/, and the shipped configs as rlbench.configs), else bench/X. Metadata, the
mapping's roots and the package data are in pyproject.toml."""
from setuptools import find_packages, setup

ROOTS = {"rlbench": "bench", "rlbench.core": "core", "rlbench.engines": "engines",
         "rlbench.analysis": "analysis", "rlbench.reports": "reports", "rlbench.configs": "configs"}

packages = [pkg for name, folder in ROOTS.items()
            for pkg in [name, *(f"{name}.{sub}" for sub in find_packages(folder))]]
setup(packages=packages, package_dir=ROOTS)
