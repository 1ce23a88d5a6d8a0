"""Registration of our methods with EasyEdit (``zjunlp/EasyEdit``, run from its source tree).

Entries added to the dict object ``easyeditor.util.alg_dict.ALG_DICT`` are seen by ``BaseEditor``
(it imports the dict with ``import *``); ``BatchEditor.is_batchable_method`` is wrapped once to
accept our names. ``BaseEditor.__init__`` is wrapped once too: a ``model_name`` its loader does not
dispatch on (:data:`EASYEDIT_LOADABLE`; e.g. ``smollm2``, a local folder) is loaded by
:func:`~zerounlearn_editor.support.model_zoo.load_model_and_tokenizer` and handed over as
``(model, tokenizer)``, and ``editor.model_name`` is set to a name string (EasyEdit's evaluation
calls ``model_name.lower()``). Names EasyEdit loads itself go through its own code unchanged.

Registration happens when ``zerounlearn_editor`` is imported, as long as ``easyeditor`` can be found
then. ``$EASYEDIT_PATH`` is read by this package only: with the tree named only there,
``import zerounlearn_editor`` must come before ``from easyeditor import ...``.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import sys
from typing import Any, Callable, Dict, Optional, Tuple

LOG = logging.getLogger(__name__)

_WRAPPED_FLAG = "_zerounlearn_batchable_names"
_LAST_ERROR: Dict[str, Optional[str]] = {"registration": None}
_INIT_FLAG = "_zerounlearn_wrapped_init"
_ADDED_FLAG = "_zerounlearn_added_names"

EASYEDIT_LOADABLE = ("t5", "gpt", "llama", "baichuan", "chatglm", "internlm", "qwen", "mistral")
"""Substrings of ``model_name`` on which ``BaseEditor.__init__`` dispatches its own loading."""

RIGHT_PADDING_METHODS = ("ROME", "MEMIT", "EMMET", "EAMET", "R-ROME", "AlphaEdit", "CORE", "SPHERE")
"""Methods EasyEdit gives a right-padding tokenizer; the others get left padding."""


def method_functions() -> Dict[str, Callable]:
    """``{alg_name: apply function}`` of the registered editing methods (:mod:`zerounlearn_editor.methods.registry`;
    the baselines GA/NPO are bench rows, not EasyEdit methods)."""
    from zerounlearn_editor.methods.registry import registered_methods

    return {entry.name: entry.apply for entry in registered_methods()}


def _batchable_names() -> frozenset:
    """The registered methods EasyEdit's ``batch_edit`` accepts (read at each call: later registrations count)."""
    from zerounlearn_editor.methods.registry import registered_methods

    return frozenset(entry.name for entry in registered_methods() if entry.easyedit_batchable)


def easyedit_available(path: Optional[str] = None) -> bool:
    """Whether ``easyeditor`` is importable (``path`` or ``$EASYEDIT_PATH`` is added to ``sys.path``)."""
    path = path or os.environ.get("EASYEDIT_PATH")
    if path and os.path.isdir(path) and path not in sys.path:
        sys.path.insert(0, path)
    return importlib.util.find_spec("easyeditor") is not None


def load_for_easyedit(name: str, alg_name: str, fp16: bool = False) -> Tuple[Any, Any]:
    """``(model, tokenizer)`` of ``name`` (zoo alias, local folder, cached hub name) for ``BaseEditor``.

    On the CPU, float16 when ``fp16`` else float32 (as EasyEdit loads), with the padding side
    EasyEdit sets for ``alg_name`` (:data:`RIGHT_PADDING_METHODS`, left otherwise).
    """
    import torch

    from zerounlearn_editor.support.model_zoo import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(name, device="cpu", dtype=torch.float16 if fp16 else torch.float32)
    tok.padding_side = "right" if alg_name in RIGHT_PADDING_METHODS else "left"
    return model, tok


def _wrap_base_editor(editor_cls: type) -> None:
    """Wrap ``BaseEditor.__init__`` once (see module docstring)."""
    if editor_cls.__dict__.get(_INIT_FLAG):
        return
    original = editor_cls.__init__

    @functools.wraps(original)
    def __init__(self, hparams, *args, **kwargs):
        name = getattr(hparams, "model_name", None)
        if isinstance(name, str) and not any(key in name.lower() for key in EASYEDIT_LOADABLE):
            LOG.info("model %r: EasyEdit's loader does not know the name; loaded by zerounlearn_editor", name)
            hparams.model_name = load_for_easyedit(
                name, str(getattr(hparams, "alg_name", "")), bool(getattr(hparams, "fp16", False))
            )
            try:
                original(self, hparams, *args, **kwargs)
            finally:
                hparams.model_name = name
            self.model_name = name
            return
        original(self, hparams, *args, **kwargs)
        if isinstance(self.model_name, tuple) and len(self.model_name) == 2:  # the model's folder name
            path = str(getattr(getattr(self.model_name[0], "config", None), "_name_or_path", "") or "")
            self.model_name = path.rstrip("/").rsplit("/", 1)[-1] or "model"

    editor_cls.__init__ = __init__
    setattr(editor_cls, _INIT_FLAG, True)


def registration_error() -> Optional[str]:
    """Why the last :func:`register_with_easyedit` call found EasyEdit but could not import it (else None)."""
    return _LAST_ERROR["registration"]


def register_with_easyedit(path: Optional[str] = None) -> bool:
    """Add the registered editing methods (:mod:`zerounlearn_editor.methods.registry`; not the baselines) to
    EasyEdit's ``ALG_DICT`` and batch gate.

    Idempotent; a method registered later is added by calling it again, and one unregistered since the last call is
    removed from ``ALG_DICT`` (the batch gate reads the registry at each call). ``path`` (or ``$EASYEDIT_PATH``) is
    an EasyEdit source tree to import from.
    Returns False (and logs why) when EasyEdit cannot be imported.
    """
    if not easyedit_available(path):
        LOG.debug("EasyEdit not importable; set EASYEDIT_PATH to its source tree to register")
        return False
    try:
        alg_dict = importlib.import_module("easyeditor.util.alg_dict")
        batch_module = importlib.import_module("easyeditor.editors.batch_editor")
        # a fake EasyEdit (tests) may have no editors.editor module
        has_editor = importlib.util.find_spec("easyeditor.editors.editor") is not None
        editor_module = importlib.import_module("easyeditor.editors.editor") if has_editor else None
    except Exception as exc:  # a broken EasyEdit install must not break our import
        LOG.warning("EasyEdit found but failed to import (%s: %s); not registering", type(exc).__name__, exc)
        _LAST_ERROR["registration"] = f"{type(exc).__name__}: {exc}"
        return False
    _LAST_ERROR["registration"] = None
    methods = method_functions()
    for stale in getattr(alg_dict, _ADDED_FLAG, frozenset()) - set(methods):
        alg_dict.ALG_DICT.pop(stale, None)
    alg_dict.ALG_DICT.update(methods)
    setattr(alg_dict, _ADDED_FLAG, frozenset(methods))
    batch_editor = batch_module.BatchEditor
    if getattr(batch_editor, _WRAPPED_FLAG, None) is None:
        original = batch_editor.is_batchable_method

        def is_batchable_method(alg_name: str) -> bool:
            return alg_name in _batchable_names() or original(alg_name)

        batch_editor.is_batchable_method = staticmethod(is_batchable_method)
        setattr(batch_editor, _WRAPPED_FLAG, True)
    if editor_module is not None:
        _wrap_base_editor(editor_module.BaseEditor)
    LOG.debug("registered %s with EasyEdit", ", ".join(methods))
    return True
