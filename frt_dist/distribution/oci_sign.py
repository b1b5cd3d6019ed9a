"""Signatures as referrers of a lock's OCI artefact (SPEC §16 item 50; filled in below)."""

from __future__ import annotations


def attach_signatures(store, lock, digest: str, size: int) -> list[dict]:
    return []


def check_referrers(store, lock, digest: str, *, project=None) -> list[dict]:
    return []
