// RMSNorm and fused SiLU-and-multiply for frt-cuda-ops (fp32, fp16, bf16; fp32 accumulation).
// Both launch on the current CUDA stream, so they run inside CUDA graph capture and after
// whatever the caller queued before them.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace frt_cuda_ops {

constexpr int kWarp = 32;

// One block per row: sum of squares reduced across the block, then x * rsqrt(mean + eps) * w.
template <typename T>
__global__ void rms_norm_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ w,
                                int hidden, float eps) {
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * hidden;
  T* outr = out + static_cast<int64_t>(blockIdx.x) * hidden;
  float ss = 0.f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float v = static_cast<float>(xr[i]);
    ss += v * v;
  }
  __shared__ float partial[kWarp];
  for (int off = kWarp / 2; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) partial[warp] = ss;
  __syncthreads();
  if (warp == 0) {
    ss = lane < blockDim.x / kWarp ? partial[lane] : 0.f;
    for (int off = kWarp / 2; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    if (lane == 0) partial[0] = ss;
  }
  __syncthreads();
  const float inv = rsqrtf(partial[0] / hidden + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    outr[i] = static_cast<T>(static_cast<float>(xr[i]) * inv * static_cast<float>(w[i]));
  }
}

// out[r, j] = silu(in[r, j]) * in[r, d + j] for the [rows, 2d] input (gate half first).
template <typename T>
__global__ void silu_and_mul_kernel(T* __restrict__ out, const T* __restrict__ in, int64_t d, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / d, col = i % d;
    const float g = static_cast<float>(in[row * 2 * d + col]);
    const float u = static_cast<float>(in[row * 2 * d + d + col]);
    out[i] = static_cast<T>(g / (1.f + __expf(-g)) * u);
  }
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "rms_norm: x and weight must be CUDA tensors");
  TORCH_CHECK(x.scalar_type() == weight.scalar_type(), "rms_norm: x and weight dtypes differ");
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && x.size(-1) == weight.size(0),
              "rms_norm: weight must be [hidden] with hidden = x.size(-1)");
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor xc = x.contiguous(), wc = weight.contiguous();
  at::Tensor out = at::empty_like(xc);
  const int hidden = static_cast<int>(xc.size(-1));
  const int64_t rows = xc.numel() / hidden;
  if (rows == 0) return out;
  const int threads = hidden >= 1024 ? 1024 : ((hidden + kWarp - 1) / kWarp) * kWarp;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "rms_norm", [&] {
    rms_norm_kernel<scalar_t><<<rows, threads, 0, stream>>>(out.data_ptr<scalar_t>(), xc.data_ptr<scalar_t>(),
                                                            wc.data_ptr<scalar_t>(), hidden, static_cast<float>(eps));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor silu_and_mul(const at::Tensor& gate_up) {
  TORCH_CHECK(gate_up.is_cuda(), "silu_and_mul: gate_up must be a CUDA tensor");
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0, "silu_and_mul: the last dimension must be even");
  const c10::cuda::CUDAGuard guard(gate_up.device());
  const at::Tensor in = gate_up.contiguous();
  const int64_t d = in.size(-1) / 2;
  auto sizes = in.sizes().vec();
  sizes.back() = d;
  at::Tensor out = at::empty(sizes, in.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 65535);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.scalar_type(), "silu_and_mul", [&] {
    silu_and_mul_kernel<scalar_t><<<blocks, threads, 0, stream>>>(out.data_ptr<scalar_t>(), in.data_ptr<scalar_t>(), d, n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace frt_cuda_ops
