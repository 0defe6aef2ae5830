/* The red team's libc walk: resolve a libc function by walking libc's in-memory ELF (no dlsym, no forbidden
 * import, no syscall instruction). One copy, shared with the CPU cheat kernels of tests/test_trust_holes.py. */
#include "../attnq_libc_walk.h"
