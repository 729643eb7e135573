//! Command-line pieces the benches share: the common flags (`--quick`, `--runs`, `--out`, `--shape`,
//! `--batches`) and their parsers.

use std::path::PathBuf;

/// The flags every bench takes; each bench's `Args` holds one and dereferences to it.
pub struct Common {
    /// `--quick`: the short B list.
    pub quick: bool,
    /// `--runs N`: timed runs per measurement (at least the bench's minimum).
    pub runs: usize,
    /// `--out DIR`: where the CSV (and plots) go.
    pub out: PathBuf,
    /// `--shape D,V` (repeatable): (config name, D, V); empty = the bench's defaults.
    pub shapes: Vec<(String, usize, usize)>,
    /// `--batches 1,2,…`: the B list, sorted, without repeats; `None` = the default.
    pub batches: Option<Vec<usize>>,
    /// The smallest `--runs` accepted (a smaller one is raised to it).
    min_runs: usize,
}

impl Common {
    /// The defaults: 50 runs (never fewer than `min_runs`), output in `target/flashsampling-bench`.
    pub fn new(min_runs: usize) -> Self {
        Self {
            quick: false,
            runs: 50.max(min_runs),
            out: PathBuf::from("target/flashsampling-bench"),
            shapes: Vec::new(),
            batches: None,
            min_runs,
        }
    }

    /// Takes `flag` (and its value from `rest`) when it is a common one; `false` when it is not.
    /// Panics with the reason on a bad value.
    pub fn take(&mut self, flag: &str, rest: &mut impl Iterator<Item = String>) -> bool {
        match flag {
            "--quick" => self.quick = true,
            "--shape" => {
                let shape = parse_shape(&rest.next().expect("--shape D,V"));
                if !self.shapes.contains(&shape) {
                    self.shapes.push(shape);
                }
            }
            "--batches" => self.batches = Some(parse_batches(&rest.next().expect("--batches 1,2,…"))),
            "--runs" => {
                let n = rest.next().and_then(|s| s.parse::<usize>().ok()).filter(|&n| n > 0);
                self.runs = n.expect("--runs N (N ≥ 1)").max(self.min_runs);
            }
            "--out" => self.out = PathBuf::from(rest.next().expect("--out DIR")),
            _ => return false,
        }
        true
    }

    /// The (config, D, V) list of the run: the `--shape` ones, else `defaults`.
    pub fn configs(&self, defaults: &[(&str, usize, usize)]) -> Vec<(String, usize, usize)> {
        configs(&self.shapes, defaults)
    }

    /// The B list of the run: `--batches`, else the quick or the full default.
    pub fn batch_list(&self, quick_list: &[usize], full: &[usize]) -> Vec<usize> {
        batch_list(&self.batches, self.quick, quick_list, full)
    }
}

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
