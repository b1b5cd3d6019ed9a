"""Foundations every other part stands on: value classes, canonical digests, names, safe folders."""
