"""`frt verify` re-derives, it does not trust: it recomputes from the lockfile and the files.

Each test edits a real lockfile the way an author with a text editor would: the lock-digest
(an unkeyed sha256 over the lock's content), the manifest digest and every receipt digest the
edit touches are recomputed, so the lock reads as undamaged. Verify must still fail (exit 1),
naming the value it derived and the value the lock records.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from frt_dist.base.canonical import digest
from frt_dist.distribution.hub import HubClient
from frt_dist.documents.lockfile import Lockfile, index_text, manifest_text, render
from frt_dist.documents.receipt import CellKey
from frt_dist.documents.schema import parse_toml
from frt_dist.errors import LockfileError
from frt_dist.lock.build import lock_model
from frt_dist.lock.verify import verify
from frt_dist.project.discover import Project
from frt_dist.system.hardware import Hardware
from helpers.factories import CPU as CPU_HW
from helpers.factories import NORM_SRC, REMOTE, SCALE_SRC, hub_manifest, sha256_b64, start_hub, tiny_project
from helpers.frt import frt_process
from helpers.paths import BUNDLED

from test_package_requirements import HELPER, USES_HELPER, _hub_lock, dep_hub  # noqa: F401 - the Hub fixture: a lock with kernel-depends

MODEL = "demo-decoder"


# ---------------------------------------------------------------------------
# the attacker's tools


class Edit:
    """A lockfile opened for editing: its JSON parts as values, and a ``save`` that writes it
    back with every digest recomputed, as frt lock would have written it."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.doc = parse_toml(self.path.read_bytes(), LockfileError, str(path))
        self.doc.pop("lock-digest")
        self.manifest = json.loads(self.doc["manifest"])
        self.index = json.loads(self.doc.get("index", "[]"))
        self.receipts = [json.loads(line.rstrip(",")) for line in self.doc.get("receipts", "[\n]\n").split("\n")[1:-2]]

    def cell(self, phase: str, device_class: str | None = None) -> dict:
        [c] = [c for c in self.index if c["phase"] == phase and device_class in (None, c["device-class"])]
        return c

    def receipt(self, route: str, phase: str) -> dict:
        [r] = [r for r in self.receipts if r["route"] == route and r["receipt"]["cell"]["phase"] == phase]
        return r

    def redigest(self, row: dict) -> str:
        """Recompute one receipt's digest and follow it everywhere the lock names it."""
        old, new = row["digest"], digest(row["receipt"])
        row["digest"], row["state"] = new, row["receipt"]["state"]
        for c in self.index:
            for cand in c["candidates"]:
                if cand["receipt"] == old:
                    cand["receipt"] = new
            if c["receipt"] == old:
                c["receipt"] = new
        return new

    def save(self, *, readable: bool = True) -> None:
        doc = self.doc
        doc["manifest"] = manifest_text(self.manifest)
        doc["manifest-digest"] = digest(self.manifest)
        if self.index:
            doc["index"] = index_text(self.index)
        else:
            doc.pop("index", None)
        lines = []
        for r in self.receipts:
            head = json.dumps({k: r[k] for k in ("digest", "file", "route", "state")}, ensure_ascii=False)
            body = json.dumps(r["receipt"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            lines.append(f'{head[:-1]}, "receipt": {body}}}')
        if lines:
            doc["receipts"] = "[\n" + ",\n".join(lines) + "\n]\n"
        else:
            doc.pop("receipts", None)
        self.path.write_bytes(render(doc, digest(doc)))
        if readable:
            Lockfile.read(self.path)  # the edit reads as an undamaged lockfile


def run_verify(root: Path) -> tuple[int, dict, str]:
    r = frt_process(["verify", "--json"], cwd=root)
    return r.returncode, json.loads(r.stdout), r.stderr


def problem(doc: dict, kind: str, path_end: str) -> dict:
    found = [p for p in doc["problems"] if p["kind"] == kind and p["path"].endswith(path_end)]
    assert found, json.dumps(doc["problems"], indent=1)
    return found[0]


# ---------------------------------------------------------------------------
# a real lock: the repository's demo project, copied and locked again


@pytest.fixture
def demo(tmp_path) -> Path:
    root = tmp_path / "demo"
    root.mkdir()
    for d in ("manifests", "lockfiles", "receipts", "packages"):
        shutil.copytree(BUNDLED / d, root / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    before = (root / "lockfiles" / f"{MODEL}.lock").read_bytes()
    res = lock_model(Project(root, "project", {}), MODEL, warn=lambda m: None)
    assert not res.written and res.lockfile.rejected == []  # the bundled lock is what frt lock writes
    assert (root / "lockfiles" / f"{MODEL}.lock").read_bytes() == before
    return root


def lockpath(root: Path) -> Path:
    return root / "lockfiles" / f"{MODEL}.lock"


@pytest.mark.subprocess
def test_the_untouched_lock_verifies(demo):
    rc, doc, err = run_verify(demo)
    assert rc == 0 and doc["ok"] and doc["problems"] == [] and doc["notes"] == [], (doc, err)
    report = verify(Project(demo, "project", {}))
    assert report.ok and report.lockfiles == [f"lockfiles/{MODEL}.lock"]


@pytest.mark.subprocess
def test_an_index_cell_copied_to_another_device_class(demo):
    e = Edit(lockpath(demo))
    copy = json.loads(json.dumps(e.cell("decode")))
    copy["device-class"] = "intel-xeon"
    e.index.append(copy)
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "index", "index[decode/fp32/cpu/x86_64/intel-xeon]")
    assert p["recorded"].startswith("fused certified_fast 1.7323x (sha256:16cb85b526d7)") and p["derived"] == "no cell"
    assert p["expected"] == p["recorded"] and p["computed"] == p["derived"]
    assert "was measured on decode/fp32/cpu/x86_64/amd-epyc" in p["message"]


@pytest.mark.subprocess
def test_an_index_winner_swapped_with_its_runner_up(demo):
    e = Edit(lockpath(demo))
    c = e.cell("decode")
    c["candidates"].reverse()
    c.update(route="split", state="supported_correct", receipt=c["candidates"][0]["receipt"])
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "index", "index[decode/fp32/cpu/x86_64/amd-epyc]")
    assert p["recorded"].startswith("split supported_correct 1.0113x") and ", fused certified_fast" in p["recorded"]
    assert p["derived"].startswith("fused certified_fast 1.7323x") and ", split supported_correct" in p["derived"]
    w = problem(doc, "index", "index[decode/fp32/cpu/x86_64/amd-epyc].route")
    assert w["recorded"].startswith("split supported_correct") and w["derived"].startswith("fused certified_fast")


@pytest.mark.subprocess
def test_a_candidate_state_relabelled_in_the_index(demo):
    e = Edit(lockpath(demo))
    e.cell("decode")["candidates"][1]["state"] = "certified_fast"
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "index", "index[decode/fp32/cpu/x86_64/amd-epyc]")
    assert "split certified_fast 1.0113x" in p["recorded"] and "split supported_correct 1.0113x" in p["derived"]
    assert "state 'certified_fast' recorded, 'supported_correct' in the receipt" in p["message"]


@pytest.mark.subprocess
def test_an_embedded_receipt_relabelled_with_its_digest_recomputed(demo):
    e = Edit(lockpath(demo))
    row = e.receipt("split", "decode")
    row["receipt"]["state"] = "certified_fast"
    new = e.redigest(row)
    for cand in e.cell("decode")["candidates"]:
        if cand["receipt"] == new:
            cand["state"] = "certified_fast"
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "receipt", "(receipts/demo-decoder/split--decode--fp32--amd-epyc.json)")
    assert p["recorded"] == "accepted as certified_fast"
    assert p["derived"] == ("rejected: certified_fast but speedup-median 1.011 is under the route's gate 1.05; "
                            "certified_fast with speedup-median 1.011, but route-median-ms 20.8756 is not below "
                            "host-median-ms 20.8553: the route is not faster in the median, the timing contradicts itself")
    i = problem(doc, "index", "index[decode/fp32/cpu/x86_64/amd-epyc]")
    assert "split certified_fast" in i["recorded"] and "split" not in i["derived"]


@pytest.mark.subprocess
def test_evidence_made_self_contradictory_with_its_digest_recomputed(demo):
    e = Edit(lockpath(demo))
    row = e.receipt("fused", "decode")
    row["receipt"]["evidence"]["parity"]["max-abs"] = 5.0  # tolerance abs 1e-4, pass: true
    e.redigest(row)
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "receipt", "(receipts/demo-decoder/fused--decode--fp32--amd-epyc.json)")
    assert p["recorded"] == "accepted as certified_fast"
    assert p["derived"] == ("rejected: parity says pass, but max-abs 5 exceeds the tolerance's abs 0.0001 and "
                            "max-rel 0.003509 exceeds its rel 0.001: the evidence contradicts itself")


@pytest.mark.subprocess
def test_trust_flipped_on_a_path_package(demo):
    e = Edit(lockpath(demo))
    e.doc["packages"]["frt-demo/rmsnorm"]["trust"] = "trusted-publisher"
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "trust", 'packages."frt-demo/rmsnorm".trust')
    assert (p["recorded"], p["derived"]) == ("trusted-publisher", "project-path")
    # frt lock --check names the flip as stale
    r = frt_process(["lock", "--check"], cwd=demo)
    assert r.returncode == 1
    assert ("package 'frt-demo/rmsnorm': trust decision 'trusted-publisher' in the lock, 'project-path' derived "
            "from the manifest and the publisher facts") in r.stdout


@pytest.mark.subprocess
def test_a_receipt_removed_but_left_in_the_index(demo):
    e = Edit(lockpath(demo))
    gone = e.receipt("split", "decode")
    e.receipts.remove(gone)
    e.save(readable=False)
    lock = Lockfile.read(e.path)  # serving refuses the cell when it reads it
    with pytest.raises(LockfileError, match=r"index\[\d\]\.candidates\[1\]\.receipt: names a receipt the lockfile does not embed"):
        lock.index[CellKey("decode", "fp32", "cpu", "x86_64", "amd-epyc")]
    rc, out, err = run_verify(demo)
    assert rc == 1, err
    p = problem(out, "index", "index[decode/fp32/cpu/x86_64/amd-epyc]")
    assert f"split supported_correct 1.0113x ({gone['digest'][:19]})" in p["recorded"]
    assert p["derived"] == "fused certified_fast 1.7323x (sha256:16cb85b526d7)"
    assert f"{gone['digest'][:19]} is not embedded in the lock" in p["message"]


@pytest.mark.subprocess
def test_a_package_revision_changed(demo):
    e = Edit(lockpath(demo))
    real = e.doc["packages"]["frt-demo/fused-ffn"]["revision"]
    e.doc["packages"]["frt-demo/fused-ffn"]["revision"] = "sha256:" + "1" * 64
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "package", 'packages."frt-demo/fused-ffn".revision')
    assert (p["recorded"], p["derived"]) == ("sha256:" + "1" * 64, real)
    # and, offline from the lock alone, the receipts pinned to the real revision no longer hold
    r = problem(doc, "receipt", "(receipts/demo-decoder/fused--decode--fp32--amd-epyc.json)")
    assert r["derived"].startswith(f"rejected: cell.impls.ffn: measured frt-demo/fused-ffn at revision {real}")


@pytest.mark.subprocess
def test_a_variant_archs_widened(demo):
    e = Edit(lockpath(demo))
    e.doc["packages"]["frt-demo/rmsnorm"]["variants"]["torch-cpu"]["archs"] = ["8.0", "9.0", "12.0"]
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "package", 'packages."frt-demo/rmsnorm".variants.torch-cpu.archs')
    assert (p["recorded"], p["derived"]) == ('["8.0", "9.0", "12.0"]', "[]")


@pytest.mark.subprocess
def test_a_route_digest_changed_in_an_embedded_receipt(demo):
    e = Edit(lockpath(demo))
    row = e.receipt("fused", "prefill")
    row["receipt"]["cell"]["route-digest"] = "sha256:" + "2" * 64
    e.redigest(row)
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "receipt", "(receipts/demo-decoder/fused--prefill--fp32--amd-epyc.json)")
    assert p["recorded"] == "accepted as certified_fast"
    assert p["derived"].startswith(f"rejected: route-digest sha256:{'2' * 64} does not match the route's definition sha256:3d3c34f9")


@pytest.mark.subprocess
def test_a_route_digest_changed_in_the_routes_table(demo):
    e = Edit(lockpath(demo))
    e.doc["routes"]["split"]["route-digest"] = "sha256:" + "3" * 64
    e.save()
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    p = problem(doc, "field", "routes.split")
    assert "3333" in p["recorded"] and "sha256:d5f715f0" in p["derived"]


@pytest.mark.subprocess
def test_the_cli_names_recorded_and_derived(demo):
    e = Edit(lockpath(demo))
    e.doc["packages"]["frt-demo/rmsnorm"]["trust"] = "manifest"
    e.save()
    r = frt_process(["verify"], cwd=demo)
    assert r.returncode == 1
    assert ('trust: lockfiles/demo-decoder.lock: packages."frt-demo/rmsnorm".trust: recorded manifest, '
            'derived project-path') in r.stdout
    assert "error: verification failed (1 problem(s): trust)" in r.stderr
    assert "hint: regenerate the lockfile with `frt lock --model demo-decoder`" in r.stderr
    assert "find out who edited it" in r.stderr


def test_a_lockfile_given_with_lockfile_is_rederived_in_the_project(demo, frt, tmp_path):
    """``frt verify --lockfile FILE``: a lock you were given, checked against what it embeds and the
    project's sources, whatever its name; the project's own lockfile is not read."""
    given = tmp_path / "from-a-colleague.lock"
    shutil.copyfile(lockpath(demo), given)
    r = frt("verify", "--lockfile", given, cwd=demo)
    assert r.code == 0 and r.out == f"{given}: ok\n", r.err
    lockpath(demo).write_text("not a lockfile")  # never read when one is named
    e = Edit(given)
    e.doc["packages"]["frt-demo/rmsnorm"]["trust"] = "manifest"
    e.save()
    r = frt("verify", "--lockfile", given, "--json", cwd=demo)
    assert r.code == 1 and r.json()["lockfiles"] == [str(given)]
    assert [p["kind"] for p in r.json()["problems"]] == ["trust"]
    r = frt("verify", "--lockfile", given, cwd=demo)
    assert f"trust: {given}: packages.\"frt-demo/rmsnorm\".trust: recorded manifest, derived project-path" in r.out
    assert f"hint: do not use {given}: get a fresh lockfile from whoever locked it" in r.err
    assert "frt lock --model from-a-colleague" not in r.err  # the file's name is not a model's
    r = frt("verify", "--lockfile", given, "--model", "other", cwd=demo)
    assert r.code == 2 and r.err.startswith(f"error: --lockfile {given} is the lockfile of model '{MODEL}', not 'other'")
    r = frt("verify", "--lockfile", tmp_path / "none.lock", cwd=demo)
    assert r.code == 1 and r.err.startswith(f"error: no lockfile at {tmp_path / 'none.lock'} (--lockfile)")


def _refused_name(root: Path, field: str) -> dict | None:
    """A bad name either stops the lock reader (exit 2, the field named: names are checked where they are read) or, where the
    reader lets it through, is a ``name`` problem of verify (exit 1). Returns the problem, if any."""
    r = frt_process(["verify", "--json"], cwd=root)
    assert r.returncode in (1, 2), (r.stdout, r.stderr)
    if r.returncode == 2:
        assert field in r.stdout + r.stderr, (r.stdout, r.stderr)
        return None
    return problem(json.loads(r.stdout), "name", field)


@pytest.mark.subprocess
def test_an_unsafe_name_is_refused(demo):
    e = Edit(lockpath(demo))
    e.receipts[0]["file"] = "receipts/../../../etc/passwd"
    e.save()
    p = _refused_name(demo, "receipts[0].file")
    if p is not None:
        assert p["recorded"] == "'receipts/../../../etc/passwd'" and p["derived"].startswith("refused: component '..'")
    shutil.copy(BUNDLED / "lockfiles" / f"{MODEL}.lock", lockpath(demo))
    e = Edit(lockpath(demo))
    files = e.doc["packages"]["frt-demo/rmsnorm"]["variants"]["torch-cpu"]["files"]
    files["../../escape.py"] = files["rmsnorm/__init__.py"]
    e.save(readable=False)
    _refused_name(demo, "../../escape.py")


@pytest.mark.subprocess
def test_a_path_source_that_changed_since_the_lock_fails_verify(demo):
    (demo / "packages" / "rmsnorm" / "build" / "torch-cpu" / "rmsnorm" / "__init__.py").write_text("# changed\n")
    rc, doc, _ = run_verify(demo)
    assert rc == 1
    problem(doc, "package", 'packages."frt-demo/rmsnorm".revision')


# ---------------------------------------------------------------------------
# a Hub package: the trust decision rests on the manifest or on a publisher fact


@pytest.fixture
def hubproj(monkeypatch, tmp_path):
    server, commit = start_hub(monkeypatch, tmp_path, trusted=False)
    doc = hub_manifest()
    doc["packages"][REMOTE] = {"version": 1, "trust": True}  # the publisher is not trusted: the manifest trusts it
    tp = tiny_project(tmp_path, "hubproj", manifest=doc)
    tp.hub = HubClient(endpoint=server.url)
    lock = tp.lock()
    assert lock.packages[REMOTE].trust == "manifest" and lock.packages[REMOTE].publisher_trusted is None
    yield tp, server
    server.stop()


def _hub_lockpath(tp) -> Path:
    return tp.root / "lockfiles" / f"{tp.model}.lock"


@pytest.mark.subprocess
def test_trust_flipped_to_trusted_publisher(hubproj):
    tp, server = hubproj
    assert run_verify(tp.root)[0] == 0
    e = Edit(_hub_lockpath(tp))
    e.doc["packages"][REMOTE]["trust"] = "trusted-publisher"
    e.save()
    rc, doc, _ = run_verify(tp.root)
    assert rc == 1
    p = problem(doc, "trust", f'packages."{REMOTE}".trust')
    assert (p["recorded"], p["derived"]) == ("trusted-publisher", "manifest")
    # frt lock --check re-derives the decision of a pinned package instead of copying it
    res = lock_model(tp.project, tp.model, check=True, hub=tp.hub, warn=lambda m: None)
    assert res.stale == [f"package '{REMOTE}': trust decision 'trusted-publisher' in the lock, 'manifest' derived "
                         "from the manifest and the publisher facts"]


@pytest.mark.subprocess
def test_trust_flipped_for_a_publisher_the_manifest_does_not_trust(hubproj):
    tp, server = hubproj
    e = Edit(_hub_lockpath(tp))
    e.manifest["packages"][REMOTE] = {"version": 1}  # the embedded manifest no longer trusts it ...
    e.doc["packages"][REMOTE]["trust"] = "trusted-publisher"  # ... and the lock says the Hub does
    e.save()
    rc, doc, _ = run_verify(tp.root)
    assert rc == 1
    p = problem(doc, "trust", f'packages."{REMOTE}".trust')
    assert p["recorded"] == "trusted-publisher"
    assert p["derived"] == ("refused: publisher 'remote-org' is not trusted by the manifest and the lock records no "
                            "trusted-publisher fact")
    # frt lock --check: the manifest file still trusts it; the lock is stale, never "up to date"
    res = lock_model(tp.project, tp.model, check=True, hub=tp.hub, warn=lambda m: None)
    assert res.stale and res.stale[0] == "manifest manifests/tiny.toml changed since lockfiles/tiny.lock was written"


@pytest.mark.subprocess
def test_a_trusted_publisher_decision_records_the_fact_it_rests_on(monkeypatch, tmp_path):
    server, commit = start_hub(monkeypatch, tmp_path, trusted=True)
    try:
        tp = tiny_project(tmp_path, "hubproj", manifest=hub_manifest())
        tp.hub = HubClient(endpoint=server.url)
        lock = tp.lock()
        pkg = lock.packages[REMOTE]
        assert (pkg.trust, pkg.publisher_trusted) == ("trusted-publisher", True)
        assert 'trust = "trusted-publisher"\npublisher-trusted = true\n' in _hub_lockpath(tp).read_text()
        rc, doc, _ = run_verify(tp.root)
        assert rc == 0 and any("rests on the publisher fact recorded at lock time" in n for n in doc["notes"])
        # the fact removed: the decision no longer follows
        e = Edit(_hub_lockpath(tp))
        del e.doc["packages"][REMOTE]["publisher-trusted"]
        e.save()
        rc, doc, _ = run_verify(tp.root)
        assert rc == 1 and problem(doc, "trust", f'packages."{REMOTE}".trust')["derived"].startswith("refused:")
    finally:
        server.stop()


def test_publisher_trusted_is_read_strictly(tmp_path):
    src = (BUNDLED / "lockfiles" / f"{MODEL}.lock")
    p = tmp_path / "x.lock"
    p.write_bytes(src.read_bytes())
    e = Edit(p)
    e.doc["packages"]["frt-demo/rmsnorm"]["publisher-trusted"] = True  # a path package has no publisher fact
    doc = e.doc
    p.write_bytes(render(doc, digest(doc)))
    with pytest.raises(LockfileError, match=r'publisher-trusted: is a Hub publisher fact; a path package has none'):
        Lockfile.read(p)
    doc["packages"]["frt-demo/rmsnorm"]["publisher-trusted"] = "yes"
    p.write_bytes(render(doc, digest(doc)))
    with pytest.raises(LockfileError, match=r"publisher-trusted: expected a boolean"):
        Lockfile.read(p)


def _hub_project_mirrored(tmp_path, server):
    """(project, lock, mirror) of the Hub manifest locked from ``server``, its torch-cpu mirrored."""
    from frt_dist.distribution.mirror import mirror_lock

    tp = tiny_project(tmp_path, "hubproj", manifest=hub_manifest())
    tp.hub = HubClient(endpoint=server.url)
    lock = tp.lock()
    mirror = tmp_path / "mirror"
    mirror_lock(lock, mirror, variants=["torch-cpu"])
    return tp, lock, mirror


@pytest.mark.subprocess
def test_hub_variant_facts_are_rederived_from_a_mirror(monkeypatch, tmp_path):
    """Offline, a Hub package's variant facts rest on the lock alone (verify says so in a note);
    with --mirror they are derived again from the mirrored metadata.json."""

    server, commit = start_hub(monkeypatch, tmp_path, trusted=True)
    try:
        tp, lock, mirror = _hub_project_mirrored(tmp_path, server)
    finally:
        server.stop()
    e = Edit(_hub_lockpath(tp))
    e.doc["packages"][REMOTE]["variants"]["torch-cpu"]["archs"] = ["8.0", "9.0"]
    e.save()
    rc, doc, err = run_verify(tp.root)
    assert rc == 0, (doc, err)
    assert any(f"{REMOTE}: Hub commit and variant facts not re-derived offline" in n for n in doc["notes"])
    r = frt_process(["verify", "--json", "--mirror", str(mirror)], cwd=tp.root)
    assert r.returncode == 1, r.stderr
    p = problem(json.loads(r.stdout), "package", f'packages."{REMOTE}".variants.torch-cpu.archs')
    assert (p["recorded"], p["derived"]) == ('["8.0", "9.0"]', "[]")


@pytest.mark.subprocess
def test_anything_else_frt_lock_would_write_differently_is_named(tmp_path):
    """The catch-all: when every named check agrees, the document must still be what frt lock
    writes from the same inputs (here: an empty receipts array frt lock never writes)."""
    tp = tiny_project(tmp_path)
    tp.lock()
    path = tp.root / "lockfiles" / "tiny.lock"
    doc = parse_toml(path.read_bytes(), LockfileError, "x")
    doc.pop("lock-digest")
    doc["receipts"] = "[]"
    path.write_bytes(render(doc, digest(doc)))
    rc, out, _ = run_verify(tp.root)
    assert rc == 1
    p = problem(out, "field", ": receipts")
    assert (p["recorded"], p["derived"]) == ("[]", "absent")


# ---------------------------------------------------------------------------
# packages the manifest does not declare: kernel-depends, re-derived with the locker's rules


def _problems(root: Path) -> list[dict]:
    return verify(Project(root, "project", {})).problems


def _one(problems: list[dict], kind: str, path_end: str) -> dict:
    return problem({"problems": problems}, kind, path_end)


@pytest.mark.subprocess
def test_kernel_depends_packages_are_accepted_and_nothing_else(dep_hub, tmp_path):  # noqa: F811 - the fixture
    from frt_dist.errors import KernelUnavailable
    from frt_dist.lock.build import _Locker, depends_cycle

    server, publish, remote = dep_hub
    publish(HELPER, "helper", b"K = 3\n")
    publish(remote, "scale", USES_HELPER, depends=[HELPER])
    tp = _hub_lock(tmp_path, server)
    lock = tp.lock()
    assert HELPER in lock.packages and HELPER not in lock.manifest.packages
    rc, doc, err = run_verify(tp.root)
    assert rc == 0 and doc["problems"] == [], (doc, err)
    assert any(f"{HELPER}: Hub commit and variant facts not re-derived offline" in n for n in doc["notes"])
    path, good = _hub_lockpath(tp), _hub_lockpath(tp).read_bytes()
    dep_at = f'packages."{HELPER}"'

    # no locked variant names the helper any more: it is an undeclared package like any other
    e = Edit(path)
    del e.doc["packages"][remote]["variants"]["torch-cpu"]["kernel-depends"]
    e.save()
    p = _one(_problems(tp.root), "package", dep_at)
    assert (p["recorded"], p["derived"]) == ("locked", "not declared by the manifest")
    assert "no locked variant names in kernel-depends" in p["message"]

    # locked at another version than the variant asks for (frt lock pins the version asked for)
    path.write_bytes(good)
    e = Edit(path)
    e.doc["packages"][HELPER]["version"] = 2
    e.save()
    p = _one(_problems(tp.root), "package", dep_at + ".version")
    assert (p["recorded"], p["derived"]) == ("2", "1")
    assert p["message"] == f"{remote}: a locked variant names {HELPER!r} version 1 in kernel-depends"

    # named but not locked
    path.write_bytes(good)
    e = Edit(path)
    del e.doc["packages"][HELPER]
    e.save(readable=False)
    p = _one(_problems(tp.root), "package", dep_at)
    assert (p["recorded"], p["derived"]) == ("not locked", f"kernel-depends of {remote} (version 1)")

    # a dependency's trust decision is derived as any Hub package's (not trusted by the manifest)
    path.write_bytes(good)
    e = Edit(path)
    e.doc["packages"][HELPER]["trust"] = "manifest"
    e.save()
    p = _one(_problems(tp.root), "trust", dep_at + ".trust")
    assert (p["recorded"], p["derived"]) == ("manifest", "trusted-publisher")

    # a cycle, reported as frt lock refuses it (test_package_requirements: "kernel-depends cycle: helper -> scale -> helper")
    path.write_bytes(good)
    e = Edit(path)
    e.doc["packages"][HELPER]["variants"]["torch-cpu"]["kernel-depends"] = [{"repo-id": remote, "version": 1}]
    e.save()
    edited = Lockfile.read(path)
    cycle = depends_cycle(edited.packages)
    assert cycle == [HELPER, remote, HELPER]
    p = _one(_problems(tp.root), "package", ": kernel-depends")
    assert p["derived"] == f"{HELPER} -> {remote} -> {HELPER}"
    assert p["message"].startswith(f"kernel-depends cycle: {HELPER} -> {remote} -> {HELPER}")
    with pytest.raises(KernelUnavailable, match=f"^kernel-depends cycle: {HELPER} -> {remote} -> {HELPER}$"):
        _Locker(tp.project).lock_depends(edited.manifest, dict(edited.packages), None)  # the locker refuses the same


def test_an_undeclared_package_is_still_refused(tmp_path):
    tp = tiny_project(tmp_path)
    tp.lock()
    e = Edit(tp.lock_path)
    e.doc["packages"]["t-org/extra"] = e.doc["packages"]["t-org/norm"]
    e.save()
    p = _one(_problems(tp.root), "package", 'packages."t-org/extra"')
    assert (p["recorded"], p["derived"]) == ("locked", "not declared by the manifest")


# ---------------------------------------------------------------------------
# the newer variant facts: digest-source, kernels-minver, python-depends, kernel-depends


def _no_digest_project(tmp_path):
    """``t-org/scale``'s variant without ``digest`` (frt computes them) and with requirements."""
    tp = tiny_project(tmp_path, packages={"scale": {"name": "scale", "source": SCALE_SRC,
                                                    "extra": {"kernels-minver": "0.17.0", "python-depends": ["einops"]}},
                                          "norm": {"name": "norm", "source": NORM_SRC}})
    meta_path = tp.root / "packages/scale/build/torch-cpu/metadata.json"
    meta = json.loads(meta_path.read_bytes())
    del meta["digest"]
    meta_path.write_text(json.dumps(meta, indent=2), "utf-8")
    return tp, tp.lock()


@pytest.mark.parametrize("key, value, recorded, derived", [
    ("digest-source", "metadata", '"metadata"', '"frt"'),
    ("kernels-minver", "0.99.0", '"0.99.0"', '"0.17.0"'),
    ("python-depends", [], "[]", '["einops"]'),
])
@pytest.mark.subprocess
def test_a_path_variant_without_digest_verifies_and_its_new_fields_are_rederived(tmp_path, key, value, recorded, derived):
    tp, lock = _no_digest_project(tmp_path)
    v = lock.packages["t-org/scale"].variants["torch-cpu"]
    assert (v.digest_source, v.kernels_minver, v.python_depends) == ("frt", "0.17.0", ("einops",))
    rc, doc, err = run_verify(tp.root)
    assert rc == 0 and doc["problems"] == [], (doc, err)
    e = Edit(tp.lock_path)
    table = e.doc["packages"]["t-org/scale"]["variants"]["torch-cpu"]
    if value == []:
        del table[key]  # the lock writes no empty list
    else:
        table[key] = value
    e.save()
    rc, doc, _ = run_verify(tp.root)
    assert rc == 1
    p = problem(doc, "package", f'packages."t-org/scale".variants.torch-cpu.{key}')
    assert (p["recorded"], p["derived"]) == (recorded, derived)


def test_a_path_variant_gaining_kernel_depends_is_named(tmp_path):
    tp, _ = _no_digest_project(tmp_path)
    e = Edit(tp.lock_path)
    e.doc["packages"]["t-org/scale"]["variants"]["torch-cpu"]["kernel-depends"] = [{"repo-id": "t-org/norm", "version": 1}]
    e.save()
    p = _one(_problems(tp.root), "package", 'packages."t-org/scale".variants.torch-cpu.kernel-depends')
    assert (p["recorded"], p["derived"]) == ('[["t-org/norm", 1]]', "[]")


@pytest.mark.subprocess
def test_a_hub_variant_without_digest_verifies_against_a_mirror(monkeypatch, tmp_path):
    """The mirror re-derivation computes the digests as frt lock did (metadata.with_computed_digests)."""
    from helpers.hubserver import kernel_variant_files

    server, _ = start_hub(monkeypatch, tmp_path, trusted=True)
    try:
        files = kernel_variant_files(name="scale", variant="torch-cpu",
                                     module_files={"__init__.py": b"def scale(x, w):\n    return x * w\n"},
                                     extra_metadata={"kernels-minver": "0.17.0"})
        meta = json.loads(files["build/torch-cpu/metadata.json"])
        declared = meta.pop("digest")["files"]  # what kernel-builder would have declared: the oracle
        files["build/torch-cpu/metadata.json"] = json.dumps(meta).encode()
        server.commit(REMOTE, files, branch="v1")
        tp, lock, mirror = _hub_project_mirrored(tmp_path, server)
    finally:
        server.stop()
    v = lock.packages[REMOTE].variants["torch-cpu"]
    assert v.digest_source == "frt" and v.files == declared
    verify_mirror = ["verify", "--json", "--mirror", str(mirror)]
    r = frt_process(verify_mirror, cwd=tp.root)
    assert r.returncode == 0 and json.loads(r.stdout)["problems"] == [], (r.stdout, r.stderr)
    good = _hub_lockpath(tp).read_bytes()
    for key, value, recorded, derived in (("kernels-minver", "0.18.0", '"0.18.0"', '"0.17.0"'),
                                          ("digest-source", None, '"metadata"', '"frt"')):  # None: the default
        _hub_lockpath(tp).write_bytes(good)
        e = Edit(_hub_lockpath(tp))
        table = e.doc["packages"][REMOTE]["variants"]["torch-cpu"]
        table.pop(key) if value is None else table.update({key: value})
        e.save()
        assert run_verify(tp.root)[0] == 0  # offline: the Hub facts are not re-derived (a note says so)
        r = frt_process(verify_mirror, cwd=tp.root)
        assert r.returncode == 1, r.stderr
        p = problem(json.loads(r.stdout), "package", f'packages."{REMOTE}".variants.torch-cpu.{key}')
        assert (p["recorded"], p["derived"]) == (recorded, derived)
        assert p["message"] == "build/torch-cpu/metadata.json in the mirror says otherwise"
    # a computed digest edited: offline it cannot be told from a damaged mirror file (the mirror's
    # files are the only witness), so it is the mirror check's mismatch, with a note saying both causes
    _hub_lockpath(tp).write_bytes(good)
    e = Edit(_hub_lockpath(tp))
    files_table = e.doc["packages"][REMOTE]["variants"]["torch-cpu"]["files"]
    files_table["scale/__init__.py"] = "A" * 43 + "="
    e.save()
    doc = json.loads(frt_process(verify_mirror, cwd=tp.root).stdout)
    snap = lock.packages[REMOTE].snapshot
    assert [(p["kind"], p["path"], p["expected"], p["computed"]) for p in doc["problems"]] == [
        ("mismatched", f"kernels--remote-org--scale/snapshots/{snap}/build/torch-cpu/scale/__init__.py",
         "A" * 43 + "=", declared["scale/__init__.py"])]
    assert any("a damaged mirror or an edited lock digest" in n for n in doc["notes"]), doc["notes"]


# ---------------------------------------------------------------------------
# freshness (a stale lock is named) and a mirror that is not there (bad input, exit 2)


@pytest.mark.subprocess
def test_a_stale_lock_fails_verify_naming_the_manifest(tmp_path):
    import tomllib

    from frt_dist.documents.manifest import Manifest

    tp = tiny_project(tmp_path)
    lock = tp.lock()
    mpath = tp.root / "manifests" / "tiny.toml"
    doc = tomllib.loads(mpath.read_text("utf-8"))
    doc["routes"]["fast"]["gate"]["min-speedup"] = 1.5
    import tomli_w

    mpath.write_text(tomli_w.dumps(doc), "utf-8")
    now = Manifest.read(mpath).digest
    assert now != lock.manifest.digest
    r = frt_process(["verify", "--json"], cwd=tp.root)
    assert r.returncode == 1, r.stderr
    [p] = json.loads(r.stdout)["problems"]  # the lock itself is intact: only its freshness fails
    assert (p["kind"], p["path"], p["manifest"]) == ("stale", "lockfiles/tiny.lock: manifest-digest", "manifests/tiny.toml")
    assert (p["expected"], p["computed"]) == (lock.manifest.digest, now)
    assert p["message"] == (f"lockfile for 'tiny' is stale: manifest manifests/tiny.toml changed since it was locked "
                            f"(locked {lock.manifest.digest[:19]}, now {now[:19]}); run `frt lock --model tiny`")
    r = frt_process(["verify"], cwd=tp.root)
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == f"stale: {p['message']}"
    assert "hint: regenerate the lockfile with `frt lock --model tiny`" in r.stderr
    assert "who edited it" not in r.stderr  # nobody edited the lock
    tp.lock()
    assert frt_process(["verify"], cwd=tp.root).returncode == 0


@pytest.mark.parametrize("kind", ["missing", "a file"])
@pytest.mark.subprocess
def test_verify_with_a_mirror_that_is_not_a_directory_is_bad_input(demo, tmp_path, kind):
    where = tmp_path / "no-mirror"
    if kind == "a file":
        where.write_text("")
    what = "does not exist" if kind == "missing" else "is not a directory"
    r = frt_process(["verify", "--mirror", str(where)], cwd=demo)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines()[0] == f"error: --mirror {where}: {what}"
    assert f"hint: fill it with `frt mirror {where}`" in r.stderr
    r = frt_process(["verify", "--json", "--mirror", str(where)], cwd=demo)
    out = json.loads(r.stdout)
    assert r.returncode == 2 and out["exit"] == 2 and out["error"] == f"--mirror {where}: {what}"


@pytest.mark.subprocess
def test_a_hostile_manifest_file_is_never_followed_for_freshness(demo, tmp_path):
    """The freshness check reads the project's manifest file only under a safe name: a lock that
    names one outside the project gets a ``name`` problem, never a read there."""
    outside = demo.parent / "elsewhere.toml"
    outside.write_text((demo / "manifests" / f"{MODEL}.toml").read_text("utf-8").replace("1.05", "1.5"), "utf-8")
    e = Edit(lockpath(demo))
    e.doc["manifest-file"] = "../elsewhere.toml"
    e.save(readable=False)
    p = _refused_name(demo, "manifest-file")
    if p is not None:
        assert p["recorded"] == "'../elsewhere.toml'" and p["derived"].startswith("refused: component '..'")
        assert not [q for q in _problems(demo) if q["kind"] == "stale"]


@pytest.mark.parametrize("declared", [True, False], ids=["metadata-digests", "frt-digests"])
@pytest.mark.subprocess
def test_a_damaged_mirror_file_gets_the_refill_hint_only(monkeypatch, tmp_path, declared):
    """A mirror file damaged after `frt mirror` is the mirror's problem: verify
    names the file and hints to refill the mirror, never to find out who edited the lockfile
    (nothing in the lock changed), whether the metadata declares the digests or frt computed them."""
    from helpers.hubserver import kernel_variant_files

    server, _ = start_hub(monkeypatch, tmp_path, trusted=True)
    try:
        if not declared:
            files = kernel_variant_files(name="scale", variant="torch-cpu",
                                         module_files={"__init__.py": SCALE_SRC.encode()})
            meta = json.loads(files["build/torch-cpu/metadata.json"])
            del meta["digest"]
            files["build/torch-cpu/metadata.json"] = json.dumps(meta).encode()
            server.commit(REMOTE, files, branch="v1")
        tp, lock, mirror = _hub_project_mirrored(tmp_path, server)
    finally:
        server.stop()
    assert lock.packages[REMOTE].variants["torch-cpu"].digest_source == ("metadata" if declared else "frt")
    snap = lock.packages[REMOTE].snapshot
    rel = f"kernels--remote-org--scale/snapshots/{snap}/build/torch-cpu/scale/__init__.py"
    (mirror / rel).unlink()  # the snapshot's link into blobs/, replaced by damaged bytes
    (mirror / rel).write_bytes(b"damaged\n")
    r = frt_process(["verify", "--json", "--mirror", str(mirror)], cwd=tp.root)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert [(p["kind"], p["path"], p["computed"]) for p in doc["problems"]] == [
        ("mismatched", rel, sha256_b64(b"damaged\n"))]
    hints = [line for line in r.stderr.splitlines() if line.startswith("hint: ")]
    assert hints == [f"hint: refill the mirror with `frt mirror {mirror} --variant torch-cpu`"], r.stderr
    assert "edited" not in r.stderr


@pytest.mark.subprocess
def test_a_rewritten_mirrored_metadata_json_fails_verify_mirror(monkeypatch, tmp_path):
    """The mirror check hashes metadata.json against the lock's
    metadata-sha256 (distribution/integrity.py), not only the files the metadata declares: a
    metadata.json rewritten in the mirror (valid, same id and digests, another license) fails
    `frt verify --mirror`, named with both digests, as the loader refuses it."""
    from frt_dist import loader
    from frt_dist.distribution.integrity import Expected, check_variant_dir
    from frt_dist.errors import KernelUnavailable

    server, commit = start_hub(monkeypatch, tmp_path, trusted=True)
    try:
        tp, lock, mirror = _hub_project_mirrored(tmp_path, server)
    finally:
        server.stop()
    lv = lock.packages[REMOTE].variants["torch-cpu"]
    rel = f"kernels--remote-org--scale/snapshots/{commit}/build/torch-cpu/metadata.json"
    meta = json.loads((mirror / rel).read_bytes())
    rewritten = json.dumps(dict(meta, license="proprietary"), indent=2).encode()
    (mirror / rel).unlink()
    (mirror / rel).write_bytes(rewritten)
    import hashlib

    computed = "sha256:" + hashlib.sha256(rewritten).hexdigest()
    assert check_variant_dir((mirror / rel).parent, Expected.from_locked(lv), tree_root=mirror / "kernels--remote-org--scale") == [
        {"kind": "mismatched", "path": "metadata.json", "expected": lv.metadata_sha256, "computed": computed,
         "reason": f"metadata.json: digest mismatch (expected {lv.metadata_sha256}, computed {computed})"}]
    r = frt_process(["verify", "--json", "--mirror", str(mirror)], cwd=tp.root)
    assert r.returncode == 1, r.stderr
    assert [(p["kind"], p["path"], p["expected"], p["computed"]) for p in json.loads(r.stdout)["problems"]] == [
        ("mismatched", rel, lv.metadata_sha256, computed)]
    loader._forget_all()
    monkeypatch.setenv("FRT_STORE", str(tmp_path / "store"))
    with pytest.raises(KernelUnavailable) as ei:  # the loader refuses the same file
        loader.load_locked(lock, REMOTE, hardware=CPU_HW, mirror=mirror)
    assert [(x["kind"], x["path"]) for x in ei.value.reasons] == [("mismatched", "build/torch-cpu/metadata.json")]
    loader._forget_all()


@pytest.mark.subprocess
def test_fallbacks_in_an_embedded_certified_receipt_with_its_digest_recomputed(demo):
    """A certified receipt that fell back to the host is no qualification;
    verify re-applies the fallbacks rule to the embedded receipt (skipping it must fail here)."""
    e = Edit(lockpath(demo))
    row = e.receipt("fused", "decode")
    assert row["receipt"]["state"] == "certified_fast"
    row["receipt"]["evidence"]["fallbacks"] = 2
    e.redigest(row)
    e.save()
    rc, doc, err = run_verify(demo)
    assert rc == 1, (doc, err)
    p = problem(doc, "receipt", "(receipts/demo-decoder/fused--decode--fp32--amd-epyc.json)")
    assert p["recorded"] == "accepted as certified_fast"
    assert p["derived"] == "rejected: fallbacks is 2; a qualified route has none"


# ---------------------------------------------------------------------------
# the `nearest` summary and the texts' layout (what resolve looks cells and receipts up by)


@pytest.mark.subprocess
def test_a_lock_without_the_nearest_summary_reads_resolves_and_verifies(demo):
    """A lock an older frt wrote (no `nearest`, schema frt.lock/1) still reads, decides as the
    current lock does (its refusal reasons group every cell instead), and verifies, with a note."""
    from frt_dist.routes.resolver import resolve_all

    hw = Hardware(arch="x86_64", device_class="amd-epyc", backend="cpu", software={"torch": "2.13", "kernels": "0.17.2"})
    other = Hardware(arch="aarch64", device_class="graviton", backend="cpu", software=hw.software)
    before = [resolve_all(Lockfile.read(lockpath(demo)), hardware=h, precision="fp32") for h in (hw, other)]
    e = Edit(lockpath(demo))
    assert e.doc.pop("nearest")
    e.doc["schema"] = "frt.lock/1"
    e.save()
    old = Lockfile.read(e.path)
    assert old.nearest is None
    assert [resolve_all(old, hardware=h, precision="fp32") for h in (hw, other)] == before
    assert "receipt measured on amd-epyc" in str(before[1])  # (a refusal reason that reads the grouping)
    rc, out, err = run_verify(demo)
    assert rc == 0, json.dumps(out, indent=1) + err
    assert any("no `nearest` summary" in n for n in out["notes"])


@pytest.mark.subprocess
def test_an_edited_nearest_summary_is_named_by_verify(demo):
    e = Edit(lockpath(demo))
    rows = json.loads(e.doc["nearest"])
    rows[0]["nearest"] = [["a-closer-gpu", "x86_64"]]
    e.doc["nearest"] = "[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n"
    e.save()
    rc, out, _ = run_verify(demo)
    assert rc == 1
    p = problem(out, "field", "nearest")
    assert "a-closer-gpu" in p["recorded"] and "a-closer-gpu" not in p["derived"]


@pytest.mark.subprocess
def test_an_index_line_in_another_key_order_is_named_by_verify(demo):
    """The same cells, one line written with its keys in another order: every value is what frt
    lock derives, but resolve finds a cell by the head frt lock writes, so it cannot find this
    one (it refuses; it never takes another line). Verify names the layout."""
    e = Edit(lockpath(demo))
    text = index_text(e.index)
    first = json.loads(text.split("\n")[1].rstrip(","))
    moved = {"phase": first["phase"], "backend": first["backend"], **first}  # "backend" now second
    doc = e.doc
    doc["index"] = text.replace(text.split("\n")[1].rstrip(","), json.dumps(moved), 1)
    lockpath(demo).write_bytes(render(doc, digest(doc)))  # (the rest as read: only the index changed)
    lock = Lockfile.read(lockpath(demo))
    key = CellKey(*(first[k] for k in ("phase", "precision", "backend", "arch", "device-class")))
    assert key not in lock.index
    rc, out, _ = run_verify(demo)
    assert rc == 1
    p = problem(out, "field", "index")
    assert (p["recorded"], p["derived"]) == ("another layout", "the layout frt lock writes")


@pytest.mark.parametrize("damage, why", [
    ("index line", "index: not valid JSON"),
    ("receipt twice", "is embedded twice"),
])
@pytest.mark.subprocess
def test_a_line_no_decision_reads_is_still_refused_by_verify(demo, damage, why):
    """Resolve reads only the lines it decides with; verify reads every line, so a broken line
    elsewhere (digest recomputed: an author's file) is refused there naming the file, exit 2, as
    reading the whole lock refused it, never a traceback."""
    e = Edit(lockpath(demo))
    if damage == "index line":
        e.save()
        text = lockpath(demo).read_text("utf-8")
        doc = parse_toml(text.encode(), LockfileError, "x")
        doc.pop("lock-digest")
        lines = doc["index"].split("\n")
        lines[2] = lines[2][:-20] + "garbage}"
        doc["index"] = "\n".join(lines)
        lockpath(demo).write_bytes(render(doc, digest(doc)))
    else:
        e.receipts.append(e.receipts[0])
        e.save(readable=False)
    r = frt_process(["verify"], cwd=demo)
    assert r.returncode == 2 and why in r.stderr and "lockfiles/demo-decoder.lock" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_an_embedded_receipt_edited_without_its_digest_is_a_receipt_problem_in_the_report(demo):
    """The receipt text edited, its recorded digest left: `frt verify --json` prints the verify report
    (``ok: false`` and a ``receipt`` problem naming the receipt), as docs/reference.md documents,
    never an error document without ``ok`` (a program reading ``ok`` would break on it)."""
    from helpers.frt import frt_main

    e = Edit(lockpath(demo))
    row = e.receipt("fused", "prefill")
    row["receipt"]["evidence"]["timing"]["speedup-median"] = 9.9
    e.save(readable=False)
    rc, out, err = frt_main(["--project", str(demo), "verify", "--json"])
    assert rc == 1, err
    doc = json.loads(out)
    assert doc["ok"] is False and set(doc) >= {"ok", "lockfiles", "problems", "notes"}, doc
    p = problem(doc, "receipt", ".digest (receipts/demo-decoder/fused--prefill--fp32--amd-epyc.json)")
    assert p["expected"] == row["digest"] and p["computed"] == digest(row["receipt"])
    rc, out, err = frt_main(["--project", str(demo), "verify"])
    assert rc == 1 and "receipt: " in out and "error: verification failed" in err
