//! `--plot PATH.png`: guest instructions per second against the client's
//! worker threads, one line per workload and trace kind (`cannoli-pc-<N>w`,
//! `cannoli-pcmem-<N>w`, for every N that ran: `--workers`), and plain QEMU's
//! rate as a dashed reference line.
//!
//! [`chart`] gathers the points from the bench's medians, [`draw`] renders
//! them: a pure function of a [`Chart`], so that a test can draw made-up
//! data.
//!
//! Text: plotters' `ab_glyph` feature with DejaVu Sans compiled in (the
//! `dejavu` crate), registered as "sans-serif". Not the `ttf` feature: that
//! one goes through font-kit, which needs fontconfig's and freetype's dev
//! packages to build (scripts/deps.sh installs neither) and finds its fonts
//! on the system at run time, so a machine without fonts would draw a chart
//! with no labels or fail. This way the chart looks the same everywhere.

use crate::config::{self, Hooks, Kind};
use crate::report::{self, Cell};
use crate::workload::Workload;
use plotters::prelude::*;
use std::path::Path;

/// The image size of `--plot`.
pub const SIZE: (u32, u32) = (1200, 700);

/// The workloads `--plot` runs when `--workload` is not given.
pub const WORKLOADS: &[&str] = &["nop-loop", "busybox-sha256"];

/// The configurations `--plot` runs when `--config` is not given: plain
/// QEMU for the reference lines, libinsn.so for the instruction count (which
/// checks the cannoli rows' event counts too), and cannoli tracing pcs, and
/// pcs and memory accesses, with each worker count of `workers`
/// (`--workers`), in table order.
pub fn configs(workers: &[usize]) -> Vec<String> {
    config::all(workers)
        .into_iter()
        .filter(|c| match c.kind {
            Kind::Plain => true,
            Kind::Cannoli { hooks, .. } => hooks != Hooks::Never,
            _ => c.name == "plugin-insn",
        })
        .map(|c| c.name.to_string())
        .collect()
}

/// What the hooks trace, for the legend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trace {
    Pc,
    PcMem,
}

/// One line: guest instructions per second of `workload` traced with
/// `trace`, at each number of worker threads.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub workload: String,
    pub trace: Trace,
    /// (worker threads, guest instructions per second), by threads.
    pub points: Vec<(u32, f64)>,
}

/// Plain QEMU's guest instructions per second on `workload`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    pub workload: String,
    pub per_sec: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    /// The second title line: date, CPU, runs.
    pub subtitle: String,
    pub lines: Vec<Line>,
    pub references: Vec<Reference>,
}

/// The chart of a bench run: for every workload that runs under every
/// configuration (not rss-10x) and has an instruction count, its cannoli-pc
/// and cannoli-pcmem rows' instructions/s (the count over the median QEMU
/// wall time, the table's *guest insn/s*) and plain QEMU's. Also returns
/// what is missing, as warnings.
pub fn chart(
    host: &[String],
    runs: usize,
    workloads: &[Workload],
    cells: &[Cell],
) -> (Chart, Vec<String>) {
    let mut notes = Vec::new();
    let mut lines = Vec::new();
    let mut references = Vec::new();
    for (wi, w) in workloads.iter().enumerate() {
        if w.only.is_some() || !cells.iter().any(|c| c.workload == wi) {
            continue;
        }
        let Some((insns, _)) = report::guest_insns(cells, wi) else {
            notes.push(format!(
                "{}: no instruction count (run plugin-insn or a cannoli-pc row): not plotted",
                w.name
            ));
            continue;
        };
        let rate = |c: &Cell| c.wall().filter(|&s| s > 0.0).map(|s| insns as f64 / s);
        for trace in [Trace::Pc, Trace::PcMem] {
            let want = match trace {
                Trace::Pc => Hooks::Pc,
                Trace::PcMem => Hooks::PcMem,
            };
            let mut points: Vec<(u32, f64)> = cells
                .iter()
                .filter(|c| c.workload == wi)
                .filter_map(|c| match c.config.kind {
                    Kind::Cannoli { hooks, workers } if hooks == want => {
                        Some((workers as u32, rate(c)?))
                    }
                    _ => None,
                })
                .collect();
            points.sort_by_key(|p| p.0);
            if !points.is_empty() {
                lines.push(Line {
                    workload: w.name.to_string(),
                    trace,
                    points,
                });
            }
        }
        match cells
            .iter()
            .find(|c| c.workload == wi && c.config.kind == Kind::Plain)
            .and_then(rate)
        {
            Some(per_sec) => references.push(Reference {
                workload: w.name.to_string(),
                per_sec,
            }),
            None => notes.push(format!("{}: no plain QEMU time: no reference line", w.name)),
        }
    }
    let field = |prefix: &str| {
        host.iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or("unknown")
            .to_string()
    };
    let chart = Chart {
        title: "cannoli: guest instructions per second vs client worker threads".into(),
        subtitle: format!(
            "{}, {}, medians of {runs} run{}",
            field("- Date: "),
            field("- CPU: "),
            if runs == 1 { "" } else { "s" }
        ),
        lines,
        references,
    };
    (chart, notes)
}

/// One colour per workload.
fn color(workload: usize) -> RGBColor {
    const PALETTE: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
        RGBColor(140, 86, 75),
    ];
    PALETTE[workload % PALETTE.len()]
}

/// Registers DejaVu Sans as plotters' "sans-serif", once.
fn register_font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "the embedded DejaVu Sans font does not load".to_string())
    })
    .clone()
}

/// Draws `chart` as a PNG of `size` pixels at `path` (its directory is
/// created if needed).
pub fn draw(chart: &Chart, path: &Path, size: (u32, u32)) -> Result<(), String> {
    if chart.lines.is_empty() && chart.references.is_empty() {
        return Err("nothing to plot: no cannoli-pc, cannoli-pcmem or plain row has a time and an instruction count".into());
    }
    register_font()?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    draw_png(chart, path, size).map_err(|e| format!("cannot draw {}: {e}", path.display()))
}

fn draw_png(
    chart: &Chart,
    path: &Path,
    size: (u32, u32),
) -> Result<(), Box<dyn std::error::Error>> {
    // Workloads in order of first appearance, for the colours.
    let mut names: Vec<&str> = Vec::new();
    for n in chart
        .lines
        .iter()
        .map(|l| l.workload.as_str())
        .chain(chart.references.iter().map(|r| r.workload.as_str()))
    {
        if !names.contains(&n) {
            names.push(n);
        }
    }
    let color_of = |w: &str| color(names.iter().position(|n| *n == w).unwrap_or(0));

    // The x axis: 0 to one past the most worker threads, ticks and labels
    // at the worker counts that were run (1, 2, 4, 8, 15 on 16 CPUs: not
    // every integer, which would crowd the axis on a machine with 64).
    let mut ticks: Vec<i32> = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0 as i32))
        .collect();
    ticks.sort_unstable();
    ticks.dedup();
    if ticks.is_empty() {
        ticks.push(1);
    }
    let max_workers = ticks[ticks.len() - 1].max(1);
    let max_rate = chart
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .chain(chart.references.iter().map(|r| r.per_sec))
        .fold(0.0, f64::max);
    let (scale, unit) = if max_rate >= 2e9 {
        (1e9, "billions")
    } else {
        (1e6, "millions")
    };
    let top = (max_rate / scale * 1.1).max(1e-9);
    let decimals = if top < 3.0 {
        2
    } else if top < 30.0 {
        1
    } else {
        0
    };

    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.margin(10, 10, 10, 10);
    let root = root.titled(&chart.title, ("sans-serif", 26).into_font().color(&BLACK))?;
    let root = root.titled(
        &chart.subtitle,
        ("sans-serif", 16).into_font().color(&BLACK),
    )?;
    let legend_width = (size.0 / 4).clamp(200, 320);
    let (plot_area, legend) = root.split_horizontally(size.0.saturating_sub(legend_width + 20));

    let mut ch = ChartBuilder::on(&plot_area)
        .margin(10)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((0..max_workers + 1).with_key_points(ticks), 0.0..top)?;
    let x_label = |x: &i32| {
        if (1..=max_workers).contains(x) {
            x.to_string()
        } else {
            String::new()
        }
    };
    let y_label = |y: &f64| format!("{y:.decimals$}");
    ch.configure_mesh()
        .x_desc("client worker threads")
        .y_desc(format!("guest instructions per second ({unit})"))
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 15))
        .draw()?;

    for r in &chart.references {
        let c = color_of(&r.workload);
        let y = r.per_sec / scale;
        ch.draw_series(DashedLineSeries::new(
            [(0, y), (max_workers + 1, y)],
            10,
            6,
            c.stroke_width(2),
        ))?;
    }
    for l in &chart.lines {
        let c = color_of(&l.workload);
        let pts: Vec<(i32, f64)> = l
            .points
            .iter()
            .map(|&(w, r)| (w as i32, r / scale))
            .collect();
        // PC+mem thinner than PC, besides its triangles.
        let width = match l.trace {
            Trace::Pc => 3,
            Trace::PcMem => 2,
        };
        ch.draw_series(LineSeries::new(pts.clone(), c.stroke_width(width)))?;
        match l.trace {
            Trace::Pc => ch.draw_series(pts.iter().map(|&p| Circle::new(p, 6, c.filled())))?,
            Trace::PcMem => {
                ch.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 8, c.filled())))?
            }
        };
    }

    // The legend, in its own column right of the chart so that it never
    // hides a line: per workload, its PC and PC+mem lines and plain QEMU.
    let text = ("sans-serif", 16).into_font().color(&BLACK);
    let mut y = 60;
    for name in &names {
        let c = color_of(name);
        legend.draw(&Text::new(name.to_string(), (10, y), text.clone()))?;
        y += 24;
        for trace in [Trace::Pc, Trace::PcMem] {
            if !chart
                .lines
                .iter()
                .any(|l| l.workload == *name && l.trace == trace)
            {
                continue;
            }
            let width = if trace == Trace::Pc { 3 } else { 2 };
            legend.draw(&PathElement::new(
                [(14, y + 8), (54, y + 8)],
                c.stroke_width(width),
            ))?;
            let label = match trace {
                Trace::Pc => {
                    legend.draw(&Circle::new((34, y + 8), 6, c.filled()))?;
                    "cannoli, PC"
                }
                Trace::PcMem => {
                    legend.draw(&TriangleMarker::new((34, y + 8), 8, c.filled()))?;
                    "cannoli, PC + mem"
                }
            };
            legend.draw(&Text::new(label, (64, y), text.clone()))?;
            y += 24;
        }
        if chart.references.iter().any(|r| r.workload == *name) {
            for x in [14, 30, 46] {
                legend.draw(&PathElement::new(
                    [(x, y + 8), (x + 8, y + 8)],
                    c.stroke_width(2),
                ))?;
            }
            legend.draw(&Text::new("plain QEMU", (64, y), text.clone()))?;
            y += 24;
        }
        y += 12;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config;
    use crate::run::Sample;

    /// Width and height from a PNG's signature and IHDR chunk.
    fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
        let be = |b: &[u8]| u32::from_be_bytes(b.try_into().unwrap());
        if bytes.len() < 24
            || &bytes[..8] != b"\x89PNG\r\n\x1a\n"
            || be(&bytes[8..12]) != 13
            || &bytes[12..16] != b"IHDR"
        {
            return None;
        }
        Some((be(&bytes[16..20]), be(&bytes[20..24])))
    }

    fn synthetic() -> Chart {
        let line = |w: &str, trace, k: f64| Line {
            workload: w.into(),
            trace,
            points: (1..=4).map(|n| (n, k * 1e6 * (1.0 + n as f64))).collect(),
        };
        Chart {
            title: "test chart".into(),
            subtitle: "2025-01-01 00:00 UTC, Some CPU, medians of 3 runs".into(),
            lines: vec![
                line("nop-loop", Trace::Pc, 100.0),
                line("nop-loop", Trace::PcMem, 60.0),
                line("busybox-sha256", Trace::Pc, 80.0),
                line("busybox-sha256", Trace::PcMem, 40.0),
            ],
            references: vec![
                Reference {
                    workload: "nop-loop".into(),
                    per_sec: 900e6,
                },
                Reference {
                    workload: "busybox-sha256".into(),
                    per_sec: 700e6,
                },
            ],
        }
    }

    #[test]
    fn plot_renders_a_png_of_the_requested_size() {
        let dir = std::env::temp_dir().join(format!("cannoli-bench-plot-{}", std::process::id()));
        let path = dir.join("sub/workers.png");
        draw(&synthetic(), &path, (640, 400)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(png_size(&bytes), Some((640, 400)));
        // Billions: another axis unit, same size.
        let mut big = synthetic();
        big.references[0].per_sec = 3e9;
        draw(&big, &path, (800, 500)).unwrap();
        assert_eq!(png_size(&std::fs::read(&path).unwrap()), Some((800, 500)));
        std::fs::remove_dir_all(&dir).unwrap();
        // Nothing to draw is an error, not an empty picture.
        let empty = Chart {
            lines: vec![],
            references: vec![],
            ..synthetic()
        };
        assert!(draw(&empty, &dir.join("x.png"), (640, 400)).is_err());
    }

    #[test]
    fn plot_points_come_from_the_medians_and_the_instruction_count() {
        let root = Path::new("/nonexistent");
        let ws: Vec<Workload> = crate::workload::all(root, true)
            .into_iter()
            .filter(|w| WORKLOADS.contains(&w.name))
            .collect();
        assert_eq!(ws.len(), 2);
        let cell = |w: usize, name: &str, walls: &[f64], insns: Option<u64>| Cell {
            workload: w,
            config: config::by_name(name).unwrap(),
            samples: walls
                .iter()
                .map(|&wall| Sample {
                    wall,
                    total: wall,
                    insns,
                    ..Sample::default()
                })
                .collect(),
            errors: vec![],
        };
        let cells = vec![
            cell(0, "plain", &[1.0, 2.0, 9.0], None),
            cell(0, "plugin-insn", &[50.0], Some(1_000_000_000)),
            cell(0, "cannoli-pc-2w", &[5.0], None),
            cell(0, "cannoli-pc-1w", &[4.0, 4.0], None),
            cell(0, "cannoli-pcmem-1w", &[10.0], None),
            // Failed in every run: no point.
            cell(0, "cannoli-pcmem-2w", &[], None),
            // No instruction count for busybox: left out, with a note.
            cell(1, "plain", &[1.0], None),
        ];
        let host = crate::setup::host_description(Path::new("/nonexistent/qemu"));
        let (c, notes) = chart(&host, 3, &ws, &cells);
        assert_eq!(
            c.lines,
            [
                Line {
                    workload: "nop-loop".into(),
                    trace: Trace::Pc,
                    points: vec![(1, 250e6), (2, 200e6)],
                },
                Line {
                    workload: "nop-loop".into(),
                    trace: Trace::PcMem,
                    points: vec![(1, 100e6)],
                },
            ]
        );
        assert_eq!(
            c.references,
            [Reference {
                workload: "nop-loop".into(),
                per_sec: 500e6,
            }]
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("busybox-sha256: no instruction count"));
        // The date and the CPU of the host lines the table shows.
        let field = |p: &str| host.iter().find_map(|l| l.strip_prefix(p)).unwrap();
        let want = format!("{}, {}, ", field("- Date: "), field("- CPU: "));
        assert!(c.subtitle.starts_with(&want), "{}", c.subtitle);
        assert!(c.subtitle.ends_with("medians of 3 runs"), "{}", c.subtitle);
    }

    #[test]
    fn plot_defaults_name_real_workloads_and_configs() {
        for w in WORKLOADS {
            assert!(crate::workload::NAMES.contains(w), "{w}");
        }
        for workers in [&[1, 2][..], &[1, 2, 4, 8, 15], &[1, 2, 4, 8, 16, 32, 63]] {
            let c = configs(workers);
            for c in &c {
                assert!(config::by_name(c).is_some(), "{c}");
            }
            // plain, plugin-insn, and a pc and a pcmem row per count.
            assert_eq!(c.len(), 2 + 2 * workers.len(), "{c:?}");
            assert_eq!(c[..2], ["plain", "plugin-insn"]);
            for n in workers {
                assert!(c.contains(&format!("cannoli-pc-{n}w")), "{c:?}");
                assert!(c.contains(&format!("cannoli-pcmem-{n}w")), "{c:?}");
            }
        }
        assert_eq!(
            configs(&[1, 2]),
            [
                "plain",
                "plugin-insn",
                "cannoli-pc-1w",
                "cannoli-pc-2w",
                "cannoli-pcmem-1w",
                "cannoli-pcmem-2w"
            ]
        );
    }

    /// The chart of a 16- and a 64-CPU machine's worker counts: the x axis
    /// reaches the most workers, and the points come from generated rows.
    #[test]
    fn plot_covers_every_worker_count() {
        let root = Path::new("/nonexistent");
        let ws: Vec<Workload> = crate::workload::all(root, true)
            .into_iter()
            .filter(|w| w.name == "nop-loop")
            .collect();
        let dir =
            std::env::temp_dir().join(format!("cannoli-bench-plot-workers-{}", std::process::id()));
        for workers in [&[1, 2, 4, 8, 15][..], &[1, 2, 4, 8, 16, 32, 63]] {
            let wall = |n: usize| 10.0 / (1.0 + (n as f64).ln());
            let mut cells = vec![Cell {
                workload: 0,
                config: config::by_name("plugin-insn").unwrap(),
                samples: vec![Sample {
                    wall: 50.0,
                    insns: Some(1_000_000_000),
                    ..Sample::default()
                }],
                errors: vec![],
            }];
            for name in configs(workers)
                .iter()
                .filter(|c| c.starts_with("cannoli-"))
            {
                let c = config::by_name(name).unwrap();
                let Kind::Cannoli { workers: n, .. } = c.kind else {
                    unreachable!()
                };
                cells.push(Cell {
                    workload: 0,
                    config: c,
                    samples: vec![Sample {
                        wall: wall(n),
                        ..Sample::default()
                    }],
                    errors: vec![],
                });
            }
            let host = vec!["- Date: today".to_string()];
            let (chart, notes) = chart(&host, 1, &ws, &cells);
            // No plain row: no reference line, with a note.
            assert_eq!(notes.len(), 1, "{notes:?}");
            assert_eq!(chart.lines.len(), 2);
            for l in &chart.lines {
                let xs: Vec<usize> = l.points.iter().map(|p| p.0 as usize).collect();
                assert_eq!(xs, workers, "{:?}", l.trace);
                assert_eq!(l.points[0].1, 1e8);
            }
            let path = dir.join(format!("{}.png", workers.len()));
            draw(&chart, &path, SIZE).unwrap();
            assert_eq!(png_size(&std::fs::read(&path).unwrap()), Some(SIZE));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
