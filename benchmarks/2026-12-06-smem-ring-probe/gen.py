#!/usr/bin/env python3
"""PTX for the shared-memory ring probe (issue 55, finding 51): the mma.sync ceiling probe of
../2026-12-06-mma-sync-ceiling/gen.py with the TMA's writes into the same shared memory.

One kernel `k(out, src, iters)`. `warps` consumer warps each run `iters` stages of 4 k16 steps: wait for the stage's
`full` barrier, read every k16 step's fragments from the stage's slot with `ldmatrix.x4` (MT for A, NT/2 for B, from
conflict-free 512-byte blocks) and run MT x NT `mma.sync.m16n8k16` (bf16 in, f32 accumulate), then lane 0 arrives on
the slot's `empty` barrier. A ring of S slots of W bytes is refilled with `cp.async.bulk` (global -> shared, the
non-tensor bulk copy: the same async proxy and shared-memory writes as the kernels' tensor copies) from `src`, an
L2-resident 1 MiB buffer, so the copies cost shared-memory and L2 bandwidth but no HBM.

producer "warp": an extra warp (the kernels' layout; with `warps` = 8 that is 9 warps and ptxas's 168-register cap);
producer "inline": lane 0 of consumer warp 0 refills slot (i - 1) % S with stage i - 1 + S at the top of stage i, after
waiting for that slot's `empty` barrier (no extra warp: 8 warps keep 255 registers).
W = 0: no copies (each stage's `full` barrier completes on the producer's arrival alone: the ring's synchronisation
without its writes)."""
import sys


def kernel(mt, nt, warps, S, W, producer):
    assert nt % 2 == 0 and W % 4096 == 0 and producer in ("warp", "inline")
    L = []
    e = L.append
    nthreads = 32 * (warps + (producer == "warp"))
    slot_bytes = max(W, 8192)  # the ldmatrix blocks span 8 KiB
    e(".version 8.0\n.target sm_90\n.address_size 64\n")
    e(f".shared .align 8 .b64 full[{S}];\n.shared .align 8 .b64 empty[{S}];")
    e(".extern .shared .align 1024 .b8 ring[];")
    e(f".visible .entry k(.param .u64 out, .param .u64 src, .param .u32 iters) .maxntid {nthreads}, 1, 1 {{")
    e("  .reg .pred %p<4>;\n  .reg .b32 %r<40>;\n  .reg .b64 %rd<8>;")
    nacc = mt * nt * 4
    e(f"  .reg .f32 %d<{nacc}>;\n  .reg .f32 %s;")
    e(f"  .reg .b32 %a<{4 * mt}>;\n  .reg .b32 %b<{4 * (nt // 2)}>;")
    e("  ld.param.u64 %rd0, [out];\n  ld.param.u64 %rd3, [src];\n  ld.param.u32 %r0, [iters];")
    e("  mov.u32 %r1, %tid.x;\n  shr.u32 %r20, %r1, 5;\n  and.b32 %r21, %r1, 31;")
    e("  mov.u32 %r22, full;\n  mov.u32 %r23, empty;\n  mov.u32 %r24, ring;")
    # init barriers
    e("  setp.ne.u32 %p1, %r1, 0;\n  @%p1 bra INITDONE;")
    for i in range(S):
        e(f"  mbarrier.init.shared::cta.b64 [%r22+{8 * i}], 1;")
        e(f"  mbarrier.init.shared::cta.b64 [%r23+{8 * i}], {warps};")
    e("  fence.mbarrier_init.release.cluster;")
    e("INITDONE:\n  bar.sync 0;")

    def refill(stage_reg, wait_empty):
        """lane-0 code: refill slot stage % S with stage `stage_reg` (a register), after waiting for its empty
        barrier's previous phase when wait_empty (stage >= S)."""
        e(f"  rem.u32 %r30, {stage_reg}, {S};\n  div.u32 %r31, {stage_reg}, {S};")
        e("  shl.b32 %r32, %r30, 3;\n  add.u32 %r33, %r23, %r32;\n  add.u32 %r34, %r22, %r32;")
        lbl = f"R{len(L)}"
        e(f"  setp.lt.u32 %p2, {stage_reg}, {S};\n  @%p2 bra {lbl}SKIP;")
        e("  sub.u32 %r35, %r31, 1;\n  and.b32 %r35, %r35, 1;")
        e(f"{lbl}W:\n  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r33], %r35;\n  @!%p3 bra {lbl}W;")
        e(f"{lbl}SKIP:")
        e(f"  mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r34], {W};")
        if W:
            e(f"  mul.lo.u32 %r36, %r30, {slot_bytes};\n  add.u32 %r36, %r36, %r24;")
            e(f"  and.b32 %r37, {stage_reg}, 15;\n  mul.wide.u32 %rd6, %r37, 65536;\n  add.u64 %rd7, %rd3, %rd6;")
            for c in range(W // 8192 + (W % 8192 > 0)):
                n = min(8192, W - 8192 * c)
                e(f"  cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r36+{8192 * c}], "
                  f"[%rd7+{8192 * c}], {n}, [%r34];")

    if producer == "warp":
        e(f"  setp.ne.u32 %p1, %r20, {warps};\n  @%p1 bra CONSUMER;")
        e("  setp.ne.u32 %p1, %r21, 0;\n  @%p1 bra END;")
        e("  mov.u32 %r10, 0;\nPLOOP:")
        refill("%r10", True)
        e("  add.u32 %r10, %r10, 1;\n  setp.lt.u32 %p1, %r10, %r0;\n  @%p1 bra PLOOP;\n  bra.uni END;")
    else:
        # the first S stages, before the consumers start
        e("  or.b32 %r11, %r20, %r21;\n  setp.ne.u32 %p1, %r11, 0;\n  @%p1 bra CONSUMER;")
        e("  mov.u32 %r10, 0;\nPRE:")
        refill("%r10", False)
        e(f"  add.u32 %r10, %r10, 1;\n  min.u32 %r12, %r0, {S};\n  setp.lt.u32 %p1, %r10, %r12;\n  @%p1 bra PRE;")
    e("CONSUMER:")
    for i in range(nacc):
        e(f"  mov.f32 %d{i}, 0f00000000;")
    e("  shl.b32 %r5, %r21, 4;\n  add.u32 %r5, %r5, %r24;")
    e("  mov.u32 %r6, 0;")
    e("LOOP:")
    if producer == "inline":
        # lane 0 of warp 0 refills slot (i - 1) % S with stage i - 1 + S
        e("  or.b32 %r11, %r20, %r21;\n  setp.ne.u32 %p1, %r11, 0;\n  setp.eq.u32 %p2, %r6, 0;\n  or.pred %p1, %p1, %p2;")
        e(f"  add.u32 %r13, %r6, {S - 1};\n  setp.ge.u32 %p2, %r13, %r0;\n  or.pred %p1, %p1, %p2;\n  @%p1 bra NOREFILL;")
        refill("%r13", True)
        e("NOREFILL:\n  bar.warp.sync -1;")
    # wait for full[i % S], parity (i / S) & 1
    e(f"  rem.u32 %r14, %r6, {S};\n  div.u32 %r15, %r6, {S};\n  and.b32 %r15, %r15, 1;")
    e("  shl.b32 %r16, %r14, 3;\n  add.u32 %r17, %r22, %r16;\n  add.u32 %r18, %r23, %r16;")
    e("FW:\n  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r17], %r15;\n  @!%p3 bra FW;")
    e(f"  mul.lo.u32 %r8, %r14, {slot_bytes};\n  add.u32 %r8, %r8, %r5;")
    for kk in range(4):
        for m in range(mt):
            off = ((kk * mt + m) % 8) * 512
            e(f"  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%a{4*m}, %a{4*m+1}, %a{4*m+2}, %a{4*m+3}}}, [%r8+{off}];")
        for j in range(nt // 2):
            off = (8 + (kk * (nt // 2) + j) % 8) * 512 % 8192
            e(f"  ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%b{4*j}, %b{4*j+1}, %b{4*j+2}, %b{4*j+3}}}, [%r8+{off}];")
        for j in range(nt // 2):
            for m in range(mt):
                for h in range(2):
                    d = (m * nt + 2 * j + h) * 4
                    dd = f"{{%d{d}, %d{d + 1}, %d{d + 2}, %d{d + 3}}}"
                    e(f"  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {dd}, "
                      f"{{%a{4*m}, %a{4*m+1}, %a{4*m+2}, %a{4*m+3}}}, {{%b{4*j+2*h}, %b{4*j+2*h+1}}}, {dd};")
    e("  bar.warp.sync -1;\n  setp.ne.u32 %p1, %r21, 0;\n  @!%p1 mbarrier.arrive.shared::cta.b64 %rd4, [%r18];")
    e("  add.u32 %r6, %r6, 1;\n  setp.lt.u32 %p1, %r6, %r0;\n  @%p1 bra LOOP;")
    e("  mov.f32 %s, 0f00000000;")
    for i in range(nacc):
        e(f"  add.f32 %s, %s, %d{i};")
    e("  mov.u32 %r9, %ctaid.x;\n  mov.u32 %r26, %ntid.x;\n  mad.lo.u32 %r9, %r9, %r26, %r1;")
    e("  mul.wide.u32 %rd1, %r9, 4;\n  add.u64 %rd2, %rd0, %rd1;\n  st.global.f32 [%rd2], %s;")
    e("END:\n  ret;\n}")
    return "\n".join(L) + "\n", S * slot_bytes, nthreads


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.stdout.write(kernel(int(a[0]), int(a[1]), int(a[2]), int(a[3]), int(a[4]), a[5])[0])
