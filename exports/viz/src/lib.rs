// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli viz`: a picture of a whole recorded run. Time (instructions
//! executed by the thread) runs left to right, guest addresses bottom to
//! top; instruction fetches, loads and stores in three colours; the address
//! axis folded to the parts of the mapped regions the thread touched (each
//! band labelled: the program, a library, `[heap]`, `[stack]`, ...); one
//! lane per guest thread.
//!
//! Two passes over the recording, in bounded memory whatever its length:
//! [`survey`] counts each stream's instructions and accesses (the time
//! axis) and the pages it touched and what was mapped there (the bands);
//! [`paint`] bins every event into a fixed-size [`grid::Grid`] per lane.
//! [`layout::Layout`] maps (time, address) to a pixel, for the drawing and
//! for tests (`--layout-json` writes it).

pub mod grid;
pub mod layout;
pub mod paint;
pub mod survey;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cannoli::Recording;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::grid::{shade, Access, Grid};
use crate::layout::{fold, spans, Lane, Layout, COLORS, PAGE_SHIFT};

/// One line for `cannoli --help`.
pub const ABOUT: &str =
    "Draw a recording: time against guest address, fetches, loads and stores, one lane per thread";

#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The recording (made by `cannoli record`)
    #[arg(value_name = "RUN")]
    pub recording: PathBuf,
    /// The picture to write (PNG)
    #[arg(short, long, value_name = "FILE", default_value = "run.png")]
    pub output: PathBuf,
    /// Width of the picture in pixels
    #[arg(long, default_value_t = 1600, value_parser = clap::value_parser!(u32).range(400..=16384))]
    pub width: u32,
    /// Height of the picture in pixels (taller if the threads need it: at
    /// least 60 rows per lane)
    #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u32).range(200..=16384))]
    pub height: u32,
    /// Also write the picture's geometry as JSON: the time axis, the lanes
    /// and their bands (address ranges and pixel rows), the colours
    #[arg(long, value_name = "FILE")]
    pub layout_json: Option<PathBuf>,
    /// Decoding threads: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, default_value_t = cannoli::default_workers() as u64, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
}

const TOOL: &str = "cannoli viz";

// Picture geometry.
const LABELS: u32 = 190;
const RIGHT: u32 = 24;
const HEADER: u32 = 64;
const LANE_TITLE: u32 = 20;
const LANE_GAP: u32 = 12;
const FOOTER: u32 = 56;
const MIN_LANE: u32 = 60;

/// Runs the command; returns the exit status.
pub fn main(args: Args) -> i32 {
    let start = Instant::now();
    let rec = match Recording::open(&args.recording) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{TOOL}: {e}");
            return 1;
        }
    };
    let hooks = rec.hooks().clone();
    // Each pass's configuration and results: values of this call (see
    // `survey::Survey`), so that viz can run twice in one process.
    let fetch_from_regs = !hooks.exec;
    let survey = Arc::new(survey::Survey::new(fetch_from_regs));
    let threads = args.threads as usize;

    // Pass 1: extents and names.
    let bar = tools::progress::Bar::new(&rec, "cannoli viz (pass 1 of 2)");
    let first = match rec.replay_with::<survey::Surveyor>(threads, survey.clone()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{TOOL}: {e}");
            return 1;
        }
    };
    let survey_secs = start.elapsed().as_secs_f64();
    let survey::Found {
        surveys,
        left_out,
        spaces,
    } = survey.take();
    drop(survey);
    let all_streams = surveys.len() as u64 + left_out;
    if left_out > 0 {
        eprintln!(
            "{TOOL}: {}: {} streams; drawing the {} busiest (instructions and memory accesses), \
             {left_out} left out",
            args.recording.display(),
            all_streams,
            surveys.len()
        );
    }
    let surveys: Vec<_> = surveys
        .into_values()
        .filter(|s| !s.pages.is_empty())
        .collect();
    if surveys.is_empty() {
        if !first.stats.is_complete() {
            eprintln!(
                "{TOOL}: {}: no instruction or memory access could be read ({})",
                args.recording.display(),
                first.stats.loss_summary()
            );
            return cannoli::EXIT_INCOMPLETE;
        }
        eprintln!(
            "{TOOL}: {}: no instructions or memory accesses recorded: nothing to draw",
            args.recording.display()
        );
        return 1;
    }
    let total_insns: u64 = surveys.iter().map(|s| s.instructions).sum();
    let in_accesses = total_insns == 0;
    let time_total = surveys
        .iter()
        .map(|s| {
            if in_accesses {
                s.accesses
            } else {
                s.instructions
            }
        })
        .max()
        .unwrap_or(0)
        .max(1);

    // The layout.
    let n = surveys.len() as u32;
    let plot_width = args.width - LABELS - RIGHT;
    let avail = args
        .height
        .saturating_sub(HEADER + FOOTER + n * (LANE_TITLE + LANE_GAP));
    let lane_h = (avail / n).max(MIN_LANE);
    let height = HEADER + FOOTER + n * (LANE_TITLE + LANE_GAP + lane_h);
    let empty = survey::Space::default();
    let mut lanes = Vec::new();
    let mut top = HEADER;
    for s in &surveys {
        let space = spaces.get(&s.space).unwrap_or(&empty);
        let pages: Vec<(u64, String)> = s
            .pages
            .iter()
            .map(|&p| (p, space.name_of(p << PAGE_SHIFT)))
            .collect();
        top += LANE_TITLE;
        lanes.push(Lane {
            stream: s.stream,
            pid: s.pid,
            tid: s.tid,
            exe: s.exe.clone(),
            instructions: s.instructions,
            accesses: s.accesses,
            top,
            height: lane_h,
            bands: fold(spans(pages), lane_h),
        });
        top += lane_h + LANE_GAP;
    }
    drop(surveys);
    let layout = Layout {
        width: args.width,
        height,
        time_unit: if in_accesses {
            "accesses"
        } else {
            "instructions"
        },
        time_total,
        plot_left: LABELS,
        plot_width,
        colors: COLORS,
        lanes,
    };

    // Pass 2: the pixels.
    let setup: HashMap<u64, paint::LaneSetup> = layout
        .lanes
        .iter()
        .map(|l| {
            (
                l.stream,
                paint::LaneSetup {
                    bands: l.bands.clone(),
                    rows: l.height,
                },
            )
        })
        .collect();
    let paint = Arc::new(paint::Paint::new(
        setup,
        plot_width,
        time_total,
        in_accesses,
        fetch_from_regs,
    ));
    bar.next_pass("cannoli viz (pass 2 of 2)");
    let second = match rec.replay_quietly_with::<paint::Painter>(threads, paint.clone()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{TOOL}: {e}");
            return 1;
        }
    };
    drop(bar);
    let grids = paint.take_grids();
    drop(paint);

    let title = format!(
        "{} ({}, --hooks {}){}",
        cannoli::wire::tame(&rec.info().command.join(" "), 400),
        cannoli::wire::tame(rec.info().guest.as_deref().unwrap_or("unknown guest"), 40),
        hooks.preset,
        if left_out > 0 {
            format!(
                " - the {} busiest of {all_streams} threads",
                survey::MAX_LANES
            )
        } else {
            String::new()
        }
    );
    if let Err(e) = draw(&layout, &grids, &title, &args.output) {
        eprintln!("{TOOL}: cannot write {}: {e}", args.output.display());
        return 1;
    }
    if let Some(j) = &args.layout_json {
        let text = serde_json::to_string_pretty(&layout).expect("the layout serializes");
        if let Err(e) = std::fs::write(j, text + "\n") {
            eprintln!("{TOOL}: cannot write {}: {e}", j.display());
            return 1;
        }
    }
    let events: u64 = layout
        .lanes
        .iter()
        .map(|l| l.instructions + l.accesses)
        .sum();
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{TOOL}: wrote {} ({}x{}): {} lane{}, {} bands, {events} events in {secs:.2} s (survey {survey_secs:.2} s; {:.1} M events/s over both passes), {}",
        args.output.display(),
        layout.width,
        layout.height,
        layout.lanes.len(),
        if layout.lanes.len() == 1 { "" } else { "s" },
        layout.lanes.iter().map(|l| l.bands.len()).sum::<usize>(),
        events as f64 / secs.max(1e-9) / 1e6,
        second.stats.loss_summary(),
    );
    if !first.stats.is_complete() || !second.stats.is_complete() {
        eprintln!(
            "{TOOL}: {}: the recording is incomplete ({}): the picture shows what could be read",
            args.recording.display(),
            second.stats.loss_summary()
        );
        return cannoli::EXIT_INCOMPLETE;
    }
    0
}

/// Registers DejaVu Sans as plotters' "sans-serif" (no system fonts
/// needed). Every picture does, rather than once per process behind a
/// static: plotters keeps fonts in a process-wide registry of its own, and
/// registering the same embedded font again only replaces it with itself
/// (parsing its table directory: microseconds), so pictures drawn one after
/// another or at once all find it.
fn register_font() -> Result<(), FontError> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| FontError)
}

/// The font compiled in did not parse.
#[derive(Debug, thiserror::Error)]
#[error("the embedded DejaVu Sans font does not load")]
struct FontError;

/// `1234567` as `1.23M`.
pub fn si(v: u64) -> String {
    let v = v as f64;
    for (d, s) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if v >= d {
            let x = v / d;
            return if x >= 100.0 || x.fract() == 0.0 {
                format!("{x:.0}{s}")
            } else if x >= 10.0 {
                format!("{x:.1}{s}")
            } else {
                format!("{x:.2}{s}")
            };
        }
    }
    format!("{v:.0}")
}

/// A round tick step giving about `n` ticks up to `total`.
fn tick_step(total: u64, n: u64) -> u64 {
    let raw = (total / n.max(1)).max(1);
    let mag = 10u64.pow(raw.ilog10());
    for m in [1, 2, 5, 10] {
        if mag * m >= raw {
            return mag * m;
        }
    }
    mag * 10
}

fn rgb(c: [u8; 3]) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

fn draw(
    layout: &Layout,
    grids: &std::collections::BTreeMap<u64, Grid>,
    title: &str,
    path: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    register_font()?;
    let c = &layout.colors;
    let (w, h) = (layout.width as usize, layout.height as usize);
    let mut buf: Vec<u8> = c
        .background
        .iter()
        .copied()
        .cycle()
        .take(w * h * 3)
        .collect();
    // The pixels first, straight into the buffer.
    let (pl, pw) = (layout.plot_left, layout.plot_width);
    for lane in &layout.lanes {
        let mut put = |x: u32, y: u32, px: [u8; 3]| {
            let i = (y as usize * w + x as usize) * 3;
            buf[i..i + 3].copy_from_slice(&px);
        };
        // Rows between bands: grey, the cut.
        let mut in_band = vec![false; lane.height as usize];
        for b in &lane.bands {
            for r in b.row0..b.row0 + b.rows {
                in_band[r as usize] = true;
            }
        }
        for (r, inside) in in_band.iter().enumerate() {
            if !inside {
                for x in pl..pl + pw {
                    put(x, lane.y_of_row(r as u32), c.gap);
                }
            }
        }
        if let Some(g) = grids.get(&lane.stream) {
            let max = g.max();
            for r in 0..g.rows {
                let y = lane.y_of_row(r);
                for col in 0..g.cols {
                    if let Some((k, n)) = g.shown(col, r) {
                        let color = match k {
                            Access::Fetch => c.fetch,
                            Access::Load => c.load,
                            Access::Store => c.store,
                        };
                        put(pl + col, y, shade(color, c.background, n, max[k as usize]));
                    }
                }
            }
        }
    }
    {
        let root =
            BitMapBackend::with_buffer(&mut buf, (layout.width, layout.height)).into_drawing_area();
        annotate(layout, title, &root)?;
        root.present()?;
    }
    write_image(path, &buf, layout.width, layout.height)
}

/// Writes RGB pixels as PNG, or as binary PPM (P6) if `path` ends in
/// `.ppm` (for tests: readable without a PNG decoder).
fn write_image(path: &Path, rgb: &[u8], w: u32, h: u32) -> Result<(), Box<dyn std::error::Error>> {
    let ppm = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("ppm"));
    if ppm {
        let mut out = format!("P6\n{w} {h}\n255\n").into_bytes();
        out.extend_from_slice(rgb);
        std::fs::write(path, out)?;
    } else {
        image::save_buffer_with_format(
            path,
            rgb,
            w,
            h,
            image::ColorType::Rgb8,
            image::ImageFormat::Png,
        )?;
    }
    Ok(())
}

/// Text, frames, legend and axis over the pixels.
fn annotate(
    layout: &Layout,
    title: &str,
    root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
) -> Result<(), Box<dyn std::error::Error>> {
    let c = &layout.colors;
    let black = ("sans-serif", 14).into_font().color(&BLACK);
    let grey = RGBColor(110, 110, 110);
    let small = ("sans-serif", 11).into_font().color(&grey);

    // Title and legend.
    let mut t = title.to_string();
    if t.chars().count() > 110 {
        t = t.chars().take(107).collect::<String>() + "...";
    }
    root.draw(&Text::new(
        format!("cannoli viz: {t}"),
        (12, 10),
        ("sans-serif", 18).into_font().color(&BLACK),
    ))?;
    let mut x = layout.plot_left as i32;
    for (name, col) in [
        ("instruction fetch", c.fetch),
        ("load", c.load),
        ("store", c.store),
    ] {
        root.draw(&Rectangle::new([(x, 38), (x + 14, 52)], rgb(col).filled()))?;
        root.draw(&Text::new(name, (x + 20, 38), black.clone()))?;
        x += 40 + name.len() as i32 * 8;
    }
    root.draw(&Text::new(
        "darker: more events per pixel; addresses folded to what each thread touched",
        (x + 20, 40),
        small.clone(),
    ))?;

    let pl = layout.plot_left;
    let pw = layout.plot_width;
    for lane in &layout.lanes {
        // Lane title.
        let what = if layout.time_unit == "accesses" {
            format!("{} loads and stores", si(lane.accesses))
        } else {
            format!(
                "{} instructions, {} loads and stores",
                si(lane.instructions),
                si(lane.accesses)
            )
        };
        root.draw(&Text::new(
            format!(
                "thread {} (pid {}, stream {}) {}: {what}",
                lane.tid,
                lane.pid,
                lane.stream,
                survey::basename(&lane.exe)
            ),
            (pl as i32, (lane.top - LANE_TITLE + 2) as i32),
            black.clone(),
        ))?;
        // Frame.
        root.draw(&Rectangle::new(
            [
                ((pl - 1) as i32, (lane.top - 1) as i32),
                ((pl + pw) as i32, (lane.top + lane.height) as i32),
            ],
            grey,
        ))?;
        // Band labels, top down, skipping one that would overlap the last.
        let right = Pos::new(HPos::Right, VPos::Center);
        let mut last_y = -1000;
        for b in lane.bands.iter().rev() {
            let y_top = lane.y_of_row(b.row0 + b.rows - 1) as i32;
            let y_bot = lane.y_of_row(b.row0) as i32;
            let mid = (y_top + y_bot) / 2;
            let name_y = if b.rows >= 30 { mid - 6 } else { mid };
            if name_y - last_y < 13 {
                continue;
            }
            let mut name = b.name.clone();
            if name.chars().count() > 26 {
                name = name.chars().take(24).collect::<String>() + "..";
            }
            root.draw(&Text::new(
                name,
                ((pl - 8) as i32, name_y),
                ("sans-serif", 13).into_font().color(&BLACK).pos(right),
            ))?;
            last_y = name_y;
            if b.rows >= 30 {
                root.draw(&Text::new(
                    format!("{:#x}-{:#x}", b.lo, b.hi),
                    ((pl - 8) as i32, mid + 8),
                    small.clone().pos(right),
                ))?;
                last_y = mid + 8;
            }
            root.draw(&PathElement::new(
                vec![((pl - 5) as i32, y_top), ((pl - 5) as i32, y_bot)],
                grey,
            ))?;
        }
    }

    // Time axis under the last lane.
    let y0 = layout.lanes.last().map_or(HEADER, |l| l.top + l.height + 1) as i32;
    let step = tick_step(layout.time_total, 8);
    let mut t = 0;
    while t <= layout.time_total {
        let x = layout.x(t) as i32;
        root.draw(&PathElement::new(vec![(x, y0), (x, y0 + 5)], grey))?;
        root.draw(&Text::new(
            si(t),
            (x, y0 + 8),
            ("sans-serif", 12)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
        t += step;
    }
    let axis = if layout.time_unit == "accesses" {
        "loads and stores (per thread)"
    } else {
        "instructions executed (per thread)"
    };
    root.draw(&Text::new(
        axis,
        ((pl + pw / 2) as i32, y0 + 28),
        ("sans-serif", 14)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_and_units() {
        assert_eq!(tick_step(1_317_454_556, 8), 200_000_000);
        assert_eq!(tick_step(7, 8), 1);
        assert_eq!(tick_step(100, 8), 20);
        assert_eq!(si(0), "0");
        assert_eq!(si(200_000_000), "200M");
        assert_eq!(si(1_500_000_000), "1.50G");
        assert_eq!(si(12_345), "12.3k");
    }
}
