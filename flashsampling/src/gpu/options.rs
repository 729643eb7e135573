//! The GPU backend's tuning, as a typed value ([`GpuOptions`]): the library reads no environment
//! variable; the benches, tests and the example build their options with [`GpuOptions::from_env`].
//! None of them changes which token a call draws (every variant, range split and step entry samples
//! the same distribution from the same noise; see each field).

use flashsampling_kernels::config::{FUSED_VARIANTS, FusedVariant, TruncateStep};

use crate::error::{Error, Result};

/// How a [`GpuBackend`](super::GpuBackend) loads and launches its kernels. `Default` is what a
/// serving engine wants: cubins where they load, the variant and ranges chosen per call, dependent
/// launches on.
///
/// ```
/// use flashsampling::gpu::GpuOptions;
///
/// let measure_portable = GpuOptions { portable_only: true, ..GpuOptions::default() };
/// assert!(measure_portable.dependent_launch && measure_portable.fused_variant.is_none());
/// // flashsampling::GpuBackend::with_options(0, measure_portable) opens device 0 with them.
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuOptions {
    /// Load the PTX through the driver's JIT even where cubins are embedded (`FLASHSAMPLING_JIT=1`).
    pub jit: bool,
    /// Keep the Hopper (sm_90a) module unloaded, so a Hopper GPU runs the portable kernels the way
    /// other GPUs do (`FLASHSAMPLING_PORTABLE=1`; to measure and test that path).
    pub portable_only: bool,
    /// Force the stage-balanced vocab ranges on (where a variant can) or off; `None`: each variant
    /// decides (`FLASHSAMPLING_BALANCE_STAGES=1|0`).
    pub stage_balance: Option<bool>,
    /// Launch the reduction and the truncation step with programmatic dependent launch (default on;
    /// `FLASHSAMPLING_PDL=0` turns it off, to measure it).
    pub dependent_launch: bool,
    /// Force the truncation step's entry; `None`: [`TruncateStep::for_rows`]
    /// (`FLASHSAMPLING_TRUNCATE_STEP=alone|paired`).
    pub truncate_step: Option<TruncateStep>,
    /// Resident blocks per multiprocessor of the persistent grid, `1..=32` (else
    /// [`Error::InvalidOption`]); `None`: the kernel's occupancy (`FLASHSAMPLING_BLOCKS_PER_SM`).
    pub blocks_per_sm: Option<u32>,
    /// Force one fused-kernel variant for every batch size (an error at construction where the GPU
    /// does not run it; a call whose epilogue it has no kernel for, a truncating call on
    /// `tma_mma_n64t` or `tma_mma_n128`, keeps the choice by batch size); `None`: the choice by
    /// batch size (`FLASHSAMPLING_FUSED_VARIANT=<entry>`).
    pub fused_variant: Option<FusedVariant>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            jit: false,
            portable_only: false,
            stage_balance: None,
            dependent_launch: true,
            truncate_step: None,
            blocks_per_sm: None,
            fused_variant: None,
        }
    }
}

/// The resident blocks per multiprocessor [`GpuOptions::blocks_per_sm`] may force.
const BLOCKS_PER_SM: std::ops::RangeInclusive<u32> = 1..=32;

impl GpuOptions {
    /// The options checked (before a backend opens its device): a `blocks_per_sm` outside `1..=32` is
    /// [`Error::InvalidOption`].
    pub fn check(&self) -> Result<()> {
        match self.blocks_per_sm {
            Some(n) if !BLOCKS_PER_SM.contains(&n) => {
                Err(Error::InvalidOption { name: "GpuOptions::blocks_per_sm", value: n.to_string() })
            }
            _ => Ok(()),
        }
    }

    /// The options the `FLASHSAMPLING_*` variables above give (unset or empty: the default), for
    /// benches, tests and examples; the library never calls it. A value that is not one of those
    /// listed is [`Error::InvalidOption`] (an unknown variant [`Error::UnknownVariant`]).
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Self::from_env`] over any lookup of the variables (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var = |name: &'static str| get(name).filter(|v| !v.is_empty());
        let bad = |name: &'static str, value: String| Error::InvalidOption { name, value };
        let flag = |name: &'static str, default: bool| match var(name).as_deref() {
            None => Ok(default),
            Some("1") => Ok(true),
            Some("0") => Ok(false),
            Some(v) => Err(bad(name, v.into())),
        };
        let stage_balance = match var("FLASHSAMPLING_BALANCE_STAGES") {
            None => None,
            Some(_) => Some(flag("FLASHSAMPLING_BALANCE_STAGES", false)?),
        };
        let truncate_step = match var("FLASHSAMPLING_TRUNCATE_STEP").as_deref() {
            None => None,
            Some("alone") => Some(TruncateStep::Alone),
            Some("paired") => Some(TruncateStep::Paired),
            Some(v) => return Err(bad("FLASHSAMPLING_TRUNCATE_STEP", v.into())),
        };
        let blocks_per_sm = match var("FLASHSAMPLING_BLOCKS_PER_SM") {
            None => None,
            Some(v) => match v.parse::<u32>() {
                Ok(n) if BLOCKS_PER_SM.contains(&n) => Some(n),
                _ => return Err(bad("FLASHSAMPLING_BLOCKS_PER_SM", v)),
            },
        };
        let fused_variant = match var("FLASHSAMPLING_FUSED_VARIANT") {
            None => None,
            Some(name) => Some(FusedVariant::by_name(&name).ok_or_else(|| {
                let known: Vec<&str> = FUSED_VARIANTS.iter().map(|v| v.entry).collect();
                Error::UnknownVariant(name.clone(), known.join(", "))
            })?),
        };
        Ok(Self {
            jit: flag("FLASHSAMPLING_JIT", false)?,
            portable_only: flag("FLASHSAMPLING_PORTABLE", false)?,
            stage_balance,
            dependent_launch: flag("FLASHSAMPLING_PDL", true)?,
            truncate_step,
            blocks_per_sm,
            fused_variant,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_come_from_the_variables_and_bad_values_are_typed_errors() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
        };
        assert_eq!(GpuOptions::from_lookup(env(&[])).unwrap(), GpuOptions::default());
        let o = GpuOptions::from_lookup(env(&[
            ("FLASHSAMPLING_JIT", "1"),
            ("FLASHSAMPLING_PORTABLE", "1"),
            ("FLASHSAMPLING_PDL", "0"),
            ("FLASHSAMPLING_BALANCE_STAGES", "0"),
            ("FLASHSAMPLING_TRUNCATE_STEP", "paired"),
            ("FLASHSAMPLING_BLOCKS_PER_SM", "2"),
            ("FLASHSAMPLING_FUSED_VARIANT", FUSED_VARIANTS[0].entry),
        ]))
        .unwrap();
        assert!(o.jit && o.portable_only && !o.dependent_launch);
        assert_eq!(
            (o.stage_balance, o.truncate_step, o.blocks_per_sm, o.fused_variant),
            (Some(false), Some(TruncateStep::Paired), Some(2), Some(FUSED_VARIANTS[0]))
        );
        // Empty is unset.
        assert_eq!(GpuOptions::from_lookup(env(&[("FLASHSAMPLING_PDL", "")])).unwrap(), GpuOptions::default());
        for (name, value) in [
            ("FLASHSAMPLING_JIT", "yes"),
            ("FLASHSAMPLING_PDL", "2"),
            ("FLASHSAMPLING_BALANCE_STAGES", "on"),
            ("FLASHSAMPLING_TRUNCATE_STEP", "both"),
            ("FLASHSAMPLING_BLOCKS_PER_SM", "0"),
            ("FLASHSAMPLING_BLOCKS_PER_SM", "33"),
        ] {
            let pairs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([(name, value)]));
            assert_eq!(
                GpuOptions::from_lookup(env(pairs)),
                Err(Error::InvalidOption { name, value: value.into() }),
                "{name}={value}"
            );
        }
        // A forced block count outside 1..=32 in a value built by hand: a typed error before any device.
        let forced = |n| GpuOptions { blocks_per_sm: Some(n), ..GpuOptions::default() };
        assert_eq!(
            forced(33).check(),
            Err(Error::InvalidOption { name: "GpuOptions::blocks_per_sm", value: "33".into() })
        );
        assert!(forced(0).check().is_err() && forced(32).check().is_ok() && GpuOptions::default().check().is_ok());
        assert_eq!(
            crate::GpuBackend::with_options(0, forced(0)).unwrap_err(),
            Error::InvalidOption { name: "GpuOptions::blocks_per_sm", value: "0".into() }
        );
        let unknown = GpuOptions::from_lookup(env(&[("FLASHSAMPLING_FUSED_VARIANT", "nope")]));
        assert!(matches!(unknown, Err(Error::UnknownVariant(ref n, _)) if n == "nope"));
    }
}
