//! One f32 dot product of a hidden row and a weight row (bf16 or f16, [`ElementType`]) over a warp
//! ([`warp_dot`]) or a block ([`block_dot`]): the few logits that are recomputed outside the fused
//! pass (adjusted tokens, the sampled token's log-probability, a truncated row's new token).

use core::arch::nvptx::_syncthreads;

use super::ptx::{cvt_f32_f16, ld_global_nc_v4_f32, ld_shared_u32, shfl_sync_bfly_b32, st_shared_u32};
use crate::params::ElementType;

/// The two elements of a 32-bit word (low half first) in f32, exactly: bf16 by a shift, f16 by
/// `cvt.f32.f16`.
#[inline(always)]
fn widen(word: u32, elem: ElementType) -> [f32; 2] {
    if elem.is_f16() {
        [cvt_f32_f16(word as u16), cvt_f32_f16((word >> 16) as u16)]
    } else {
        [f32::from_bits(word << 16), f32::from_bits(word & 0xFFFF_0000)]
    }
}

/// `y += Σ` of the products of the four words' elements (in the order [`warp_dot`] documents).
#[inline(always)]
fn add_products(y: &mut f32, hv: [f32; 4], wv: [f32; 4], elem: ElementType) {
    for j in 0..4 {
        let (h, w) = (widen(hv[j].to_bits(), elem), widen(wv[j].to_bits(), elem));
        *y += h[0] * w[0];
        *y += h[1] * w[1];
    }
}

/// Four 16-byte chunks of both rows, `k + 256·i` for `i < 4`, hidden then weight, in flight together.
///
/// # Safety
/// `k + 3·256 + 8 ≤` the rows' lengths; both 16-byte aligned at `k` (`k % 8 == 0`).
#[inline(always)]
unsafe fn load4(hidden: *const u16, weight: *const u16, k: usize) -> [[f32; 4]; 8] {
    let at = |row: *const u16, i: usize| row.wrapping_add(k + 256 * i) as *const f32;
    // SAFETY: the four chunks are inside both rows, 16-byte aligned (the caller's contract).
    unsafe {
        [
            ld_global_nc_v4_f32(at(hidden, 0)),
            ld_global_nc_v4_f32(at(weight, 0)),
            ld_global_nc_v4_f32(at(hidden, 1)),
            ld_global_nc_v4_f32(at(weight, 1)),
            ld_global_nc_v4_f32(at(hidden, 2)),
            ld_global_nc_v4_f32(at(weight, 2)),
            ld_global_nc_v4_f32(at(hidden, 3)),
            ld_global_nc_v4_f32(at(weight, 3)),
        ]
    }
}

/// `y +=` the products of four chunks from [`load4`], in order.
#[inline(always)]
fn add4(y: &mut f32, c: [[f32; 4]; 8], elem: ElementType) {
    add_products(y, c[0], c[1], elem);
    add_products(y, c[2], c[3], elem);
    add_products(y, c[4], c[5], elem);
    add_products(y, c[6], c[7], elem);
}

/// `Σ_k hidden[k] · weight[k]` over `d` entries (`d % 8 == 0`), f32: lane `l` sums entries
/// `8l + 256i ..`, then a butterfly; every lane returns the same sum.
///
/// Four 16-byte chunks of each row are in flight at a time ([`load4`]; the sum's order is that of one
/// at a time): the loop is latency-bound, and a recomputed logit sits on a launch's critical path.
///
/// # Safety
/// All 32 lanes of the warp call it together with the same arguments; both rows hold `d` elements of
/// type `elem` and are 16-byte aligned.
#[inline(always)]
pub(super) unsafe fn warp_dot(hidden: *const u16, weight: *const u16, d: usize, lane: u32, elem: ElementType) -> f32 {
    let mut y = 0.0f32;
    let mut k = 8 * lane as usize;
    while k + 3 * 256 < d {
        // SAFETY: k + 3·256 + 8 ≤ d (d % 8 == 0): every chunk is inside both rows, 16-byte aligned.
        add4(&mut y, unsafe { load4(hidden, weight, k) }, elem);
        k += 4 * 256;
    }
    while k < d {
        // SAFETY: k + 8 ≤ d (d % 8 == 0): 16 bytes inside both rows, 16-byte aligned.
        let (hv, wv) = unsafe {
            (ld_global_nc_v4_f32(hidden.add(k) as *const f32), ld_global_nc_v4_f32(weight.add(k) as *const f32))
        };
        add_products(&mut y, hv, wv, elem);
        k += 256;
    }
    for m in [1u32, 2, 4, 8, 16] {
        // SAFETY: all 32 lanes (the caller's contract).
        y += f32::from_bits(unsafe { shfl_sync_bfly_b32(y.to_bits(), m) });
    }
    y
}

/// `Σ_k hidden[k] · weight[k]` over `d` entries (`d % 8 == 0`) with the block's first `threads`
/// threads (a multiple of 32; the others only meet the barrier): thread `t` sums the 16-byte chunks
/// `t, t + threads, …`, four in flight (one round to memory up to D = 8192 at 256 threads), then a
/// butterfly per warp and those warps' sums in order (thread 0's result; `slots` holds one word per
/// taking-part warp).
///
/// # Safety
/// Every thread of the block calls it, at least `threads` of them; both rows hold `d` elements of
/// type `elem`, 16-byte aligned.
#[inline(always)]
pub(super) unsafe fn block_dot(
    (hidden, weight): (*const u16, *const u16),
    d: usize,
    (tid, threads): (u32, u32),
    slots: u32,
    elem: ElementType,
) -> f32 {
    let stride = 8 * threads as usize;
    let mut y = 0.0f32;
    let part = tid < threads; // warp-uniform
    let mut k = 8 * tid as usize;
    while part && k < d {
        let mut c = [[0.0f32; 4]; 8];
        unrolled!(I in [0, 1, 2, 3] {
            let at = k + I * stride;
            if at < d {
                // SAFETY: at + 8 ≤ d (d % 8 == 0): 16 bytes inside both rows, 16-byte aligned.
                unsafe {
                    c[2 * I] = ld_global_nc_v4_f32(hidden.add(at) as *const f32);
                    c[2 * I + 1] = ld_global_nc_v4_f32(weight.add(at) as *const f32);
                }
            }
        });
        unrolled!(I in [0, 1, 2, 3] {
            if k + I * stride < d {
                add_products(&mut y, c[2 * I], c[2 * I + 1], elem);
            }
        });
        k += 4 * stride;
    }
    for m in [1u32, 2, 4, 8, 16] {
        // SAFETY: every lane of every warp (the caller's contract).
        y += f32::from_bits(unsafe { shfl_sync_bfly_b32(y.to_bits(), m) });
    }
    // SAFETY: one word per warp inside `slots`; block-uniform barrier.
    unsafe {
        if part && tid % 32 == 0 {
            st_shared_u32(slots + 4 * (tid / 32), y.to_bits());
        }
        _syncthreads();
    }
    let mut sum = 0.0f32;
    if tid == 0 {
        for w in 0..threads / 32 {
            // SAFETY: stored above, visible after the barrier.
            sum += f32::from_bits(unsafe { ld_shared_u32(slots + 4 * w) });
        }
    }
    sum
}
