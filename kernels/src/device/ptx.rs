//! Inline PTX: one instruction per function, named after it. The only `asm!` in the crate.

use core::arch::asm;

// The dynamic shared-memory window of every kernel in the module (size set at launch).
core::arch::global_asm!(".extern .shared .align 16 .b8 fs_dynamic_smem[];");

/// `mov.u32 d, fs_dynamic_smem;` — the shared-window address of the dynamic shared memory.
#[inline(always)]
pub fn mov_u32_dynamic_smem() -> u32 {
    let addr: u32;
    // SAFETY: reads the address of a module-level shared symbol; no memory is accessed.
    unsafe { asm!("mov.u32 {0}, fs_dynamic_smem;", out(reg32) addr, options(pure, nomem, nostack)) };
    addr
}

/// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`: `d += a · b` on one warp's fragments.
///
/// # Safety
/// All 32 lanes of the warp must execute it together (converged), with fragments laid out as in the
/// PTX ISA for m16n8k16 (see `config` for the k-slot permutation the fused kernel uses).
#[inline(always)]
pub unsafe fn mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
    // SAFETY: register-only instruction; the caller guarantees warp convergence.
    unsafe {
        asm!(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {{{0}, {1}, {2}, {3}}}, {{{4}, {5}, {6}, {7}}}, {{{8}, {9}}}, {{{0}, {1}, {2}, {3}}};",
            inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3],
            in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
            in(reg32) b[0], in(reg32) b[1],
            options(pure, nomem, nostack),
        );
    }
}

/// `shfl.sync.bfly.b32`: the value of lane `lane ^ lane_mask`, over the full warp.
///
/// # Safety
/// All 32 lanes must execute it together.
#[inline(always)]
pub unsafe fn shfl_sync_bfly_b32(x: u32, lane_mask: u32) -> u32 {
    let r: u32;
    // SAFETY: register-only; the caller guarantees all lanes participate (member mask 0xffffffff).
    unsafe {
        asm!(
            "shfl.sync.bfly.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
            out(reg32) r, in(reg32) x, in(reg32) lane_mask,
            options(nomem, nostack),
        );
    }
    r
}

/// `st.shared.v2.u32`: store 8 bytes to shared memory.
///
/// # Safety
/// `addr` must be an 8-byte aligned shared-window address inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_v2_u32(addr: u32, v: [u32; 2]) {
    // SAFETY: the caller guarantees the address is inside this block's shared memory.
    unsafe {
        asm!("st.shared.v2.u32 [{0}], {{{1}, {2}}};", in(reg32) addr, in(reg32) v[0], in(reg32) v[1], options(nostack));
    }
}

/// `ld.shared.v2.u32`: load 8 bytes from shared memory.
///
/// # Safety
/// As [`st_shared_v2_u32`].
#[inline(always)]
pub unsafe fn ld_shared_v2_u32(addr: u32) -> [u32; 2] {
    let (x, y): (u32, u32);
    // SAFETY: the caller guarantees the address is inside this block's shared memory.
    unsafe {
        asm!("ld.shared.v2.u32 {{{0}, {1}}}, [{2}];", out(reg32) x, out(reg32) y, in(reg32) addr, options(readonly, nostack));
    }
    [x, y]
}

/// `shfl.sync.up.b32`: the value of lane `lane - delta` (own value for lanes below `delta`).
///
/// # Safety
/// All 32 lanes must execute it together.
#[inline(always)]
pub unsafe fn shfl_sync_up_b32(x: u32, delta: u32) -> u32 {
    let r: u32;
    // SAFETY: register-only; the caller guarantees all lanes participate.
    unsafe {
        asm!(
            "shfl.sync.up.b32 {0}, {1}, {2}, 0x0, 0xffffffff;",
            out(reg32) r, in(reg32) x, in(reg32) delta,
            options(nomem, nostack),
        );
    }
    r
}

/// `ex2.approx.ftz.f32`: 2^x (about 2 ulp; used by the benchmark baselines only, never by sampling).
#[inline(always)]
pub fn ex2_approx_ftz_f32(x: f32) -> f32 {
    let r: f32;
    // SAFETY: register-only instruction.
    unsafe { asm!("ex2.approx.ftz.f32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `ld.global.nc.v4.f32`: a 16-byte read-only load of four floats.
///
/// # Safety
/// `ptr` must be a 16-byte aligned global address of 16 readable bytes not written during the kernel.
#[inline(always)]
pub unsafe fn ld_global_nc_v4_f32(ptr: *const f32) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    // SAFETY: the caller guarantees a valid, aligned, read-only global address.
    unsafe {
        asm!(
            "ld.global.nc.v4.f32 {{{0}, {1}, {2}, {3}}}, [{4}];",
            out(reg32) x, out(reg32) y, out(reg32) z, out(reg32) w, in(reg64) ptr,
            options(pure, readonly, nostack),
        );
    }
    [x, y, z, w]
}

/// `cp.async.cg.shared.global [dst], [src], 16, src_size;`: asynchronous 16-byte global → shared copy
/// that bypasses L1; bytes past `src_size` (0 or 16) are zero-filled.
///
/// # Safety
/// `dst` is a 16-byte aligned shared address of this block; `src` a 16-byte aligned global address
/// readable for `src_size` bytes. The copy lands only after `cp.async.wait_group`.
#[inline(always)]
pub unsafe fn cp_async_cg_shared_global_16(dst: u32, src: *const u32, src_size: u32) {
    // SAFETY: the caller guarantees both addresses.
    unsafe {
        asm!("cp.async.cg.shared.global [{0}], [{1}], 16, {2};", in(reg32) dst, in(reg64) src, in(reg32) src_size, options(nostack));
    }
}

/// `cp.async.ca.shared.global [dst], [src], 16, src_size;`: as the `.cg` form, but cached in L1 (hidden
/// states and weight tiles shared by sibling warps).
///
/// # Safety
/// As [`cp_async_cg_shared_global_16`].
#[inline(always)]
pub unsafe fn cp_async_ca_shared_global_16(dst: u32, src: *const u32, src_size: u32) {
    // SAFETY: the caller guarantees both addresses.
    unsafe {
        asm!("cp.async.ca.shared.global [{0}], [{1}], 16, {2};", in(reg32) dst, in(reg64) src, in(reg32) src_size, options(nostack));
    }
}

/// `cp.async.commit_group;`: closes the group of this thread's outstanding `cp.async` copies.
#[inline(always)]
pub fn cp_async_commit_group() {
    // SAFETY: only orders this thread's asynchronous copies.
    unsafe { asm!("cp.async.commit_group;", options(nostack)) };
}

/// `cp.async.wait_group N;`: waits until at most `N` of this thread's committed groups are pending.
#[inline(always)]
pub fn cp_async_wait_group<const N: u32>() {
    // SAFETY: only waits for this thread's asynchronous copies.
    unsafe { asm!("cp.async.wait_group {n};", n = const N, options(nostack)) };
}

/// `ld.shared.v4.u32`: load 16 bytes from shared memory.
///
/// # Safety
/// `addr` must be a 16-byte aligned shared-window address inside the launch's shared memory.
#[inline(always)]
pub unsafe fn ld_shared_v4_u32(addr: u32) -> [u32; 4] {
    let (x, y, z, w): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees the address is inside this block's shared memory.
    unsafe {
        asm!(
            "ld.shared.v4.u32 {{{0}, {1}, {2}, {3}}}, [{4}];",
            out(reg32) x, out(reg32) y, out(reg32) z, out(reg32) w, in(reg32) addr,
            options(readonly, nostack),
        );
    }
    [x, y, z, w]
}

/// `bar.warp.sync 0xffffffff;`: all lanes of the warp reach this point, and their shared-memory
/// accesses before it are visible to each other after it.
#[inline(always)]
pub fn bar_warp_sync() {
    // SAFETY: a warp-level barrier; every lane of a converged warp calls it.
    unsafe { asm!("bar.warp.sync 0xffffffff;", options(nostack)) };
}

/// `fence.acq_rel.gpu;`: orders this thread's memory accesses before and after it, device-wide.
#[inline(always)]
pub fn fence_acq_rel_gpu() {
    // SAFETY: a memory fence; no operands.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) };
}

/// `atom.global.add.u32`: atomically adds `v` to `*ptr` and returns the old value.
///
/// # Safety
/// `ptr` must be a 4-byte aligned global address.
#[inline(always)]
pub unsafe fn atom_global_add_u32(ptr: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("atom.global.add.u32 {0}, [{1}], {2};", out(reg32) old, in(reg64) ptr, in(reg32) v, options(nostack))
    };
    old
}

/// `ld.global.cg.v2.u32`: an 8-byte load cached in L2 only (data other blocks wrote in this launch).
///
/// # Safety
/// `ptr` must be an 8-byte aligned global address of 8 readable bytes.
#[inline(always)]
pub unsafe fn ld_global_cg_v2_u32(ptr: *const u32) -> [u32; 2] {
    let (x, y): (u32, u32);
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("ld.global.cg.v2.u32 {{{0}, {1}}}, [{2}];", out(reg32) x, out(reg32) y, in(reg64) ptr, options(readonly, nostack));
    }
    [x, y]
}
