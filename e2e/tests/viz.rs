// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli viz`: the picture of a run with a known access pattern.
//!
//! `tests/programs/vizpattern.c` writes a 64 KiB buffer forward, byte by
//! byte, then reads it backward, and prints where the buffer is. It is
//! recorded with `--hooks mem` (mipsel and x86_64, static), and drawn at a
//! fixed size as PPM (the same pixels as the PNG, readable here without a
//! PNG decoder) with `--layout-json`, the picture's geometry. The ground
//! truth of when each access happened comes from `cannoli-dump --replay`
//! (the number of instructions before it, the time axis's unit), and the
//! layout maps it to pixels as documented in `exports/viz/src/layout.rs`:
//!
//! * every store to the buffer is a store-coloured pixel, every load a
//!   load-coloured one: an increasing diagonal, then a decreasing one;
//! * in the columns of the write phase the buffer's rows hold no load and
//!   nothing off the diagonal (background), in the read phase no store;
//! * the time axis ends at the run's instruction count, the buffer's band
//!   is named after the program (`(bss)`), and the stack has its band.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::recording::{Json, Tool};
use e2e::{guest, RunDir};

const LIMIT: Duration = Duration::from_secs(180);
const WIDTH: u32 = 1000;
const HEIGHT: u32 = 600;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Background,
    Fetch,
    Load,
    Store,
    Other,
}

struct Picture {
    w: u32,
    h: u32,
    rgb: Vec<u8>,
}

impl Picture {
    fn read(path: &Path) -> Picture {
        let b = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // "P6\n<w> <h>\n255\n" then the pixels.
        let mut fields = Vec::new();
        let mut p = 0;
        while fields.len() < 4 {
            while b[p].is_ascii_whitespace() {
                p += 1;
            }
            let s = p;
            while !b[p].is_ascii_whitespace() {
                p += 1;
            }
            fields.push(String::from_utf8_lossy(&b[s..p]).into_owned());
        }
        p += 1;
        assert_eq!(fields[0], "P6", "{}: not a binary PPM", path.display());
        let (w, h): (u32, u32) = (fields[1].parse().unwrap(), fields[2].parse().unwrap());
        assert_eq!(fields[3], "255");
        let rgb = b[p..].to_vec();
        assert_eq!(rgb.len(), (w * h * 3) as usize, "{}: short", path.display());
        Picture { w, h, rgb }
    }

    fn px(&self, x: u32, y: u32) -> [u8; 3] {
        let i = ((y * self.w + x) * 3) as usize;
        [self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]]
    }
}

fn rgb_of(j: &Json) -> [u8; 3] {
    let a = j.as_array();
    assert_eq!(a.len(), 3, "a colour: {j:?}");
    [0, 1, 2].map(|i| a[i].as_u64().unwrap() as u8)
}

fn hex(j: &Json) -> u64 {
    let s = j
        .as_str()
        .unwrap_or_else(|| panic!("not a hex string: {j:?}"));
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// The layout, as `--layout-json` writes it.
struct Layout {
    plot_left: u32,
    plot_width: u32,
    time_total: u64,
    lane_top: u32,
    lane_height: u32,
    /// (name, lo, hi, row0, rows)
    bands: Vec<(String, u64, u64, u32, u32)>,
    background: [u8; 3],
    kinds: [(Class, [u8; 3]); 3],
}

impl Layout {
    fn parse(j: &Json) -> Layout {
        let c = j.get("colors");
        let lanes = j.get("lanes").as_array();
        assert_eq!(lanes.len(), 1, "one thread, one lane");
        let lane = &lanes[0];
        Layout {
            plot_left: j.get("plot_left").as_u64().unwrap() as u32,
            plot_width: j.get("plot_width").as_u64().unwrap() as u32,
            time_total: j.get("time_total").as_u64().unwrap(),
            lane_top: lane.get("top").as_u64().unwrap() as u32,
            lane_height: lane.get("height").as_u64().unwrap() as u32,
            bands: lane
                .get("bands")
                .as_array()
                .iter()
                .map(|b| {
                    (
                        b.get("name").as_str().unwrap().to_string(),
                        hex(b.get("lo")),
                        hex(b.get("hi")),
                        b.get("row0").as_u64().unwrap() as u32,
                        b.get("rows").as_u64().unwrap() as u32,
                    )
                })
                .collect(),
            background: rgb_of(c.get("background")),
            kinds: [
                (Class::Fetch, rgb_of(c.get("fetch"))),
                (Class::Load, rgb_of(c.get("load"))),
                (Class::Store, rgb_of(c.get("store"))),
            ],
        }
    }

    /// x = plot_left + min(floor(t * plot_width / time_total), plot_width - 1)
    fn x(&self, t: u64) -> u32 {
        let c = (t as u128 * self.plot_width as u128 / self.time_total.max(1) as u128) as u32;
        self.plot_left + c.min(self.plot_width - 1)
    }

    /// y = top + height - 1 - (row0 + min(floor((a - lo) * rows / (hi - lo)), rows - 1))
    fn y(&self, addr: u64) -> Option<u32> {
        let (_, lo, hi, row0, rows) = self.band(addr)?;
        let r = ((addr - lo) as u128 * *rows as u128 / (hi - lo) as u128) as u32;
        Some(self.lane_top + self.lane_height - 1 - (row0 + r.min(rows - 1)))
    }

    fn band(&self, addr: u64) -> Option<&(String, u64, u64, u32, u32)> {
        self.bands.iter().find(|b| b.1 <= addr && addr < b.2)
    }

    /// A kind's colour blended toward the background (alpha the same on
    /// every channel, within rounding), or the background itself.
    fn class(&self, px: [u8; 3]) -> Class {
        if px == self.background {
            return Class::Background;
        }
        for (k, c) in self.kinds {
            let alphas: Vec<f64> = (0..3)
                .filter(|&i| (c[i] as i32 - self.background[i] as i32).abs() > 40)
                .map(|i| {
                    (self.background[i] as f64 - px[i] as f64)
                        / (self.background[i] as f64 - c[i] as f64)
                })
                .collect();
            let (lo, hi) = alphas
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), &a| (l.min(a), h.max(a)));
            let flat = (0..3)
                .filter(|&i| (c[i] as i32 - self.background[i] as i32).abs() <= 40)
                .all(|i| (px[i] as i32 - self.background[i] as i32).abs() <= 40);
            if flat && lo > 0.3 && hi < 1.02 && hi - lo < 0.05 {
                return k;
            }
        }
        Class::Other
    }
}

/// Accesses to `lo..hi` from the dump: (instructions before it, address,
/// store?); and the total instruction count.
fn accesses(dump: &Path, lo: u64, hi: u64) -> (Vec<(u64, u64, bool)>, u64) {
    let text = fs::read_to_string(dump).unwrap();
    let mut t = 0u64;
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split(' ');
        match f.next() {
            Some("X") => t += 1,
            Some(k @ ("L" | "S")) => {
                let _pc = f.next();
                let a = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
                if (lo..hi).contains(&a) {
                    out.push((t, a, k == "S"));
                }
            }
            _ => {}
        }
    }
    (out, t)
}

fn case(arch: &str) {
    let start = Instant::now();
    let dir = RunDir::new();
    let prog = guest(arch, "vizpattern");
    let rec = dir.file("run.cnl");
    let r = Tool::new("cannoli")
        .args(["record", "--hooks", "mem", "-o"])
        .arg(&rec)
        .arg(&prog)
        .run(&dir, "record", LIMIT)
        .unwrap();
    r.expect_code(0).unwrap();
    let out = String::from_utf8_lossy(&r.stdout).into_owned();
    let line = out
        .lines()
        .find(|l| l.starts_with("buffer "))
        .unwrap_or_else(|| panic!("{arch}: no buffer line in {out:?}"));
    let f: Vec<&str> = line.split(' ').collect();
    let buf = u64::from_str_radix(f[1].trim_start_matches("0x"), 16).unwrap();
    let size: u64 = f[2].parse().unwrap();

    let dump = dir.file("dump.txt");
    Tool::new("cannoli-dump")
        .arg("--replay")
        .arg(&rec)
        .arg("--out")
        .arg(&dump)
        .args(["--only", "XLS", "--threads", "2"])
        .run(&dir, "dump", LIMIT)
        .unwrap()
        .expect_code(0)
        .unwrap();
    let (acc, insns) = accesses(&dump, buf, buf + size);
    let stores: Vec<(u64, u64)> = acc.iter().filter(|a| a.2).map(|a| (a.0, a.1)).collect();
    let loads: Vec<(u64, u64)> = acc.iter().filter(|a| !a.2).map(|a| (a.0, a.1)).collect();
    assert_eq!(stores.len() as u64, size, "{arch}: one store per byte");
    assert_eq!(loads.len() as u64, size, "{arch}: one load per byte");
    assert!(stores.windows(2).all(|w| w[1].1 == w[0].1 + 1), "forward");
    assert!(loads.windows(2).all(|w| w[1].1 + 1 == w[0].1), "backward");
    assert!(stores.last().unwrap().0 <= loads[0].0, "write, then read");

    let ppm = dir.file("run.ppm");
    let json = dir.file("layout.json");
    let v = Tool::new("cannoli")
        .arg("viz")
        .arg(&rec)
        .arg("-o")
        .arg(&ppm)
        .args([
            "--width",
            &WIDTH.to_string(),
            "--height",
            &HEIGHT.to_string(),
        ])
        .arg("--layout-json")
        .arg(&json)
        .run(&dir, "viz", LIMIT)
        .unwrap();
    v.expect_code(0).unwrap();
    // The PNG too (default name, in the run directory).
    Tool::new("cannoli")
        .arg("viz")
        .arg(&rec)
        .run(&dir, "viz-png", LIMIT)
        .unwrap()
        .expect_code(0)
        .unwrap();
    let png = fs::read(dir.file("run.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{arch}: run.png is a PNG");

    let pic = Picture::read(&ppm);
    assert_eq!(
        (pic.w, pic.h),
        (WIDTH, HEIGHT),
        "{arch}: the size asked for"
    );
    let j = Json::parse(&fs::read_to_string(&json).unwrap()).unwrap();
    let lay = Layout::parse(&j);
    assert_eq!(j.get("time_unit").as_str(), Some("instructions"));
    assert_eq!(
        lay.time_total, insns,
        "{arch}: the time axis ends at the run's instructions"
    );
    let band = lay.band(buf).expect("a band holds the buffer");
    assert_eq!(band.0, "vizpattern (bss)", "{arch}: the buffer's band");
    assert!(
        band.2 >= buf + size,
        "{arch}: the whole buffer is in one band"
    );
    assert!(
        lay.bands.iter().any(|b| b.0 == "[stack]"),
        "{arch}: a [stack] band: {:?}",
        lay.bands
    );
    assert!(
        lay.bands.iter().any(|b| b.0 == "vizpattern"),
        "{arch}: the program's band"
    );

    let mut bad = Vec::new();
    // Every access is its kind's colour where the layout puts it (a store
    // wins a pixel it shares with a load: where the diagonals meet).
    let store_px: std::collections::HashSet<(u32, u32)> = stores
        .iter()
        .map(|&(t, a)| (lay.x(t), lay.y(a).unwrap()))
        .collect();
    for (list, kind) in [(&stores, Class::Store), (&loads, Class::Load)] {
        for &(t, a) in list.iter().step_by(61).chain(list.last()) {
            let (x, y) = (lay.x(t), lay.y(a).unwrap());
            let want = if store_px.contains(&(x, y)) {
                Class::Store
            } else {
                kind
            };
            let c = lay.class(pic.px(x, y));
            if c != want {
                bad.push(format!(
                    "t {t} addr {a:#x} at ({x}, {y}): {c:?} {:?}, want {want:?}",
                    pic.px(x, y)
                ));
            }
        }
    }
    // The diagonals' directions: higher addresses higher up.
    let y_first_store = lay.y(stores[0].1).unwrap();
    let y_last_store = lay.y(stores.last().unwrap().1).unwrap();
    // The buffer is most of its band (64 of 80-92 KiB).
    assert!(
        y_first_store > y_last_store + band.4 / 2,
        "{arch}: the stores rise ({y_first_store} to {y_last_store}, band {band:?})"
    );
    assert!(lay.x(stores.last().unwrap().0) > lay.x(stores[0].0) + 100);

    // Each phase's interior columns, in the buffer's rows: its own kind on
    // the diagonal (within a row), background everywhere else.
    let y_top = lay.y(buf + size - 1).unwrap();
    let y_bot = lay.y(buf).unwrap();
    for (list, own, other) in [
        (&stores, Class::Store, Class::Load),
        (&loads, Class::Load, Class::Store),
    ] {
        // Per column: the rows the accesses of that column fall in.
        let mut rows: std::collections::BTreeMap<u32, (u32, u32)> = Default::default();
        for &(t, a) in list.iter() {
            let (x, y) = (lay.x(t), lay.y(a).unwrap());
            let e = rows.entry(x).or_insert((y, y));
            e.0 = e.0.min(y);
            e.1 = e.1.max(y);
        }
        let x0 = *rows.keys().next().unwrap() + 1;
        let x1 = *rows.keys().last().unwrap() - 1;
        let mut checked = 0;
        for x in x0..x1 {
            let (lo, hi) = rows.get(&x).copied().unwrap_or((u32::MAX, 0));
            let mut seen_own = false;
            for y in y_top..=y_bot {
                let c = lay.class(pic.px(x, y));
                let near = y + 1 >= lo && y <= hi + 1;
                checked += 1;
                if c == own && near {
                    seen_own = true;
                } else if c == other {
                    bad.push(format!("{other:?} in the {own:?} phase at ({x}, {y})"));
                } else if !near && c != Class::Background {
                    bad.push(format!(
                        "{c:?} off the {own:?} diagonal at ({x}, {y}), diagonal rows {lo}..={hi}"
                    ));
                }
            }
            if !seen_own {
                bad.push(format!(
                    "column {x}: no {own:?} on the diagonal (rows {lo}..={hi})"
                ));
            }
        }
        assert!(checked > 10_000, "{arch}: {checked} pixels checked");
    }
    if !bad.is_empty() {
        panic!(
            "{arch}: {} wrong pixels (picture {}), first ones:\n{}",
            bad.len(),
            ppm.display(),
            bad[..bad.len().min(20)].join("\n")
        );
    }
    eprintln!(
        "viz {arch}: ok ({} stores, {} loads, {} instructions) in {:.1?}",
        stores.len(),
        loads.len(),
        insns,
        start.elapsed()
    );
}

#[test]
fn vizpattern_mipsel() {
    case("mipsel");
}

#[test]
fn vizpattern_x86_64() {
    case("x86_64");
}

/// Bad input: one line, exit 1; a damaged recording: the loss said, exit 3.
#[test]
fn bad_and_damaged_recordings() {
    let dir = RunDir::new();
    fs::write(dir.file("junk.cnl"), b"not a recording at all").unwrap();
    let r = Tool::new("cannoli")
        .args(["viz", "junk.cnl", "-o", "junk.png"])
        .run(&dir, "junk", LIMIT)
        .unwrap();
    r.expect_code(1).unwrap();
    assert_eq!(r.stderr_lines().len(), 1, "one line: {}", r.stderr);
    let r = Tool::new("cannoli")
        .args(["viz", "missing.cnl"])
        .run(&dir, "missing", LIMIT)
        .unwrap();
    r.expect_code(1).unwrap();
    assert_eq!(r.stderr_lines().len(), 1, "one line: {}", r.stderr);

    // A recording cut in the middle of its chunks.
    let rec = dir.file("run.cnl");
    Tool::new("cannoli")
        .args(["record", "--hooks", "mem", "-o"])
        .arg(&rec)
        .arg(guest("mipsel", "vizpattern"))
        .run(&dir, "record", LIMIT)
        .unwrap()
        .expect_code(0)
        .unwrap();
    let b = fs::read(&rec).unwrap();
    fs::write(dir.file("cut.cnl"), &b[..b.len() / 2]).unwrap();
    let r = Tool::new("cannoli")
        .args(["viz", "cut.cnl", "-o", "cut.png"])
        .run(&dir, "cut", LIMIT)
        .unwrap();
    r.expect_code(3).unwrap();
    assert!(
        r.stderr.contains("incomplete"),
        "the loss is stated: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert!(dir.file("cut.png").exists(), "what could be read is drawn");
}
