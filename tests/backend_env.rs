//! `FLASHSAMPLING_BACKEND` read from the real environment by `BackendChoice::from_env` (the library
//! itself never reads it). One test in its own binary: it sets the variable, which no other test of
//! this process reads.

use flashsampling::{BackendChoice, Error, Sampler};

#[test]
fn unknown_backend_values_are_rejected() {
    // SAFETY: the only test of this binary; no other thread reads or writes the environment.
    unsafe { std::env::set_var("FLASHSAMPLING_BACKEND", "cuda") };
    assert_eq!(BackendChoice::from_env().unwrap_err(), Error::UnknownBackend("cuda".into()));
    // SAFETY: as above.
    unsafe { std::env::set_var("FLASHSAMPLING_BACKEND", "cpu") };
    let s = Sampler::new(BackendChoice::from_env().unwrap()).unwrap();
    assert!(matches!(s, Sampler::Cpu(_)) && s.fallback_reason().is_none());
    // The library ignores the variable.
    // SAFETY: as above.
    unsafe { std::env::set_var("FLASHSAMPLING_BACKEND", "bogus") };
    assert!(matches!(Sampler::new(BackendChoice::Cpu).unwrap(), Sampler::Cpu(_)));
    assert!(Sampler::new(BackendChoice::Auto).is_ok());
    // SAFETY: as above.
    unsafe { std::env::remove_var("FLASHSAMPLING_BACKEND") };
    assert_eq!(BackendChoice::from_env().unwrap(), BackendChoice::Auto);
}
