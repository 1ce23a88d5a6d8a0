"""EasyEdit's own FT, ROME, MEMIT and AlphaEdit as bench methods.

The implementations are EasyEdit's (``easyeditor.util.alg_dict.ALG_DICT``), called with
EasyEdit's calling convention and hyperparameter classes. Their hyperparameters are built
from the main ZeroUnlearn YAML so that every method edits the same model the same way:

* ``layers`` (ROME: the middle one of them), the module templates (``lm_head_module``: the
  embedding when the head is tied to it, as in EasyEdit's Llama-3.2 YAMLs), ``fact_token`` and
  the target-optimisation settings (``v_*``, ``clamp_norm_factor``, ``kl_factor``);
* ``stats_dir``, ``mom2_dataset`` = our corpus cache name, ``mom2_n_samples``, ``mom2_dtype``:
  EasyEdit then reads the statistics file the bench wrote (same layout) and never downloads;
* method defaults from EasyEdit's shipped YAMLs (ROME ``mom2_adjustment: true``; MEMIT and
  AlphaEdit ``mom2_update_weight`` = our ``utility_weight``; FT ``prompt_last``, 25 steps).

``method_hparams`` for one of these methods names a YAML of field overrides (any field of
EasyEdit's class; an unknown one is an error naming it and the file).

Every request's ``target_new`` is set to the neutral target (the main YAML's
``neutral_target``, else the tokenizer's EOS text), the target ZeroUnlearn aims at. ROME edits
one fact per call, so its requests are applied one after another; the others get the whole
batch. AlphaEdit's null-space projector is computed once with EasyEdit's ``get_project`` and
stored under the run's folder (``P_loc``); its sequential-edit memory is reset for every
batch (``reset_cache=True``). EasyEdit's module-level caches (context templates, covariances)
are reset when a run prepares the method, so a run never sees another model's cache.
EasyEdit's ``print`` output is captured and logged at debug level.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import torch
from torch import nn

from zerounlearn_editor.engine.hparams import EditHyperParams, HParamsError, load_config_file
from zerounlearn_editor.engine.stats import corpus_cache_name, model_basename
from zerounlearn_editor.harness.method_specs import (
    EditOutcome,
    HParamsLookup,
    MethodContext,
    MethodSpec,
    PreparedMethod,
    StatsBank,
)
from zerounlearn_editor.integrations.easyedit import easyedit_available
from zerounlearn_editor.support.files import file_identity
from zerounlearn_editor.support.model_access import (
    get_module,
    model_device,
    module_is_transposed,
    num_hidden_layers,
)

__all__ = [
    "EASYEDIT_METHODS",
    "EASYEDIT_SKIP_REASON",
    "EasyEditAPI",
    "load_easyedit",
    "easyedit_model_name",
    "easyedit_config",
    "build_easyedit_hparams",
    "easyedit_spec",
]

LOG = logging.getLogger(__name__)

EASYEDIT_METHODS = ("FT", "ROME", "MEMIT", "AlphaEdit")
EASYEDIT_SKIP_REASON = "skipped: EasyEdit not importable (set EASYEDIT_PATH)"

_HPARAMS_CLASSES = {
    "FT": ("easyeditor.models.ft.ft_hparams", "FTHyperParams"),
    "ROME": ("easyeditor.models.rome.rome_hparams", "ROMEHyperParams"),
    "MEMIT": ("easyeditor.models.memit.memit_hparams", "MEMITHyperParams"),
    "AlphaEdit": ("easyeditor.models.alphaedit.AlphaEdit_hparams", "AlphaEditHyperParams"),
}
_CACHE_MODULES = {
    "ROME": ("easyeditor.models.rome.rome_main", "easyeditor.models.rome.compute_u"),
    "MEMIT": ("easyeditor.models.memit.memit_main",),
    "AlphaEdit": ("easyeditor.models.alphaedit.AlphaEdit_main",),
}
_CACHE_RESETS: Dict[str, Callable[[], Any]] = {
    "CONTEXT_TEMPLATES_CACHE": lambda: None,
    "COV_CACHE": dict,
    "inv_mom2_cache": dict,
    "P_loaded": lambda: False,
    "cache_c_new": lambda: False,
}


@dataclass
class EasyEditAPI:
    """The parts of EasyEdit the bench calls: ``ALG_DICT``, hparams classes, cache-holding modules."""

    alg_dict: Mapping[str, Callable[..., Any]]
    hparams_classes: Mapping[str, type]
    modules: Mapping[str, List[Any]] = field(default_factory=dict)

    def reset_caches(self, method: str) -> None:
        """Reset EasyEdit's module-level caches of ``method`` (templates, covariances, projector flags)."""
        for module in self.modules.get(method, []):
            for attr, fresh in _CACHE_RESETS.items():
                if hasattr(module, attr):
                    setattr(module, attr, fresh())


def load_easyedit() -> Tuple[Optional[EasyEditAPI], Optional[str]]:
    """``(api, None)`` when EasyEdit imports, else ``(None, reason)`` (a "skipped: ..." sentence)."""
    if not easyedit_available():
        return None, EASYEDIT_SKIP_REASON
    try:
        alg_dict = importlib.import_module("easyeditor.util.alg_dict").ALG_DICT
        classes = {m: getattr(importlib.import_module(mod), cls) for m, (mod, cls) in _HPARAMS_CLASSES.items()}
        modules = {m: [importlib.import_module(mod) for mod in mods] for m, mods in _CACHE_MODULES.items()}
    except Exception as exc:  # a broken EasyEdit must not stop the other methods
        return None, f"skipped: EasyEdit failed to import ({type(exc).__name__}: {exc})"
    return EasyEditAPI(alg_dict, classes, modules), None


def easyedit_model_name(model: nn.Module, rewrite_module: str) -> str:
    """``model_name`` for EasyEdit hparams.

    EasyEdit calls the apply functions with our loaded model, so the name only feeds substring
    tests: AlphaEdit sizes its projector for names holding ``llama``/``qwen`` (``nn.Linear``
    down-projection) or ``gpt2-xl`` (GPT-2 ``Conv1D``). Other names get that layout as a suffix.
    """
    name = str(getattr(model.config, "_name_or_path", "") or type(model).__name__)
    lower = name.lower()
    if any(key in lower for key in ("llama", "qwen", "gpt-j-6b", "gpt2-xl")):
        return name
    layout = "gpt2-xl" if module_is_transposed(get_module(model, rewrite_module)) else "llama"
    return f"{name} [{layout} layout]"


def _attn_template(layer_module_tmp: str) -> str:
    return layer_module_tmp + (".attn" if layer_module_tmp.startswith("transformer.h") else ".self_attn")


def _lm_head_owner(model: nn.Module, lm_head_module: str) -> str:
    """The module whose ``.weight`` is the output head *as a named parameter*.

    With tied embeddings (SmolLM2, Llama-3.2) ``lm_head.weight`` is not among
    ``named_parameters()`` and MEMIT's ``get_parameter`` fails; EasyEdit's own YAMLs name the
    embedding (``model.embed_tokens``) for such models, which is what this returns.
    """
    params = dict(model.named_parameters())
    if f"{lm_head_module}.weight" in params:
        return lm_head_module
    weight = get_module(model, lm_head_module).weight
    for name, param in params.items():
        if param is weight and name.endswith(".weight"):
            return name[: -len(".weight")]
    return lm_head_module


def easyedit_config(name: str, main: EditHyperParams, model: nn.Module, work_dir: Path) -> Dict[str, Any]:
    """EasyEdit hyperparameters of ``name`` mapped from the main hparams (before overrides)."""
    layers = list(main.layers)
    loss_layer = main.v_loss_layer if main.v_loss_layer >= 0 else num_hidden_layers(model) + main.v_loss_layer
    common: Dict[str, Any] = dict(
        alg_name=name,
        model_name=easyedit_model_name(model, main.rewrite_module_tmp.format(layers[0])),
        device=str(model_device(model)),
        layers=layers,
        rewrite_module_tmp=main.rewrite_module_tmp,
        layer_module_tmp=main.layer_module_tmp,
        mlp_module_tmp=main.mlp_module_tmp,
        attn_module_tmp=_attn_template(main.layer_module_tmp),
        ln_f_module=main.ln_f_module,
        lm_head_module=_lm_head_owner(model, main.lm_head_module),
        max_length=main.max_length,
        model_parallel=False,
        fp16=False,
    )
    if name == "FT":
        return dict(
            common,
            rewrite_module_tmp=main.rewrite_module_tmp + ".weight",
            num_steps=25,
            lr=5e-4,
            weight_decay=0.0,
            kl_factor=0.0,
            norm_constraint=False,
            objective_optimization="prompt_last",
            batch_size=64,
        )
    located = dict(
        common,
        fact_token=main.fact_token,
        v_num_grad_steps=main.v_num_grad_steps,
        v_lr=main.v_lr,
        v_loss_layer=loss_layer,
        v_weight_decay=main.v_weight_decay,
        clamp_norm_factor=main.clamp_norm_factor,
        kl_factor=main.kl_factor,
        stats_dir=main.stats_dir,
        mom2_dataset=corpus_cache_name(main.mom2_dataset),
        mom2_n_samples=main.mom2_n_samples,
        mom2_dtype=main.mom2_dtype,
    )
    if name == "ROME":
        return dict(
            located,
            layers=[layers[len(layers) // 2]],
            mom2_adjustment=True,
            context_template_length_params=[[5, 10], [10, 10]],
        )
    update_weight = float(getattr(main, "utility_weight", 15000.0))
    located.update(layer_selection="all", mom2_adjustment=True, mom2_update_weight=update_weight, batch_size=1)
    if name == "MEMIT":
        return located
    threshold = float(getattr(main, "nullspace_threshold", 2e-2))
    layer_tag = "-".join(map(str, layers))
    tag = f"{model_basename(model)}_{layer_tag}_{located['mom2_dataset']}_{main.mom2_n_samples}_{threshold:g}"
    return dict(
        located, nullspace_threshold=threshold, L2=1.0, P_loc=str(work_dir / "easyedit" / f"AlphaEdit_P_{tag}.pt")
    )


def build_easyedit_hparams(cls: type, config: Mapping[str, Any], override: Optional[Path] = None) -> Any:
    """An EasyEdit hparams object of ``cls`` from ``config`` updated by an override YAML.

    Only fields of ``cls`` are passed (EasyEdit's classes differ slightly); an override key that
    is not a field of ``cls`` raises :class:`HParamsError` naming it and the file.
    """
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in config.items() if k in names}
    if override is not None:
        extra = load_config_file(override)
        unknown = sorted(set(extra) - names)
        if unknown:
            raise HParamsError(f"{override}: unknown key(s) {unknown} for EasyEdit {cls.__name__}")
        if "alg_name" in extra and extra["alg_name"] != config.get("alg_name"):
            raise HParamsError(
                f"{override}: key 'alg_name' must be {config.get('alg_name')!r}, got {extra['alg_name']!r}"
            )
        values.update(extra)
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
    ]
    missing = [name for name in required if name not in values]
    if missing:
        raise HParamsError(f"EasyEdit {cls.__name__}: no value for required field(s) {missing}")
    return cls(**values)


@contextlib.contextmanager
def _captured_stdout(method: str) -> Iterator[None]:
    """EasyEdit prints progress; keep it off our stdout and log it at debug level."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            yield
    finally:
        text = buffer.getvalue().strip()
        if text:
            LOG.debug("%s (EasyEdit) printed:\n%s", method, text[-4000:])


def _rng_devices(model: nn.Module) -> List[int]:
    device = model_device(model)
    return [device.index or 0] if device.type == "cuda" else []


def _save_tensor_atomic(tensor: torch.Tensor, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        os.chmod(tmp, 0o644)
        torch.save(tensor, tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _ensure_alphaedit_projector(api: EasyEditAPI, model: nn.Module, tok: Any, hparams: Any) -> None:
    """Compute AlphaEdit's projector with EasyEdit's ``get_project`` once and store it at ``P_loc``."""
    path = Path(hparams.P_loc)
    if path.exists():
        return
    module = next((m for m in api.modules.get("AlphaEdit", []) if hasattr(m, "get_project")), None)
    if module is None:
        return
    with _captured_stdout("AlphaEdit"):
        projector = torch.stack([module.get_project(model, tok, layer, hparams).cpu() for layer in hparams.layers])
    _save_tensor_atomic(projector, path)
    LOG.info("AlphaEdit null-space projector %s written to %s", tuple(projector.shape), path)


def _merge_first(into: Dict[str, torch.Tensor], new: Mapping[str, torch.Tensor]) -> None:
    for key, value in new.items():
        into.setdefault(key, value)


def _restore(model: nn.Module, weights_copy: Mapping[str, torch.Tensor]) -> None:
    from zerounlearn_editor.engine.pipeline import restore_weights

    restore_weights(model, weights_copy)


def easyedit_spec(name: str) -> MethodSpec:
    """EasyEdit's ``name`` (one of :data:`EASYEDIT_METHODS`) as a bench method."""

    def describe(lookup: HParamsLookup) -> Dict[str, Any]:
        override = lookup.override_for(name)
        if override is not None and not override.is_file():
            raise HParamsError(f"method hparams for {name}: file not found: {override}")
        return {
            "mapped_from": file_identity(lookup.main_path),
            "override": file_identity(override) if override is not None else None,
        }

    def prepare(ctx: MethodContext) -> PreparedMethod:
        api, reason = load_easyedit()
        if api is None:
            return PreparedMethod(name, skip_reason=reason)
        if name not in api.alg_dict or name not in api.hparams_classes:
            return PreparedMethod(name, skip_reason=f"skipped: this EasyEdit has no {name}")
        config = easyedit_config(name, ctx.lookup.main, ctx.model, ctx.work_dir)
        hparams = build_easyedit_hparams(api.hparams_classes[name], config, ctx.lookup.override_for(name))
        api.reset_caches(name)
        apply = api.alg_dict[name]
        neutral = ctx.neutral_target

        def edit(model: nn.Module, tok: Any, requests: List[Dict[str, Any]], stats: StatsBank) -> EditOutcome:
            batch = [dict(r, target_new=neutral) for r in requests]
            extra: Dict[str, Any] = {}
            if name == "AlphaEdit":
                _ensure_alphaedit_projector(api, model, tok, hparams)
                extra["reset_cache"] = True  # fresh sequential-edit memory for every batch
            weights_copy: Dict[str, torch.Tensor] = {}
            try:
                with _captured_stdout(name), torch.random.fork_rng(devices=_rng_devices(model)):
                    torch.manual_seed(0)
                    groups = [[r] for r in batch] if name == "ROME" else [batch]
                    for group in groups:
                        _, copied = apply(model, tok, group, hparams, copy=False, return_orig_weights=True, **extra)
                        _merge_first(weights_copy, copied)
            except BaseException:
                _restore(model, weights_copy)
                raise
            return EditOutcome(weights_copy, {"calls": len(groups), "target_new": neutral})

        uses_stats = name in ("MEMIT", "AlphaEdit") or (
            name == "ROME" and bool(getattr(hparams, "mom2_adjustment", False))
        )
        return PreparedMethod(
            name,
            edit,
            _jsonable(hparams),
            stats_layers=tuple(hparams.layers) if uses_stats else (),
            stats_module_tmp=hparams.rewrite_module_tmp if uses_stats else None,
        )

    return MethodSpec(name, describe, prepare)


def _jsonable(hparams: Any) -> Dict[str, Any]:
    if dataclasses.is_dataclass(hparams):
        return {
            k: v
            for k, v in dataclasses.asdict(hparams).items()
            if isinstance(v, (str, int, float, bool, list, type(None)))
        }
    return {}
