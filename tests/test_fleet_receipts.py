"""Receipts from many hosts: qualification hosts ``frt receipts push`` to one
store, the lock job ``frt receipts pull`` and ``frt lock``: the lock's bytes do not depend on the
order the receipts arrived in, nor on one arriving twice; what the store holds is untrusted."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from frt_dist.base.canonical import digest
from frt_dist.documents.lockfile import Lockfile
from helpers.factories import CPU, receipt_doc, tiny_project
from helpers.frt import frt_process

pytestmark = pytest.mark.subprocess  # every test here starts frt or a server as a process


@pytest.fixture
def hosts(tmp_path):
    """A locked project with no receipts, and three hosts' receipt folders: host A measured decode on
    the CPU, host B decode on another CPU model (a cell of its own); both measured
    the CPU prefill (the same receipt, B's copy written with other whitespace)."""
    tp = tiny_project(tmp_path)
    tp.lock()
    lf = Lockfile.read(tp.lock_path)
    docs = {"a-dec": receipt_doc(lf, "fast", "decode", CPU), "pre": receipt_doc(lf, "fast", "prefill", CPU),
            "b-other": receipt_doc(lf, "fast", "decode", dataclasses.replace(CPU, device_class="other-cpu"))}
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    for d in (host_a, host_b):
        d.mkdir()
    (host_a / "fast--decode.json").write_text(json.dumps(docs["a-dec"], indent=1))
    (host_a / "fast--prefill.json").write_text(json.dumps(docs["pre"], indent=1))
    (host_b / "prefill-again.json").write_text(json.dumps(docs["pre"]))  # same receipt, other bytes
    (host_b / "other-cpu.json").write_text(json.dumps(docs["b-other"], indent=2))
    return tp, host_a, host_b, docs


def _lock_job(tp, tmp_path, name: str, url: str, *lock_args) -> bytes:
    """A fresh checkout of the project (no receipts), pull, lock: the lockfile's bytes."""
    job = tp.copy_to(tmp_path / name)
    shutil.rmtree(job.root / "receipts", ignore_errors=True)
    (job.root / "receipts").mkdir()
    r = frt_process(["receipts", "pull", url], cwd=job.root)
    assert r.returncode == 0, r.stderr
    r = frt_process(["lock", *lock_args], cwd=job.root)
    assert r.returncode == 0, r.stderr
    return job.lock_path.read_bytes()


@pytest.mark.slow
def test_the_lock_is_byte_identical_whatever_order_receipts_arrive_in(hosts, tmp_path, s3, bucket):
    tp, host_a, host_b, docs = hosts
    c = s3.client()
    c.create_bucket(Bucket=f"{bucket}-2")
    url1, url2 = f"s3://{bucket}/q", f"s3://{bucket}-2/q"
    for url, order in ((url1, [host_a, host_b]), (url2, [host_b, host_a, host_a])):  # B first, A twice
        for host in order:
            r = frt_process(["receipts", "push", url, str(host), "--json"], cwd=tp.root)
            assert r.returncode == 0, r.stderr
    keys = sorted(o["Key"] for o in c.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == sorted(f"q/receipts/sha256/{digest(d).split(':')[1]}.json" for d in docs.values())  # 3, not 4
    assert sorted(o["Key"] for o in c.list_objects_v2(Bucket=f"{bucket}-2")["Contents"]) == keys
    lock1 = _lock_job(tp, tmp_path, "job1", url1)
    lock2 = _lock_job(tp, tmp_path, "job2", url2)
    assert lock1 == lock2
    lf = Lockfile.read(tmp_path / "job1" / "lockfiles" / "tiny.lock")
    assert sorted(lf.receipts) == sorted(digest(d) for d in docs.values()) and not lf.rejected
    # pulled names come from the digest and the receipt's model, nothing else
    pulled = sorted(p.relative_to(tmp_path / "job1" / "receipts") for p in (tmp_path / "job1" / "receipts").rglob("*")
                    if p.is_file())
    assert pulled == sorted(Path("tiny") / f"{digest(d).split(':')[1]}.json" for d in docs.values())
    # pulling again writes nothing new
    r = frt_process(["receipts", "pull", url1, "--json"], cwd=tmp_path / "job1")
    assert r.returncode == 0 and json.loads(r.stdout)["written"] == [] and len(json.loads(r.stdout)["present"]) == 3


def test_push_validates_first_and_sends_nothing_when_a_receipt_is_invalid(hosts, s3, bucket):
    tp, host_a, _, _ = hosts
    bad = json.loads((host_a / "fast--decode.json").read_text())
    del bad["cell"]["route"]
    (host_a / "zz-bad.json").write_text(json.dumps(bad))
    r = frt_process(["receipts", "push", f"s3://{bucket}/q", str(host_a)], cwd=tp.root)
    assert r.returncode == 2 and "zz-bad.json" in r.stderr and "route" in r.stderr and "Traceback" not in r.stderr
    assert "Contents" not in s3.client().list_objects_v2(Bucket=bucket)


def test_what_the_store_holds_is_checked_before_it_is_written(hosts, tmp_path, s3, bucket):
    tp, host_a, _, docs = hosts
    assert frt_process(["receipts", "push", f"s3://{bucket}/q", str(host_a)], cwd=tp.root).returncode == 0
    c = s3.client()
    good = digest(docs["a-dec"]).split(":")[1]
    swapped = dict(docs["a-dec"], verdict="PASS, honest")  # valid receipt, but not the one its key names
    evil_model = json.loads(json.dumps(docs["a-dec"]))
    evil_model["cell"]["model"] = "../../outside"
    c.put_object(Bucket=bucket, Key=f"q/receipts/sha256/{good}.json", Body=json.dumps(swapped).encode())
    c.put_object(Bucket=bucket, Key=f"q/receipts/sha256/{digest(evil_model).split(':')[1]}.json",
                 Body=json.dumps(evil_model).encode())
    c.put_object(Bucket=bucket, Key="q/receipts/sha256/not-a-digest.json", Body=b"{}")
    c.put_object(Bucket=bucket, Key=f"q/receipts/sha256/{'0' * 64}.json", Body=b"\xff not json")
    job = tp.copy_to(tmp_path / "job")
    # the store is untrusted: each bad object is named and not written, and the pull still succeeds, so one
    # bad object cannot stop every later `frt receipts pull && frt lock`; --strict makes it a failure
    r = frt_process(["receipts", "pull", f"s3://{bucket}/q", "--strict"], cwd=job.root)
    assert r.returncode == 1 and "4 receipt(s)" in r.stderr and "Traceback" not in r.stderr, r.stderr
    shutil.rmtree(job.root / "receipts")
    r = frt_process(["receipts", "pull", f"s3://{bucket}/q"], cwd=job.root)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("warning: refused: ") == 4
    assert f"sha256/{good}.json: its canonical digest is sha256:" in r.stderr
    assert "cell.model" in r.stderr and "not-a-digest.json: not a receipt key" in r.stderr and "not valid JSON: not UTF-8" in r.stderr
    written = sorted(str(p.relative_to(job.root / "receipts")) for p in (job.root / "receipts").rglob("*.json"))
    assert written == [f"tiny/{digest(docs['pre']).split(':')[1]}.json"]  # only the one intact receipt
    assert not (tmp_path / "outside").exists()
    # pushing again repairs the damaged object (what is there is read and checked, not trusted by its key)
    assert frt_process(["receipts", "push", f"s3://{bucket}/q", str(host_a)], cwd=tp.root).returncode == 0
    stored = c.get_object(Bucket=bucket, Key=f"q/receipts/sha256/{good}.json")["Body"].read()
    assert digest(json.loads(stored)) == f"sha256:{good}"


def test_file_url_carries_receipts_too(hosts, tmp_path):
    tp, host_a, host_b, _ = hosts
    url = f"file://{tmp_path / 'shared'}"
    for host in (host_a, host_b):
        assert frt_process(["receipts", "push", url, str(host)], cwd=tp.root).returncode == 0
    assert len(list((tmp_path / "shared" / "receipts" / "sha256").iterdir())) == 3
    assert _lock_job(tp, tmp_path, "job", url) == _lock_job(tp, tmp_path, "job-b", url)


def test_pull_refuses_to_write_into_the_bundled_demo(tmp_path, s3, bucket):
    r = frt_process(["receipts", "pull", f"s3://{bucket}/q", "--demo"], cwd=tmp_path)
    assert r.returncode == 2 and "bundled demo project is read-only" in r.stderr, r.stderr


def test_signatures_travel_with_their_receipts_and_the_lock_judges_them(tmp_path, s3, bucket):
    """A qualification host signs (`frt sign`) and pushes; the lock job pulls and locks under a
    [trust.receipts] policy: the signer is recorded. A signature the store spoiled is written (the
    store is untrusted, the lock judges) and that receipt is rejected naming the signature problem."""
    import tomli_w
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    tp = tiny_project(tmp_path)
    tp.lock()
    lf = Lockfile.read(tp.lock_path)
    host = tmp_path / "host"
    host.mkdir()
    rec = host / "fast--decode.json"
    rec.write_text(json.dumps(receipt_doc(lf, "fast", "decode", CPU), indent=1))
    key = ed25519.Ed25519PrivateKey.generate()
    priv = tmp_path / "qualify-ci.pem"
    priv.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    (tp.root / "keys").mkdir()
    (tp.root / "keys" / "qualify-ci.pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    m = dict(tp.manifest)
    m["trust"] = {"receipts": {"keys": ["keys/qualify-ci.pub"]}}
    (tp.root / "manifests" / "tiny.toml").write_text(tomli_w.dumps(m), "utf-8")
    assert frt_process(["sign", "--key", str(priv), str(rec)], cwd=tp.root).returncode == 0
    url = f"s3://{bucket}/fleet"
    r = frt_process(["receipts", "push", url, str(host), "--json"], cwd=tp.root)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["signatures"] == [str(rec) + ".sig"]
    hexd = digest(json.loads(rec.read_text()))
    assert hexd.startswith("sha256:")
    sig_key = f"fleet/receipts/sha256/{hexd[7:]}.json.sig"
    c = s3.client()
    assert c.get_object(Bucket=bucket, Key=sig_key)["Body"].read() == Path(str(rec) + ".sig").read_bytes()

    _lock_job(tp, tmp_path, "job", url)
    job = tmp_path / "job"
    pulled = job / "receipts" / "tiny" / f"{hexd[7:]}.json.sig"
    assert pulled.read_bytes() == Path(str(rec) + ".sig").read_bytes()
    lock = Lockfile.read(job / "lockfiles" / "tiny.lock")
    assert not lock.rejected and lock.signatures, lock.rejected

    # the store spoils the signature: pulled as it is, and the lock rejects the receipt for it
    env = json.loads(Path(str(rec) + ".sig").read_text())
    env["signatures"][0]["sig"] = env["signatures"][0]["sig"][::-1]
    c.put_object(Bucket=bucket, Key=sig_key, Body=json.dumps(env).encode())
    shutil.rmtree(tmp_path / "job")
    _lock_job(tp, tmp_path, "job", url, "--allow-loss")  # (its only receipt rejected: no empty lock by accident)
    lock = Lockfile.read(job / "lockfiles" / "tiny.lock")
    assert [r["reason"] for r in lock.rejected] and "signature" in lock.rejected[0]["reason"], lock.rejected
    assert not lock.signatures

    # not a signature at all: refused at pull (a warning; exit 1 under --strict), the receipt itself still written
    c.put_object(Bucket=bucket, Key=sig_key, Body=b"not json")
    shutil.rmtree(tmp_path / "job")
    j = tp.copy_to(tmp_path / "job")
    shutil.rmtree(j.root / "receipts", ignore_errors=True)
    r = frt_process(["receipts", "pull", url], cwd=j.root)
    assert r.returncode == 0 and "warning: refused: " in r.stderr and "not a JSON object" in r.stderr, r.stderr
    r = frt_process(["receipts", "pull", url, "--strict"], cwd=j.root)
    assert r.returncode == 1 and "not a JSON object" in r.stderr, r.stderr
    assert (j.root / "receipts" / "tiny" / f"{hexd[7:]}.json").is_file()
    assert not pulled.exists()
