// SPDX-License-Identifier: GPL-2.0-or-later
//! The second pass: every event binned into its lane's [`Grid`]. The
//! parallel phase turns addresses into lane rows (the bands are known from
//! the survey) and merges runs of events on the same row; the serial phase
//! keeps the time and adds to the grid.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use cannoli::{Cannoli, ClientInfo};

use crate::grid::{Access, Grid};
use crate::layout::{band_of, col_of, Band};

/// Per stream: its bands and grid size, set before the pass.
pub struct LaneSetup {
    pub bands: Vec<Band>,
    pub rows: u32,
}

/// One paint pass: its geometry, set before it, and the grids it fills.
/// The pass is started with it ([`cannoli::Recording::replay_with`]) and
/// every [`Painter`] reaches it through its `PidContext` (it is the
/// `PidContext`): a value per pass rather than module statics, so that two
/// pictures can be drawn in one process, one after the other or at once.
pub struct Paint {
    /// Per stream: its bands and rows (a stream not here is not drawn).
    pub setup: HashMap<u64, LaneSetup>,
    /// Plot columns.
    pub cols: u32,
    /// The time axis's end.
    pub time_total: u64,
    /// The time axis counts loads and stores (no instructions recorded).
    pub in_accesses: bool,
    /// Count `regs`/`branch` events as instructions (as the survey did).
    pub fetch_from_regs: bool,
    /// Grids, filled as streams end.
    grids: Mutex<BTreeMap<u64, Grid>>,
}

impl Paint {
    pub fn new(
        setup: HashMap<u64, LaneSetup>,
        cols: u32,
        time_total: u64,
        in_accesses: bool,
        fetch_from_regs: bool,
    ) -> Paint {
        Paint {
            setup,
            cols,
            time_total,
            in_accesses,
            fetch_from_regs,
            grids: Mutex::new(BTreeMap::new()),
        }
    }

    /// The grids painted (once the pass has returned: every stream ended).
    pub fn take_grids(&self) -> BTreeMap<u64, Grid> {
        std::mem::take(&mut *self.grids.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Adds a finished stream's grid (merged with one of the same stream).
    fn keep(&self, stream: u64, g: Grid) {
        let mut grids = self.grids.lock().unwrap_or_else(|p| p.into_inner());
        match grids.get_mut(&stream) {
            Some(old) => old.merge(&g),
            None => {
                grids.insert(stream, g);
            }
        }
    }
}

/// No row: the address is in no band (the time still counts).
const NO_ROW: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
pub struct Item {
    row: u32,
    kind: Access,
    n: u32,
}

pub struct Lane {
    bands: Vec<Band>,
}

#[inline(always)]
fn row(lane: &Lane, addr: u64) -> u32 {
    band_of(&lane.bands, addr).map_or(NO_ROW, |b| b.row_of(addr))
}

#[inline(always)]
fn push(t: &mut Vec<Item>, row: u32, kind: Access, n: u32) {
    if let Some(l) = t.last_mut() {
        if l.row == row && l.kind == kind && l.n <= u32::MAX - n {
            l.n += n;
            return;
        }
    }
    t.push(Item { row, kind, n });
}

pub struct Painter {
    /// The pass, to hand the grid to when the stream ends (`None`: kept by
    /// no one, in unit tests).
    run: Option<Arc<Paint>>,
    stream: u64,
    grid: Grid,
    /// Time: events so far; the column of `t`, and the first time of the
    /// next column (so that a column is computed by division only when
    /// the time crosses into it).
    t: u64,
    col: u32,
    next: u64,
    total: u64,
    in_accesses: bool,
}

impl Painter {
    /// Moves the time to `t`.
    #[inline(always)]
    fn set_time(&mut self, t: u64) {
        self.t = t;
        if t >= self.next {
            self.col = col_of(t, self.total, self.grid.cols);
            self.next = first_time_of(self.col + 1, self.total, self.grid.cols);
        }
    }

    /// `n` events at the current time on `row`, spanning `n` time units
    /// if they count as time.
    #[inline(always)]
    fn advance(&mut self, row: u32, kind: Access, n: u32, counts: bool) {
        if !counts {
            if row != NO_ROW {
                self.grid.add(self.col, row, kind, n);
            }
            return;
        }
        let c0 = self.col;
        self.set_time(self.t + n as u64 - 1);
        if row != NO_ROW {
            self.grid.add_span(c0, self.col, row, kind, n as u64);
        }
        self.set_time(self.t + 1);
    }
}

/// The first time whose column is `col` or more: `ceil(col * total /
/// width)` (`u64::MAX` past the last column).
fn first_time_of(col: u32, total: u64, width: u32) -> u64 {
    if col >= width {
        return u64::MAX;
    }
    let w = width.max(1) as u128;
    ((col as u128 * total.max(1) as u128).div_ceil(w)) as u64
}

impl Cannoli for Painter {
    type Trace = Item;
    type TidContext = Lane;
    type PidContext = Paint;

    fn init_pid(ci: &ClientInfo) -> Arc<Paint> {
        ci.expect_state::<Paint>()
    }

    fn init_tid(run: &Paint, ci: &ClientInfo) -> (Painter, Lane) {
        let (bands, rows) = run
            .setup
            .get(&ci.stream)
            .map_or((Vec::new(), 0), |l| (l.bands.clone(), l.rows));
        (
            Painter {
                run: Some(ci.expect_state::<Paint>()),
                stream: ci.stream,
                grid: Grid::new(if rows == 0 { 0 } else { run.cols }, rows),
                t: 0,
                col: 0,
                next: 0,
                total: run.time_total,
                in_accesses: run.in_accesses,
            },
            Lane { bands },
        )
    }

    fn exec(_: &Paint, l: &Lane, pc: u64, t: &mut Vec<Item>) {
        push(t, row(l, pc), Access::Fetch, 1)
    }

    fn exec_run(_: &Paint, l: &Lane, pcs: &[u64], t: &mut Vec<Item>) {
        // The run's first pc stands for the whole run (a few instructions
        // in a row, a pixel at most apart): one lookup per run.
        if let Some(&a) = pcs.first() {
            push(t, row(l, a), Access::Fetch, pcs.len() as u32);
        }
    }

    fn regs(run: &Paint, l: &Lane, pc: u64, _: &[u8], t: &mut Vec<Item>) {
        if run.fetch_from_regs {
            push(t, row(l, pc), Access::Fetch, 1)
        }
    }

    fn branch(run: &Paint, l: &Lane, pc: u64, _: bool, _: &[u8], t: &mut Vec<Item>) {
        if run.fetch_from_regs {
            push(t, row(l, pc), Access::Fetch, 1)
        }
    }

    fn read(_: &Paint, l: &Lane, _: u64, addr: u64, _: u64, _: u8, t: &mut Vec<Item>) {
        push(t, row(l, addr), Access::Load, 1)
    }

    fn write(_: &Paint, l: &Lane, _: u64, addr: u64, _: u64, _: u8, t: &mut Vec<Item>) {
        push(t, row(l, addr), Access::Store, 1)
    }

    fn trace(&mut self, _: &Paint, _: &Lane, trace: &[Item]) {
        if self.grid.rows == 0 {
            return;
        }
        if self.next == 0 {
            self.set_time(0);
        }
        let acc = self.in_accesses;
        for it in trace {
            match it.kind {
                Access::Fetch => self.advance(it.row, it.kind, it.n, !acc),
                _ => self.advance(it.row, it.kind, it.n, acc),
            }
        }
    }
}

impl Drop for Painter {
    fn drop(&mut self) {
        if self.grid.rows == 0 {
            return;
        }
        if let Some(run) = self.run.take() {
            let g = std::mem::replace(&mut self.grid, Grid::new(0, 0));
            run.keep(self.stream, g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_by_boundaries_are_columns_by_division() {
        for (total, width) in [
            (1000u64, 100u32),
            (7, 100),
            (123_457, 1386),
            (1, 3),
            (u64::MAX / 3, 999),
        ] {
            let mut p = Painter {
                run: None,
                stream: 0,
                grid: Grid::new(width, 1),
                t: 0,
                col: 0,
                next: 0,
                total,
                in_accesses: false,
            };
            p.set_time(0);
            let mut t = 0u64;
            for step in [1u64, 2, 3, 5, 8, 13, 21, 34, 55, 89, 1000, 12345]
                .iter()
                .cycle()
                .take(400)
            {
                t = t.saturating_add(*step);
                if t > total.saturating_mul(2) {
                    break;
                }
                p.set_time(t);
                assert_eq!(
                    p.col,
                    col_of(t, total, width),
                    "t {t} total {total} width {width}"
                );
            }
        }
    }

    #[test]
    fn runs_spread_over_their_columns() {
        let mut p = Painter {
            run: None,
            stream: 0,
            grid: Grid::new(10, 2),
            t: 0,
            col: 0,
            next: 0,
            total: 100,
            in_accesses: false,
        };
        p.trace(
            &Paint::new(HashMap::new(), 10, 100, false, false),
            &Lane { bands: Vec::new() },
            &[
                Item {
                    row: 1,
                    kind: Access::Fetch,
                    n: 25,
                },
                Item {
                    row: 0,
                    kind: Access::Store,
                    n: 2,
                },
                Item {
                    row: NO_ROW,
                    kind: Access::Fetch,
                    n: 50,
                },
                Item {
                    row: 0,
                    kind: Access::Load,
                    n: 1,
                },
            ],
        );
        // Instructions 0..25: columns 0, 1, 2 (8 each, at least 1).
        assert_eq!(
            (0..4)
                .map(|c| p.grid.get(c, 1, Access::Fetch))
                .collect::<Vec<_>>(),
            vec![8, 8, 8, 0]
        );
        // The stores after 25 instructions: column 2; the load after 75: 7.
        assert_eq!(p.grid.get(2, 0, Access::Store), 2);
        assert_eq!(p.grid.get(7, 0, Access::Load), 1);
        assert_eq!(p.t, 75);
    }
}
