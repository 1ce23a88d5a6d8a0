"""Renamed to :mod:`zerounlearn_editor.data.datasets`; this name is the same module object, for code
written against the old path."""
import sys

from zerounlearn_editor.data import datasets as _renamed

sys.modules[__name__] = _renamed
