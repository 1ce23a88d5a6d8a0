"""Renamed to :mod:`zerounlearn_editor.bench.method_specs`; this name is the same module object, for code
written against the old path."""

import sys

from zerounlearn_editor.bench import method_specs as _renamed

sys.modules[__name__] = _renamed
