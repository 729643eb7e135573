//! Shard layouts: which global vocab rows each rank holds ([`ShardLayout`]), checked across ranks.

use super::*;

/// Most ranks a layout or a group takes (NCCL's rank count is a C `int`; no machine has more GPUs).
pub const MAX_RANKS: usize = 1 << 16;

/// The shard a rank holds: global vocab rows `offset .. offset + rows` of a `vocab`-entry head with
/// hidden size `d`, its weight and the hidden states of element type `elem`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardLayout {
    /// Global vocab index of the shard's first row (a multiple of [`SHARD_OFFSET_ALIGN`]).
    pub offset: usize,
    /// Rows of the shard's weight (the last shard's may run past `vocab`: padding).
    pub rows: usize,
    /// The model's vocabulary size V.
    pub vocab: usize,
    /// Hidden size D.
    pub d: usize,
    /// Element type of the weight shard and the hidden states (the same on every rank; a call
    /// with other elements is refused).
    pub elem: ElementType,
}

impl ShardLayout {
    /// The even split Megatron and vLLM use: `ceil(V / G)` rows per rank rounded up to a multiple
    /// of `pad` (≥ 4, a multiple of 4), the last shard padded past V; bf16 elements
    /// ([`Self::with_elem`] for others).
    pub fn even(vocab: usize, d: usize, ranks: usize, pad: usize) -> Result<Vec<Self>> {
        if ranks == 0 || pad == 0 || pad % SHARD_OFFSET_ALIGN != 0 {
            return Err(Error::InvalidShards { reason: "ranks and padding must be positive multiples of 4", at: 0 });
        }
        if vocab == 0 {
            return Err(Error::EmptyVocab);
        }
        let max = MAX_DIM as usize;
        if vocab > max {
            return Err(Error::TooLarge { what: "vocab size V", value: vocab, max });
        }
        if ranks > MAX_RANKS {
            return Err(Error::TooLarge { what: "ranks", value: ranks, max: MAX_RANKS });
        }
        // The padded shard and the padded head must stay within the kernels' limit: checked without
        // wrap-around (a release build wrapped `usize::MAX` to a 0-row shard).
        let rows = vocab.div_ceil(ranks).checked_next_multiple_of(pad).unwrap_or(usize::MAX);
        let total = rows.saturating_mul(ranks);
        if total > max {
            return Err(Error::TooLarge {
                what: "vocab rows of all shards (V padded to the ranks)",
                value: total,
                max,
            });
        }
        Ok((0..ranks).map(|r| Self { offset: r * rows, rows, vocab, d, elem: ElementType::Bf16 }).collect())
    }

    /// The layout with element type `elem`.
    pub fn with_elem(self, elem: ElementType) -> Self {
        Self { elem, ..self }
    }

    /// The exchange's word for the element type (1 = bf16, 2 = f16).
    pub(super) fn elem_word(elem: ElementType) -> u64 {
        match elem {
            ElementType::Bf16 => 1,
            ElementType::F16 => 2,
        }
    }

    /// `Error::RankMismatch` (from rank `rank`'s view) unless a call's elements `elem` are the
    /// layout's.
    pub(super) fn check_elem(&self, rank: usize, elem: ElementType) -> Result<()> {
        if elem != self.elem {
            return Err(Error::RankMismatch {
                rank,
                what: "element type (1 = bf16, 2 = f16) of this call's hidden states and weight",
                expected: Self::elem_word(self.elem) as usize,
                actual: Self::elem_word(elem) as usize,
            });
        }
        Ok(())
    }

    pub(super) fn words(&self, rank: usize, world: usize) -> [u64; 8] {
        const MAGIC: u64 = 0x666c_6173_6873_6d70; // "flashsmp"
        [
            MAGIC,
            rank as u64,
            world as u64,
            self.offset as u64,
            self.rows as u64,
            self.vocab as u64,
            self.d as u64,
            Self::elem_word(self.elem),
        ]
    }
}

/// Checks that `layouts` (in rank order) tile `0 .. V` with shards on the GPU's alignment, agree on
/// V and D, and that the ranks agree on the dtype (`words` from the exchange). The same verdict on
/// every rank.
pub(super) fn validate_layouts(layouts: &[ShardLayout]) -> Result<()> {
    let first = layouts.first().ok_or(Error::InvalidShards { reason: "no shards", at: 0 })?;
    let mut next = 0;
    for (rank, l) in layouts.iter().enumerate() {
        let elem = |l: &ShardLayout| ShardLayout::elem_word(l.elem) as usize;
        for (what, expected, actual) in [
            ("vocab size V", first.vocab, l.vocab),
            ("hidden size D", first.d, l.d),
            ("element type (1 = bf16, 2 = f16)", elem(first), elem(l)),
        ] {
            if expected != actual {
                return Err(Error::RankMismatch { rank, what, expected, actual });
            }
        }
        if l.rows == 0 {
            return Err(Error::InvalidShards { reason: "an empty shard", at: l.offset });
        }
        if l.offset != next {
            let reason = if l.offset > next { "a gap between shards" } else { "overlapping shards" };
            return Err(Error::InvalidShards { reason, at: next.min(l.offset) });
        }
        if l.offset % SHARD_OFFSET_ALIGN != 0 {
            return Err(Error::InvalidShards {
                reason: "a shard on the GPU must start at a multiple of 4 vocab rows",
                at: l.offset,
            });
        }
        next = l.offset + l.rows;
    }
    if first.vocab == 0 {
        return Err(Error::EmptyVocab);
    }
    if next < first.vocab {
        return Err(Error::InvalidShards { reason: "the shards end before V", at: next });
    }
    if next > MAX_DIM as usize {
        return Err(Error::TooLarge { what: "vocab rows of all shards", value: next, max: MAX_DIM as usize });
    }
    Ok(())
}
