// sandbox_read_checker.cu — class "the candidate shares the checker's process": at 567c892 the candidate's
// host code ran inside the process that computes the reference and the verdict. Now it runs in its own
// process; this kernel tries to open the checker's memory (/proc/<parent>/mem, where the fp32 reference
// and the original's output live) and, failing that, writes nothing. Defense: the checker is a separate,
// non-dumpable process; the candidate has no capabilities, no ptrace (seccomp) and, under Landlock, no
// access to processes outside its sandbox. Expected: incorrect, poisoned_output; correct with
// ATTNQ_SANDBOX=off (the same user may read a dumpable process's memory... the checker is non-dumpable,
// so root with capabilities is needed: the control is root's).
#include "attn_abi.h"
#include "common_attn.cuh"
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", (int)getppid());
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;  // the reference is out of reach: nothing computed
    close(fd);
    return adv::launch<adv::Honest>(p, stream);
}
