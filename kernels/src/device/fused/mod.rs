//! The fused kernels' entry points, one file per family: each composes the roles (scheduler,
//! producer, mainloop, fragment adapter, block merge, reduction) into a kernel body and instantiates
//! it once per variant of [`crate::config::FUSED_VARIANTS`]. No family file imports another.

mod mma_sync;
mod wgmma;
mod wgmma_t;
