"""Emit the wgmma inline-PTX wrappers used by attn_fast_v4.cu (pasted between its GENERATED markers).

    python kernels/campaigns/fast-kernel/gen_wgmma.py > /tmp/wg.inc

SS form (A and B from shared-memory descriptors, both K-major):  S = Q K^T, N = BN keys.
RS form (A from registers, B from a descriptor, imm-trans-b = 1: B is MN-major): O += P V, N = head_dim.
Syntax: PTX ISA 8.x, "wgmma.mma_async" (sm_90a).
"""

TYPES = {"bf16": "__nv_bfloat16", "f16": "__half"}


def regs(n: int, first: int = 0) -> str:
    return ",".join(f"%{i}" for i in range(first, first + n))


def emit_ss(n: int, ptx_t: str, c_t: str) -> str:
    k = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(k))
    return f'''template <>
struct WgSS<{c_t}, {n}> {{
__device__ __forceinline__ static void run(float (&d)[{k}], uint64_t da, uint64_t db, int accumulate) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{k + 2}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_t}.{ptx_t} {{{regs(k)}}}, %{k}, %{k + 1}, p, 1, 1, 0, 0;\\n}}\\n"
        : {outs}
        : "l"(da), "l"(db), "r"(accumulate));
}}
}};
'''


def emit_rs(n: int, ptx_t: str, c_t: str) -> str:
    k = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(k))
    return f'''template <>
struct WgRS<{c_t}, {n}> {{
__device__ __forceinline__ static void run(float (&d)[{k}], const uint32_t (&a)[4], uint64_t db) {{
    asm volatile(
        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{k + 5}, 0;\\n"
        "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_t}.{ptx_t} {{{regs(k)}}}, {{{regs(4, k)}}}, %{k + 4}, p, 1, 1, 1;\\n}}\\n"
        : {outs}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}}
}};
'''


def main() -> None:
    out = []
    for ptx_t, c_t in TYPES.items():
        for n in (64, 128):
            out.append(emit_ss(n, ptx_t, c_t))
        for n in (64, 128, 256):
            out.append(emit_rs(n, ptx_t, c_t))
    print("\n".join(out), end="")


if __name__ == "__main__":
    main()
