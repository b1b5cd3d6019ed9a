"""Host entry of the GPU check: the bundled demo's decoder block, unmodified, on CUDA.

The same weights and inputs as ``frt_dist.demo.decoder`` (seeded on the CPU, then moved), so
the host reference is the demo's; only the device differs.
"""

from frt_dist.demo.decoder import DecoderBlock


class CudaDecoderBlock(DecoderBlock):
    def __init__(self, *, seed: int = 0) -> None:
        super().__init__(seed=seed)
        self.norm_weight, self.w_gate_up, self.w_down = (t.to("cuda") for t in
                                                         (self.norm_weight, self.w_gate_up, self.w_down))

    def make_inputs(self, rows: int, *, seed: int = 0):
        return super().make_inputs(rows, seed=seed).to("cuda")


def build_host(phase=None, *, seed: int = 0) -> CudaDecoderBlock:
    return CudaDecoderBlock(seed=seed)
