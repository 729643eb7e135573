//! Per-row logit controls that touch some tokens of a row: the allowed-token bitmask (grammars) and
//! sparse adjustments (logit bias, repetition / frequency / presence penalties). The arithmetic is the
//! no_std core's ([`flashsampling_kernels::logits`]); these are the host-side containers, their
//! validation, and the helper that builds a row's penalties from its tokens so far.

use std::collections::BTreeMap;

use flashsampling_kernels::logits::Adjustment;

use crate::error::{Error, Result};

/// Allowed tokens per row as 32-bit words: bit `j` of word `w` is token `32·w + j` (the layout vLLM
/// and xgrammar use, so a caller can pass theirs). `[B, words_per_row]`, row-major,
/// `words_per_row = ceil(V / 32)`; bits past V are ignored. A disallowed token is never sampled; a row
/// with nothing allowed has no token ([`Error::AllLogitsNegInfinite`] on the host API).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMask {
    /// The words, `[B, words_per_row]`.
    pub words: Vec<u32>,
    /// Words per row.
    pub words_per_row: usize,
}

impl TokenMask {
    /// Every token of `v` allowed, for `b` rows.
    pub fn all(b: usize, v: usize) -> Self {
        Self { words: vec![u32::MAX; b * v.div_ceil(32)], words_per_row: v.div_ceil(32) }
    }

    /// Only the listed tokens allowed, per row.
    pub fn from_allowed(v: usize, rows: &[&[u32]]) -> Result<Self> {
        let wpr = v.div_ceil(32);
        let mut words = vec![0u32; rows.len() * wpr];
        for (r, tokens) in rows.iter().enumerate() {
            for &t in *tokens {
                if t as usize >= v {
                    return Err(Error::TokenOutOfRange { row: r, token: t, v });
                }
                words[r * wpr + t as usize / 32] |= 1 << (t % 32);
            }
        }
        Ok(Self { words, words_per_row: wpr })
    }

    /// Row `row`'s words.
    pub fn row(&self, row: usize) -> &[u32] {
        &self.words[row * self.words_per_row..(row + 1) * self.words_per_row]
    }

    pub(crate) fn validate(&self, b: usize, v: usize) -> Result<()> {
        let want = v.div_ceil(32);
        if self.words_per_row != want || self.words.len() != b * want {
            return Err(Error::LengthMismatch {
                buffer: "allowed-token mask (B × ceil(V / 32) words)",
                expected: b * want,
                actual: if self.words_per_row == want { self.words.len() } else { self.words_per_row * b },
            });
        }
        Ok(())
    }
}

/// Sparse per-row logit adjustments in CSR form: row `r`'s entries are
/// `tokens[offsets[r] .. offsets[r + 1]]` (strictly increasing) with `adjustments[…]`.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseAdjustments {
    /// `B + 1` offsets into `tokens`, non-decreasing, from 0.
    pub offsets: Vec<usize>,
    /// Token ids, strictly increasing within a row.
    pub tokens: Vec<u32>,
    /// One adjustment per token id.
    pub adjustments: Vec<Adjustment>,
}

impl SparseAdjustments {
    /// No adjustment on any of `b` rows.
    pub fn none(b: usize) -> Self {
        Self { offsets: vec![0; b + 1], tokens: Vec::new(), adjustments: Vec::new() }
    }

    /// From per-row requests (one [`RowPenalties`] per batch row).
    pub fn from_rows(rows: &[RowPenalties<'_>]) -> Result<Self> {
        let mut out = Self::none(0);
        for (r, p) in rows.iter().enumerate() {
            for (t, a) in p.adjustments(r)? {
                out.tokens.push(t);
                out.adjustments.push(a);
            }
            out.offsets.push(out.tokens.len());
        }
        Ok(out)
    }

    /// Row `row`'s (tokens, adjustments).
    pub fn row(&self, row: usize) -> (&[u32], &[Adjustment]) {
        let (a, b) = (self.offsets[row], self.offsets[row + 1]);
        (&self.tokens[a..b], &self.adjustments[a..b])
    }

    pub(crate) fn validate(&self, b: usize, v: usize) -> Result<()> {
        let n = self.tokens.len();
        if self.offsets.len() != b + 1 {
            return Err(Error::LengthMismatch {
                buffer: "adjustment offsets (B + 1)",
                expected: b + 1,
                actual: self.offsets.len(),
            });
        }
        if self.adjustments.len() != n {
            return Err(Error::LengthMismatch { buffer: "adjustments", expected: n, actual: self.adjustments.len() });
        }
        if self.offsets[0] != 0 || self.offsets[b] != n || self.offsets.windows(2).any(|w| w[0] > w[1]) {
            return Err(Error::InvalidAdjustments {
                row: 0,
                reason: "offsets must rise from 0 to the number of entries",
            });
        }
        for row in 0..b {
            let (tokens, adj) = self.row(row);
            if let Some(&t) = tokens.iter().find(|&&t| t as usize >= v) {
                return Err(Error::TokenOutOfRange { row, token: t, v });
            }
            if tokens.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Error::InvalidAdjustments {
                    row,
                    reason: "token ids must be strictly increasing within a row",
                });
            }
            if adj.iter().any(|a| {
                !(a.bias.is_finite() && a.subtract.is_finite() && a.repetition.is_finite() && a.repetition > 0.0)
            }) {
                return Err(Error::InvalidAdjustments {
                    row,
                    reason: "bias and penalties must be finite, repetition > 0",
                });
            }
        }
        Ok(())
    }
}

/// One request's adjustments, with the definitions vLLM documents for its sampling parameters:
/// `logit_bias` adds to a token's logit; `repetition_penalty` (> 0, 1 = off) divides a positive and
/// multiplies a negative logit of every token in the prompt or the output so far; `frequency_penalty`
/// subtracts its value times the token's count in the output so far; `presence_penalty` subtracts its
/// value once for a token that occurs in the output so far. Bias first, then the repetition penalty,
/// then frequency and presence ([`Adjustment::apply`]).
#[derive(Clone, Debug, Default)]
pub struct RowPenalties<'a> {
    /// (token, bias) pairs.
    pub logit_bias: &'a [(u32, f32)],
    /// The repetition penalty (0 is read as 1: off).
    pub repetition_penalty: f32,
    /// The frequency penalty.
    pub frequency_penalty: f32,
    /// The presence penalty.
    pub presence_penalty: f32,
    /// The prompt's tokens (for the repetition penalty).
    pub prompt: &'a [u32],
    /// The tokens generated so far.
    pub output: &'a [u32],
}

impl RowPenalties<'_> {
    /// The row's (token, adjustment) entries, sorted by token.
    fn adjustments(&self, row: usize) -> Result<Vec<(u32, Adjustment)>> {
        let rep = if self.repetition_penalty == 0.0 { 1.0 } else { self.repetition_penalty };
        if !(rep.is_finite() && rep > 0.0 && self.frequency_penalty.is_finite() && self.presence_penalty.is_finite()) {
            return Err(Error::InvalidAdjustments { row, reason: "penalties must be finite, repetition > 0" });
        }
        let mut map: BTreeMap<u32, Adjustment> = BTreeMap::new();
        for &(t, bias) in self.logit_bias {
            map.entry(t).or_insert(Adjustment::NONE).bias += bias;
        }
        if rep != 1.0 {
            for &t in self.prompt.iter().chain(self.output) {
                map.entry(t).or_insert(Adjustment::NONE).repetition = rep;
            }
        }
        let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
        for &t in self.output {
            *counts.entry(t).or_insert(0) += 1;
        }
        if self.frequency_penalty != 0.0 || self.presence_penalty != 0.0 {
            for (&t, &c) in &counts {
                map.entry(t).or_insert(Adjustment::NONE).subtract =
                    self.frequency_penalty * c as f32 + self.presence_penalty;
            }
        }
        Ok(map.into_iter().filter(|(_, a)| *a != Adjustment::NONE).collect())
    }
}

/// Everything a row's logits go through before the temperature, for one row (the CPU backend's view
/// of the controls).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowLogits<'a> {
    pub softcap: Option<f32>,
    pub mask: Option<&'a [u32]>,
    pub adjust: (&'a [u32], &'a [Adjustment]),
}

impl RowLogits<'_> {
    /// Whether anything applies.
    pub fn is_identity(&self) -> bool {
        self.softcap.is_none() && self.mask.is_none() && self.adjust.0.is_empty()
    }

    /// Processes the logits of vocab rows `v0 .. v0 + logits.len()` in place with the one logit
    /// pipeline the kernels run ([`LogitPipeline::process`]: soft-cap, then the token's adjustment,
    /// then the mask; disallowed: `−∞`).
    pub fn apply(&self, logits: &mut [f32], v0: usize) {
        use flashsampling_kernels::logits::{LogitPipeline, allowed};
        let pipe = LogitPipeline::new(self.softcap.unwrap_or(0.0));
        let (tokens, adj) = self.adjust;
        // The adjusted tokens in range, in ascending order (the row's tokens are sorted).
        let mut next = tokens.partition_point(|&t| (t as usize) < v0);
        for (i, y) in logits.iter_mut().enumerate() {
            let v = v0 + i;
            let adjustment = match tokens.get(next) {
                Some(&t) if t as usize == v => {
                    next += 1;
                    Some(&adj[next - 1])
                }
                _ => None,
            };
            let ok = self.mask.is_none_or(|mask| allowed(mask, v as u32));
            *y = pipe.process(*y, adjustment, ok);
        }
    }

    /// One processed logit (token `v`).
    pub fn one(&self, y: f32, v: usize) -> f32 {
        let mut l = [y];
        self.apply(&mut l, v);
        l[0]
    }
}
