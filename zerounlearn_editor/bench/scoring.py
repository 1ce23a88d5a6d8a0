"""Renamed to :mod:`zerounlearn_editor.bench.case_scoring`; this name is the same module object, for code
written against the old path."""

import sys

from zerounlearn_editor.bench import case_scoring as _renamed

sys.modules[__name__] = _renamed
