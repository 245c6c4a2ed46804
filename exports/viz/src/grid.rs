// SPDX-License-Identifier: GPL-2.0-or-later
//! The accumulation grid of one lane: events counted per pixel (plot column
//! by lane row) and per kind, as they stream by. Its size is fixed by the
//! picture, not by the recording.

/// What an event is, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Access {
    Fetch = 0,
    Load = 1,
    Store = 2,
}

pub const KINDS: usize = 3;

#[derive(Debug, Clone)]
pub struct Grid {
    pub cols: u32,
    pub rows: u32,
    /// `(row * cols + col) * KINDS + kind`.
    counts: Vec<u32>,
}

impl Grid {
    pub fn new(cols: u32, rows: u32) -> Grid {
        Grid {
            cols,
            rows,
            counts: vec![0; cols as usize * rows as usize * KINDS],
        }
    }

    #[inline]
    fn at(&mut self, col: u32, row: u32, kind: Access) -> &mut u32 {
        let i = (row as usize * self.cols as usize + col as usize) * KINDS + kind as usize;
        &mut self.counts[i]
    }

    /// Adds `n` events of `kind` at one pixel.
    #[inline]
    pub fn add(&mut self, col: u32, row: u32, kind: Access, n: u32) {
        if col < self.cols && row < self.rows {
            let c = self.at(col, row, kind);
            *c = c.saturating_add(n);
        }
    }

    /// Adds `n` events of `kind` spread over the columns `c0..=c1` of one
    /// row (a run of instructions whose time spans several columns): each
    /// column gets its share, at least 1.
    pub fn add_span(&mut self, c0: u32, c1: u32, row: u32, kind: Access, n: u64) {
        if c1 <= c0 {
            self.add(c0, row, kind, n.min(u32::MAX as u64) as u32);
            return;
        }
        let per = (n / (c1 - c0 + 1) as u64).clamp(1, u32::MAX as u64) as u32;
        for c in c0..=c1.min(self.cols.saturating_sub(1)) {
            self.add(c, row, kind, per);
        }
    }

    pub fn get(&self, col: u32, row: u32, kind: Access) -> u32 {
        let i = (row as usize * self.cols as usize + col as usize) * KINDS + kind as usize;
        self.counts[i]
    }

    /// The largest count of each kind (for the shading).
    pub fn max(&self) -> [u32; KINDS] {
        let mut m = [0; KINDS];
        for px in self.counts.chunks_exact(KINDS) {
            for k in 0..KINDS {
                m[k] = m[k].max(px[k]);
            }
        }
        m
    }

    /// What a pixel shows: stores over loads over fetches (so a store is
    /// never hidden by the instruction that made it), with the count of
    /// that kind; `None` for an empty pixel.
    pub fn shown(&self, col: u32, row: u32) -> Option<(Access, u32)> {
        [Access::Store, Access::Load, Access::Fetch]
            .into_iter()
            .map(|k| (k, self.get(col, row, k)))
            .find(|&(_, n)| n > 0)
    }

    /// Adds another grid of the same size.
    pub fn merge(&mut self, other: &Grid) {
        assert_eq!((self.cols, self.rows), (other.cols, other.rows));
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(*b);
        }
    }
}

/// The colour of a pixel showing `n` events of a kind whose busiest pixel
/// has `max`: the kind's colour blended toward the background, from 45 %
/// (one event) to full (the busiest), on a log scale.
pub fn shade(color: [u8; 3], background: [u8; 3], n: u32, max: u32) -> [u8; 3] {
    let f = if max <= 1 {
        1.0
    } else {
        ((1.0 + n as f64).ln() / (1.0 + max as f64).ln()).clamp(0.0, 1.0)
    };
    let a = 0.45 + 0.55 * f;
    let mut out = [0; 3];
    for i in 0..3 {
        out[i] = (background[i] as f64 * (1.0 - a) + color[i] as f64 * a).round() as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binning() {
        let mut g = Grid::new(10, 4);
        g.add(3, 1, Access::Load, 2);
        g.add(3, 1, Access::Load, 5);
        g.add(3, 1, Access::Fetch, 1);
        g.add(10, 0, Access::Store, 1); // outside: ignored
        g.add(0, 4, Access::Store, 1);
        assert_eq!(g.get(3, 1, Access::Load), 7);
        assert_eq!(g.shown(3, 1), Some((Access::Load, 7)));
        g.add(3, 1, Access::Store, 1);
        assert_eq!(g.shown(3, 1), Some((Access::Store, 1)));
        assert_eq!(g.shown(2, 1), None);
        // A run over columns 4..=7: 10 instructions, 2 each (at least 1).
        g.add_span(4, 7, 2, Access::Fetch, 10);
        assert_eq!(
            (4..8)
                .map(|c| g.get(c, 2, Access::Fetch))
                .collect::<Vec<_>>(),
            vec![2, 2, 2, 2]
        );
        g.add_span(8, 12, 2, Access::Fetch, 1);
        assert_eq!(g.get(9, 2, Access::Fetch), 1);
        assert_eq!(g.max(), [2, 7, 1]);
        let mut h = Grid::new(10, 4);
        h.merge(&g);
        h.merge(&g);
        assert_eq!(h.get(3, 1, Access::Load), 14);
    }

    #[test]
    fn shading_keeps_the_hue() {
        let c = [225, 30, 30];
        let bg = [255, 255, 255];
        assert_eq!(shade(c, bg, 100, 100), c);
        let light = shade(c, bg, 1, 1000);
        assert!(
            light[0] > light[1] + 60 && light[1] == light[2],
            "{light:?}"
        );
    }
}
