// load_time_abort.cu — a fault at LOAD time: a static initializer ("check the GPU once") asserts that
// the device is a Blackwell (compute capability 10.x), so on an H200 the worker aborts inside dlopen,
// before any scenario starts. Uses only allow-listed symbols (cudaGetDevice, cudaDeviceGetAttribute,
// __assert_fail), so it passes the policy.
// Caught by: worker_isolation — verify_kernel raises VerifyError ("the worker exited ... before any
// scenario") instead of hanging or killing the caller.
#include "attn_abi.h"
#include "common_attn.cuh"
#include <assert.h>

namespace {
struct DeviceCheck {
    DeviceCheck() {
        int dev = 0, major = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        assert(major == 10 && "this kernel uses tcgen05: Blackwell only");
    }
};
const DeviceCheck device_check;  // runs when the library is loaded
}  // namespace

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    return adv::launch<adv::Honest>(p, stream);
}
