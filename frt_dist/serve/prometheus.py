"""The plan's ledger as Prometheus text exposition (``Plan.ledger(format="prometheus")``)."""

from __future__ import annotations

from .ledger import NOT_OBSERVED

__all__ = ["exposition", "SEAM_COUNTERS"]

# (family, kind, help, ledger key per band): the per-seam counters, also what the vLLM plugin sums over its
# engine processes (frt_dist/serve/vllm/metrics.py)
SEAM_COUNTERS = (
    ("frt_seam_calls_total", "counter", "Calls that entered the frt guard, per seam and phase band.", "calls"),
    ("frt_seam_fallbacks_total", "counter", "Contract misses that ran the caller's host path.", "fallbacks"),
    ("frt_seam_host_calls_total", "counter", "Calls served by the host path by decision (host band, unbound seam, detached).",
     "host-calls"),
    ("frt_seam_contract_refusals_total", "counter", "Contract misses that raised ContractViolation.",
     "contract-refusals"),
    ("frt_seam_bind_refusals_total", "counter", "plan.entry requests refused (RouteRefused).", "bind-refusals"),
    ("frt_seam_captures_total", "counter", "Calls made while a CUDA graph was captured (in calls; replays are not counted).",
     "captures"),
)


def _esc(v) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**kw) -> str:
    return "{" + ",".join(f'{k}="{_esc(v if v is not None else "")}"' for k, v in kw.items()) + "}"


def exposition(snap: dict, plan) -> str:
    """``Plan.ledger("prometheus")``: the snapshot ``snap`` of ``plan`` as Prometheus text."""
    model = snap["model"]
    lines: list[str] = []

    def head(name, kind, text):
        lines.extend([f"# HELP {name} {text}", f"# TYPE {name} {kind}"])

    views = [(seam, p, v) for seam, s in snap["seams"].items() for p, v in s["phases"].items()]
    for name, kind, text, key in SEAM_COUNTERS:
        head(name, kind, text)
        for seam, p, v in views:
            lines.append(f"{name}{_labels(model=model, seam=seam, phase=p, route=v['route'], state=v['state'])} {v[key]}")
    head("frt_seam_contract_misses_total", "counter",
         "Contract misses by reason kind (arity, type, device, dtype, layout, rows, width, shape).")
    for seam, p, v in views:
        for kind, n in v["contract-misses"].items():
            lines.append(f"frt_seam_contract_misses_total{_labels(model=model, seam=seam, phase=p, reason=kind)} {n}")
    head("frt_seam_observed", "gauge", "1 when the guard's counters saw every call; 0 when the seam ran inside "
         f"a compiled graph ({NOT_OBSERVED}).")
    for seam, p, v in views:
        lines.append(f"frt_seam_observed{_labels(model=model, seam=seam, phase=p)} {int(v['observed'])}")
    head("frt_package_info", "gauge", "Packages bound by the plan (value 1), with revision, variant and pin flag.")
    for repo, pkg in sorted(plan.packages.items()):
        labels = _labels(model=model, repo=repo, revision=pkg.revision, variant=pkg.variant, source=pkg.source,
                         pinned=str(pkg.pinned).lower())
        lines.append(f"frt_package_info{labels} 1")
    for key, name, kind, text in (
            ("calls", "frt_calls_total", "counter", "Guarded calls, all seams."),
            ("fallbacks", "frt_fallbacks_total", "counter", "Contract-miss fallbacks to the host, all seams."),
            ("host-decisions", "frt_host_decisions", "gauge", "Phase bands the plan decided host (no qualified route)."),
            ("host-calls", "frt_host_calls_total", "counter", "Calls served by the host by decision, all seams."),
            ("refusals", "frt_refusals_total", "counter", "Contract and bind refusals, all seams.")):
        head(name, kind, text)
        lines.append(f"{name}{_labels(model=model)} {snap['totals'][key]}")
    return "\n".join(lines) + "\n"
