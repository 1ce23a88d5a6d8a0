"""Build hook: wheels carry a copy of ``hparams/`` as ``zerounlearn_editor/_hparams``.

The YAMLs live at the repository root (``hparams/<Method>/<model>.yaml``); an editable install
reads them there, a wheel or ``pip install .`` gets this copy so that ``zerounlearn demo`` and
``resources.hparams_path`` work without the checkout. Everything else is in ``setup.cfg``.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithHparams(build_py):
    """``build_py`` plus ``hparams/**/*.yaml`` -> ``<build_lib>/zerounlearn_editor/_hparams/``."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's hparams/
        source = ROOT / "hparams"
        target = Path(self.build_lib) / "zerounlearn_editor" / "_hparams"
        for path in sorted(source.rglob("*.yaml")):
            dest = target / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)


setup(cmdclass={"build_py": BuildPyWithHparams})
