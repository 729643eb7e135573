//! # flashsampling-kernels
//!
//! The `no_std` half of FlashSampling: everything that must be the same on the GPU and on the CPU.
//! Compiled to PTX (sm_90) by the host crate's build script, and linked into the host crate as an
//! ordinary rlib, where the CPU backend and the tests call the very same functions.
//!
//! | module | what |
//! |---|---|
//! | [`philox`] | Philox4x32-10 counter-based generator |
//! | [`noise`] | uniform, logarithm, Gumbel noise and the noise key |
//! | [`epilogue`] | logit transform (temperature) and the tile epilogue |
//! | [`candidate`] | the per-tile state: `update` and associative `merge` |
//! | [`logits`] | per-row logit processing before the temperature: soft-cap, sparse adjustments, the allowed-token mask |
//! | [`logmass`] | online log-sum-exp state (the log-probability kernels, the rank merge) |
//! | [`exactmass`] | exact log-sum-exp state: integer bins at absolute places, the same bits for any grouping of the vocab |
//! | [`config`] | tile sizes, the typed kernel variants (family, PTX module, thread bound) and their choice per batch size, shared with the host |
//! | [`params`] | kernel parameter structs, passed by value |
//! | [`truncate`] | top-k / top-p / min-p: per-unit top lists, the certificate, the kept set |
//! | `device` | (nvptx64 only) the kernels, by role: scheduler, pipeline, producers, mainloops, fragment adapters, block merge, reduction, entry points; baselines and test kernels |
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, stdarch_nvptx, asm_experimental_arch))]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod candidate;
pub mod config;
pub mod epilogue;
pub mod exactmass;
pub mod launch;
pub mod logits;
pub mod logmass;
pub mod noise;
pub mod params;
pub mod philox;
pub mod ranks;
pub mod schedule;
pub mod truncate;

#[cfg(test)]
mod test_rng;

#[cfg(target_arch = "nvptx64")]
mod device;

pub use candidate::{Candidate, INVALID_INDEX};
pub use epilogue::Transform;
pub use noise::{RowNoise, stream_id};
