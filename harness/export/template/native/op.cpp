// op.cpp: the native (C++) CUDA implementation of torch.ops.<package>.fwd, written by `attnq export`.
//
// Built on first GPU use by the package's native/__init__.py (torch.utils.cpp_extension.load), loaded
// without a Python module, and driven through two C functions called with ctypes:
//
//   attnq_native_attach(device, attn_fwd, attn_fwd_workspace_bytes, cudaGetLastError, cudaGetErrorString,
//                       num_sms)   the kernel library the Python side loaded for that device
//   attnq_native_register(ns, dispatch_key, error, error_len)   registers fwd() as ns::fwd's kernel
//
// The kernel library is not linked: its functions arrive as addresses (it is dlopen'ed once, by the Python
// side, which also checks its sha256 and ABI version), and the launch error is read from the library's own
// CUDA runtime (nvcc links it statically by default), exactly as the Python implementation does.
//
// fwd() serves the common case: 4-D bf16/fp16 CUDA tensors of fitting shapes on one device, last
// dimension contiguous, nothing empty, the device's library attached. Every other input (and a nonzero
// status from attn_fwd) goes to the Python implementation, registered as ns::_fwd_python, which runs the
// same checks and raises the package's own exceptions (ValueError, UnsupportedArgument, NoGpuError,
// KernelDeclined) with the same messages.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "attn_abi.h"

namespace {

using FwdFn = int (*)(const attn_fwd_params*, cudaStream_t);
using WorkspaceFn = size_t (*)(const attn_fwd_params*);
using LastErrorFn = cudaError_t (*)();
using ErrorStringFn = const char* (*)(cudaError_t);
using Out = std::tuple<at::Tensor, at::Tensor>;

struct DeviceKernel {
  FwdFn fwd;
  WorkspaceFn workspace_bytes;  // may be null: the kernel needs no scratch
  LastErrorFn last_error;
  ErrorStringFn error_string;
  int64_t num_sms;
};

constexpr int kMaxDevices = 64;
std::atomic<const DeviceKernel*> g_kernels[kMaxDevices];
std::string g_ns;  // the op namespace (the package name); set once, before the first registration
std::mutex g_register_mutex;
std::vector<torch::Library*> g_libraries;  // kept for the life of the process (never deregistered)

// attn_fwd_workspace_bytes per launch configuration: dtype, shape, causal, SM count and strides.
using WorkspaceKey = std::array<int64_t, 19>;
struct WorkspaceKeyHash {
  size_t operator()(const WorkspaceKey& key) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : key) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
std::mutex g_workspace_mutex;
std::unordered_map<WorkspaceKey, size_t, WorkspaceKeyHash> g_workspace_bytes;

Out python_fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double softmax_scale, bool causal,
               int64_t sm_margin) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow((g_ns + "::_fwd_python").c_str(), "")
                             .typed<Out(const at::Tensor&, const at::Tensor&, const at::Tensor&, double, bool,
                                        int64_t)>();
  // straight to its CUDA kernel (the Python function): no autograd or backend selection on the way
  return op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CUDA), q, k, v, softmax_scale, causal, sm_margin);
}

bool fits_int32(std::initializer_list<int64_t> values) {
  return std::all_of(values.begin(), values.end(),
                     [](int64_t x) { return x > 0 && x <= std::numeric_limits<int32_t>::max(); });
}

Out fwd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double softmax_scale, bool causal,
        int64_t sm_margin) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return python_fwd(q, k, v, softmax_scale, causal, sm_margin);
  const int64_t b = q.size(0), sq = q.size(1), hq = q.size(2), d = q.size(3);
  const int64_t sk = k.size(1), hk = k.size(2);
  const at::ScalarType dtype = q.scalar_type();
  const bool common = k.size(0) == b && k.size(3) == d && v.size(0) == b && v.size(1) == sk && v.size(2) == hk &&
                      v.size(3) == d && fits_int32({b, sq, sk, hq, hk, d}) && hq % hk == 0 &&
                      (dtype == at::kBFloat16 || dtype == at::kHalf) && k.scalar_type() == dtype &&
                      v.scalar_type() == dtype && q.is_cuda() && k.device() == q.device() &&
                      v.device() == q.device() && q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1;
  const int device = q.get_device();
  const DeviceKernel* kern =
      common && device >= 0 && device < kMaxDevices ? g_kernels[device].load(std::memory_order_acquire) : nullptr;
  if (kern == nullptr) return python_fwd(q, k, v, softmax_scale, causal, sm_margin);

  c10::cuda::CUDAGuard guard(q.device());
  attn_fwd_params p{};  // reserved[] and the data pointers zero
  p.abi_version = ATTN_ABI_VERSION;
  p.dtype = dtype == at::kBFloat16 ? ATTN_DTYPE_BF16 : ATTN_DTYPE_FP16;
  p.q_batch_stride = q.stride(0), p.q_row_stride = q.stride(1), p.q_head_stride = q.stride(2);
  p.k_batch_stride = k.stride(0), p.k_row_stride = k.stride(1), p.k_head_stride = k.stride(2);
  p.v_batch_stride = v.stride(0), p.v_row_stride = v.stride(1), p.v_head_stride = v.stride(2);
  p.o_batch_stride = sq * hq * d, p.o_row_stride = hq * d, p.o_head_stride = d;  // o is contiguous
  p.batch = static_cast<int32_t>(b), p.seqlen_q = static_cast<int32_t>(sq), p.seqlen_k = static_cast<int32_t>(sk);
  p.num_heads_q = static_cast<int32_t>(hq), p.num_heads_kv = static_cast<int32_t>(hk);
  p.head_dim = static_cast<int32_t>(d);
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.causal = causal ? 1 : 0;
  p.num_sms = static_cast<int32_t>(std::max<int64_t>(1, kern->num_sms - std::max<int64_t>(0, sm_margin)));

  size_t workspace_bytes = 0;
  if (kern->workspace_bytes != nullptr) {  // asked once per configuration, on params without data (attn_abi.h)
    const WorkspaceKey key{device, static_cast<int64_t>(dtype), b, sq, sk, hq, hk, d, p.causal, p.num_sms,
                           p.q_batch_stride, p.q_row_stride, p.q_head_stride, p.k_batch_stride, p.k_row_stride,
                           p.k_head_stride, p.v_batch_stride, p.v_row_stride, p.v_head_stride};
    std::lock_guard<std::mutex> lock(g_workspace_mutex);
    auto it = g_workspace_bytes.find(key);
    if (it == g_workspace_bytes.end()) it = g_workspace_bytes.emplace(key, kern->workspace_bytes(&p)).first;
    workspace_bytes = it->second;
  }
  at::Tensor o = at::empty({b, sq, hq, d}, q.options());
  at::Tensor lse = at::empty({b, hq, sq}, q.options().dtype(at::kFloat));
  at::Tensor workspace;  // from torch's caching allocator (the graph's pool under capture)
  if (workspace_bytes != 0) {
    workspace = at::empty({static_cast<int64_t>(workspace_bytes)}, q.options().dtype(at::kByte));
    p.workspace = workspace.data_ptr();
    p.workspace_bytes = workspace_bytes;
  }
  p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.o = o.data_ptr();
  p.lse = lse.data_ptr<float>();
  const int status = kern->fwd(&p, c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
  if (status != 0) return python_fwd(q, k, v, softmax_scale, causal, sm_margin);  // raises KernelDeclined
  const cudaError_t err = kern->last_error();
  TORCH_CHECK(err == cudaSuccess, g_ns, ": the kernel launch failed: ", kern->error_string(err), " (cudaError ",
              static_cast<int>(err), ")");
  return {std::move(o), std::move(lse)};
}

void write_error(char* error, size_t error_len, const char* message) {
  if (error != nullptr && error_len > 0) std::snprintf(error, error_len, "%s", message);
}

}  // namespace

extern "C" {

// The kernel library loaded for `device`: 0 when attached, -1 for a device index out of range, -2 without
// attn_fwd or the CUDA runtime's error functions. An earlier attachment stays allocated (a call may hold it).
__attribute__((visibility("default"))) int attnq_native_attach(int device, void* fwd_fn, void* workspace_fn,
                                                              void* last_error_fn, void* error_string_fn,
                                                              int num_sms) {
  if (device < 0 || device >= kMaxDevices) return -1;
  if (fwd_fn == nullptr || last_error_fn == nullptr || error_string_fn == nullptr) return -2;
  auto* kern = new DeviceKernel{reinterpret_cast<FwdFn>(fwd_fn), reinterpret_cast<WorkspaceFn>(workspace_fn),
                                reinterpret_cast<LastErrorFn>(last_error_fn),
                                reinterpret_cast<ErrorStringFn>(error_string_fn), num_sms};
  g_kernels[device].store(kern, std::memory_order_release);
  return 0;
}

// Registers fwd() as the `dispatch_key` kernel of ns::fwd (the schema is defined by the Python side).
// 0 on success; otherwise nonzero with the reason in `error`.
__attribute__((visibility("default"))) int attnq_native_register(const char* ns, const char* dispatch_key,
                                                                char* error, size_t error_len) {
  try {
    std::lock_guard<std::mutex> lock(g_register_mutex);
    if (g_ns.empty()) g_ns = ns;
    if (g_ns != ns) {
      write_error(error, error_len, ("this library serves the namespace " + g_ns).c_str());
      return 1;
    }
    auto* lib = new torch::Library(torch::Library::IMPL, g_ns, c10::parseDispatchKey(dispatch_key), __FILE__,
                                   __LINE__);
    lib->impl("fwd", TORCH_FN(fwd));
    g_libraries.push_back(lib);
    return 0;
  } catch (const std::exception& exc) {
    write_error(error, error_len, exc.what());
    return 2;
  }
}

}  // extern "C"
