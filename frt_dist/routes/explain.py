"""Explanations of decisions (``frt resolve --explain``): a ``Reporter`` that
records every event, and the candidate table of each phase band. Nothing here
is on the serving path."""

from __future__ import annotations

from .resolver import Reporter

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


def candidates(lock, decisions) -> list[dict]:
    """Every route of the binding per decided band: won or lost and why, its
    route-digest, and the revision and variants of each package it uses."""
    out = []
    m = lock.manifest
    for phase, d in decisions.items():
        reasons = {r.route: r.reason for r in d.reasons}
        for rname, rt in m.routes.items():
            pk = {}
            for repo in m.route_packages(rname):
                p = lock.packages[repo]
                pk[repo] = {"revision": p.revision, "variants": sorted(p.variants),
                            "variant": d.variants.get(repo) if d.route == rname else None}
            out.append({"phase": phase, "route": rname, "route-digest": rt.digest,
                        "won": d.route == rname, "reason": reasons.get(rname, "chosen" if d.route == rname else ""),
                        "packages": pk,
                        "receipts": sorted(r.digest for r in lock.receipts.values()
                                           if r.route == rname and r.key.phase == phase)})
    return out
