//! Command-line pieces the benches share (`--shape`, `--batches`).

/// `--shape D,V` → (`d{D}-v{V}`, D, V); panics with the reason on a bad shape.
pub fn parse_shape(s: &str) -> (String, usize, usize) {
    let dims: Vec<usize> =
        s.split(',').map(|x| x.trim().parse::<usize>().ok()).collect::<Option<_>>().unwrap_or_default();
    let [d, v] = dims[..] else { panic!("--shape D,V: two positive integers, got {s:?}") };
    let align = flashsampling::kernels::config::D_ALIGN as usize;
    let max = flashsampling::kernels::config::MAX_DIM as usize;
    assert!(d > 0 && v > 0 && d <= max && v <= max, "--shape {s}: D and V in 1..={max}");
    assert!(d % align == 0, "--shape {s}: D must be a multiple of {align}");
    (format!("d{d}-v{v}"), d, v)
}

/// `--batches 1,2,…` → the sorted B list without repeats; panics with the reason on a bad list.
pub fn parse_batches(s: &str) -> Vec<usize> {
    let mut b: Vec<usize> = s
        .split(',')
        .map(|x| x.trim().parse::<usize>().ok().filter(|&b| b > 0))
        .collect::<Option<_>>()
        .unwrap_or_else(|| panic!("--batches 1,2,…: positive integers, got {s:?}"));
    b.sort_unstable();
    b.dedup();
    b
}

/// The run's (config, D, V) list: the `--shape` ones, else the defaults.
pub fn configs(shapes: &[(String, usize, usize)], defaults: &[(&str, usize, usize)]) -> Vec<(String, usize, usize)> {
    if shapes.is_empty() { defaults.iter().map(|&(c, d, v)| (c.to_string(), d, v)).collect() } else { shapes.to_vec() }
}

/// The run's B list: `--batches`, else the quick or the full default.
pub fn batch_list(given: &Option<Vec<usize>>, quick: bool, quick_list: &[usize], full: &[usize]) -> Vec<usize> {
    match (given, quick) {
        (Some(b), _) => b.clone(),
        (None, true) => quick_list.to_vec(),
        (None, false) => full.to_vec(),
    }
}
