"""The real-data corpus: the 54 FlashRT Kernel Hub packages, with the CUDA
capabilities, CUDA versions and backends their public ``build.toml`` files declare
(``flashrt-project/FlashRT-HF-kernels@0823390``, via ``../shared/data/flashrt-packages.json``,
copied to ``tests/data/flashrt-archs.json``), rebuilt on the test Hub with placeholder binaries;
a Qwen3-8B-style manifest over 17 of them (5 seams, 7 routes, 4 precisions, decode and prefill);
receipts on H200, B200, RTX 5090, L40S, A100, DGX Spark (GB10, aarch64) and Jetson Thor (aarch64).

Every decision of `frt lock`, `frt resolve`, `frt matrix` and `frt mirror` is checked against an
oracle built only from `kernels`' own functions and the JSON data (``tests/helpers/realdata.py``).
"""

from __future__ import annotations

import os

import pytest

from helpers import realdata as rd
from helpers.hubserver import HubServer

pytestmark = pytest.mark.slow  # every test here takes more than ~5 s

ACCEPTS = (("certified_fast",), ("certified_fast", "supported_correct"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The corpus on a test Hub, locked once by `frt lock` (a real subprocess, cold cache)."""
    tmp = tmp_path_factory.mktemp("realdata")
    with HubServer() as server:
        c = rd.build_corpus(tmp / "proj", server)
        server.reset_counts()
        p = rd.frt(["lock", "--model", rd.MODEL, "--project", str(c.root)], c.env(tmp / "hf-lock"))
        assert p.returncode == 0, p.stderr
        c.lock_requests = server.request_count()
        c.lock_stderr = p.stderr
        yield c


@pytest.fixture(scope="module")
def lock(corpus):
    from frt_dist.documents.lockfile import Lockfile

    return Lockfile.read(corpus.lock_path)


@pytest.fixture(scope="module")
def decisions(corpus):
    """``{accept: rd.Agreement}``: `frt resolve --json` on every machine and precision, compared with
    the oracle (in this process; module scope runs before conftest's ``_hermetic``, so FRT_* and HF_*
    are cleared here)."""
    with pytest.MonkeyPatch.context() as mp:
        for k in [k for k in os.environ if k.startswith(("FRT_", "HF_", "KERNELS_"))]:
            mp.delenv(k)
        return {acc: rd.agreement(corpus.root, corpus.specs, acc) for acc in ACCEPTS}


def test_the_corpus_is_the_real_declarations():
    """At least 50 real packages; every CUDA one publishes x86_64 and aarch64 variants, the noarch
    one `torch-cuda`, and the declared capabilities end up in ``backend.archs``."""
    pk = {p["repo_id"]: p for p in rd.packages()}
    assert len(pk) >= 50
    assert rd.variants_of(pk["flashrt/fp8-gemm"]) == {
        "torch213-cxx11-cu128-x86_64-linux": ("cuda", ["8.9", "11.0a", "12.0a"]),
        "torch213-cxx11-cu130-x86_64-linux": ("cuda", ["8.9", "11.0a", "12.0a"]),
        "torch213-cxx11-cu130-aarch64-linux": ("cuda", ["8.9", "11.0a", "12.0a"])}
    assert rd.variants_of(pk["flashrt/fa4-cute-runtime"]) == {"torch-cuda": ("cuda", None)}
    assert set(rd.variants_of(pk["flashrt/fused-mlp-megakernels-blackwell"])) == {
        "torch213-cxx11-cu130-x86_64-linux", "torch213-cxx11-cu130-aarch64-linux"}  # [general.cuda] minver 13.0
    assert "torch213-cxx11-rocm71-x86_64-linux" in rd.variants_of(pk["flashrt/flashrt-fp8-ffn"])
    used = {r for route in rd.ROUTES for r in rd.route_repos(route)}
    assert len(used) == 17 and used <= set(pk)
    assert {p for p, _ in rd.ROUTES.values()} == set(rd.PRECISIONS) and len(rd.ROUTES) == 7
    assert len({s for _, seams in rd.ROUTES.values() for s in seams}) == 5


@pytest.mark.subprocess
def test_lock_pins_every_package_at_its_branch_with_the_published_archs(corpus, lock):
    assert set(lock.packages) == set(corpus.commits)
    for p in rd.packages():
        got = lock.packages[p["repo_id"]]
        assert got.revision == corpus.commits[p["repo_id"]], p["repo_id"]
        assert set(got.variants) == set(rd.variants_of(p)), p["repo_id"]
        for name, (_, archs) in rd.variants_of(p).items():
            assert list(got.variants[name].archs or []) == list(archs or []), (p["repo_id"], name)
    # a cold lock asks per package for its branches, its build/ listing and each variant's metadata.json
    # (+1: huggingface_hub's telemetry registry); nothing per file, nothing twice
    n_variants = sum(len(rd.variants_of(p)) for p in rd.packages())
    assert corpus.lock_requests <= 2 * len(corpus.commits) + n_variants + 1, corpus.lock_requests


@pytest.mark.subprocess
def test_receipts_the_device_archs_do_not_admit_are_rejected_at_lock(corpus, lock):
    """One admissibility rule: a receipt whose cell the locked variant's archs do not admit is rejected at lock
    time, naming the package; every admitted one is accepted."""
    rejected = {r["file"].rsplit("/", 1)[-1]: r["reason"] for r in lock.rejected}
    bad = [s for s in corpus.specs if not s.admitted]
    assert bad, "the corpus must hold receipts on devices their archs do not admit"
    missing = [s.file for s in bad if s.file not in rejected]
    assert not missing, f"{len(missing)}/{len(bad)} not rejected, e.g. {missing[:3]}"
    for s in bad:
        reason = rejected[s.file]
        assert any(r.split("/", 1)[1] in reason for r in s.blocking) and s.machine.arch in reason, (s.file, reason)
    wrongly = [s.file for s in corpus.specs if s.admitted and s.file in rejected]
    assert not wrongly, {f: rejected[f] for f in wrongly}
    warned = [line for line in corpus.lock_stderr.splitlines() if line.startswith("warning: ")]
    assert all(any(s.file in line for line in warned) for s in bad), corpus.lock_stderr[-2000:]  # each invalid receipt is named


@pytest.mark.parametrize("accept", ACCEPTS, ids=["certified", "both"])
@pytest.mark.subprocess
def test_every_resolve_decision_agrees_with_the_kernels_oracle(decisions, accept):
    """7 machines x 4 precisions x 2 bands through `frt resolve --json` with declared hardware: route
    and state, or refusal, and the reason of every route not taken (text checked), equal to the
    oracle's; resolve exits 1 when any requested band is refused."""
    r = decisions[accept]
    print(f"oracle agreement ({','.join(accept)}): {r.agree}/{r.total}")
    assert r.agree == r.total and not r.diffs, "\n".join(r.diffs[:20])


@pytest.mark.subprocess
def test_the_corpus_covers_routes_and_every_refusal_kind(corpus):
    """The oracle's table is not trivial: routes are chosen in both states, each refusal reason
    occurs, and in some cell state must outrank speed (a certified_fast winner over a faster
    supported_correct receipt), so a ranking that forgot either rule would disagree."""
    cells = [(m, prec, ph) for m in rd.MACHINES for prec in rd.PRECISIONS for ph in rd.PHASES]
    both = {c: rd.expected_decision(corpus.specs, *c, ACCEPTS[1]) for c in cells}
    cert = {c: rd.expected_decision(corpus.specs, *c, ACCEPTS[0]) for c in cells}
    assert sum(e["route"] is not None for e in both.values()) >= 5
    assert {e["state"] for e in both.values()} >= {"certified_fast", "supported_correct", "unknown"}
    phrases = " | ".join(r for e in [*both.values(), *cert.values()] for r in e["reasons"].values())
    for kind in ("variant for this system not locked", "declares", "no receipt for this cell", "ranked below",
                 "route precision is", "receipt is supported_correct; accept is certified_fast"):
        assert kind in phrases, kind
    assert any(e["state"] == "certified_fast" and any(
        s.state == "supported_correct" and s.speedup > e["speedup"] and s.admitted and (s.machine, s.phase) == (m, ph)
        and rd.ROUTES[s.route][0] == prec for s in corpus.specs) for (m, prec, ph), e in both.items())


def _matrix_winners(md: str) -> dict[tuple[str, str, str], str]:
    """``{(phase, precision, device class): route}`` of the ★ cells of `frt matrix`'s Markdown."""
    header, out = [], {}
    for line in md.splitlines():
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if cols[0] == "phase":
            header = cols
        elif header and line.startswith("|") and len(cols) == len(header) and cols[0] in rd.PHASES:
            row = dict(zip(header, cols, strict=True))
            for route in rd.ROUTES:
                if row[route].startswith("★"):
                    out[(row["phase"], row["precision"], row["device class"])] = route
    return out


@pytest.mark.subprocess
def test_matrix_winners_are_the_resolve_decisions(corpus, decisions):
    """One admissibility rule: the matrix never shows a winner that resolve refuses (accept both states)."""
    rc, md, err = rd.cli(["matrix", "--model", rd.MODEL, "--project", str(corpus.root)])
    assert rc == 0, err
    winners = _matrix_winners(md)
    chosen = {(d["phase"], prec, m.device_class): d["route"]
              for (m, prec), doc in decisions[ACCEPTS[1]].docs.items() for d in doc.get("decisions", []) if d["route"]}
    assert winners == chosen


@pytest.mark.parametrize("machine", [rd.MACHINES[0], rd.MACHINES[-1]], ids=lambda m: m.device_class)
@pytest.mark.subprocess
def test_mirror_for_a_machine_holds_the_variants_kernels_selects(corpus, tmp_path, machine):
    """`frt mirror DIR` for a declared machine fetches, per locked package, exactly the variant
    `kernels` would select there (x86_64 cu128 on H200, aarch64 cu130 on Jetson Thor)."""
    p = rd.frt(["mirror", str(tmp_path / "mirror"), "--model", rd.MODEL, "--project", str(corpus.root),
                *machine.flags()], corpus.env(tmp_path / "hf"))
    assert p.returncode == 0, p.stderr
    assert rd.mirrored(tmp_path / "mirror") == rd.expected_mirror(machine)
