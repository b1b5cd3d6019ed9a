// Registers the kernels as torch operators (torch.ops.frt_cuda_ops.*), so torch.compile and CUDA
// graphs see them as opaque ops, and gives the shared object the PyInit a Python import needs.
#include <Python.h>
#include <torch/library.h>

namespace frt_cuda_ops {
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
at::Tensor silu_and_mul(const at::Tensor& gate_up);
}  // namespace frt_cuda_ops

TORCH_LIBRARY(frt_cuda_ops, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("silu_and_mul(Tensor gate_up) -> Tensor");
}

TORCH_LIBRARY_IMPL(frt_cuda_ops, CUDA, m) {
  m.impl("rms_norm", &frt_cuda_ops::rms_norm);
  m.impl("silu_and_mul", &frt_cuda_ops::silu_and_mul);
}

extern "C" PyObject* PyInit__C(void) {
  static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_C", "frt-cuda-ops operators", -1, nullptr};
  return PyModule_Create(&def);
}
