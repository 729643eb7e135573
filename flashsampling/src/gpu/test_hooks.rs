//! Test hooks (`internals`): device noise checked against the host's.

use super::*;

impl GpuBackend {
    /// Runs Philox4x32-10 on the device for each counter (tests: bit-identical to the host). Loads
    /// the test PTX module.
    #[cfg(feature = "internals")]
    pub fn philox_on_device(&self, counters: &[[u32; 4]], key: [u32; 2]) -> Result<Vec<[u32; 4]>> {
        self.noise_test(flashsampling_kernels::config::PHILOX_ENTRY, counters, key)
    }

    /// Gumbel noise (f32 bits) of each counter's four Philox words, on the device (the test module).
    #[cfg(feature = "internals")]
    pub fn gumbel_on_device(&self, counters: &[[u32; 4]], key: [u32; 2]) -> Result<Vec<[u32; 4]>> {
        self.noise_test(flashsampling_kernels::config::GUMBEL_ENTRY, counters, key)
    }

    #[cfg(feature = "internals")]
    pub(super) fn noise_test(&self, entry: &str, counters: &[[u32; 4]], key: [u32; 2]) -> Result<Vec<[u32; 4]>> {
        let func = self.k.ctx.load_module(Ptx::from_src(crate::PTX_TEST.text()?))?.load_function(entry)?;
        let func = &func;
        let n = counters.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let flat: Vec<u32> = counters.iter().flatten().copied().collect();
        let ctr = self.stream.clone_htod(&flat)?;
        let mut out = self.stream.alloc_zeros::<u32>(4 * n)?;
        {
            let (c, _c) = ctr.device_ptr(&self.stream);
            let (o, _o) = out.device_ptr_mut(&self.stream);
            let p = ByValue(NoiseTestParams {
                counters: c as *const [u32; 4],
                out: o as *mut [u32; 4],
                key,
                n: n as u32,
                _pad: 0,
            });
            // SAFETY: counters and out hold n entries of 16 bytes.
            unsafe { self.stream.launch_builder(func).arg(&p).launch(LaunchConfig::for_num_elems(n as u32)) }?;
        }
        let host = self.stream.clone_dtoh(&out)?;
        Ok(host.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect())
    }
}
