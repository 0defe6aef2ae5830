// sandbox_unix_socket.cu — class "the candidate shares the checker's rights" (red team rt9): host code
// opens a unix datagram socket (to sendto a listener outside the sandbox, no connect needed), through
// libc_walk.cuh. Defense: seccomp refuses every new socket (and socketpair, connect, bind, sendto with an
// address); the launcher keeps only the connected socket it was given.
// Expected: incorrect, poisoned_output with the sandbox on; correct with ATTNQ_SANDBOX=off.
#include "attn_abi.h"
#include "common_attn.cuh"
#include "libc_walk.cuh"

extern "C" int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    typedef int (*socket_fn)(int, int, int);
    typedef long (*sendto_fn)(int, const void*, size_t, int, const void*, unsigned);
    static int ok = -1;
    if (ok < 0) {
        socket_fn sk = walk::libc<socket_fn>("socket");
        sendto_fn to = walk::libc<sendto_fn>("sendto");
        const int fd = sk ? sk(1 /* AF_UNIX */, 2 /* SOCK_DGRAM */, 0) : -1;
        struct { unsigned short family; char path[108]; } addr = {1, "/tmp/attnq-adversarial.sock"};
        if (fd >= 0 && to) to(fd, "hello", 5, 0, &addr, sizeof addr);  // a listener there would get it
        ok = fd >= 0;
    }
    return ok ? adv::launch<adv::Honest>(p, stream) : 0;
}
