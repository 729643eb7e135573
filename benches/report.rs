//! Benchmark report: the table, CSV and JSON files, and the SVG plot (plotters).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

/// One (config, B) measurement; times in ms (medians, with min and max of `ours`).
#[derive(Clone, Debug)]
pub struct Row {
    pub config: String,
    pub d: usize,
    pub v: usize,
    pub b: usize,
    /// Fused sampling, T = 1: median, min, max.
    pub ours: (f64, f64, f64),
    /// Fused, greedy (T = 0: no noise): the sampling epilogue's share is `ours - ours_greedy`.
    pub ours_greedy: f64,
    /// cuBLAS GEMM alone (f32 logits).
    pub gemm: (f64, f64, f64),
    /// cuBLAS GEMM + softmax + multinomial.
    pub gemm_multinomial: (f64, f64, f64),
    /// cuBLAS GEMM + Gumbel-max over logits.
    pub gemm_gumbel: (f64, f64, f64),
    /// HBM floor: weight bytes / measured HBM bandwidth (the faster of a copy and a read-only stream).
    pub hbm_floor: f64,
    /// The read-only stream of this config's weight bytes, timed interleaved with `ours` (alternate
    /// runs, `EventTimer::time_paired`): its median (ms) and the median of the per-run ratios ours ÷
    /// read. `None` in a CSV written before it was measured (`--replot`).
    pub read: Option<(f64, f64)>,
    /// Compute floor: 2·B·D·V / measured bf16 GEMM rate.
    pub compute_floor: f64,
    /// Rows where ours and the Gumbel-over-logits baseline drew the same token (same noise).
    pub agree: usize,
}

pub const CSV_HEADER: &str = "config,D,V,B,ours_ms,ours_min_ms,ours_max_ms,ours_greedy_ms,gemm_ms,gemm_min_ms,gemm_max_ms,gemm_multinomial_ms,gemm_multinomial_min_ms,gemm_multinomial_max_ms,gemm_gumbel_ms,gemm_gumbel_min_ms,gemm_gumbel_max_ms,hbm_floor_ms,compute_floor_ms,agree_rows,weight_read_ms,ours_over_read";

impl Row {
    pub fn csv(&self) -> String {
        let t = |x: (f64, f64, f64)| format!("{:.5},{:.5},{:.5}", x.0, x.1, x.2);
        format!(
            "{},{},{},{},{},{:.5},{},{},{},{:.5},{:.5},{},{}",
            self.config,
            self.d,
            self.v,
            self.b,
            t(self.ours),
            self.ours_greedy,
            t(self.gemm),
            t(self.gemm_multinomial),
            t(self.gemm_gumbel),
            self.hbm_floor,
            self.compute_floor,
            self.agree,
            match self.read {
                Some((ms, ratio)) => format!("{ms:.5},{ratio:.4}"),
                None => ",".into(),
            }
        )
    }

    /// A row of `results.csv`: 22 fields (the last two both empty without the paired read), or the 20
    /// of a CSV from before it; `None` for anything else.
    pub fn from_csv(line: &str) -> Option<Row> {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 20 && f.len() != 22 {
            return None;
        }
        let n = |i: usize| f[i].parse::<f64>().ok();
        let t = |i: usize| Some((n(i)?, n(i + 1)?, n(i + 2)?));
        Some(Row {
            config: f[0].to_string(),
            d: f[1].parse().ok()?,
            v: f[2].parse().ok()?,
            b: f[3].parse().ok()?,
            ours: t(4)?,
            ours_greedy: n(7)?,
            gemm: t(8)?,
            gemm_multinomial: t(11)?,
            gemm_gumbel: t(14)?,
            hbm_floor: n(17)?,
            compute_floor: n(18)?,
            agree: f[19].parse().ok()?,
            read: if f.len() == 20 || (f[20].is_empty() && f[21].is_empty()) { None } else { Some((n(20)?, n(21)?)) },
        })
    }

    fn json(&self) -> String {
        let t = |x: (f64, f64, f64)| format!("{{\"median\": {:.5}, \"min\": {:.5}, \"max\": {:.5}}}", x.0, x.1, x.2);
        format!(
            "{{\"config\": \"{}\", \"D\": {}, \"V\": {}, \"B\": {}, \"ours\": {}, \"ours_greedy_median\": {:.5}, \"gemm\": {}, \"gemm_multinomial\": {}, \"gemm_gumbel\": {}, \"hbm_floor\": {:.5}, \"compute_floor\": {:.5}, \"agree_rows\": {}, \"weight_read\": {}}}",
            self.config,
            self.d,
            self.v,
            self.b,
            t(self.ours),
            self.ours_greedy,
            t(self.gemm),
            t(self.gemm_multinomial),
            t(self.gemm_gumbel),
            self.hbm_floor,
            self.compute_floor,
            self.agree,
            match self.read {
                Some((ms, ratio)) => format!("{{\"median\": {ms:.5}, \"ours_over_read\": {ratio:.4}}}"),
                None => "null".into(),
            }
        )
    }
}

/// The table printed at the end of the run.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<14} {:>4} | {:>8} {:>8} {:>8} | {:>7} {:>6} {:>8} | {:>7} {:>9} {:>8} | {:>6} {:>6} | {:>6}",
        "config",
        "B",
        "ours ms",
        "min",
        "max",
        "/floor",
        "/read",
        "/GEMM",
        "GEMM ms",
        "GEMM+mult",
        "GEMM+gum",
        "mult/o",
        "gum/o",
        "noise%"
    );
    for r in rows {
        let floor = r.hbm_floor.max(r.compute_floor);
        let _ = writeln!(
            s,
            "{:<14} {:>4} | {:>8.4} {:>8.4} {:>8.4} | {:>7.3} {:>6} {:>8.3} | {:>7.4} {:>9.4} {:>8.4} | {:>6.2} {:>6.2} | {:>5.1}%",
            r.config,
            r.b,
            r.ours.0,
            r.ours.1,
            r.ours.2,
            r.ours.0 / floor,
            r.read.map_or("-".into(), |(_, ratio)| format!("{ratio:.3}")),
            r.ours.0 / r.gemm.0,
            r.gemm.0,
            r.gemm_multinomial.0,
            r.gemm_gumbel.0,
            r.gemm_multinomial.0 / r.ours.0,
            r.gemm_gumbel.0 / r.ours.0,
            100.0 * (r.ours.0 - r.ours_greedy) / r.ours.0,
        );
    }
    s
}

/// Writes `results.csv`, `results.json` and one SVG plot per config (`plot-<config>.svg`, rows in
/// their order) into `dir`.
pub fn write_files(dir: &Path, rows: &[Row], meta: &str) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    for r in rows {
        csv += &r.csv();
        csv.push('\n');
    }
    std::fs::write(dir.join("results.csv"), csv)?;
    let json = format!(
        "{{\"meta\": {meta},\n\"rows\": [\n{}\n]}}\n",
        rows.iter().map(Row::json).collect::<Vec<_>>().join(",\n")
    );
    std::fs::write(dir.join("results.json"), json)?;
    let mut written = vec![dir.join("results.csv"), dir.join("results.json")];
    let mut configs: Vec<&str> = Vec::new();
    for r in rows {
        if !configs.contains(&r.config.as_str()) {
            configs.push(&r.config);
        }
    }
    for c in configs {
        let path = dir.join(format!("plot-{c}.svg"));
        plot(&path, c, &rows.iter().filter(|r| r.config == c).cloned().collect::<Vec<_>>())
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        written.push(path);
    }
    Ok(written)
}

fn plot(path: &Path, config: &str, rows: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
    let (d, v) = (rows[0].d, rows[0].v);
    let ymax = rows.iter().map(|r| r.gemm_multinomial.0.max(r.gemm_gumbel.0).max(r.ours.0)).fold(0.0, f64::max) * 1.1;
    // A log axis needs a range: at least 1..2 (a single B = 1).
    let bmax = rows.iter().map(|r| r.b).max().unwrap_or(1).max(2) as f64;
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("LM head + sampling, {config} (D = {d}, V = {v}), H200 medians"), ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((1f64..bmax).log_scale(), 0f64..ymax)?;
    chart.configure_mesh().x_desc("batch size B").y_desc("time per call (ms)").draw()?;
    type Series<'a> = (&'a str, RGBColor, Box<dyn Fn(&Row) -> f64>);
    let series: [Series; 6] = [
        ("FlashSampling (ours)", RGBColor(200, 30, 30), Box::new(|r: &Row| r.ours.0)),
        ("cuBLAS GEMM alone", RGBColor(30, 30, 200), Box::new(|r: &Row| r.gemm.0)),
        ("GEMM + softmax + multinomial", RGBColor(120, 60, 160), Box::new(|r: &Row| r.gemm_multinomial.0)),
        ("GEMM + Gumbel-max over logits", RGBColor(30, 140, 60), Box::new(|r: &Row| r.gemm_gumbel.0)),
        ("HBM floor (weights once)", RGBColor(0, 0, 0), Box::new(|r: &Row| r.hbm_floor)),
        ("compute floor (bf16 GEMM rate)", RGBColor(140, 140, 140), Box::new(|r: &Row| r.compute_floor)),
    ];
    for (name, color, f) in series {
        let pts: Vec<(f64, f64)> = rows.iter().map(|r| (r.b as f64, f(r))).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .draw()?;
    root.present()?;
    Ok(())
}
