//! The device code this crate embeds: the PTX modules and the cubins build.rs made or took from the
//! shipped `ptx/` (see build.rs), each zstd-compressed as `static` bytes and decoded when a GPU
//! backend loads it (milliseconds: about 20 ms for the largest, the sm_90a cubin).
//!
//! Which one a GPU loads ([`crate::GpuBackend::module_code`]): on compute capability 9.0 the cubins
//! (machine code of the pinned ptxas, no JIT), else, or with `FLASHSAMPLING_JIT=1`, or where a cubin
//! is empty or fails to load, the PTX through the driver's JIT. The Hopper module's PTX is embedded
//! only by builds from source (`build-ptx`); a prebuilt build's Hopper kernels are its cubin.

use std::io::Read;

use crate::{Error, Result};

/// One embedded module (PTX text or a cubin), zstd-compressed; empty when this build has none.
#[derive(Clone, Copy, Debug)]
pub struct Artifact {
    name: &'static str,
    /// The compressed bytes, behind a function that is never inlined: a `static` or `const` slice
    /// would copy them into the crate's metadata (every dependent's `.rmeta`), the function keeps them
    /// in its object code only.
    zst: fn() -> &'static [u8],
}

/// An [`Artifact`] of the file build.rs names in the environment variable `$var`.
macro_rules! embedded {
    ($name:literal, $var:literal) => {{
        #[inline(never)]
        fn zst() -> &'static [u8] {
            include_bytes!(env!($var))
        }
        Artifact { name: $name, zst }
    }};
}

impl Artifact {
    /// Its file name (`flashsampling_sm90a.cubin`, …).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Whether this build embeds nothing for it.
    pub fn is_empty(&self) -> bool {
        (self.zst)().is_empty()
    }

    /// Its size as embedded (compressed), in bytes.
    pub fn compressed_len(&self) -> usize {
        (self.zst)().len()
    }

    /// Its bytes, decoded (empty when [`Artifact::is_empty`]).
    pub fn bytes(&self) -> Result<Vec<u8>> {
        let zst = (self.zst)();
        if zst.is_empty() {
            return Ok(Vec::new());
        }
        let corrupt = |e: String| Error::EmbeddedModule { name: self.name, reason: e };
        let mut decoder = ruzstd::decoding::StreamingDecoder::new(zst).map_err(|e| corrupt(e.to_string()))?;
        let mut bytes = Vec::new();
        decoder.read_to_end(&mut bytes).map_err(|e| corrupt(e.to_string()))?;
        Ok(bytes)
    }

    /// Its bytes as text (a PTX module).
    pub fn text(&self) -> Result<String> {
        String::from_utf8(self.bytes()?)
            .map_err(|_| Error::EmbeddedModule { name: self.name, reason: "not UTF-8".into() })
    }
}

/// The portable PTX module ([`flashsampling_kernels::config::Module::Portable`]: the `mma.sync` kernels),
/// for the architecture `FLASHSAMPLING_SM` named at build time (default sm_90; see [`PTX_SM`]).
pub static PTX: Artifact = embedded!("flashsampling.ptx", "FLASHSAMPLING_EMBED_PTX");
/// The architecture the portable PTX was built for.
pub const PTX_SM: &str = env!("FLASHSAMPLING_PTX_SM");
/// The Hopper PTX module ([`flashsampling_kernels::config::Module::Hopper`]: the `wgmma` kernels) for the
/// arch-specific sm_90a target: embedded by builds from source (`build-ptx`) only, empty otherwise.
pub static PTX_SM90A: Artifact = embedded!("flashsampling_sm90a.ptx", "FLASHSAMPLING_EMBED_PTX_SM90A");
/// [`PTX`] assembled for sm_90 (shipped, or by the build's ptxas; empty when there is none, or the
/// portable module was built for another architecture): what compute capability 9.0 loads.
pub static CUBIN: Artifact = embedded!("flashsampling.cubin", "FLASHSAMPLING_EMBED_CUBIN");
/// The Hopper module assembled for sm_90a (shipped, or by the build's ptxas; empty when a build from
/// source had none: the Hopper kernels then load from [`PTX_SM90A`]).
pub static CUBIN_SM90A: Artifact = embedded!("flashsampling_sm90a.cubin", "FLASHSAMPLING_EMBED_CUBIN_SM90A");
/// The test PTX module ([`flashsampling_kernels::config::Module::Test`]: device noise tests and benchmark
/// baselines), loaded only by the `internals` feature's test hooks and baselines.
#[cfg(feature = "internals")]
pub static PTX_TEST: Artifact = embedded!("flashsampling_test.ptx", "FLASHSAMPLING_EMBED_PTX_TEST");

/// `ptxas --version`'s last line for the ptxas that made the cubins ("" without cubins): the shipped
/// one's (`ptx/MANIFEST`) or this build's.
#[doc(hidden)]
pub const PTXAS_VERSION: &str = env!("FLASHSAMPLING_PTXAS_VERSION");
/// The Hopper PTX's line in `ptx/MANIFEST` (its length and FNV-1a 64 digest), computed by a build
/// from source; empty in a prebuilt build, which has no Hopper PTX.
#[doc(hidden)]
pub const PTX_SM90A_DIGEST: &str = env!("FLASHSAMPLING_PTX_SM90A_DIGEST");
/// Whether this build assembled the cubins itself (a build from source with a ptxas), rather than
/// taking the shipped ones (a prebuilt build, or a build from source without ptxas whose PTX is the
/// shipped PTX).
#[doc(hidden)]
pub const CUBINS_ASSEMBLED: bool = matches!(env!("FLASHSAMPLING_CUBINS_ASSEMBLED").as_bytes(), b"1");
/// The build's ptxas reports (`ptxas -v`: registers, shared memory and spills per entry) of
/// [`CUBIN`] and [`CUBIN_SM90A`], as paths on the build machine (each file empty when this build did
/// not assemble that module): `tests/ptxas.rs` reads them instead of assembling the modules again.
#[doc(hidden)]
pub const PTXAS_REPORT_PATHS: [&str; 2] =
    [env!("FLASHSAMPLING_PTXAS_REPORT_PATH"), env!("FLASHSAMPLING_PTXAS_REPORT_SM90A_PATH")];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_module_decodes() {
        // (`mut` only for the test module, which a build without `internals` does not embed.)
        #[cfg_attr(not(feature = "internals"), allow(unused_mut))]
        let mut all = vec![PTX, PTX_SM90A, CUBIN, CUBIN_SM90A];
        #[cfg(feature = "internals")]
        all.push(PTX_TEST);
        for a in all {
            let bytes = a.bytes().unwrap();
            assert_eq!(bytes.is_empty(), a.is_empty(), "{}", a.name());
            if a.name().ends_with(".ptx") && !a.is_empty() {
                assert!(a.text().unwrap().contains(".entry "), "{}", a.name());
            }
            if a.name().ends_with(".cubin") && !a.is_empty() {
                assert_eq!(&bytes[..4], b"\x7fELF", "{}", a.name());
            }
        }
        assert!(!PTX.is_empty());
    }

    #[test]
    fn a_corrupted_module_is_a_typed_error() {
        let bad = Artifact { name: "bad.ptx", zst: || b"\x28\xb5\x2f\xfd garbage" };
        assert!(matches!(bad.bytes(), Err(Error::EmbeddedModule { name: "bad.ptx", .. })));
        let empty = Artifact { name: "none.cubin", zst: || b"" };
        assert!(empty.is_empty() && empty.bytes().unwrap().is_empty());
    }
}
