"""The wheel carries the migrations and the default configuration inside the package.

`migrations/` and `config/` stay at the top of the repository, where Alembic and operators expect
them; the build copies them to `gateway/_data/`, where `gateway migrate` (gateway.db.migrate) and
the default `GATEWAY_CONFIG` (gateway.settings) find them when the gateway runs outside a checkout.
Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads both from the checkout itself
            return
        data = Path(self.build_lib) / "gateway" / "_data"
        skipped = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree("migrations", data / "migrations", ignore=skipped, dirs_exist_ok=True)
        shutil.copy2("config/gateway.yaml", data / "gateway.yaml")


setup(cmdclass={"build_py": BuildWithData})
