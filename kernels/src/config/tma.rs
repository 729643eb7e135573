//! The TMA layouts: the tensor maps' boxes over the weight and the hidden states, and which vocab
//! row each slab row of a stage holds.

use super::*;

/// The TMA weight box: a tensor map over the weight `[V, D]` copies `TMA_WEIGHT_BOX_ROWS` rows that
/// are `TMA_WEIGHT_ROW_STEP` vocab rows apart (its element stride along V), 64 D columns each.
/// Sixteen such boxes fill a stage's 128-row weight slab in the permuted row order of the `wgmma`
/// kernels (slab rows `64h + 16w + 8e + g`, `g = 0..8`, are vocab rows `32w + 2h + e + 4g` of the
/// tile), so each lane's accumulators stay whole Philox groups of four vocab rows.
pub const TMA_WEIGHT_ROW_STEP: u32 = 4;
/// Rows of one TMA weight box (see [`TMA_WEIGHT_ROW_STEP`]).
pub const TMA_WEIGHT_BOX_ROWS: u32 = 8;
/// TMA weight boxes per stage: 128 slab rows / 8.
pub const TMA_WEIGHT_BOXES: u32 = BLOCK_V / TMA_WEIGHT_BOX_ROWS;

/// Slab row `s` of a `wgmma` stage → offset of its vocab row in the 128-row tile. The two 64-row
/// halves `h` of the slab are the A operands of two `m64nNk16` MMAs; slab row `64h + 16w + 8e + g`
/// holds vocab row `4·(8w + g) + 2h + e`, so the accumulators of lane `(w, g, q)` (MMA rows
/// `16w + g` and `16w + g + 8` of both halves) are four consecutive vocab rows: one Philox group.
#[inline]
pub const fn vocab_of_slab_row(s: u32) -> u32 {
    let (h, w, g, e) = (s / 64, (s % 64) / 16, s % 8, (s % 16) / 8);
    4 * (8 * w + g) + 2 * h + e
}

/// Slab row of MMA row `g + 8e` (`g < 8`) of M tile `mt` (`< 2`) of consumer warp `w` (`< 4`) in the
/// portable TMA kernels ([`Family::TmaMmaSync`]), which read the weight-as-A slab as `mma.sync` A
/// fragments: slab row `64mt + 16w + 8e + g` holds vocab row `32w + 4g + 2mt + e` of the tile
/// ([`vocab_of_slab_row`]), so lane `(g, q)` of warp `w` holds the four vocab rows `32w + 4g ..`
/// (one Philox group, the block-staging kernels' lane rows), and the 8 rows one `ldmatrix` matrix
/// reads are consecutive slab rows (8 distinct 128-byte swizzles: no bank conflict).
#[inline]
pub const fn mma_slab_row(w: u32, mt: u32, e: u32, g: u32) -> u32 {
    64 * mt + 16 * w + 8 * e + g
}

/// Where lane `lane` of consumer warp `w` points `ldmatrix` in a stage of the portable TMA kernels
/// ([`Family::TmaMmaSync`]): byte offsets from the slab (whose `w_rows` weight rows come first, in
/// the weight-as-A order, then the hidden rows) of the 16-byte rows it gives each `ldmatrix.x4`.
/// Lane `l = 8i + r` gives row `r` of matrix `i`, and register `i` of lane `4g + q` receives
/// elements `2q, 2q + 1` of row `g` of matrix `i`:
/// - **A** (M tile `mt`): matrix `i` is MMA rows `g + 8·(i % 2)`, D half `i / 2` of the k16 step:
///   slab row [`mma_slab_row`]`(w, mt, i % 2, r)`, so the registers are the A fragment
///   `{a0a1, a2a3, a4a5, a6a7}` of `mma.sync.m16n8k16` in order.
/// - **B** (N tiles `2j`, `2j + 1`): matrix `i` is N tile `2j + i / 2`, D half `i % 2`: hidden row
///   `h0 + 8·(2j + i / 2) + r`, so registers 0, 1 are N tile `2j`'s `{b0b1, b2b3}` and 2, 3 N tile
///   `2j + 1`'s.
///
/// D half `e` of k16 step `kk` is a row's 16-byte piece `2kk + e`, stored at piece
/// `(2kk + e) ^ (row % 8)` (the 128-byte swizzle). The 8 rows of a matrix are consecutive slab rows
/// (`h0 % 8 == 0`), so they hit 8 distinct bank groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlabLane {
    /// Offsets of the lane's A rows, per M tile.
    pub a_rows: [u32; 2],
    /// Offset of the lane's B row for N tiles 0 and 1 (pair `j` is `16 · STAGE_ROW_BYTES · j` on).
    pub b_row: u32,
    /// `(i / 2) ^ r`: XORed with `2kk`, the stored piece of the lane's A rows.
    pub a_x: u32,
    /// `(i % 2) ^ r`: XORed with `2kk`, the stored piece of the lane's B row.
    pub b_x: u32,
}

impl SlabLane {
    /// Lane `lane` of consumer warp `w` (vocab rows `32w ..` of each tile), whose batch rows start at
    /// hidden row `h0` (a multiple of 8) of a slab of `w_rows` weight rows.
    #[inline]
    pub const fn new(w: u32, lane: u32, h0: u32, w_rows: u32) -> Self {
        let (i, r) = (lane / 8, lane % 8);
        SlabLane {
            a_rows: [STAGE_ROW_BYTES * mma_slab_row(w, 0, i % 2, r), STAGE_ROW_BYTES * mma_slab_row(w, 1, i % 2, r)],
            b_row: STAGE_ROW_BYTES * (w_rows + h0 + 8 * (i / 2) + r),
            a_x: (i / 2) ^ r,
            b_x: (i % 2) ^ r,
        }
    }
    /// Offset of the lane's A row for M tile `mt`, k16 step `kk`.
    #[inline(always)]
    pub const fn a_at(&self, mt: usize, kk: u32) -> u32 {
        self.a_rows[mt] + 16 * ((2 * kk) ^ self.a_x)
    }
    /// Offset of the lane's B row for N tiles `2j`, `2j + 1`, k16 step `kk`.
    #[inline(always)]
    pub const fn b_at(&self, j: u32, kk: u32) -> u32 {
        self.b_row + 16 * STAGE_ROW_BYTES * j + 16 * ((2 * kk) ^ self.b_x)
    }
}

/// A TMA tensor map's geometry (`R` dimensions, innermost first), as `cuTensorMapEncodeTiled`
/// takes it; the data type is bf16, the swizzle 128 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TmaLayout<const R: usize> {
    /// Elements per dimension.
    pub dims: [u64; R],
    /// Bytes between consecutive indices of each dimension (`strides[0]` = 2, the element size;
    /// the driver takes `strides[1..]`).
    pub strides: [u64; R],
    /// Box: elements traversed per dimension.
    pub boxes: [u32; R],
    /// Traversal step per dimension (`boxes[i] / element_strides[i]` elements are copied).
    pub element_strides: [u32; R],
}

impl<const R: usize> TmaLayout<R> {
    /// Byte offset of box element `at` (box coordinates, the box at the origin).
    pub const fn offset(&self, at: [u64; R]) -> u64 {
        let mut off = 0;
        let mut i = 0;
        while i < R {
            off += at[i] * self.element_strides[i] as u64 * self.strides[i];
            i += 1;
        }
        off
    }
}

/// The one-box-per-tile weight map over rows `0 .. 32·⌊V/32⌋` of the weight `[V, D]`: dimensions
/// D, `g` (stride 4 rows), `e` (1 row), `w` (32 rows), `h` (2 rows), box `64 × 8 × 2 × 4 × 2`, so box
/// element `(k, g, e, w, h)` lands at slab row `g + 8e + 16w + 64h` and is vocab row
/// [`vocab_of_slab_row`] of it (the tile at `w = 4·tile`). `None` when V < 32.
pub const fn tma_weight_tiles(d: u32, v: u32) -> Option<TmaLayout<5>> {
    let row = 2 * d as u64;
    if v < 32 {
        return None;
    }
    Some(TmaLayout {
        dims: [d as u64, 8, 2, (v / 32) as u64, 2],
        strides: [2, 4 * row, row, 32 * row, 2 * row],
        boxes: [STAGE_K, 8, 2, 4, 2],
        element_strides: [1; 5],
    })
}

/// Vocab rows per tile of the hidden-as-A kernels ([`Family::WgmmaHiddenA`]): the N of `m64n256k16`.
pub const TMA_T_TILE_V: u32 = 256;
/// V must be a multiple of this for the hidden-as-A kernels: their one-box weight map covers whole
/// 16-row groups, and rows past V are then exactly the ones outside the map (zeros).
pub const TMA_T_VOCAB_ALIGN: u32 = 16;

/// Slab row `n` of a hidden-as-A stage (the B operand, 256 vocab rows) → offset of its vocab row in
/// the tile. Accumulator `4j + 2e + c` of lane `(w, g, q)` is batch row `16w + g + 8e`, column
/// `n = 8j + 2q + c`; slab row `16J + 8i + 2q + c` holds vocab row `16J + 4q + 2i + c`, so the
/// columns of `j = 2J` and `2J + 1` are the four consecutive vocab rows `16J + 4q ..`: one Philox
/// group per lane and batch row.
#[inline]
pub const fn vocab_of_slab_row_t(n: u32) -> u32 {
    let (big_j, i, q, c) = (n / 16, (n / 8) % 2, (n / 2) % 4, n % 2);
    16 * big_j + 4 * q + 2 * i + c
}

/// The one-box-per-tile weight map of the hidden-as-A kernels over the weight `[V, D]`
/// (`V % 16 == 0`): dimensions D, `c` (stride 1 row), `q` (4 rows), `i` (2 rows), `J` (16 rows,
/// `V / 16` of them), box `64 × 2 × 4 × 2 × 16`, so box element `(k, c, q, i, J)` lands at slab row
/// `c + 2q + 8i + 16J` and is vocab row [`vocab_of_slab_row_t`] of it (the tile at `J = 16·tile`);
/// rows past V lie outside the map (zeros). `None` when `V % 16 ≠ 0`.
pub const fn tma_weight_tiles_t(d: u32, v: u32) -> Option<TmaLayout<5>> {
    let row = 2 * d as u64;
    if v % TMA_T_VOCAB_ALIGN != 0 {
        return None;
    }
    Some(TmaLayout {
        dims: [d as u64, 2, 4, 2, (v / 16) as u64],
        strides: [2, row, 4 * row, 2 * row, 16 * row],
        boxes: [STAGE_K, 2, 4, 2, 16],
        element_strides: [1; 5],
    })
}

/// The row-box weight map over the whole weight `[V, D]`: box `64 × 32` with element strides
/// `1 × 4` ([`TMA_WEIGHT_BOX_ROWS`] rows [`TMA_WEIGHT_ROW_STEP`] apart); box `i` of a tile starts
/// at vocab row [`vocab_of_slab_row`]`(8i)` and lands at slab row `8i`. Rows past V are zeros.
pub const fn tma_weight_rows(d: u32, v: u32) -> TmaLayout<2> {
    TmaLayout {
        dims: [d as u64, v as u64],
        strides: [2, 2 * d as u64],
        boxes: [STAGE_K, TMA_WEIGHT_BOX_ROWS * TMA_WEIGHT_ROW_STEP],
        element_strides: [1, TMA_WEIGHT_ROW_STEP],
    }
}

/// The hidden-state map over `[B, D]`: box `64 × block_b` rows; rows past B are zeros.
pub const fn tma_hidden(d: u32, b: u32, block_b: u32) -> TmaLayout<2> {
    TmaLayout {
        dims: [d as u64, b as u64],
        strides: [2, 2 * d as u64],
        boxes: [STAGE_K, block_b],
        element_strides: [1, 1],
    }
}
