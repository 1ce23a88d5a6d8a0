"""Moved to :mod:`zerounlearn_editor.support.model_access` (the ground floor, it imports nothing of the
package); this module only re-exports it for code written against the old path."""
from zerounlearn_editor.support.model_access import *  # noqa: F401,F403
