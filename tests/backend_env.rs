//! `FLASHSAMPLING_BACKEND` read from the real environment. One test in its own binary: it sets the
//! variable, which no other test of this process reads.

use flashsampling::{BackendChoice, Error, Sampler};

#[test]
fn unknown_backend_values_are_rejected() {
    // SAFETY: the only test of this binary; no other thread reads or writes the environment.
    unsafe { std::env::set_var("FLASHSAMPLING_BACKEND", "cuda") };
    assert_eq!(Sampler::new(BackendChoice::Auto).unwrap_err(), Error::UnknownBackend("cuda".into()));
    // SAFETY: as above.
    unsafe { std::env::set_var("FLASHSAMPLING_BACKEND", "cpu") };
    let s = Sampler::new(BackendChoice::Auto).unwrap();
    assert!(matches!(s, Sampler::Cpu(_)) && s.fallback_reason().is_none());
    // Explicit choices ignore the variable.
    // SAFETY: as above.
    unsafe { std::env::set_var("FLASHSAMPLING_BACKEND", "bogus") };
    assert!(matches!(Sampler::new(BackendChoice::Cpu).unwrap(), Sampler::Cpu(_)));
    // SAFETY: as above.
    unsafe { std::env::remove_var("FLASHSAMPLING_BACKEND") };
    assert!(Sampler::new(BackendChoice::Auto).is_ok());
}
