// SPDX-License-Identifier: GPL-2.0-or-later
//! Where things go in the picture: the folded address axis of a lane (its
//! bands: the touched parts of mapped regions, gaps cut out), the time axis,
//! and the mapping of (time, address) to a pixel, which the drawing pass and
//! the tests share.

use serde::Serialize;

/// Page size of the touched-page bookkeeping.
pub const PAGE_SHIFT: u32 = 12;
pub const PAGE: u64 = 1 << PAGE_SHIFT;

/// Pages from one touched page to the next that still stay in one band
/// (at most `MAX_GAP_PAGES - 1` untouched pages between); a longer gap
/// splits the band (a stack touched at both ends of a big reservation).
pub const MAX_GAP_PAGES: u64 = 64;

/// Rows between two bands (drawn grey: the cut).
pub const BAND_GAP: u32 = 3;

/// Fewest rows a band gets.
pub const MIN_BAND_ROWS: u32 = 6;

/// One band of a lane: the addresses `lo..hi` drawn in rows
/// `row0..row0 + rows` (row 0 is the lane's bottom row; higher addresses
/// are higher up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Band {
    /// What is mapped there: a file's name, `[heap]`, `[stack]`, `[anon]`,
    /// `NAME (data)`, `NAME (bss)`, `[unmapped]`.
    pub name: String,
    #[serde(serialize_with = "hex")]
    pub lo: u64,
    #[serde(serialize_with = "hex")]
    pub hi: u64,
    pub row0: u32,
    pub rows: u32,
}

fn hex<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:#x}"))
}

impl Band {
    /// The row of `addr` (which must be in `lo..hi`).
    #[inline]
    pub fn row_of(&self, addr: u64) -> u32 {
        let span = self.hi - self.lo;
        let off = addr - self.lo;
        // u64 arithmetic where it cannot overflow (always, but for bands
        // of more than 2^44 bytes): u128 division is slow.
        let r = if span < 1 << 44 && self.rows < 1 << 20 {
            (off * self.rows as u64 / span) as u32
        } else {
            (off as u128 * self.rows as u128 / span as u128) as u32
        };
        self.row0 + r.min(self.rows - 1)
    }
}

/// A span of touched pages with one name, before rows are given out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub name: String,
    /// Page numbers: first touched, last touched (inclusive).
    pub first: u64,
    pub last: u64,
}

/// Groups touched pages (`(page number, region name)`, any order) into
/// spans: consecutive pages of the same name, at most
/// [`MAX_GAP_PAGES`] pages apart, form one span.
pub fn spans(mut pages: Vec<(u64, String)>) -> Vec<Span> {
    pages.sort_unstable_by_key(|p| p.0);
    pages.dedup_by_key(|p| p.0);
    let mut out: Vec<Span> = Vec::new();
    for (p, name) in pages {
        match out.last_mut() {
            Some(s) if s.name == name && p - s.last <= MAX_GAP_PAGES => s.last = p,
            _ => out.push(Span {
                name,
                first: p,
                last: p,
            }),
        }
    }
    out
}

/// Gives `rows` rows to `spans` (in address order, lowest at the bottom):
/// [`BAND_GAP`] rows between bands, each band at least [`MIN_BAND_ROWS`]
/// (fewer if there is no room), the rest shared by the square root of each
/// span's size, so a 4 KiB page and an 8 MiB stack are both readable. If
/// there are too many spans for the rows, the closest neighbours are merged
/// first.
pub fn fold(mut spans: Vec<Span>, rows: u32) -> Vec<Band> {
    if spans.is_empty() || rows == 0 {
        return Vec::new();
    }
    let max_bands = ((rows + BAND_GAP) / (MIN_BAND_ROWS.min(rows) + BAND_GAP)).max(1) as usize;
    while spans.len() > max_bands {
        // Merge the pair with the smallest address gap.
        let i = (0..spans.len() - 1)
            .min_by_key(|&i| spans[i + 1].first - spans[i].last)
            .unwrap();
        let b = spans.remove(i + 1);
        let a = &mut spans[i];
        if a.name != b.name {
            a.name = format!("{}, {}", a.name, b.name);
        }
        a.last = b.last;
    }
    let n = spans.len() as u32;
    let gaps = BAND_GAP * (n - 1);
    let min = MIN_BAND_ROWS.min((rows - gaps.min(rows)) / n).max(1);
    let free = rows.saturating_sub(gaps + min * n);
    let weights: Vec<f64> = spans
        .iter()
        .map(|s| (((s.last - s.first + 1) * PAGE) as f64).sqrt())
        .collect();
    let total: f64 = weights.iter().sum();
    // Largest remainder, so the rows add up exactly.
    let shares: Vec<f64> = weights.iter().map(|w| w / total * free as f64).collect();
    let mut extra: Vec<u32> = shares.iter().map(|s| s.floor() as u32).collect();
    let mut left = free - extra.iter().sum::<u32>();
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by(|&a, &b| {
        let fa = shares[a] - shares[a].floor();
        let fb = shares[b] - shares[b].floor();
        fb.partial_cmp(&fa).unwrap_or(std::cmp::Ordering::Equal)
    });
    for i in order {
        if left == 0 {
            break;
        }
        extra[i] += 1;
        left -= 1;
    }
    let mut row = 0;
    spans
        .into_iter()
        .zip(extra)
        .map(|(s, e)| {
            let b = Band {
                name: s.name,
                lo: s.first << PAGE_SHIFT,
                hi: (s.last + 1) << PAGE_SHIFT,
                row0: row,
                rows: min + e,
            };
            row += b.rows + BAND_GAP;
            b
        })
        .collect()
}

/// The band holding `addr`, by binary search (`bands` in address order).
pub fn band_of(bands: &[Band], addr: u64) -> Option<&Band> {
    let i = bands.partition_point(|b| b.hi <= addr);
    bands.get(i).filter(|b| b.lo <= addr)
}

/// One lane: a guest thread's stream.
#[derive(Debug, Clone, Serialize)]
pub struct Lane {
    /// The stream's number in the recording.
    pub stream: u64,
    pub pid: i32,
    pub tid: i32,
    pub exe: String,
    /// Instructions executed and memory accesses in the stream.
    pub instructions: u64,
    pub accesses: u64,
    /// Pixel rows of the lane's plot: `top..top + height`.
    pub top: u32,
    pub height: u32,
    pub bands: Vec<Band>,
}

impl Lane {
    /// The pixel row of `addr`, if it is in one of the bands.
    pub fn y(&self, addr: u64) -> Option<u32> {
        band_of(&self.bands, addr).map(|b| self.y_of_row(b.row_of(addr)))
    }

    /// The pixel row of lane row `row` (0 at the bottom).
    pub fn y_of_row(&self, row: u32) -> u32 {
        self.top + self.height - 1 - row
    }
}

/// The whole picture's geometry.
#[derive(Debug, Clone, Serialize)]
pub struct Layout {
    pub width: u32,
    pub height: u32,
    /// What the time axis counts: `instructions` (executed, in the
    /// thread) or `accesses` (loads and stores, when the recording has no
    /// instructions).
    pub time_unit: &'static str,
    /// The time axis runs from 0 to this (the longest lane's count).
    pub time_total: u64,
    /// Pixel columns of every lane's plot: `plot_left..plot_left +
    /// plot_width`.
    pub plot_left: u32,
    pub plot_width: u32,
    /// Colours as RGB: `fetch`, `load`, `store` at full strength (a pixel
    /// with few events is that colour blended toward `background`),
    /// `background`, `gap` (the rows between bands).
    pub colors: Colors,
    pub lanes: Vec<Lane>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Colors {
    pub fetch: [u8; 3],
    pub load: [u8; 3],
    pub store: [u8; 3],
    pub background: [u8; 3],
    pub gap: [u8; 3],
}

pub const COLORS: Colors = Colors {
    fetch: [40, 90, 220],
    load: [10, 160, 40],
    store: [225, 30, 30],
    background: [255, 255, 255],
    gap: [225, 225, 225],
};

impl Layout {
    /// The plot column (0-based, within the plot) of time `t`.
    pub fn col(&self, t: u64) -> u32 {
        col_of(t, self.time_total, self.plot_width)
    }

    /// The pixel column of time `t`.
    pub fn x(&self, t: u64) -> u32 {
        self.plot_left + self.col(t)
    }

    /// The pixel of an event at time `t` and address `addr` in lane
    /// `lane`: `None` if the address is in none of its bands.
    pub fn pixel(&self, lane: usize, t: u64, addr: u64) -> Option<(u32, u32)> {
        Some((self.x(t), self.lanes.get(lane)?.y(addr)?))
    }
}

/// `floor(t * width / total)`, at most `width - 1`.
#[inline]
pub fn col_of(t: u64, total: u64, width: u32) -> u32 {
    let c = match t.checked_mul(width as u64) {
        Some(p) => p / total.max(1),
        None => (t as u128 * width as u128 / total.max(1) as u128) as u64,
    };
    c.min(width.saturating_sub(1) as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(list: &[(u64, &str)]) -> Vec<(u64, String)> {
        list.iter().map(|&(p, n)| (p, n.to_string())).collect()
    }

    #[test]
    fn spans_cut_gaps_and_split_names() {
        let s = spans(pages(&[
            (0x403, "prog"),
            (0x400, "prog"),
            (0x401, "prog"),
            (0x401, "prog"),
            (0x49f, "prog (bss)"),
            (0x4a0, "prog (bss)"),
            // 63 untouched pages later: the same span.
            (0x4e0, "prog (bss)"),
            // 64: a new one.
            (0x521, "prog (bss)"),
            (0x7fff0, "[stack]"),
        ]));
        let got: Vec<(&str, u64, u64)> = s
            .iter()
            .map(|s| (s.name.as_str(), s.first, s.last))
            .collect();
        assert_eq!(
            got,
            vec![
                ("prog", 0x400, 0x403),
                ("prog (bss)", 0x49f, 0x4e0),
                ("prog (bss)", 0x521, 0x521),
                ("[stack]", 0x7fff0, 0x7fff0),
            ]
        );
    }

    #[test]
    fn fold_gives_every_row_and_maps_addresses() {
        let s = spans(pages(&[
            (0x400, "prog"),
            (0x40f, "prog"),
            (0x7fff0, "[stack]"),
            (0x12345, "[heap]"),
        ]));
        let bands = fold(s, 200);
        assert_eq!(bands.len(), 3);
        // Every row is used: bands, gaps, nothing left over.
        let last = bands.last().unwrap();
        assert_eq!(last.row0 + last.rows, 200);
        for w in bands.windows(2) {
            assert_eq!(w[0].row0 + w[0].rows + BAND_GAP, w[1].row0);
            assert!(w[0].hi <= w[1].lo);
        }
        // sqrt weights: 16 pages get 4 times the extra rows of 1 page.
        assert!(bands[0].rows > bands[1].rows);
        assert!(bands.iter().all(|b| b.rows >= MIN_BAND_ROWS));
        // Addresses: the band's ends, monotonic inside.
        let b = &bands[0];
        assert_eq!((b.lo, b.hi), (0x400000, 0x410000));
        assert_eq!(b.row_of(b.lo), b.row0);
        assert_eq!(b.row_of(b.hi - 1), b.row0 + b.rows - 1);
        let mut prev = 0;
        for a in (b.lo..b.hi).step_by(64) {
            let r = b.row_of(a);
            assert!(r >= prev);
            prev = r;
        }
        assert_eq!(band_of(&bands, 0x40ffff).map(|b| b.row0), Some(0));
        assert_eq!(band_of(&bands, 0x410000), None);
        assert_eq!(band_of(&bands, 0x3fffff), None);
        assert_eq!(
            band_of(&bands, 0x7fff0abc).map(|b| b.name.as_str()),
            Some("[stack]")
        );
    }

    #[test]
    fn fold_merges_when_crowded() {
        let list: Vec<(u64, String)> = (0..100u64).map(|i| (i * 1000, format!("m{i}"))).collect();
        let bands = fold(spans(list), 50);
        assert!(bands.len() <= 50 / (MIN_BAND_ROWS + BAND_GAP) as usize + 1);
        let last = bands.last().unwrap();
        assert!(last.row0 + last.rows <= 50);
        // Still in address order and covering every page.
        assert_eq!(bands[0].lo, 0);
        assert_eq!(last.hi, (99 * 1000 + 1) << PAGE_SHIFT);
        // A single row lane still works.
        let one = fold(spans(pages(&[(1, "a"), (5000, "b")])), 1);
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].row0, one[0].rows), (0, 1));
    }

    #[test]
    fn time_columns() {
        assert_eq!(col_of(0, 1000, 100), 0);
        assert_eq!(col_of(9, 1000, 100), 0);
        assert_eq!(col_of(10, 1000, 100), 1);
        assert_eq!(col_of(999, 1000, 100), 99);
        assert_eq!(col_of(5000, 1000, 100), 99);
        assert_eq!(col_of(3, 0, 100), 99);
        assert_eq!(col_of(u64::MAX, u64::MAX, 100), 99);
    }
}
