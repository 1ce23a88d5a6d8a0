"""Export an edit as a PEFT LoRA adapter: unlearning as a small file that can be switched off.

Both methods change each edited weight by a low-rank ``Delta = W' - W`` ``[d_out, d_in]``: rank
``<= n`` for ZeroUnlearn-GD (``E P_m`` built from the ``n`` forget keys), ``<= 2n`` for ZeroUnlearn
(``D - I = (D0 - I) - V V^T D0``, both terms of rank ``<= n``). :func:`export_lora_adapter` factorises
each ``Delta`` by an SVD truncated at its numerical rank ``r`` (above the stored weight's rounding
noise), ``B = U_r S_r^(1/2)`` ``[d_out, r]``, ``A = S_r^(1/2) V_r^T`` ``[r, d_in]``, and writes PEFT's
``adapter_config.json`` (``r = lora_alpha``: scaling 1) and ``adapter_model.safetensors`` (layers of
smaller rank zero-padded to the common ``r``), plus :data:`ADAPTER_REPORT_NAME` with per-layer ranks
and residuals and the fingerprint of the base model, which :func:`load_lora_adapter` checks.
A change that is not low rank is refused.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch import nn

from zerounlearn_editor.engine.stats import model_fingerprint
from zerounlearn_editor.support.files import write_bytes_atomic, write_text_atomic
from zerounlearn_editor.support.model_access import get_module, module_is_transposed

LOG = logging.getLogger(__name__)

ADAPTER_REPORT_NAME = "zerounlearn_adapter.json"
"""The file in the adapter folder with the rank and residual of every layer."""


class AdapterBaseError(ValueError):
    """An adapter is being loaded onto another model than the one it was made from."""


class NotLowRankError(ValueError):
    """An edited weight's change is not low rank (or not reproduced closely enough at the allowed rank)."""


@dataclass
class AdapterLayer:
    """The factorisation of one edited weight (all norms Frobenius)."""

    module: str
    shape: List[int]  # [d_out, d_in]
    numerical_rank: int  # singular values of Delta above the weight's rounding noise
    rank: int  # rank stored in the adapter (before zero padding)
    delta_norm: float
    relative_residual: float  # ||Delta - B A|| / ||Delta||
    weight_relative_residual: float  # ||Delta - B A|| / ||W'||
    noise_floor: float
    singular_values: List[float] = field(default_factory=list)  # the leading ones (rank + 4 at most)


@dataclass
class AdapterReport:
    """What :func:`export_lora_adapter` wrote."""

    out_dir: str
    r: int
    layers: List[AdapterLayer]
    files: Dict[str, int]  # file name -> bytes
    metadata: Dict[str, Any] = field(default_factory=dict)
    base_model_fingerprint: Optional[str] = None

    @property
    def size_bytes(self) -> int:
        return sum(self.files.values())

    def to_dict(self) -> Dict[str, Any]:
        return dict(
            out_dir=self.out_dir,
            r=self.r,
            layers=[asdict(l) for l in self.layers],
            files=self.files,
            size_bytes=self.size_bytes,
            metadata=self.metadata,
            base_model_fingerprint=self.base_model_fingerprint,
        )


def _rounding_noise(W_new: torch.Tensor, dtype: torch.dtype) -> float:
    """An upper estimate of the spectral norm of the rounding error of a stored ``[m, k]`` weight.

    Rounding to ``dtype`` perturbs each entry by at most ``eps/2 |w|`` (std ``~0.29 eps rms(w)``);
    an i.i.d. ``[m, k]`` matrix of std ``s`` has spectral norm ``~ s (sqrt m + sqrt k)``. This
    returns ``eps rms(W') (sqrt m + sqrt k)`` (about 3x the expected value). 0 for float64.
    """
    if dtype == torch.float64:
        return 0.0
    m, k = W_new.shape
    rms = float(W_new.norm()) / math.sqrt(m * k)
    return torch.finfo(dtype).eps * rms * (math.sqrt(m) + math.sqrt(k))


def low_rank_factors(
    delta: torch.Tensor, noise_floor: float = 0.0, max_rank: Optional[int] = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """SVD factors of ``delta`` ``[d_out, d_in]`` (float64) at its numerical rank.

    Keeps singular values ``> max(noise_floor, 1e-12 s_max)``, at most ``max_rank`` of them.
    Returns ``(B [d_out, r], A [r, d_in], S [min(d_out, d_in)] all singular values, numerical
    rank)``; ``B @ A`` is the best rank-``r`` approximation of ``delta``.
    """
    delta = delta.double()
    U, S, Vh = torch.linalg.svd(delta, full_matrices=False)
    if S.numel() == 0 or float(S[0]) == 0.0:
        numerical = 0
    else:
        numerical = int((S > max(noise_floor, 1e-12 * float(S[0]))).sum())
    r = numerical if max_rank is None else min(numerical, max_rank)
    root = S[:r].sqrt()
    B = U[:, :r] * root  # [d_out, r]
    A = root[:, None] * Vh[:r]  # [r, d_in]
    return B, A, S, numerical


def edit_deltas(
    weights_before: Union[Mapping[str, torch.Tensor], nn.Module], edited_model: nn.Module
) -> Dict[str, tuple[torch.Tensor, torch.Tensor, bool]]:
    """``{module name: (W' [d_out, d_in] float64, Delta = W' - W float64, transposed)}``.

    ``weights_before``: parameter name -> weight before the edit (the ``weights_copy`` of the
    apply functions), or the unedited model (then every 2-D weight that differs is taken).
    """
    params = dict(edited_model.named_parameters())
    if isinstance(weights_before, nn.Module):
        before_params = dict(weights_before.named_parameters())
        weights_before = {
            name: value for name, value in before_params.items()
            if name in params and value.shape == params[name].shape and not torch.equal(value, params[name].detach())
        }
        if any(name not in before_params for name in params):
            raise ValueError("the model before the edit and the edited model have different parameters")
    if not weights_before:
        raise ValueError("no edited weights: weights_before is empty (or the models are identical)")
    out = {}
    for name, before in weights_before.items():
        if not name.endswith(".weight"):
            raise ValueError(f"weights_before key {name!r} is not a module weight (must end in '.weight')")
        module_name = name[: -len(".weight")]
        if name not in params:
            raise ValueError(f"weights_before names {name!r}, which the edited model does not have")
        module = get_module(edited_model, module_name)
        if not isinstance(module, nn.Linear) and not module_is_transposed(module):
            raise ValueError(
                f"{module_name}: LoRA export supports Linear and Conv1D weights, not {type(module).__name__}"
            )
        after = params[name].detach()
        if before.shape != after.shape:
            raise ValueError(f"{name}: weight before {tuple(before.shape)} vs after {tuple(after.shape)}")
        transposed = module_is_transposed(module)
        W_new = after.double().cpu()
        delta = W_new - before.detach().double().cpu()
        if transposed:
            W_new, delta = W_new.t(), delta.t()
        out[module_name] = (W_new, delta, transposed)
    return out


def _factor_layer(module_name: str, W_new: torch.Tensor, delta: torch.Tensor, dtype: torch.dtype,
                  max_rank: Optional[int]) -> Tuple[AdapterLayer, Tuple[torch.Tensor, torch.Tensor], Optional[str]]:
    """``(report, (B [d_out, r], A [r, d_in]), problem or None)`` of one weight's change ``delta [d_out, d_in]``:
    a problem when the rank-``r`` factors leave more than ``max(1e-5, 2 eps)`` of the weight's norm, or are not
    smaller than the weight."""
    floor = _rounding_noise(W_new, dtype)
    B, A, S, numerical = low_rank_factors(delta, floor, max_rank)
    r = A.shape[0]
    residual = float(S[r:].pow(2).sum().sqrt())
    delta_norm = float(S.pow(2).sum().sqrt())
    layer = AdapterLayer(
        module=module_name,
        shape=list(delta.shape),
        numerical_rank=numerical,
        rank=r,
        delta_norm=delta_norm,
        relative_residual=residual / delta_norm if delta_norm else 0.0,
        weight_relative_residual=residual / float(W_new.norm()),
        noise_floor=floor,
        singular_values=[float(s) for s in S[: r + 4]],
    )
    limit = max(1e-5, 2 * torch.finfo(dtype).eps)
    d_out, d_in = delta.shape
    problem = None
    if layer.weight_relative_residual > limit:
        problem = (
            f"{module_name}: rank {r} (numerical rank {numerical} of {min(d_out, d_in)}) leaves a residual of "
            f"{layer.weight_relative_residual:.2e} of the weight's norm ({layer.relative_residual:.2e} of the "
            f"change's), above {limit:.1e}"
        )
    elif r * (d_out + d_in) >= d_out * d_in:
        problem = (
            f"{module_name}: the change has numerical rank {numerical} of {min(d_out, d_in)} (full rank); "
            f"a rank-{r} adapter ({r * (d_out + d_in)} numbers) is not smaller than the weight ({d_out * d_in})"
        )
    return layer, (B, A), problem


def _lora_tensors(factors: Mapping[str, Tuple[torch.Tensor, torch.Tensor]], r: int) -> Dict[str, torch.Tensor]:
    """PEFT's ``lora_A`` / ``lora_B`` tensors (float32), each layer's factors zero-padded to the common rank ``r``."""
    tensors: Dict[str, torch.Tensor] = {}
    for module_name, (B, A) in factors.items():
        pad = r - A.shape[0]
        if pad:
            A = torch.cat([A, A.new_zeros((pad, A.shape[1]))])
            B = torch.cat([B, B.new_zeros((B.shape[0], pad))], dim=1)
        tensors[f"base_model.model.{module_name}.lora_A.weight"] = A.float().contiguous()
        tensors[f"base_model.model.{module_name}.lora_B.weight"] = B.float().contiguous()
    return tensors


def _write_lora_files(out: Path, tensors: Dict[str, torch.Tensor], r: int, modules: List[str], transposed: bool,
                      base_name: Optional[str]) -> Dict[str, int]:
    """Write ``adapter_model.safetensors`` and ``adapter_config.json`` (scaling 1: the adapter adds exactly
    ``B A``) into ``out``, each atomically; returns ``{file name: size in bytes}``."""
    from peft import LoraConfig
    from safetensors.torch import save

    config = LoraConfig(
        r=r,
        lora_alpha=r,  # scaling = lora_alpha / r = 1: the adapter adds exactly B A
        lora_dropout=0.0,
        bias="none",
        target_modules=modules,
        fan_in_fan_out=transposed,
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_name,
        inference_mode=True,
    )
    weights = save(tensors, metadata={"format": "pt"})  # the bytes save_file would write
    weights_path = write_bytes_atomic(out / "adapter_model.safetensors", weights)
    config_json = json.dumps(config.to_dict(), indent=2, sort_keys=True, default=sorted)  # sets: sorted lists
    write_text_atomic(out / "adapter_config.json", config_json)
    return {"adapter_model.safetensors": weights_path.stat().st_size,
            "adapter_config.json": (out / "adapter_config.json").stat().st_size}


def export_lora_adapter(
    weights_before: Union[Mapping[str, torch.Tensor], nn.Module],
    edited_model: nn.Module,
    out_dir: Union[str, Path],
    *,
    max_rank: Optional[int] = None,
    allow_lossy: bool = False,
    base_model_name_or_path: Optional[str] = None,
    metadata: Optional[Mapping[str, Any]] = None,
) -> AdapterReport:
    """Write ``edited_model - weights_before`` as a PEFT LoRA adapter in ``out_dir``; return its report.

    ``weights_before``: parameter name -> weight before the edit (the ``weights_copy`` of
    ``apply_*(..., return_orig_weights=True)``), or the unedited model. ``max_rank`` caps each
    layer's rank (default: its numerical rank). A layer whose ``||Delta - B A||_F / ||W'||_F``
    exceeds ``max(1e-5, 2 eps)`` of the weight's dtype (its own rounding), or whose
    adapter would not be smaller than the weight, raises :class:`NotLowRankError` (nothing is
    written) unless ``allow_lossy`` (then a warning). ``base_model_name_or_path`` goes into
    ``adapter_config.json`` (default: the model's ``config._name_or_path``), ``metadata`` into
    :data:`ADAPTER_REPORT_NAME`.
    """
    import peft  # noqa: F401  # a missing peft fails here, before any factorisation

    deltas = edit_deltas(weights_before, edited_model)
    transposed_flags = {transposed for _, _, transposed in deltas.values()}
    if len(transposed_flags) > 1:
        raise ValueError("the edited modules mix Linear and Conv1D weights; export them as separate adapters")
    params = dict(edited_model.named_parameters())
    layers: List[AdapterLayer] = []
    problems: List[str] = []
    factors = {}
    for module_name, (W_new, delta, _) in deltas.items():
        layer, factors[module_name], problem = _factor_layer(
            module_name, W_new, delta, params[f"{module_name}.weight"].dtype, max_rank)
        layers.append(layer)
        problems += [problem] if problem else []
    if problems:
        message = (
            "the edit is not low rank: " + "; ".join(problems) + ". A change of (nearly) full rank cannot be a "
            "small adapter: save the model instead."
        )
        if not allow_lossy:
            raise NotLowRankError(message)
        LOG.warning("%s Exporting anyway (allow_lossy).", message)

    r = max(max(layer.rank for layer in layers), 1)
    base_name = base_model_name_or_path
    if base_name is None:
        base_name = getattr(getattr(edited_model, "config", None), "_name_or_path", None) or None
    out = Path(out_dir)  # created by the writes
    files = _write_lora_files(out, _lora_tensors(factors, r), r, sorted(deltas), transposed_flags == {True}, base_name)
    if isinstance(weights_before, nn.Module):  # the base model's fingerprint: the weights before the edit
        fingerprint = model_fingerprint(weights_before)
    else:
        fingerprint = model_fingerprint(edited_model, replace=dict(weights_before))
    report = AdapterReport(str(out), r, layers, files, dict(metadata or {}), fingerprint)
    write_text_atomic(out / ADAPTER_REPORT_NAME, json.dumps(report.to_dict(), indent=2))
    for layer in layers:
        LOG.info(
            "%s: rank %d (numerical %d), residual %.2e of the change, %.2e of the weight",
            layer.module, layer.rank, layer.numerical_rank, layer.relative_residual, layer.weight_relative_residual,
        )
    LOG.info("LoRA adapter (r=%d, %d modules, %d bytes) -> %s", r, len(layers), report.size_bytes, out)
    return report


def check_adapter_base(base_model: nn.Module, adapter_dir: Union[str, Path]) -> None:
    """Raise :class:`AdapterBaseError` when ``adapter_dir`` records another base model than ``base_model``.

    An adapter without :data:`ADAPTER_REPORT_NAME` or a recorded fingerprint is accepted with a warning.
    """
    path = Path(adapter_dir) / ADAPTER_REPORT_NAME
    try:
        recorded = json.loads(path.read_text(encoding="utf-8")).get("base_model_fingerprint")
    except FileNotFoundError:
        LOG.warning("%s: no %s; the adapter's base model cannot be checked", adapter_dir, ADAPTER_REPORT_NAME)
        return
    except (OSError, ValueError, AttributeError) as exc:
        raise AdapterBaseError(f"{path}: unreadable ({exc})") from exc
    if recorded is None:
        LOG.warning("%s records no base_model_fingerprint; the adapter's base model cannot be checked", path)
        return
    actual = model_fingerprint(base_model)
    if actual != recorded:
        raise AdapterBaseError(
            f"{adapter_dir}: the adapter was made for the model with fingerprint {recorded} ({path}); this model's "
            f"is {actual}: another model (or the same one already edited). Load it onto the model it was made from"
        )


def load_lora_adapter(base_model: nn.Module, adapter_dir: Union[str, Path], **kwargs: Any):
    """``PeftModel.from_pretrained(base_model, adapter_dir)`` after :func:`check_adapter_base`."""
    from peft import PeftModel

    check_adapter_base(base_model, adapter_dir)
    return PeftModel.from_pretrained(base_model, str(adapter_dir), **kwargs)
