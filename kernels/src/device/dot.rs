//! One f32 dot product of a bf16 hidden row and a bf16 weight row over a warp: the few logits that
//! are recomputed outside the fused pass (adjusted tokens, the sampled token's log-probability, a
//! truncated row's new token, the fallback's materialized logits).

use super::ptx::{ld_global_nc_v4_f32, shfl_sync_bfly_b32};
use half::bf16;

/// `Σ_k hidden[k] · weight[k]` over `d` entries (`d % 8 == 0`), f32: lane `l` sums entries
/// `8l + 256i ..`, then a butterfly; every lane returns the same sum.
///
/// # Safety
/// All 32 lanes of the warp call it together with the same arguments; both rows hold `d` bf16 and
/// are 16-byte aligned.
#[inline(always)]
pub(super) unsafe fn warp_dot(hidden: *const bf16, weight: *const bf16, d: usize, lane: u32) -> f32 {
    let mut y = 0.0f32;
    let mut k = 8 * lane as usize;
    while k < d {
        // SAFETY: k + 8 ≤ d (d % 8 == 0): 16 bytes inside both rows, 16-byte aligned.
        let (hv, wv) = unsafe {
            (ld_global_nc_v4_f32(hidden.add(k) as *const f32), ld_global_nc_v4_f32(weight.add(k) as *const f32))
        };
        for j in 0..4 {
            let (hb, wb) = (hv[j].to_bits(), wv[j].to_bits());
            y += f32::from_bits(hb << 16) * f32::from_bits(wb << 16);
            y += f32::from_bits(hb & 0xFFFF_0000) * f32::from_bits(wb & 0xFFFF_0000);
        }
        k += 256;
    }
    for m in [1u32, 2, 4, 8, 16] {
        // SAFETY: all 32 lanes (the caller's contract).
        y += f32::from_bits(unsafe { shfl_sync_bfly_b32(y.to_bits(), m) });
    }
    y
}

/// [`warp_dot`] of one weight row with the first `rows` (≤ `G`) of `G` hidden rows: each weight
/// chunk is loaded once for all of them; every sum is bit-identical to its [`warp_dot`].
///
/// # Safety
/// As [`warp_dot`] for the weight row and each of the first `rows` hidden rows; `rows` is the same
/// on every lane.
#[inline(always)]
pub(super) unsafe fn warp_dots<const G: usize>(
    hidden: [*const bf16; G],
    rows: usize,
    weight: *const bf16,
    d: usize,
    lane: u32,
) -> [f32; G] {
    let mut y = [0.0f32; G];
    let mut k = 8 * lane as usize;
    while k < d {
        // SAFETY: k + 8 ≤ d: 16 bytes inside the weight row, 16-byte aligned.
        let wv = unsafe { ld_global_nc_v4_f32(weight.add(k) as *const f32) };
        for (g, acc) in y.iter_mut().enumerate() {
            if g < rows {
                // SAFETY: as above, hidden row g (g < rows).
                let hv = unsafe { ld_global_nc_v4_f32(hidden[g].add(k) as *const f32) };
                for j in 0..4 {
                    let (hb, wb) = (hv[j].to_bits(), wv[j].to_bits());
                    *acc += f32::from_bits(hb << 16) * f32::from_bits(wb << 16);
                    *acc += f32::from_bits(hb & 0xFFFF_0000) * f32::from_bits(wb & 0xFFFF_0000);
                }
            }
        }
        k += 256;
    }
    for acc in y.iter_mut() {
        for m in [1u32, 2, 4, 8, 16] {
            // SAFETY: all 32 lanes (the caller's contract).
            *acc += f32::from_bits(unsafe { shfl_sync_bfly_b32(acc.to_bits(), m) });
        }
    }
    y
}
