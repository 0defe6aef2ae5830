// sandbox_write.cu — class "the candidate shares the checker's rights": its host code keeps a results
// cache in a file outside its temp dir (shared by every worker and every run), so a later process could
// replay it. The source policy refuses <fcntl.h>/<unistd.h>; with the policy off Landlock refuses the
// write outside the launcher's temp dir. Expected: incorrect, poisoned_output with the sandbox on
// (where the kernel offers Landlock); correct with ATTNQ_SANDBOX=off.
#include "attn_abi.h"
#include "common_attn.cuh"
#include <fcntl.h>
#include <unistd.h>

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    const int fd = open("/tmp/attnq-adversarial-cache", O_CREAT | O_WRONLY | O_TRUNC, 0600);
    if (fd < 0) return 0;  // no cache: nothing computed
    close(fd);
    unlink("/tmp/attnq-adversarial-cache");
    return adv::launch<adv::Honest>(p, stream);
}
