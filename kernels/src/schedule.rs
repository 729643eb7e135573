//! The stage-balanced vocab ranges of the tile scheduler (no_std: the host sizes launches and buffers
//! with them, `device/schedule.rs` walks them): a block's range as whole tiles, or balanced to the
//! pipeline stage with a cut tile's head and tail ([`RangeStages`]).

/// What one part of a block's work is: a whole vocab tile, or one of the two parts of a tile that a
/// range boundary cuts ([`RangeStages::balanced`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PieceKind {
    /// Every D step of the tile, then its epilogue.
    Whole,
    /// The first D steps of a tile whose rest the block of the range below runs: the accumulators
    /// are handed over, no epilogue.
    Head,
    /// The last D steps of a tile, continuing from the accumulators the block of the range above
    /// handed over, then the tile's epilogue.
    Tail,
}

/// One part of a block's work: the D steps `[k0, k1)` of vocab tile `tile`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The vocab tile.
    pub tile: u32,
    /// First D step (pipeline stage of the tile).
    pub k0: u32,
    /// One past the last D step.
    pub k1: u32,
    /// Whole tile, head or tail.
    pub kind: PieceKind,
}

/// The pipeline stages of one vocab range: an optional head (the first `head` D steps of tile
/// `first − 1`), the whole tiles `[first, end)`, and an optional tail (the last `tail` D steps of tile
/// `end`), `n_k` D steps per tile. The block runs them in that order ([`Self::piece`]); the tiles it
/// scores (the whole ones, then the tail's) ascend, and each logit is the same MMA sequence in D
/// order as with whole tiles (the tail continues from the head's accumulators).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeStages {
    /// D steps of the head piece (0: none).
    pub head: u32,
    /// First whole tile.
    pub first: u32,
    /// One past the last whole tile (= the tail's tile).
    pub end: u32,
    /// D steps of the tail piece (0: none).
    pub tail: u32,
    /// D steps per tile.
    pub n_k: u32,
}

impl RangeStages {
    /// Range `r` of `n` over `tiles` tiles in whole tiles, as even as integers allow: tiles
    /// `[tiles·r/n, tiles·(r+1)/n)`.
    #[inline]
    pub const fn whole(tiles: u32, n: u32, r: u32, n_k: u32) -> Self {
        let n = if n == 0 { 1 } else { n } as u64;
        let first = (tiles as u64 * r as u64 / n) as u32;
        let end = (tiles as u64 * (r as u64 + 1) / n) as u32;
        RangeStages { head: 0, first, end, tail: 0, n_k }
    }

    /// Range `r` of `n` balanced to the stage: the `tiles · n_k` stages split as evenly as integers
    /// allow, range `r` taking `s1 − s0` of them with `s = tiles·n_k·r / n`. A boundary `s` inside tile
    /// `t = s / n_k` gives the range above the tile's first `n_k − s % n_k` D steps (its head) and the
    /// range below the last `s % n_k` (its tail): the same counts as the cut in stage order, but in D
    /// order across the two blocks. Needs `tiles ≥ 2n` (every range then holds a whole tile besides
    /// its head and tail).
    #[inline]
    pub const fn balanced(tiles: u32, n: u32, r: u32, n_k: u32) -> Self {
        let n = if n == 0 { 1 } else { n } as u64;
        let total = tiles as u64 * n_k as u64;
        let s0 = (total * r as u64 / n) as u32;
        let s1 = (total * (r as u64 + 1) / n) as u32;
        let (c0, c1) = (s0 % n_k, s1 % n_k);
        RangeStages { head: if c0 == 0 { 0 } else { n_k - c0 }, first: s0.div_ceil(n_k), end: s1 / n_k, tail: c1, n_k }
    }

    /// Pieces in the block's order: the head (if any), the whole tiles, the tail (if any).
    #[inline]
    pub const fn pieces(&self) -> u32 {
        (self.head > 0) as u32 + (self.end - self.first) + (self.tail > 0) as u32
    }

    /// Piece `j < pieces()`.
    #[inline]
    pub const fn piece(&self, j: u32) -> Piece {
        let h = (self.head > 0) as u32;
        if j < h {
            return Piece { tile: self.first - 1, k0: 0, k1: self.head, kind: PieceKind::Head };
        }
        let tile = self.first + (j - h);
        if tile < self.end {
            Piece { tile, k0: 0, k1: self.n_k, kind: PieceKind::Whole }
        } else {
            Piece { tile: self.end, k0: self.n_k - self.tail, k1: self.n_k, kind: PieceKind::Tail }
        }
    }

    /// The block's stage count before piece `j` (its first stage's index; stage `i` fills ring slot
    /// `i % S`).
    #[inline]
    pub const fn first_stage(&self, j: u32) -> u32 {
        if self.head > 0 { if j == 0 { 0 } else { self.head + (j - 1) * self.n_k } } else { j * self.n_k }
    }

    /// Every stage of the range.
    #[inline]
    pub const fn stages(&self) -> u32 {
        self.head + (self.end - self.first) * self.n_k + self.tail
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    /// Every (tile, D step) of the vocab exactly once; head and tail of a cut tile complementary
    /// and owned by neighbouring ranges; each range's scored tiles ascending and above the range
    /// below's; every range within one stage of the mean.
    fn check_balanced(tiles: u32, n: u32, n_k: u32) {
        let mut seen = std::vec![0u8; (tiles * n_k) as usize];
        let mut scored = std::vec::Vec::new();
        let total = tiles as u64 * n_k as u64;
        for r in 0..n {
            let rs = RangeStages::balanced(tiles, n, r, n_k);
            let mut stage = 0;
            for j in 0..rs.pieces() {
                let pc = rs.piece(j);
                assert_eq!(rs.first_stage(j), stage, "{tiles} {n} {n_k} r {r} piece {j}");
                assert!(pc.k0 < pc.k1 && pc.k1 <= n_k && pc.tile < tiles);
                match pc.kind {
                    PieceKind::Head => assert!(j == 0 && pc.k0 == 0 && pc.k1 < n_k && r > 0),
                    PieceKind::Tail => assert!(j + 1 == rs.pieces() && pc.k0 > 0 && pc.k1 == n_k && r + 1 < n),
                    PieceKind::Whole => assert!(pc.k0 == 0 && pc.k1 == n_k),
                }
                if pc.kind == PieceKind::Head {
                    // The range below ends with the rest of this tile.
                    let below = RangeStages::balanced(tiles, n, r - 1, n_k);
                    let last = below.piece(below.pieces() - 1);
                    assert_eq!((last.kind, last.tile, last.k0), (PieceKind::Tail, pc.tile, pc.k1));
                } else {
                    scored.push(pc.tile);
                }
                for k in pc.k0..pc.k1 {
                    seen[(pc.tile * n_k + k) as usize] += 1;
                }
                stage += pc.k1 - pc.k0;
            }
            assert_eq!(stage, rs.stages());
            let (lo, hi) = (total * r as u64 / n as u64, total * (r as u64 + 1) / n as u64);
            assert_eq!(rs.stages() as u64, hi - lo);
            assert!(rs.stages() as u64 * n as u64 <= total + n as u64);
        }
        assert!(seen.iter().all(|&c| c == 1), "{tiles} tiles, {n} ranges, {n_k} steps");
        assert!(scored.windows(2).all(|w| w[0] < w[1]) && scored.len() == tiles as usize);
    }

    #[test]
    fn balanced_ranges_cover_every_stage_once_in_d_order_and_stay_within_one_stage_of_the_mean() {
        // Llama-3-70B (V 128256, D 8192) and Qwen3-8B (V 151936, D 4096) on 132 multiprocessors.
        check_balanced(1002, 132, 128);
        check_balanced(1187, 132, 64);
        let mut x = 0x9E37_79B9u32;
        let mut next = |m: u32| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x % m
        };
        for _ in 0..300 {
            let n = 1 + next(140);
            let tiles = 2 * n + next(10 * n);
            let n_k = 1 + next(160);
            check_balanced(tiles, n, n_k);
        }
        // Whole tiles are the balanced split with n_k = 1.
        for r in 0..7 {
            assert_eq!(RangeStages::balanced(50, 7, r, 1), RangeStages::whole(50, 7, r, 1));
        }
    }
}
