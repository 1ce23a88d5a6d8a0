"""The ledger of a folder ``zerounlearn unlearn --save model`` wrote: what it forgot, and how to go on.

Beside the edited model, :data:`LEDGER_NAME` (JSON) records every fact an edit of the folder's chain targeted
(prompt, subject, answer, which edits, and its status as of the latest edit: forgotten, not known before, still
answered, taught, came back or no answer; :mod:`~zerounlearn_editor.applications.fact_status`), each edit (time,
YAML name and content hash, facts file), the method, module template and layers, the base
model (its name and fingerprint, and the fingerprint of its unedited modules), the statistics ``C0`` were read
from (the base model's cache files: their names, token counts and model fingerprint), the context prefixes sampled
from the base model (every edit uses the same), the fingerprint and weights digest of the saved model, the sha256
of each of its weight files and its config (in full, checked before a continued run loads the model:
:mod:`~zerounlearn_editor.applications.ledger_files`). ``ledger_sha256`` hashes everything else: a ledger edited by
hand is refused, and so is one whose fields do not have the shape a ledger has
(:mod:`~zerounlearn_editor.applications.ledger_schema`).

``zerounlearn unlearn --model DIR`` on such a folder continues (:func:`read_continuation` before the model
loads, :meth:`Continuation.check_model` after): same method, module and layers, the folder's weights the ones
the ledger recorded, ``C0`` from the base model's cache files (never recomputed from the edited model); the new
folder's ledger lists the union, every earlier fact re-scored on the edited model (one record a fact: a fact edited
again keeps its record). A folder written before the protection experiment left the package holds its state
(:data:`~zerounlearn_editor.engine.retired_keys.RETIRED_STATE_FILE`, the ledger's ``state`` field): it is continued,
the state ignored with a logged note. A folder with a trace of an unlearn output (the report, or that old state
file) but no ledger file is refused, not taken as a base model. Anything else is refused with a
:class:`LedgerError` saying why. The ledger is written inside the run's staging folder
(:mod:`zerounlearn_editor.support.output_dir`), so a folder holds a model and its ledger whole or is as it was.
An adapter folder (``--save adapter``) carries a ledger too, but is not continued from (see :data:`ADAPTER_HINT`).
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from zerounlearn_editor.applications.fact_status import ANSWERED_RULE, edit_count
from zerounlearn_editor.applications.ledger_files import FILES_KEY, check_weight_files, weight_files_sha256
from zerounlearn_editor.applications.ledger_schema import check_ledger_schema
from zerounlearn_editor.engine.contexts import cached_context_prefixes, restore_context_prefixes
from zerounlearn_editor.engine.hparams import ConfigFile, EditHyperParams
from zerounlearn_editor.engine.retired_keys import RETIRED_STATE_FILE, RETIRED_STATE_NOTE
from zerounlearn_editor.engine.stats import (
    SecondMoment,
    StatsCacheError,
    corpus_cache_name,
    load_second_moment,
    model_basename,
    model_fingerprint,
    same_weights_at_another_precision,
    stats_path,
)
from zerounlearn_editor.support.files import sha256_of_file, sha256_of_json, write_text_atomic
from zerounlearn_editor.support.model_access import get_module, get_weight_matrix

LOG = logging.getLogger(__name__)

LEDGER_NAME = "zerounlearn_ledger.json"
LEDGER_FORMAT = "zerounlearn-ledger/2"  # /2: every fact carries its status
ADAPTER_HINT = ("continuing from an adapter folder is not supported: run the first unlearn with --save model and "
                "continue from that folder (--model DIR), or unlearn all facts again from the base model with one "
                "--save adapter run")


class LedgerError(ValueError):
    """A ledger cannot be continued from (the message names the folder and the reason)."""


_DIGEST_SAMPLES = 4096


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def edited_weights_digest(model: nn.Module, module_tmp: str, layers: Sequence[int]) -> str:
    """A digest of the edited weights (``_DIGEST_SAMPLES`` evenly spaced values of each, exact bits): equal
    weights give equal digests; an edit changes it (the ledger's ``weights_digest``)."""
    digest = hashlib.blake2b(digest_size=12)
    with torch.no_grad():
        for layer in sorted(layers):
            W = get_weight_matrix(get_module(model, module_tmp.format(layer))).detach().reshape(-1)
            count = min(_DIGEST_SAMPLES, W.numel())
            index = torch.arange(count, dtype=torch.int64, device=W.device) * (W.numel() - 1) // max(count - 1, 1)
            sample = W[index].to(torch.float64).cpu()
            digest.update(f"{layer}|{tuple(W.shape)}|".encode())
            digest.update(sample.numpy().tobytes())
    return digest.hexdigest()


def ledger_hash(ledger: Mapping[str, Any]) -> str:
    """sha256 of the ledger's canonical JSON without its ``ledger_sha256`` field."""
    return sha256_of_json({k: v for k, v in ledger.items() if k != "ledger_sha256"})


def statistics_record(hparams: EditHyperParams, base_name: str, corpus: Optional[str]) -> Dict[str, Any]:
    """Where ``C0`` of each edited layer is cached for the base model ``base_name`` (model basename) with these
    statistics settings: ``{"stats_dir", "model_name", "corpus", "n_samples", "dtype", "max_length", "files"}``."""
    ds_name = corpus_cache_name(corpus or hparams.mom2_dataset)
    files = {str(layer): str(stats_path(".", base_name, ds_name, hparams.rewrite_module_tmp.format(layer),
                                        hparams.mom2_dtype, hparams.mom2_n_samples))
             for layer in hparams.layers}
    return {"stats_dir": str(hparams.stats_dir), "model_name": base_name, "corpus": ds_name,
            "n_samples": hparams.mom2_n_samples, "dtype": hparams.mom2_dtype, "max_length": hparams.mom2_max_length,
            "files": files}


@dataclass
class Continuation:
    """A checked ledger of the folder ``folder`` (:func:`read_continuation`)."""

    folder: Path
    ledger: Dict[str, Any]

    def check_model(self, model: nn.Module, hparams: EditHyperParams, corpus: Optional[str]) -> Dict[int, SecondMoment]:
        """Check the loaded model is the folder's (base and edited weights) and return the base model's ``C0``
        (``{layer: SecondMoment}`` from its cache files); raises :class:`LedgerError` saying why not."""
        where = f"model folder {self.folder}"
        base = self.ledger["base_model"]
        if FILES_KEY in self.ledger:  # its files were checked byte for byte before loading: any dtype's load of them
            return self._base_statistics(model, hparams, corpus)
        if model_fingerprint(model, hparams.rewrite_module_tmp) != base["fingerprint_unedited_modules"]:
            raise LedgerError(
                f"{where}: this model is not an edit of the base model its ledger records ({base['name']!r}, "
                f"fingerprint {base['fingerprint']}): another base model; continue only from the folder an "
                "earlier unlearn wrote, unchanged")
        changed = model_fingerprint(model) != self.ledger["model_fingerprint"]
        if not changed and _weights_dtype(model, hparams) == self.ledger.get("weights_dtype"):
            # exact values (the fingerprint rounds to bfloat16, below which an edit may hide)
            changed = (
                edited_weights_digest(model, hparams.rewrite_module_tmp, hparams.layers)
                != self.ledger["weights_digest"]
            )
        if changed:
            raise LedgerError(
                f"{where}: the edited weights differ from the ones the ledger recorded (the model was changed after "
                "the ledger was written); the ledger's facts do not describe it")
        return self._base_statistics(model, hparams, corpus)

    def _base_statistics(
        self, model: nn.Module, hparams: EditHyperParams, corpus: Optional[str]
    ) -> Dict[int, SecondMoment]:
        recorded = self.ledger["statistics"]
        now = statistics_record(hparams, recorded["model_name"], corpus)
        differing = [k for k in ("corpus", "n_samples", "dtype", "max_length") if now[k] != recorded[k]]
        if differing:
            raise LedgerError(
                f"model folder {self.folder}: the YAML's statistics settings {differing} differ from the ones the "
                f"earlier edits used ({ {k: recorded[k] for k in differing} }); C0 must be the base model's, as "
                "before: use the same mom2_* settings and corpus"
            )
        base_fp = self.ledger["base_model"]["fingerprint_unedited_modules"]
        # the base as recorded, or as loaded now (the unedited modules are the base's; the dtype may differ)
        same = (None, base_fp, model_fingerprint(model, hparams.rewrite_module_tmp))
        out: Dict[int, SecondMoment] = {}
        for layer in hparams.layers:
            path = Path(hparams.stats_dir) / now["files"][str(layer)]
            hint = (f"C0 must come from the unedited base model {self.ledger['base_model']['name']!r}, not the edited "
                    f"one: run `zerounlearn stats` with the YAML on that model (stats_dir {hparams.stats_dir}), then "
                    "rerun")
            if not path.is_file():
                raise LedgerError(
                    f"model folder {self.folder}: the base model's statistics file {path} is missing; {hint}"
                )
            try:
                stat, meta = load_second_moment(path)
            except StatsCacheError as exc:
                raise LedgerError(f"model folder {self.folder}: {exc}; {hint}") from exc
            if meta.get("model_fingerprint") not in same and not same_weights_at_another_precision(
                    meta, model, hparams.rewrite_module_tmp, _weights_dtype(model, hparams).removeprefix("torch.")):
                raise LedgerError(
                    f"model folder {self.folder}: {path} holds the statistics of another model (fingerprint "
                    f"{meta['model_fingerprint']}, the base's {base_fp}); {hint}"
                )
            count = recorded.get("counts", {}).get(str(layer))
            if count is not None and stat.count != count:
                LOG.warning("%s: %d tokens, the earlier edits used %d (recomputed since?)", path, stat.count, count)
            out[layer] = stat
        LOG.info("continuing from %s: %d fact(s) forgotten by %d earlier edit(s); C0 of the base model %r",
                 self.folder, edit_count(self.ledger["facts"]), len(self.ledger["edits"]), recorded["model_name"])
        return out

    def restore_prefixes(self, model: nn.Module) -> None:
        """Cache on ``model`` (after :meth:`check_model`) the context prefixes the earlier edits used (sampled from
        the base model, as in one process)."""
        restore_context_prefixes(model, self.ledger.get("context_prefixes", []))


def _weights_dtype(model: nn.Module, hparams: EditHyperParams) -> str:
    return str(get_module(model, hparams.rewrite_module_tmp.format(hparams.layers[0])).weight.dtype)


def _load_ledger(folder: Path) -> Dict[str, Any]:
    path = folder / LEDGER_NAME
    try:
        ledger = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise LedgerError(f"{path}: unreadable ledger ({exc})") from exc
    if not isinstance(ledger, dict) or ledger.get("format") != LEDGER_FORMAT:
        raise LedgerError(f"{path}: not a ledger of format {LEDGER_FORMAT!r}")
    if ledger.get("ledger_sha256") != ledger_hash(ledger):
        raise LedgerError(f"{path}: its content does not match its ledger_sha256 (edited by hand or damaged); the "
                          "ledger cannot be trusted: restore the folder an earlier unlearn wrote")
    check_ledger_schema(ledger, str(path), LedgerError)  # every field the continuation reads, before a model loads
    check_weight_files(folder, ledger, LedgerError)  # the model's files, hashed in full
    return ledger


REPORT_NAME = "unlearn_report.json"
"""The report ``zerounlearn unlearn`` writes into ``--out`` (:mod:`zerounlearn_editor.applications.unlearn`)."""
UNLEARN_TRACES = (REPORT_NAME, RETIRED_STATE_FILE)
"""Files an ``unlearn`` output folder holds beside its ledger (the second: written before the protection experiment
left the package): either one without the ledger means it went missing."""


def _has_ledger(folder: Path) -> bool:
    """Whether ``folder`` holds a ledger file; raises :class:`LedgerError` when its ledger path is not a file, or
    the folder holds a trace of an unlearn output (:data:`UNLEARN_TRACES`) but no ledger: continuing from it as a
    base model would recompute ``C0`` from edited weights and drop the earlier facts."""
    path = folder / LEDGER_NAME
    if path.is_file():
        return True
    if path.exists() or path.is_symlink():
        raise LedgerError(f"{path}: the ledger path is not a file (a folder or a broken link); restore the ledger "
                          "the earlier unlearn wrote")
    traces = [name for name in UNLEARN_TRACES if (folder / name).exists()] if folder.is_dir() else []
    if traces:
        raise LedgerError(
            f"model folder {folder}: holds {' and '.join(traces)} (an unlearn output) but no {LEDGER_NAME}: its "
            "ledger is missing, so the earlier edits, their facts and the base model are unknown; restore the "
            "folder an earlier unlearn wrote, or start from the base model")
    return False


def check_out_ledger(out_dir: Path, continuation: Optional[Continuation], replace: bool) -> None:
    """Refuse (:class:`LedgerError`) an ``--out`` folder holding a ledger this run does not continue (``--model``
    is not that folder): writing would replace its record of earlier edits. ``replace`` (``--replace-ledger``):
    warn and go on."""
    path = Path(out_dir) / LEDGER_NAME
    if not (path.exists() or (Path(out_dir) / RETIRED_STATE_FILE).exists()):
        return
    if continuation is not None and continuation.folder.resolve() == Path(out_dir).resolve():
        return
    try:
        ledger = json.loads(path.read_text(encoding="utf-8"))
        held = f"{len(ledger['facts'])} fact(s) of {len(ledger['edits'])} edit(s)"
    except (OSError, ValueError, TypeError, KeyError) as exc:
        held = f"unreadable: {exc}"
    start = f"continues {continuation.folder}" if continuation is not None else "starts from a base model"
    message = (f"--out {out_dir} holds a ledger ({LEDGER_NAME}, {held}) that this run does not continue (it {start}); "
               "writing would replace that record of earlier edits")
    if not replace:
        raise LedgerError(f"{message}: continue from it with --model {out_dir}, give another --out, or pass "
                          "--replace-ledger to replace it")
    LOG.warning("%s: replacing it (--replace-ledger)", message)


def edit_time() -> str:
    """The time stamp of an edit in a ledger (UTC, seconds)."""
    return _now()


def read_continuation(model_name: Optional[str], hparams: EditHyperParams) -> Optional[Continuation]:
    """The ledger of ``model_name`` when it is a folder holding one (else None), checked against ``hparams``
    before any model loads: format and hash, method, module and layers (an old folder's state of the retired
    protection experiment is ignored, with a note)."""
    if model_name is None:
        return None
    folder = Path(model_name).expanduser()
    if not _has_ledger(folder):
        return None
    ledger = _load_ledger(folder)
    where = f"model folder {folder}"
    if ledger.get("saved") == "adapter":
        raise LedgerError(f"{where} is an adapter folder: {ADAPTER_HINT}")
    if ledger["method"] != hparams.alg_name:
        raise LedgerError(
            f"{where}: its ledger records {len(ledger['facts'])} fact(s) forgotten with {ledger['method']}; this YAML "
            f"is {hparams.alg_name}: continue with the same method (a ledger records the edits of one method)")
    if ledger["rewrite_module_tmp"] != hparams.rewrite_module_tmp or ledger["layers"] != list(hparams.layers):
        raise LedgerError(
            f"{where}: the earlier edits changed {ledger['rewrite_module_tmp']!r} layers {ledger['layers']}; this YAML "
            f"edits {hparams.rewrite_module_tmp!r} layers {list(hparams.layers)}: a ledger records the edits of one "
            "set of modules (use the YAML of the earlier edits)")
    if "state" in ledger or (folder / RETIRED_STATE_FILE).exists():
        LOG.info("%s: %s", where, RETIRED_STATE_NOTE)
    return Continuation(folder, ledger)


def build_ledger(
    previous: Optional[Continuation],
    model: nn.Module,
    weights_copy: Mapping[str, torch.Tensor],
    hparams: EditHyperParams,
    hparams_file: Union[str, Path, ConfigFile],
    facts_file: Union[str, Path],
    records: Sequence[Mapping[str, Any]],
    model_name: str,
    corpus: Optional[str],
    saved: str,
    time: str,
) -> Dict[str, Any]:
    """The ledger after this edit (without its files' hashes: :func:`write_ledger` adds them). ``records``: every
    fact after this edit, with its status (:func:`~zerounlearn_editor.applications.fact_status.merged_facts`);
    ``time``: this edit's (:func:`edit_time`, as in the records). ``hparams_file``: its path, or the file as the run
    read it (:class:`~zerounlearn_editor.engine.hparams.ConfigFile`: not read again)."""
    read = hparams_file if isinstance(hparams_file, ConfigFile) else None
    hparams_file = Path(read.name if read is not None else hparams_file)
    index = len(previous.ledger["edits"]) if previous is not None else 0
    hparams_sha256 = read.sha256 if read is not None else sha256_of_file(hparams_file)
    edit = {"time": time, "hparams_file": hparams_file.name, "hparams_sha256": hparams_sha256,
            "facts_file": Path(facts_file).name, "n_facts": sum(r["edit"] == index for r in records)}
    if previous is None:
        base_name = model_basename(model)
        base = {"name": model_name, "basename": base_name,
                "fingerprint": model_fingerprint(model, replace=dict(weights_copy)),
                "fingerprint_unedited_modules": model_fingerprint(model, hparams.rewrite_module_tmp)}
        stats = statistics_record(hparams, base_name, corpus)
        stats["counts"] = {}
        for layer in hparams.layers:  # the token counts of the files this edit read C0 from
            path = Path(hparams.stats_dir) / stats["files"][str(layer)]
            if path.is_file():
                stats["counts"][str(layer)] = load_second_moment(path)[0].count
        edits: List[Dict[str, Any]] = []
    else:
        base, stats = previous.ledger["base_model"], previous.ledger["statistics"]
        edits = list(previous.ledger["edits"])
    edits.append(edit)
    return {"format": LEDGER_FORMAT, "method": hparams.alg_name, "rewrite_module_tmp": hparams.rewrite_module_tmp,
            "layers": list(hparams.layers), "saved": saved, "base_model": base, "statistics": stats, "edits": edits,
            "facts": [dict(r) for r in records], "context_prefixes": cached_context_prefixes(model),
            "model_fingerprint": model_fingerprint(model),
            "weights_digest": edited_weights_digest(model, hparams.rewrite_module_tmp, hparams.layers),
            "weights_dtype": _weights_dtype(model, hparams), "answered_rule": ANSWERED_RULE}


def write_ledger(folder: Path, ledger: Dict[str, Any]) -> Path:
    """Write the ledger (with the sha256 of the saved model's files and ``ledger_sha256``) into ``folder`` (the
    run's staging folder); returns the ledger's path."""
    ledger = dict(ledger)
    ledger[FILES_KEY] = weight_files_sha256(folder)  # the saved model's files, whole
    ledger["ledger_sha256"] = ledger_hash(ledger)
    return write_text_atomic(folder / LEDGER_NAME, json.dumps(ledger, indent=1) + "\n")


__all__ = ["ADAPTER_HINT", "Continuation", "LEDGER_NAME", "LedgerError", "REPORT_NAME", "UNLEARN_TRACES",
           "build_ledger", "check_out_ledger", "edit_time", "edited_weights_digest", "read_continuation",
           "write_ledger"]
