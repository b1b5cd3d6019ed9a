"""A tiny host binding for qualification tests: ``x + scale(x, w)`` with a
deliberately slow host seam, so speed verdicts do not hang on machine noise."""

import time

import torch

HOST_DELAY_S = 0.002


def host_scale(x, w):
    time.sleep(HOST_DELAY_S)
    return x * w


class ToyBlock:
    seam_names = ("norm",)

    def __init__(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.w = torch.randn(8, generator=g)
        self.seams = {"norm": host_scale}
        self.host_seams = dict(self.seams)

    def __call__(self, x):
        return x + self.seams["norm"](x, self.w)

    def bind(self, seam, fn):
        self.seams[seam] = fn

    def detach(self):
        self.seams = dict(self.host_seams)

    def make_inputs(self, rows, *, seed=0):
        return torch.randn(rows, 8, generator=torch.Generator().manual_seed(seed))


def build_host(phase=None, *, seed=0):
    return ToyBlock(seed)
