#!/usr/bin/env python3
"""Benchmark: what a [trust.receipts] policy costs `frt lock` and `frt verify` (docs/reference.md#receipt-signatures).

Builds one tiny project (two path packages, phases decode/prefill) with N valid receipts on
distinct device classes, signs each with an Ed25519 key and an EC P-256 key (in two projects),
and times, in the same run, ``lock_model`` and ``verify`` without a policy (signature files
present and ignored) and with one. Reports seconds and the ratio to the unsigned baseline measured
in the same run (the machine is shared and noisy: ratios, not absolutes). Best of ``--repeat``.

    PYTHONPATH=. .venv/bin/python bench/bench_signing.py [--receipts 200] [--repeat 3]
"""

from __future__ import annotations

import sys

sys.dont_write_bytecode = True

import argparse
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import tomli_w
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from frt_dist.documents.lockfile import Lockfile
from frt_dist.lock.build import lock_model
from frt_dist.lock.verify import verify
from frt_dist.provenance import signing
from frt_dist.system.hardware import Hardware
from helpers.factories import receipt_doc, tiny_project


def build(base: Path, n: int, kind: str):
    tp = tiny_project(base, f"p-{kind}")
    tp.lock()
    lf = Lockfile.read(tp.lock_path)
    rdir = tp.root / "receipts" / "tiny"
    rdir.mkdir(parents=True, exist_ok=True)
    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    (tp.root / "keys").mkdir()
    (tp.root / "keys" / "ci.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for i in range(n):
        hw = Hardware(arch="x86_64", device_class=f"dev-{i:04d}", backend="cpu", software={"torch": "2.13"})
        p = rdir / f"{i:04d}.json"
        p.write_text(json.dumps(receipt_doc(lf, "fast", "decode", hw)), "utf-8")
        signing.sign_receipt(p, key)
    return tp


def set_policy(tp, on: bool) -> None:
    m = dict(tp.manifest)
    if on:
        m["trust"] = {"receipts": {"keys": ["keys/ci.pub"]}}
    (tp.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(m), "utf-8")


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--receipts", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{args.receipts} receipts, best of {args.repeat}")
        print("| key | step | no policy (s) | policy (s) | ratio |")
        print("|---|---|---:|---:|---:|")
        for kind in ("ed25519", "ec-p256"):
            tp = build(Path(tmp), args.receipts, kind)
            row = {}
            for on in (False, True):
                set_policy(tp, on)

                def lock(tp=tp):
                    return lock_model(tp.project, "tiny", warn=lambda m: None)

                lock()
                assert len(Lockfile.read(tp.lock_path).receipts) == args.receipts
                row[("lock", on)] = best(lock, args.repeat)
                report = verify(tp.project)
                assert report.ok, report.problems[:3]
                row[("verify", on)] = best(lambda tp=tp: verify(tp.project), args.repeat)
            for step in ("lock", "verify"):
                a, b = row[(step, False)], row[(step, True)]
                print(f"| {kind} | {step} | {a:.3f} | {b:.3f} | {b / a:.2f}x |")


if __name__ == "__main__":
    main()
