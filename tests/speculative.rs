//! Speculative verification with keyed noise (issue 52, part B, on the CPU backend): the emitted tokens
//! are bit-identical to plain decoding with the same keys, one position per step, whatever the drafts
//! (random, always right, always wrong), with every per-row control; bad drafts are typed errors.

mod common;

use common::TestRng;
use flashsampling::speculative::{Drafts, verify};
use flashsampling::{BackendChoice, Error, Matrix, Sampler, SamplingParams};
use half::bf16;

const D: usize = 32;
const V: usize = 200;

/// A request's controls: stream, seed, temperature, top-p.
#[derive(Clone, Copy)]
struct Req {
    stream: u64,
    seed: u64,
    t: f32,
    top_p: f32,
}

/// Plain decoding: the token at `position` of a request, its row sampled alone.
fn plain(sampler: &Sampler, h: &[bf16], w: &[bf16], req: Req, position: u32) -> u32 {
    let params = SamplingParams::new(req.t, req.seed)
        .with_streams(vec![req.stream])
        .with_sample(position)
        .with_seeds(vec![req.seed])
        .with_top_p(vec![req.top_p]);
    sampler.sample(Matrix::new(h, 1, D), Matrix::new(w, V, D), &params).unwrap()[0]
}

#[test]
fn emitted_tokens_are_plain_decoding_whatever_the_drafts() {
    let sampler = Sampler::new(BackendChoice::Cpu).unwrap();
    let mut rng = TestRng::new(0x52_5BEC);
    let weight = rng.normal_bf16(V * D, 2.0 / (D as f64).sqrt());
    let reqs = [
        Req { stream: 11, seed: 7, t: 1.0, top_p: 1.0 },
        Req { stream: 12, seed: 7, t: 0.7, top_p: 0.9 },
        Req { stream: 5, seed: 99, t: 0.0, top_p: 1.0 },
        Req { stream: 40, seed: 3, t: 1.3, top_p: 0.8 },
    ];
    for round in 0..40u64 {
        let ks: Vec<usize> = (0..reqs.len()).map(|r| (round as usize * 7 + r * 3) % 6).collect(); // 0..=5 drafts
        let positions: Vec<u32> = (0..reqs.len()).map(|r| (round * 13 + r as u64 * 101) as u32).collect();
        let mut offsets = vec![0usize];
        for &k in &ks {
            offsets.push(offsets.last().unwrap() + k + 1);
        }
        let rows = *offsets.last().unwrap();
        let hidden = rng.normal_bf16(rows * D, 1.0);
        // The reference: every position decoded alone.
        let want: Vec<Vec<u32>> = (0..reqs.len())
            .map(|r| {
                (0..=ks[r])
                    .map(|i| {
                        let row = offsets[r] + i;
                        plain(&sampler, &hidden[row * D..(row + 1) * D], &weight, reqs[r], positions[r] + i as u32)
                    })
                    .collect()
            })
            .collect();
        // Per-row controls: each request's, on each of its rows.
        let per_row = |f: &dyn Fn(&Req) -> f64| -> Vec<f64> {
            (0..reqs.len()).flat_map(|r| std::iter::repeat_n(f(&reqs[r]), ks[r] + 1)).collect()
        };
        let params = SamplingParams::new(1.0, 0)
            .with_streams(per_row(&|q| q.stream as f64).iter().map(|&x| x as u64).collect())
            .with_seeds(per_row(&|q| q.seed as f64).iter().map(|&x| x as u64).collect())
            .with_temperatures(per_row(&|q| q.t as f64).iter().map(|&x| x as f32).collect())
            .with_top_p(per_row(&|q| q.top_p as f64).iter().map(|&x| x as f32).collect());
        for kind in ["random", "right", "wrong", "right then wrong"] {
            let drafts: Vec<u32> = (0..reqs.len())
                .flat_map(|r| {
                    let (w, k) = (&want[r], ks[r]);
                    (0..k).map(move |i| match kind {
                        "right" => w[i],
                        "wrong" => (w[i] + 1) % V as u32,
                        "right then wrong" => {
                            if i < k / 2 {
                                w[i]
                            } else {
                                (w[i] + 1) % V as u32
                            }
                        }
                        _ => ((w[i] as u64 * 31 + i as u64 + round) % V as u64) as u32,
                    })
                })
                .collect();
            let got = verify(
                &sampler,
                Matrix::new(&hidden, rows, D),
                Matrix::new(&weight, V, D),
                &params,
                Drafts { offsets: &offsets, tokens: &drafts, positions: &positions },
            )
            .unwrap();
            for r in 0..reqs.len() {
                let d = &drafts[offsets[r] - r..offsets[r + 1] - r - 1];
                let k = d.iter().zip(&want[r]).take_while(|(a, b)| a == b).count();
                assert_eq!(got.accepted[r] as usize, k, "round {round} {kind} request {r}");
                assert_eq!(got.tokens[r], want[r][..=k], "round {round} {kind} request {r}");
                match kind {
                    "right" => assert_eq!(k, ks[r]),
                    "wrong" => assert_eq!(k, 0),
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn bad_drafts_are_typed_errors() {
    let sampler = Sampler::new(BackendChoice::Cpu).unwrap();
    let (h, w) = (vec![bf16::ONE; 3 * D], vec![bf16::ZERO; V * D]);
    let call = |offsets: &[usize], tokens: &[u32], positions: &[u32], n: u32| {
        let params = SamplingParams::new(1.0, 0).with_samples_per_row(n);
        verify(&sampler, Matrix::new(&h, 3, D), Matrix::new(&w, V, D), &params, Drafts { offsets, tokens, positions })
    };
    assert!(call(&[0, 2, 3], &[1], &[0, 0], 1).is_ok());
    for offsets in [&[0usize, 3][..], &[1, 3], &[0, 2, 2, 3], &[0, 3, 2], &[]] {
        if offsets == [0, 3] {
            continue;
        }
        assert!(matches!(call(offsets, &[1], &[0, 0], 1), Err(Error::InvalidDrafts(_))), "{offsets:?}");
    }
    assert!(matches!(call(&[0, 2, 3], &[1, 2], &[0, 0], 1), Err(Error::LengthMismatch { .. })));
    assert!(matches!(call(&[0, 2, 3], &[1], &[0], 1), Err(Error::LengthMismatch { .. })));
    assert_eq!(
        call(&[0, 2, 3], &[V as u32], &[0, 0], 1),
        Err(Error::TokenOutOfRange { row: 0, token: V as u32, v: V })
    );
    assert!(matches!(call(&[0, 2, 3], &[1], &[0, 0], 2), Err(Error::InvalidDrafts(_))));
    assert_eq!(call(&[0, 2, 3], &[1], &[u32::MAX, 0], 1), Err(Error::InvalidSample(u32::MAX)));
    assert!(matches!(call(&[0, 2, 3], &[1], &[(1 << 31) - 1, 0], 1), Err(Error::InvalidSample(_))));
}
