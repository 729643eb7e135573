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

/// Defines `mma.sync.aligned.m16n8k16.row.col.f32.<ty>.<ty>.f32` for one element type: `d += a · b`
/// on one warp's fragments.
///
/// # Safety (of each function)
/// All 32 lanes of the warp must execute it together (converged), with fragments laid out as in the
/// PTX ISA for m16n8k16 (see `config` for the k-slot permutation the fused kernel uses).
macro_rules! mma_m16n8k16 {
    ($name:ident, $ty:literal) => {
        #[doc = concat!("`mma.sync.aligned.m16n8k16.row.col.f32.", $ty, ".", $ty, ".f32`: see [`mma_m16n8k16`].")]
        ///
        /// # Safety
        /// See [`mma_m16n8k16`].
        #[inline(always)]
        pub unsafe fn $name(d: &mut [f32; 4], a: [u32; 4], b: [u32; 2]) {
            // SAFETY: register-only instruction; the caller guarantees warp convergence.
            unsafe {
                asm!(
                    concat!("mma.sync.aligned.m16n8k16.row.col.f32.", $ty, ".", $ty, ".f32 {{{0}, {1}, {2}, {3}}}, {{{4}, {5}, {6}, {7}}}, {{{8}, {9}}}, {{{0}, {1}, {2}, {3}}};"),
                    inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3],
                    in(reg32) a[0], in(reg32) a[1], in(reg32) a[2], in(reg32) a[3],
                    in(reg32) b[0], in(reg32) b[1],
                    options(pure, nomem, nostack),
                );
            }
        }
    };
}
mma_m16n8k16!(mma_sync_aligned_m16n8k16_row_col_f32_bf16_bf16_f32, "bf16");
mma_m16n8k16!(mma_sync_aligned_m16n8k16_row_col_f32_f16_f16_f32, "f16");

/// `cvt.f32.f16`: the f32 value of an IEEE half (exact).
#[inline(always)]
pub fn cvt_f32_f16(h: u16) -> f32 {
    let f: f32;
    // SAFETY: register-only conversion.
    unsafe { asm!("cvt.f32.f16 {0}, {1};", out(reg32) f, in(reg16) h, options(pure, nomem, nostack)) };
    f
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

/// `shfl.sync.idx.b32`: the value of lane `src` (`src < 32`), over the full warp.
///
/// # Safety
/// All 32 lanes must execute it together.
#[inline(always)]
pub unsafe fn shfl_sync_idx_b32(x: u32, src: u32) -> u32 {
    let r: u32;
    // SAFETY: register-only; the caller guarantees all lanes participate (member mask 0xffffffff).
    unsafe {
        asm!(
            "shfl.sync.idx.b32 {0}, {1}, {2}, 0x1f, 0xffffffff;",
            out(reg32) r, in(reg32) x, in(reg32) src,
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

/// `mov.b32`: `x` itself, through an instruction the compiler cannot see into. A blend mask made
/// with it (`(a & m) | (b & !m)`, one `lop3` on the GPU) stays a bitwise blend of two registers: a
/// mask LLVM can see is a sign-extended bool becomes a select, and a select between two elements of
/// a register array a load through a selected pointer, which puts the whole array in local memory.
#[inline(always)]
pub fn mov_b32(x: u32) -> u32 {
    let r: u32;
    // SAFETY: register-only instruction.
    unsafe { asm!("mov.b32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `ex2.approx.ftz.f32`: 2^x (about 2 ulp; the log-mass of the log-probability kernels and the
/// benchmark baselines, never the sample itself).
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

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: four 8 × 8 matrices of 16-bit elements from shared
/// memory. Lane `8i + r` gives the address of row `r` of matrix `i` (16 contiguous bytes); register
/// `i` of lane `4g + q` receives elements `2q, 2q + 1` of row `g` of matrix `i` — the layout of an
/// `mma.sync.m16n8k16` A or B fragment register.
///
/// # Safety
/// All 32 lanes of the warp execute it together (converged); each lane's `addr` is a 16-byte aligned
/// shared-window address inside the launch's shared memory.
#[inline(always)]
pub unsafe fn ldmatrix_sync_aligned_m8n8_x4_shared_b16(addr: u32) -> [u32; 4] {
    let (x, y, z, w): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees convergence and the addresses.
    unsafe {
        asm!(
            "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{0}, {1}, {2}, {3}}}, [{4}];",
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

/// `griddepcontrol.launch_dependents;`: lets a grid launched after this one with programmatic
/// stream serialization start once every block of this grid has executed it (or exited); without
/// such a dependent it does nothing.
#[inline(always)]
pub fn griddepcontrol_launch_dependents() {
    // SAFETY: a scheduling hint; no operands, no memory access.
    unsafe { asm!("griddepcontrol.launch_dependents;", options(nostack)) };
}

/// `griddepcontrol.wait;`: waits until the grids this one depends on (programmatic stream
/// serialization) have completed and their memory operations are visible; without such a
/// prerequisite it returns at once.
#[inline(always)]
pub fn griddepcontrol_wait() {
    // SAFETY: a wait on the prerequisite grids; no operands. Memory accesses stay after it (no
    // `nomem`).
    unsafe { asm!("griddepcontrol.wait;", options(nostack)) };
}

/// `ld.acquire.gpu.global.u32`: a load of a word other blocks update, ordered before this thread's
/// later memory accesses (acquire at GPU scope).
///
/// # Safety
/// `ptr` must be a 4-byte aligned global address of a readable word.
#[inline(always)]
pub unsafe fn ld_acquire_gpu_global_u32(ptr: *const u32) -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.acquire.gpu.global.u32 {0}, [{1}];", out(reg32) v, in(reg64) ptr, options(nostack)) };
    v
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

/// `red.shared.add.u32`: atomically adds `v` to the shared word at `addr` (no result).
///
/// # Safety
/// `addr` must be a 4-byte aligned shared-memory address.
#[inline(always)]
pub unsafe fn red_shared_add_u32(addr: u32, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("red.shared.add.u32 [{0}], {1};", in(reg32) addr, in(reg32) v, options(nostack)) };
}

/// `atom.shared.add.u32`: atomically adds `v` to the shared word at `addr` and returns the old value.
///
/// # Safety
/// `addr` must be a 4-byte aligned shared-memory address.
#[inline(always)]
pub unsafe fn atom_shared_add_u32(addr: u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("atom.shared.add.u32 {0}, [{1}], {2};", out(reg32) old, in(reg32) addr, in(reg32) v, options(nostack))
    };
    old
}

/// `st.shared.u32`: stores one word.
///
/// # Safety
/// `addr` must be a 4-byte aligned shared-memory address.
#[inline(always)]
pub unsafe fn st_shared_u32(addr: u32, v: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.shared.u32 [{0}], {1};", in(reg32) addr, in(reg32) v, options(nostack)) };
}

/// `ld.shared.u32`: loads one word.
///
/// # Safety
/// `addr` must be a 4-byte aligned shared-memory address.
#[inline(always)]
pub unsafe fn ld_shared_u32(addr: u32) -> u32 {
    let v: u32;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.shared.u32 {0}, [{1}];", out(reg32) v, in(reg32) addr, options(nostack, readonly)) };
    v
}

/// `st.shared.u64`: stores one double word.
///
/// # Safety
/// `addr` must be an 8-byte aligned shared-memory address.
#[inline(always)]
pub unsafe fn st_shared_u64(addr: u32, v: u64) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("st.shared.u64 [{0}], {1};", in(reg32) addr, in(reg64) v, options(nostack)) };
}

/// `ld.shared.u64`: loads one double word.
///
/// # Safety
/// `addr` must be an 8-byte aligned shared-memory address.
#[inline(always)]
pub unsafe fn ld_shared_u64(addr: u32) -> u64 {
    let v: u64;
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("ld.shared.u64 {0}, [{1}];", out(reg64) v, in(reg32) addr, options(nostack, readonly)) };
    v
}

/// `atom.global.and.b32`: atomically ands `v` into `*ptr` and returns the old value.
///
/// # Safety
/// `ptr` must be a 4-byte aligned global address.
#[inline(always)]
pub unsafe fn atom_global_and_b32(ptr: *mut u32, v: u32) -> u32 {
    let old: u32;
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!("atom.global.and.b32 {0}, [{1}], {2};", out(reg32) old, in(reg64) ptr, in(reg32) v, options(nostack))
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

/// `ld.global.cg.v4.u32`: a 16-byte load cached in L2 only (data other blocks wrote in this launch).
///
/// # Safety
/// `ptr` must be a 16-byte aligned global address of 16 readable bytes.
#[inline(always)]
pub unsafe fn ld_global_cg_v4_u32(ptr: *const u32) -> [u32; 4] {
    let (x, y, z, w): (u32, u32, u32, u32);
    // SAFETY: the caller guarantees the address.
    unsafe {
        asm!(
            "ld.global.cg.v4.u32 {{{0}, {1}, {2}, {3}}}, [{4}];",
            out(reg32) x, out(reg32) y, out(reg32) z, out(reg32) w, in(reg64) ptr,
            options(readonly, nostack),
        );
    }
    [x, y, z, w]
}

/// `st.shared.v4.u32`: store 16 bytes to shared memory.
///
/// # Safety
/// `addr` must be a 16-byte aligned shared-window address inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_shared_v4_u32(addr: u32, v: [u32; 4]) {
    // SAFETY: the caller guarantees the address is inside this block's shared memory.
    unsafe {
        asm!(
            "st.shared.v4.u32 [{0}], {{{1}, {2}, {3}, {4}}};",
            in(reg32) addr, in(reg32) v[0], in(reg32) v[1], in(reg32) v[2], in(reg32) v[3],
            options(nostack),
        );
    }
}

/// `lg2.approx.f32`: log2(x) (relative error about 2^-22; the log-probabilities' final logarithm).
#[inline(always)]
pub fn lg2_approx_f32(x: f32) -> f32 {
    let r: f32;
    // SAFETY: register-only instruction.
    unsafe { asm!("lg2.approx.f32 {0}, {1};", out(reg32) r, in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `wgmma.fence.sync.aligned;`: orders this warpgroup's register accesses to accumulators before the
/// `wgmma.mma_async` instructions that follow.
///
/// # Safety
/// All threads of the warpgroup execute it together.
#[inline(always)]
pub unsafe fn wgmma_fence_sync_aligned() {
    // SAFETY: the caller guarantees warpgroup-wide execution.
    unsafe { asm!("wgmma.fence.sync.aligned;", options(nostack)) };
}

/// `wgmma.commit_group.sync.aligned;`: closes the group of this warpgroup's pending `wgmma.mma_async`.
///
/// # Safety
/// All threads of the warpgroup execute it together.
#[inline(always)]
pub unsafe fn wgmma_commit_group_sync_aligned() {
    // SAFETY: the caller guarantees warpgroup-wide execution.
    unsafe { asm!("wgmma.commit_group.sync.aligned;", options(nostack)) };
}

/// `wgmma.wait_group.sync.aligned N;`: waits until at most `N` of this warpgroup's committed
/// `wgmma` groups are pending (their accumulators and shared-memory reads are then complete).
///
/// # Safety
/// All threads of the warpgroup execute it together.
#[inline(always)]
pub unsafe fn wgmma_wait_group_sync_aligned<const N: u32>() {
    // SAFETY: the caller guarantees warpgroup-wide execution.
    unsafe { asm!("wgmma.wait_group.sync.aligned {n};", n = const N, options(nostack)) };
}

/// Defines `wgmma.mma_async.sync.aligned.m64nNk16.f32.<ty>.<ty>` for one `N` and element type: the
/// warpgroup's `d += a · b` for a 64 × 16 A tile and a 16 × N B tile, both read from shared memory
/// through matrix descriptors (K-major, no transpose), `N / 2` f32 accumulators per thread; scale-d 1
/// (accumulate).
///
/// # Safety (of each function)
/// All 128 threads of a warpgroup (4 consecutive warps, the first one's index divisible by 4) execute
/// it together; the descriptors address shared memory holding the operands in the layout they
/// describe, made visible to the async proxy (`fence.proxy.async.shared::cta` before the barrier the
/// readers wait on). The accumulators may be read only after `wgmma.commit_group` and
/// `wgmma.wait_group`.
macro_rules! wgmma_m64nk16 {
    ($name:ident, 16, $ty:literal) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.m64n16k16.f32.", $ty, ".", $ty, "`: see [`wgmma_m64nk16`].")]
        ///
        /// # Safety
        /// See [`wgmma_m64nk16`].
        #[inline(always)]
        pub unsafe fn $name(d: &mut [f32; 8], desc_a: u64, desc_b: u64) {
            // SAFETY: the caller guarantees the warpgroup-wide execution and the operands.
            unsafe {
                asm!(
                    concat!("wgmma.mma_async.sync.aligned.m64n16k16.f32.", $ty, ".", $ty, " {{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}}, {8}, {9}, 1, 1, 1, 0, 0;"),
                    inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3], inout(reg32) d[4], inout(reg32) d[5], inout(reg32) d[6], inout(reg32) d[7],
                    in(reg64) desc_a, in(reg64) desc_b,
                    options(nostack),
                );
            }
        }
    };
    ($name:ident, 32, $ty:literal) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, "`: see [`wgmma_m64nk16`].")]
        ///
        /// # Safety
        /// See [`wgmma_m64nk16`].
        #[inline(always)]
        pub unsafe fn $name(d: &mut [f32; 16], desc_a: u64, desc_b: u64) {
            // SAFETY: the caller guarantees the warpgroup-wide execution and the operands.
            unsafe {
                asm!(
                    concat!("wgmma.mma_async.sync.aligned.m64n32k16.f32.", $ty, ".", $ty, " {{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}}}, {16}, {17}, 1, 1, 1, 0, 0;"),
                    inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3], inout(reg32) d[4], inout(reg32) d[5], inout(reg32) d[6], inout(reg32) d[7],
                    inout(reg32) d[8], inout(reg32) d[9], inout(reg32) d[10], inout(reg32) d[11], inout(reg32) d[12], inout(reg32) d[13], inout(reg32) d[14], inout(reg32) d[15],
                    in(reg64) desc_a, in(reg64) desc_b,
                    options(nostack),
                );
            }
        }
    };
    ($name:ident, 64, $ty:literal) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, "`: see [`wgmma_m64nk16`].")]
        ///
        /// # Safety
        /// See [`wgmma_m64nk16`].
        #[inline(always)]
        pub unsafe fn $name(d: &mut [f32; 32], desc_a: u64, desc_b: u64) {
            // SAFETY: the caller guarantees the warpgroup-wide execution and the operands.
            unsafe {
                asm!(
                    concat!("wgmma.mma_async.sync.aligned.m64n64k16.f32.", $ty, ".", $ty, " {{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}, {30}, {31}}}, {32}, {33}, 1, 1, 1, 0, 0;"),
                    inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3], inout(reg32) d[4], inout(reg32) d[5], inout(reg32) d[6], inout(reg32) d[7],
                    inout(reg32) d[8], inout(reg32) d[9], inout(reg32) d[10], inout(reg32) d[11], inout(reg32) d[12], inout(reg32) d[13], inout(reg32) d[14], inout(reg32) d[15],
                    inout(reg32) d[16], inout(reg32) d[17], inout(reg32) d[18], inout(reg32) d[19], inout(reg32) d[20], inout(reg32) d[21], inout(reg32) d[22], inout(reg32) d[23],
                    inout(reg32) d[24], inout(reg32) d[25], inout(reg32) d[26], inout(reg32) d[27], inout(reg32) d[28], inout(reg32) d[29], inout(reg32) d[30], inout(reg32) d[31],
                    in(reg64) desc_a, in(reg64) desc_b,
                    options(nostack),
                );
            }
        }
    };
    ($name:ident, 256, $ty:literal) => {
        #[doc = concat!("`wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, "`: see [`wgmma_m64nk16`].")]
        ///
        /// # Safety
        /// See [`wgmma_m64nk16`].
        #[inline(always)]
        pub unsafe fn $name(d: &mut [f32; 128], desc_a: u64, desc_b: u64) {
            // SAFETY: the caller guarantees the warpgroup-wide execution and the operands.
            unsafe {
                asm!(
                    concat!("wgmma.mma_async.sync.aligned.m64n256k16.f32.", $ty, ".", $ty, " {{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}, {16}, {17}, {18}, {19}, {20}, {21}, {22}, {23}, {24}, {25}, {26}, {27}, {28}, {29}, {30}, {31}, {32}, {33}, {34}, {35}, {36}, {37}, {38}, {39}, {40}, {41}, {42}, {43}, {44}, {45}, {46}, {47}, {48}, {49}, {50}, {51}, {52}, {53}, {54}, {55}, {56}, {57}, {58}, {59}, {60}, {61}, {62}, {63}, {64}, {65}, {66}, {67}, {68}, {69}, {70}, {71}, {72}, {73}, {74}, {75}, {76}, {77}, {78}, {79}, {80}, {81}, {82}, {83}, {84}, {85}, {86}, {87}, {88}, {89}, {90}, {91}, {92}, {93}, {94}, {95}, {96}, {97}, {98}, {99}, {100}, {101}, {102}, {103}, {104}, {105}, {106}, {107}, {108}, {109}, {110}, {111}, {112}, {113}, {114}, {115}, {116}, {117}, {118}, {119}, {120}, {121}, {122}, {123}, {124}, {125}, {126}, {127}}}, {128}, {129}, 1, 1, 1, 0, 0;"),
                    inout(reg32) d[0], inout(reg32) d[1], inout(reg32) d[2], inout(reg32) d[3], inout(reg32) d[4], inout(reg32) d[5], inout(reg32) d[6], inout(reg32) d[7],
                    inout(reg32) d[8], inout(reg32) d[9], inout(reg32) d[10], inout(reg32) d[11], inout(reg32) d[12], inout(reg32) d[13], inout(reg32) d[14], inout(reg32) d[15],
                    inout(reg32) d[16], inout(reg32) d[17], inout(reg32) d[18], inout(reg32) d[19], inout(reg32) d[20], inout(reg32) d[21], inout(reg32) d[22], inout(reg32) d[23],
                    inout(reg32) d[24], inout(reg32) d[25], inout(reg32) d[26], inout(reg32) d[27], inout(reg32) d[28], inout(reg32) d[29], inout(reg32) d[30], inout(reg32) d[31],
                    inout(reg32) d[32], inout(reg32) d[33], inout(reg32) d[34], inout(reg32) d[35], inout(reg32) d[36], inout(reg32) d[37], inout(reg32) d[38], inout(reg32) d[39],
                    inout(reg32) d[40], inout(reg32) d[41], inout(reg32) d[42], inout(reg32) d[43], inout(reg32) d[44], inout(reg32) d[45], inout(reg32) d[46], inout(reg32) d[47],
                    inout(reg32) d[48], inout(reg32) d[49], inout(reg32) d[50], inout(reg32) d[51], inout(reg32) d[52], inout(reg32) d[53], inout(reg32) d[54], inout(reg32) d[55],
                    inout(reg32) d[56], inout(reg32) d[57], inout(reg32) d[58], inout(reg32) d[59], inout(reg32) d[60], inout(reg32) d[61], inout(reg32) d[62], inout(reg32) d[63],
                    inout(reg32) d[64], inout(reg32) d[65], inout(reg32) d[66], inout(reg32) d[67], inout(reg32) d[68], inout(reg32) d[69], inout(reg32) d[70], inout(reg32) d[71],
                    inout(reg32) d[72], inout(reg32) d[73], inout(reg32) d[74], inout(reg32) d[75], inout(reg32) d[76], inout(reg32) d[77], inout(reg32) d[78], inout(reg32) d[79],
                    inout(reg32) d[80], inout(reg32) d[81], inout(reg32) d[82], inout(reg32) d[83], inout(reg32) d[84], inout(reg32) d[85], inout(reg32) d[86], inout(reg32) d[87],
                    inout(reg32) d[88], inout(reg32) d[89], inout(reg32) d[90], inout(reg32) d[91], inout(reg32) d[92], inout(reg32) d[93], inout(reg32) d[94], inout(reg32) d[95],
                    inout(reg32) d[96], inout(reg32) d[97], inout(reg32) d[98], inout(reg32) d[99], inout(reg32) d[100], inout(reg32) d[101], inout(reg32) d[102], inout(reg32) d[103],
                    inout(reg32) d[104], inout(reg32) d[105], inout(reg32) d[106], inout(reg32) d[107], inout(reg32) d[108], inout(reg32) d[109], inout(reg32) d[110], inout(reg32) d[111],
                    inout(reg32) d[112], inout(reg32) d[113], inout(reg32) d[114], inout(reg32) d[115], inout(reg32) d[116], inout(reg32) d[117], inout(reg32) d[118], inout(reg32) d[119],
                    inout(reg32) d[120], inout(reg32) d[121], inout(reg32) d[122], inout(reg32) d[123], inout(reg32) d[124], inout(reg32) d[125], inout(reg32) d[126], inout(reg32) d[127],
                    in(reg64) desc_a, in(reg64) desc_b,
                    options(nostack),
                );
            }
        }
    };
}
wgmma_m64nk16!(wgmma_mma_async_sync_aligned_m64n16k16_f32_bf16_bf16, 16, "bf16");
wgmma_m64nk16!(wgmma_mma_async_sync_aligned_m64n16k16_f32_f16_f16, 16, "f16");
wgmma_m64nk16!(wgmma_mma_async_sync_aligned_m64n32k16_f32_bf16_bf16, 32, "bf16");
wgmma_m64nk16!(wgmma_mma_async_sync_aligned_m64n32k16_f32_f16_f16, 32, "f16");
wgmma_m64nk16!(wgmma_mma_async_sync_aligned_m64n64k16_f32_bf16_bf16, 64, "bf16");
wgmma_m64nk16!(wgmma_mma_async_sync_aligned_m64n64k16_f32_f16_f16, 64, "f16");
wgmma_m64nk16!(wgmma_mma_async_sync_aligned_m64n256k16_f32_bf16_bf16, 256, "bf16");
wgmma_m64nk16!(wgmma_mma_async_sync_aligned_m64n256k16_f32_f16_f16, 256, "f16");

/// `mbarrier.init.shared::cta.b64 [addr], count;`: a fresh barrier in phase 0 that completes a phase
/// after `count` arrivals.
///
/// # Safety
/// `addr` is an 8-byte aligned shared-memory address no thread uses as a barrier yet; the other
/// threads use the barrier only after a block barrier (`fence.mbarrier_init` before it).
#[inline(always)]
pub unsafe fn mbarrier_init_shared_cta_b64(addr: u32, count: u32) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("mbarrier.init.shared::cta.b64 [{0}], {1};", in(reg32) addr, in(reg32) count, options(nostack)) };
}

/// `fence.mbarrier_init.release.cluster;`: this thread's `mbarrier.init`s are visible before its
/// later memory operations (the block barrier that publishes them).
#[inline(always)]
pub fn fence_mbarrier_init_release_cluster() {
    // SAFETY: a memory fence; no operands.
    unsafe { asm!("fence.mbarrier_init.release.cluster;", options(nostack)) };
}

/// `mbarrier.arrive.shared::cta.b64 state, [addr];`: one arrival (release semantics, CTA scope): this
/// thread's earlier memory accesses happen before the phase completes for the waiting threads. The
/// returned phase state is not needed (waits use the phase parity).
///
/// # Safety
/// `addr` is an initialized barrier in shared memory, and the phase being arrived on expects this
/// arrival (no phase gets more arrivals than its count).
#[inline(always)]
pub unsafe fn mbarrier_arrive_shared_cta_b64(addr: u32) {
    // SAFETY: the caller guarantees the barrier.
    unsafe {
        asm!(
            "mbarrier.arrive.shared::cta.b64 {0}, [{1}];",
            out(reg64) _, in(reg32) addr,
            options(nostack),
        );
    }
}

/// `mbarrier.try_wait.parity.shared::cta.b64 p, [addr], parity;` (acquire, CTA scope): whether the
/// barrier's phase of parity `parity` has completed (it may suspend the thread for a while first).
/// The predicate is read out with `selp`, the one extra instruction the result needs.
///
/// # Safety
/// `addr` is an initialized barrier in shared memory.
#[inline(always)]
pub unsafe fn mbarrier_try_wait_parity_shared_cta_b64(addr: u32, parity: u32) -> bool {
    let done: u32;
    // SAFETY: the caller guarantees the barrier.
    unsafe {
        asm!(
            "{{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [{1}], {2}; selp.u32 {0}, 1, 0, p; }}",
            out(reg32) done, in(reg32) addr, in(reg32) parity,
            options(nostack),
        );
    }
    done != 0
}

/// `mbarrier.arrive.expect_tx.shared::cta.b64 state, [addr], tx_bytes;`: raises the current phase's
/// expected transaction count by `tx_bytes` (the bytes the TMA copies of a stage will deliver), then
/// arrives once. The phase completes when its arrivals and all those bytes are in.
///
/// # Safety
/// As [`mbarrier_arrive_shared_cta_b64`]; `tx_bytes` is exactly what the copies completing on this
/// phase deliver.
#[inline(always)]
pub unsafe fn mbarrier_arrive_expect_tx_shared_cta_b64(addr: u32, tx_bytes: u32) {
    // SAFETY: the caller guarantees the barrier and the byte count.
    unsafe {
        asm!(
            "mbarrier.arrive.expect_tx.shared::cta.b64 {0}, [{1}], {2};",
            out(reg64) _, in(reg32) addr, in(reg32) tx_bytes,
            options(nostack),
        );
    }
}

/// `cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst],
/// [map, {x, y}], [bar];`: a TMA copy of the box at coordinates (`x` innermost, `y`) of the tensor
/// map at generic address `map` into shared memory at `dst`, in the map's swizzle; elements outside
/// the tensor are zeros. The bytes complete on barrier `bar` (transaction count).
///
/// # Safety
/// `map` is the generic address of a valid tensor map in global memory, acquired by this thread
/// ([`fence_proxy_tensormap_generic_acquire_gpu`]); `dst` is a shared address of this block with room
/// for the box, aligned as the swizzle needs (1024 bytes for 128-byte swizzle); `bar` is an
/// initialized barrier whose current phase expects these bytes; nothing reads or writes `dst` until
/// that phase completes.
#[inline(always)]
pub unsafe fn cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes(
    dst: u32,
    map: u64,
    x: i32,
    y: i32,
    bar: u32,
) {
    // SAFETY: the caller guarantees the map, the destination and the barrier.
    unsafe {
        asm!(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{0}], [{1}, {{{2}, {3}}}], [{4}];",
            in(reg32) dst, in(reg64) map, in(reg32) x, in(reg32) y, in(reg32) bar,
            options(nostack),
        );
    }
}

/// `cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst],
/// [map, {c0, c1, c2, c3, c4}], [bar];`: as the 2-D form, for a 5-D tensor map (`c0` innermost).
///
/// # Safety
/// As [`cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes`].
#[inline(always)]
pub unsafe fn cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes(
    dst: u32,
    map: u64,
    c: [i32; 5],
    bar: u32,
) {
    // SAFETY: the caller guarantees the map, the destination and the barrier.
    unsafe {
        asm!(
            "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [{0}], [{1}, {{{2}, {3}, {4}, {5}, {6}}}], [{7}];",
            in(reg32) dst, in(reg64) map, in(reg32) c[0], in(reg32) c[1], in(reg32) c[2], in(reg32) c[3], in(reg32) c[4],
            in(reg32) bar,
            options(nostack),
        );
    }
}

/// `cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint
/// [dst], [map, {x, y}], [bar], policy;`: the 2-D copy with an L2 eviction policy for the bytes it
/// reads (`policy` from a `createpolicy` below).
///
/// # Safety
/// As [`cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes`].
#[inline(always)]
pub unsafe fn cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes_l2_cache_hint(
    dst: u32,
    map: u64,
    (x, y): (i32, i32),
    bar: u32,
    policy: u64,
) {
    // SAFETY: the caller guarantees the map, the destination and the barrier; the policy only
    // changes L2 eviction priorities.
    unsafe {
        asm!(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [{0}], [{1}, {{{2}, {3}}}], [{4}], {5};",
            in(reg32) dst, in(reg64) map, in(reg32) x, in(reg32) y, in(reg32) bar, in(reg64) policy,
            options(nostack),
        );
    }
}

/// `cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint
/// [dst], [map, {c0, c1, c2, c3, c4}], [bar], policy;`: the 5-D copy with an L2 eviction policy.
///
/// # Safety
/// As [`cp_async_bulk_tensor_2d_shared_cluster_global_tile_mbarrier_complete_tx_bytes`].
#[inline(always)]
pub unsafe fn cp_async_bulk_tensor_5d_shared_cluster_global_tile_mbarrier_complete_tx_bytes_l2_cache_hint(
    dst: u32,
    map: u64,
    c: [i32; 5],
    bar: u32,
    policy: u64,
) {
    // SAFETY: as the 2-D form.
    unsafe {
        asm!(
            "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [{0}], [{1}, {{{2}, {3}, {4}, {5}, {6}}}], [{7}], {8};",
            in(reg32) dst, in(reg64) map, in(reg32) c[0], in(reg32) c[1], in(reg32) c[2], in(reg32) c[3], in(reg32) c[4],
            in(reg32) bar, in(reg64) policy,
            options(nostack),
        );
    }
}

/// `createpolicy.fractional.L2::evict_first.b64 policy, 1.0;`: an L2 policy under which the lines
/// a memory operation brings in are evicted before others (data read once).
#[inline(always)]
pub fn createpolicy_fractional_l2_evict_first_b64() -> u64 {
    let p: u64;
    // SAFETY: register-only instruction.
    unsafe {
        asm!("createpolicy.fractional.L2::evict_first.b64 {0}, 1.0;", out(reg64) p, options(pure, nomem, nostack))
    };
    p
}

/// `fence.proxy.tensormap::generic.acquire.gpu [map], 128;`: this thread's later TMA copies through
/// the tensor map at generic address `map` see its bytes as written (by the host copy before the
/// launch) through the generic proxy.
///
/// # Safety
/// `map` is the generic address of 128 readable bytes of global memory.
#[inline(always)]
pub unsafe fn fence_proxy_tensormap_generic_acquire_gpu(map: u64) {
    // SAFETY: the caller guarantees the address.
    unsafe { asm!("fence.proxy.tensormap::generic.acquire.gpu [{0}], 128;", in(reg64) map, options(nostack)) };
}

/// `setmaxnreg.inc.sync.aligned.u32 N;`: raises this warpgroup's per-thread register budget to `N`
/// (blocking until the block's pool has them), for a consumer whose accumulators need more than the
/// launch's even share.
///
/// # Safety
/// All threads of the warpgroup execute it together; `N` is a multiple of 8 in 24..=256 and at least
/// the current budget; the pool holds enough registers once the other warpgroups have released theirs.
#[inline(always)]
pub unsafe fn setmaxnreg_inc_sync_aligned_u32<const N: u32>() {
    // SAFETY: the caller guarantees warpgroup-wide execution and the budget.
    unsafe { asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const N, options(nostack)) };
}

/// `setmaxnreg.dec.sync.aligned.u32 N;`: lowers this warpgroup's per-thread register budget to `N`,
/// returning the rest to the block's pool (a producer that needs few registers).
///
/// # Safety
/// All threads of the warpgroup execute it together; `N` is a multiple of 8 in 24..=256, at most the
/// current budget, and the code after it fits in `N` registers (ptxas allocates it so).
#[inline(always)]
pub unsafe fn setmaxnreg_dec_sync_aligned_u32<const N: u32>() {
    // SAFETY: the caller guarantees warpgroup-wide execution and the budget.
    unsafe { asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const N, options(nostack)) };
}
