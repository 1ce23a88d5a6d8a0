"""Neighbour probes that a batch edit asks to forget are not neighbours in that batch.

The bench edits a seed's ``n`` cases as one batch. A neighbour probe of case A that is also a
forget or paraphrase probe of another case B of the same batch is knowledge the batch is told
to forget, so scoring it as "kept" (specificity) would charge the method for doing its job.
MQuAKE is built this way (a hop's neighbours are the other hops of its chains, each of them a
case of its own); RWKU has a few (0-12 per seed at n = 50-100), while the CounterFact and
ZsRE files have none at n <= 100 (seeds 1-5), so their tables are unchanged. Such probes are dropped
from A's neighbours (and from A's probe groups, unless A itself asks to forget them) for that
batch only; the count is logged, stored in the seed file and stated in the summary.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Dict, List, Sequence, Set, Tuple

from ..data.types import Probe, UnlearnCase

__all__ = ["drop_batch_forget_neighbours"]

LOG = logging.getLogger(__name__)


def drop_batch_forget_neighbours(cases: Sequence[UnlearnCase]) -> Tuple[List[UnlearnCase], int]:
    """The cases with neighbour probes that other cases of the batch forget removed.

    Args:
        cases: one batch (edited together).

    Returns:
        ``(cases, dropped)``: new case objects where something was removed (the others as
        they are, in the same order) and the number of neighbour probes removed.
    """
    owners: Dict[Probe, Set[int]] = {}
    for index, case in enumerate(cases):
        for probe in (*case.forget, *case.paraphrase):
            owners.setdefault(probe, set()).add(index)
    out: List[UnlearnCase] = []
    dropped = 0
    for index, case in enumerate(cases):
        own = set(case.forget) | set(case.paraphrase)
        forgotten = {p for p in case.neighbour if p not in own and owners.get(p, set()) - {index}}
        if not forgotten:
            out.append(case)
            continue
        neighbour = [p for p in case.neighbour if p not in forgotten]
        dropped += len(case.neighbour) - len(neighbour)
        groups = {
            name: [p for p in probes if p in own or p not in forgotten] for name, probes in case.probe_groups.items()
        }
        out.append(dataclasses.replace(case, neighbour=neighbour, probe_groups=groups))
    if dropped:
        LOG.info("%d neighbour probe(s) are forgotten by another case of the same batch; not scored as neighbours",
                 dropped)
    return out, dropped
