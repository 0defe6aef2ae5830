/* entry_guard.c — the run-time half of the driver entry-point rule (harness/policy.py has the static half).
 *
 * Loaded into the launcher process (harness/launcher.py) with RTLD_GLOBAL BEFORE the CUDA runtime and the
 * candidate, so the candidate's imports of cudaGetDriverEntryPoint* bind here (no LD_PRELOAD). Only a name
 * that is cuTensorMap followed by letters, digits or '_' is passed on to the runtime (dlsym RTLD_NEXT);
 * any other name gets a NULL function, cudaDriverEntryPointSymbolNotFound and cudaErrorNotPermitted, and
 * is recorded for the launcher, which reports it to the checker (the scenario fails: symbol_policy).
 * It also lists, for the launcher, the loaded libraries whose file name or soname names cuBLAS, cuDNN or CUTLASS
 * (dl_iterate_phdr: whatever the dynamic linker loaded, however dlopen was reached, e.g. found by walking
 * libc's memory with no import); harness/policy.py forbidden_library_reason judges the names. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define NOT_PERMITTED 800        /* cudaErrorNotPermitted */
#define SYMBOL_NOT_FOUND 1       /* cudaDriverEntryPointSymbolNotFound */

static volatile long refused_count = 0;
static char last_refused[128];

static int allowed(const char* s) {
    if (s == NULL || strncmp(s, "cuTensorMap", 11) != 0) return 0;
    for (const char* c = s + 11; *c; ++c)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_')) return 0;
    return 1;
}

static int refuse(const char* s, void** fn, int* status) {
    size_t i = 0;
    if (s != NULL)
        for (; s[i] && i + 1 < sizeof last_refused; ++i) last_refused[i] = s[i];
    last_refused[i] = 0;
    __atomic_add_fetch(&refused_count, 1, __ATOMIC_SEQ_CST);
    if (fn) *fn = NULL;
    if (status) *status = SYMBOL_NOT_FOUND;
    return NOT_PERMITTED;
}

/* The runtime's own definition: next in the global scope, else from the already loaded runtime (the
 * candidate's dependency, in its local scope when the launcher did not load the runtime globally). */
static void* real_symbol(const char* name) {
    void* f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        void* h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
        if (h != NULL) f = dlsym(h, name);
    }
    return f;
}

typedef int (*entry_fn)(const char*, void**, unsigned long long, int*);
typedef int (*entry_v_fn)(const char*, void**, unsigned int, unsigned long long, int*);

#define GUARD(NAME)                                                                             \
    int NAME(const char* symbol, void** fn, unsigned long long flags, int* status) {            \
        static entry_fn real = NULL;                                                            \
        if (!allowed(symbol)) return refuse(symbol, fn, status);                                \
        if (real == NULL) real = (entry_fn)real_symbol(#NAME);                            \
        return real ? real(symbol, fn, flags, status) : refuse(symbol, fn, status);             \
    }
#define GUARD_V(NAME)                                                                           \
    int NAME(const char* symbol, void** fn, unsigned int version, unsigned long long flags,     \
             int* status) {                                                                     \
        static entry_v_fn real = NULL;                                                          \
        if (!allowed(symbol)) return refuse(symbol, fn, status);                                \
        if (real == NULL) real = (entry_v_fn)real_symbol(#NAME);                          \
        return real ? real(symbol, fn, version, flags, status) : refuse(symbol, fn, status);    \
    }

GUARD(cudaGetDriverEntryPoint)
GUARD(cudaGetDriverEntryPoint_ptsz)
GUARD_V(cudaGetDriverEntryPointByVersion)
GUARD_V(cudaGetDriverEntryPointByVersion_ptsz)

/* For the launcher: how many names were refused so far, and the last one. */
long attnq_guard_refused_count(void) { return __atomic_load_n(&refused_count, __ATOMIC_SEQ_CST); }
const char* attnq_guard_last_refused(void) { return last_refused; }

/* The loaded libraries whose file name or DT_SONAME (less "lib") starts with cublas, cudnn or cutlass: their number
 * now, and the last one found (its path, or its soname where only that matched: a renamed copy keeps its soname).
 * dl_iterate_phdr walks the dynamic linker's list: no system call. */
static char forbidden_path[512];
static int forbidden_name(const char* name) {
    static const char* const names[] = {"cublas", "cudnn", "cutlass"};
    if (name == NULL || name[0] == 0) return 0;
    const char* base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "lib", 3) == 0) base += 3;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (strncasecmp(base, names[i], strlen(names[i])) == 0) return 1;
    return 0;
}
static const char* soname_in(const ElfW(Dyn)* d, uintptr_t base) {
    uintptr_t strtab = 0;
    long so = -1;
    if (d == NULL) return NULL;
    for (; d->d_tag != DT_NULL; ++d) {
        if (d->d_tag == DT_STRTAB) strtab = (uintptr_t)d->d_un.d_ptr;
        if (d->d_tag == DT_SONAME) so = (long)d->d_un.d_val;
    }
    if (strtab == 0 || so < 0) return NULL;
    if (strtab < base) strtab += base;  /* not relocated in place */
    return (const char*)strtab + so;
}
static const char* soname_of(const struct dl_phdr_info* info) {
    for (int i = 0; i < info->dlpi_phnum; ++i)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            return soname_in((const ElfW(Dyn)*)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr), info->dlpi_addr);
    return NULL;
}
static int forbidden_one(struct dl_phdr_info* info, size_t size, void* count) {
    (void)size;
    const char* path = info->dlpi_name;
    const char* soname = soname_of(info);
    const char* hit = forbidden_name(path) ? path : forbidden_name(soname) ? soname : NULL;
    if (hit != NULL) {
        strncpy(forbidden_path, hit, sizeof forbidden_path - 1);
        ++*(long*)count;
    }
    return 0;
}
long attnq_guard_forbidden_libraries(void) {
    long count = 0;
    dl_iterate_phdr(forbidden_one, &count);
    return count;
}
const char* attnq_guard_forbidden_library(void) { return forbidden_path; }

/* The same library, given to the launcher's interpreter as LD_AUDIT (harness/launch_client.py), is the dynamic
 * linker's auditor (rtld-audit(7)): it sees every load in every namespace (dlmopen too), before it happens and even
 * when the library is closed again before the call returns. A search for a forbidden name finds nothing (the load
 * fails as if the file did not exist); a forbidden library about to be mapped by path or found by its soname (a
 * renamed copy) stops the process with exit code 86 (harness.endpoints.AUDIT_EXIT_CODE) before its code runs. */
unsigned int la_version(unsigned int version) {
    (void)version;
    return LAV_CURRENT;
}
char* la_objsearch(const char* name, uintptr_t* cookie, unsigned int flag) {
    (void)cookie;
    (void)flag;
    return forbidden_name(name) ? NULL : (char*)name;
}
unsigned int la_objopen(struct link_map* map, Lmid_t lmid, uintptr_t* cookie) {
    (void)lmid;
    (void)cookie;
    if (forbidden_name(map->l_name) || forbidden_name(soname_in(map->l_ld, map->l_addr))) {
        static const char msg[] = "attnq entry guard: a cuBLAS, cuDNN or CUTLASS library was loaded: the launcher stops\n";
        if (write(2, msg, sizeof msg - 1) < 0) _exit(86);
        _exit(86);
    }
    return 0;
}
