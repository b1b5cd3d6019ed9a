"""Explanations of decisions (``frt resolve --explain``): a ``Reporter`` that
records every event, and the candidate table of each phase band. Nothing here
is on the serving path."""

from __future__ import annotations

from ..system.variants import select_variants
from .resolver import Reporter, facts_for

__all__ = ["Trace", "candidates"]


class Trace(Reporter):
    """Keeps every resolver event as a dict, in order."""

    def __init__(self) -> None:
        self.events: list[dict] = []

    def considering(self, phase, route, receipt):
        self.events.append({"phase": phase, "event": "considering", "route": route, "receipt": receipt})

    def rejecting(self, phase, route, reason):
        self.events.append({"phase": phase, "event": "rejecting", "route": route, "reason": reason})

    def choosing(self, phase, route, decision):
        self.events.append({"phase": phase, "event": "choosing", "route": route, "decision": decision})


def candidates(lock, decisions, hardware, *, verbose: bool = False) -> list[dict]:
    """Every route of the binding per decided band (docs/reference.md#frt-resolve, ``--explain``): won or lost and why
    (``reason``, and its ``kind``: ``None`` for the route taken),
    its route-digest, every failing package of the route (``problems``; the decision's
    reason names the first only), and per package its revision, its locked
    ``variants`` and the ``variant`` this system selects, for every candidate, not
    only the winner. ``verbose`` adds the selection in full: ``accepted`` in
    preference order and ``rejected`` with the reason of each."""
    out = []
    m = lock.manifest
    facts = facts_for(lock, hardware)
    for phase, d in decisions.items():
        reasons = {r.route: r for r in d.reasons}
        for rname, rt in m.routes.items():
            variants = facts.route(rname)[0]
            pk = {}
            for repo in m.route_packages(rname):
                p = lock.packages.get(repo)
                pk[repo] = {"revision": p.revision if p else None, "variants": sorted(p.variants) if p else [],
                            "variant": variants[repo], "problem": facts.package(repo)[1]}
                if verbose and p is not None:
                    choice = select_variants(p.variants, hardware)
                    pk[repo]["accepted"] = list(choice.accepted)
                    pk[repo]["rejected"] = [{"variant": v, "reason": why} for v, why in choice.rejected]
            out.append({"phase": phase, "route": rname, "route-digest": rt.digest,
                        "won": d.route == rname,
                        "reason": reasons[rname].reason if rname in reasons else "chosen" if d.route == rname else "",
                        "kind": reasons[rname].kind if rname in reasons else None,
                        "problems": list(facts.problems(rname)), "packages": pk,
                        "receipts": sorted(r.digest for r in lock.receipts.values()
                                           if r.route == rname and r.key.phase == phase)})
    return out
