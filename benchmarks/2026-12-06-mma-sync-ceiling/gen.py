#!/usr/bin/env python3
"""PTX for the mma.sync ceiling probe (issue 55): one kernel `k(out, iters)` whose warps each run `iters`
iterations of 4 k16 steps of `MT x NT` `mma.sync.m16n8k16` (bf16 in, f32 accumulate) into MT*NT accumulators.
mode "pure": the operands are registers set once (the tensor pipe alone); mode "ldm": every k16 step first reads
its fragments with `ldmatrix.x4` (MT for A, NT/2 for B, as the portable TMA consumers' `mma_stage_slab` does),
from conflict-free 512-byte blocks of shared memory that alternate between two 8 KiB halves per iteration."""
import sys


def kernel(mode, mt, nt, warps):
    assert nt % 2 == 0
    L = []
    e = L.append
    e(".version 8.0\n.target sm_90\n.address_size 64\n")
    e(f".visible .entry k(.param .u64 out, .param .u32 iters) .maxntid {32 * warps}, 1, 1 {{")
    e("  .reg .pred %p;\n  .reg .b32 %r<16>;\n  .reg .b64 %rd<4>;")
    nacc = mt * nt * 4
    e(f"  .reg .f32 %d<{nacc}>;\n  .reg .f32 %s;")
    e(f"  .reg .b32 %a<{4 * 4 * mt}>;\n  .reg .b32 %b<{4 * 4 * (nt // 2)}>;")
    e("  .shared .align 128 .b8 sm[16384];")
    e("  ld.param.u64 %rd0, [out];\n  ld.param.u32 %r0, [iters];")
    e("  mov.u32 %r1, %tid.x;")
    # zero shared memory: 4096 words
    e("  mov.u32 %r2, %r1;")
    e("ZERO:\n  shl.b32 %r3, %r2, 2;\n  mov.u32 %r4, sm;\n  add.u32 %r3, %r3, %r4;\n  st.shared.u32 [%r3], 0;")
    e(f"  add.u32 %r2, %r2, {32 * warps};\n  setp.lt.u32 %p, %r2, 4096;\n  @%p bra ZERO;\n  bar.sync 0;")
    for i in range(nacc):
        e(f"  mov.f32 %d{i}, 0f00000000;")
    if mode == "pure":
        # operands from the thread index (any bits: the MMA's timing does not depend on them)
        for i in range(4 * 4 * mt):
            e(f"  xor.b32 %a{i}, %r1, {0x3F803F80 + i};")
        for i in range(4 * 4 * (nt // 2)):
            e(f"  xor.b32 %b{i}, %r1, {0x3F803F80 + 7 * i};")
    # lane address: sm + lane*16
    e("  and.b32 %r5, %r1, 31;\n  shl.b32 %r5, %r5, 4;\n  mov.u32 %r4, sm;\n  add.u32 %r5, %r5, %r4;")
    e("  mov.u32 %r6, 0;")
    e("LOOP:")
    e("  and.b32 %r7, %r6, 1;\n  shl.b32 %r7, %r7, 13;\n  add.u32 %r8, %r5, %r7;")
    for kk in range(4):
        q = kk if mode == "ldm" else 0  # pure: the same operand registers every step
        ab = lambda m, x: f"%a{(q * mt + m) * 4 + x}"
        bb = lambda j, x: f"%b{(q * (nt // 2) + j) * 4 + x}"
        if mode == "ldm":
            for m in range(mt):
                off = ((kk * mt + m) % 8) * 512
                e(f"  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{ab(m,0)}, {ab(m,1)}, {ab(m,2)}, {ab(m,3)}}}, [%r8+{off}];")
            for j in range(nt // 2):
                off = (8 + (kk * (nt // 2) + j) % 8) * 512
                e(f"  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{bb(j,0)}, {bb(j,1)}, {bb(j,2)}, {bb(j,3)}}}, [%r8+{off}];")
        for j in range(nt // 2):
            for m in range(mt):
                for h in range(2):
                    d = (m * nt + 2 * j + h) * 4
                    dd = f"{{%d{d}, %d{d + 1}, %d{d + 2}, %d{d + 3}}}"
                    e(f"  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {dd}, "
                      f"{{{ab(m,0)}, {ab(m,1)}, {ab(m,2)}, {ab(m,3)}}}, {{{bb(j,2*h)}, {bb(j,2*h+1)}}}, {dd};")
    e("  add.u32 %r6, %r6, 1;\n  setp.lt.u32 %p, %r6, %r0;\n  @%p bra LOOP;")
    e("  mov.f32 %s, 0f00000000;")
    for i in range(nacc):
        e(f"  add.f32 %s, %s, %d{i};")
    e("  mov.u32 %r9, %ctaid.x;\n  mov.u32 %r10, %ntid.x;\n  mad.lo.u32 %r9, %r9, %r10, %r1;")
    e("  mul.wide.u32 %rd1, %r9, 4;\n  add.u64 %rd2, %rd0, %rd1;\n  st.global.f32 [%rd2], %s;")
    e("  ret;\n}")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    mode, mt, nt, warps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    sys.stdout.write(kernel(mode, mt, nt, warps))
