//! The CPU backend: the same tiles, the same noise, the same epilogue and merge as the GPU kernels
//! (the kernel crate's own functions), with logits summed in f32 on the host. The embedded default
//! when no GPU is present, and the reference the GPU tests compare against.

use flashsampling_kernels::config::BLOCK_V;
use flashsampling_kernels::epilogue::update_tile;
use flashsampling_kernels::{Candidate, RowNoise, Transform, candidate};
use half::bf16;

use crate::error::{Error, Result};
use crate::params::{Matrix, SamplingParams, Shape, validate};
use crate::{Samples, check_tokens};

/// CPU backend.
#[derive(Clone, Debug)]
pub struct CpuBackend {
    block_v: usize,
    threads: usize,
}

impl Default for CpuBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuBackend {
    /// The GPU's vocab tile ([`BLOCK_V`]) on all available cores.
    pub fn new() -> Self {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Self { block_v: BLOCK_V as usize, threads }
    }

    /// Another vocab tile size (a positive multiple of 4). Samples do not depend on it.
    pub fn with_block_v(mut self, block_v: usize) -> Result<Self> {
        if block_v == 0 || block_v % 4 != 0 || block_v > u32::MAX as usize {
            return Err(Error::InvalidTileSize(block_v));
        }
        self.block_v = block_v;
        Ok(self)
    }

    /// A fixed number of worker threads (at least 1).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The vocab tile size.
    pub fn block_v(&self) -> usize {
        self.block_v
    }

    /// One token per row of `hidden`.
    pub fn sample(&self, hidden: Matrix<'_>, weight: Matrix<'_>, params: &SamplingParams) -> Result<Vec<u32>> {
        Ok(self.sample_scored(hidden, weight, params)?.tokens)
    }

    /// Tokens and winning perturbed scores.
    pub fn sample_scored(&self, hidden: Matrix<'_>, weight: Matrix<'_>, params: &SamplingParams) -> Result<Samples> {
        let (shape, transform) = validate(
            (hidden.rows, hidden.cols, hidden.data.len()),
            (weight.rows, weight.cols, weight.data.len()),
            params,
        )?;
        let n_tiles = shape.v.div_ceil(self.block_v);
        let cands = self.candidates(hidden.data, weight.data, shape, params, transform);
        let winners: Vec<Candidate> = cands.chunks(n_tiles).map(candidate::reduce).collect();
        let samples = Samples {
            tokens: winners.iter().map(|c| c.token()).collect(),
            scores: winners.iter().map(|c| c.score).collect(),
        };
        check_tokens(&samples.tokens)?;
        Ok(samples)
    }

    /// The candidate buffer `[B, ceil(V / block_v)]` (row-major), as the fused kernel writes it.
    fn candidates(
        &self,
        hidden: &[bf16],
        weight: &[bf16],
        shape: Shape,
        params: &SamplingParams,
        transform: Transform,
    ) -> Vec<Candidate> {
        let Shape { b, d, v } = shape;
        let bv = self.block_v;
        let n_tiles = v.div_ceil(bv);
        let hidden_f32: Vec<f32> = hidden.iter().map(|x| x.to_f32()).collect();
        let noises: Vec<RowNoise> = (0..b).map(|r| params.row_noise(r)).collect();
        let threads = self.threads.min(n_tiles).max(1);
        let per_thread = n_tiles.div_ceil(threads);
        // Each worker owns a contiguous range of vocab tiles and returns their candidates, tile-major.
        let parts: Vec<Vec<Candidate>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..threads)
                .map(|t| {
                    let tiles = (t * per_thread).min(n_tiles)..((t + 1) * per_thread).min(n_tiles);
                    let (hidden_f32, noises) = (&hidden_f32, &noises);
                    s.spawn(move || {
                        let mut out = Vec::with_capacity(tiles.len() * b);
                        let mut w_tile = vec![0f32; bv * d];
                        let mut logits = vec![0f32; bv];
                        for tile in tiles {
                            let v0 = tile * bv;
                            let rows = bv.min(v - v0);
                            for (dst, src) in w_tile.iter_mut().zip(&weight[v0 * d..(v0 + rows) * d]) {
                                *dst = src.to_f32();
                            }
                            for (row, noise) in noises.iter().enumerate() {
                                let h = &hidden_f32[row * d..(row + 1) * d];
                                for (j, l) in logits[..rows].iter_mut().enumerate() {
                                    *l = dot(h, &w_tile[j * d..(j + 1) * d]);
                                }
                                let mut cand = Candidate::EMPTY;
                                update_tile(&mut cand, &logits[..rows], v0 as u32, v as u32, noise, &transform);
                                out.push(cand);
                            }
                        }
                        out
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().expect("CPU worker panicked")).collect()
        });
        let mut cands = vec![Candidate::EMPTY; b * n_tiles];
        let mut tile = 0;
        for part in parts {
            for chunk in part.chunks(b) {
                for (row, c) in chunk.iter().enumerate() {
                    cands[row * n_tiles + tile] = *c;
                }
                tile += 1;
            }
        }
        cands
    }
}

/// f32 dot product with eight interleaved partial sums (fixed order: deterministic, and vectorizable).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for k in 0..8 {
            acc[k] += a[8 * c + k] * b[8 * c + k];
        }
    }
    let mut tail = 0f32;
    for i in 8 * chunks..a.len() {
        tail += a[i] * b[i];
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail
}
