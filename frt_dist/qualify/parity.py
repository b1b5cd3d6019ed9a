"""Parity at the output boundary: the route's outputs against the host's under the manifest's
tolerances, element by element (``output_parity``), and one block run over every input (``run_all``)."""

from __future__ import annotations

__all__ = ["output_parity", "run_all"]


def output_parity(torch, outs_route, outs_host, tol) -> dict:
    """Parity of the route's outputs against the host's under the combined (``allclose``) rule
    ``|route - host| <= abs + rel * |host|``, element by element, in float64 (every float32 or
    float16 value is exact in float64, so the margin is computed without rounding the inputs).

    Besides the maxima it records the worst element under that rule: ``worst-margin``, the
    largest ``|route - host| - (abs + rel * |host|)``, with ``worst-margin-error`` and
    ``worst-margin-host`` (``|route - host|`` and ``|host|`` there). ``pass`` is exactly
    ``worst-margin <= 0``, so ``frt lock`` and ``frt verify`` decide it from the receipt alone."""
    worst = {"rows": None, "max-abs": -1.0}
    max_abs = max_rel = 0.0
    margin = None  # (margin, error, |host|) at the worst element so far
    ok = True
    for rows in sorted(outs_host):
        a, b = outs_route[rows], outs_host[rows]
        if tuple(a.shape) != tuple(b.shape) or not torch.isfinite(a).all():
            ok = False
            max_abs = float("inf")
            worst = {"rows": rows, "max-abs": float("inf")}
            continue
        a64, b64 = a.detach().double().reshape(-1), b.detach().double().reshape(-1)
        if a64.numel() == 0:
            continue
        err, hb = (a64 - b64).abs(), b64.abs()
        marg = err - (tol["abs"] + tol["rel"] * hb)
        i = int(marg.argmax())
        if margin is None or not float(marg[i]) <= margin[0]:  # NaN (a NaN host) is worst
            margin = (float(marg[i]), float(err[i]), float(hb[i]))
        m_abs = float(err.max())
        m_rel = float((err / (hb + tol["abs"])).max())
        if m_abs > worst["max-abs"]:
            worst = {"rows": rows, "max-abs": m_abs}
        max_abs, max_rel = max(max_abs, m_abs), max(max_rel, m_rel)
    out = {"max-abs": max_abs, "max-rel": max_rel, "tolerance": dict(tol), "worst-case": worst}
    if margin is not None:
        out.update({"worst-margin": margin[0], "worst-margin-error": margin[1], "worst-margin-host": margin[2]})
    out["pass"] = bool(ok and margin is not None and margin[0] <= 0)
    return out


def run_all(block, inputs):
    return {rows: block(x) for rows, x in inputs.items()}
