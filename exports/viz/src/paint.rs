// SPDX-License-Identifier: GPL-2.0-or-later
//! The second pass: every event binned into its lane's [`Grid`]. The
//! parallel phase turns addresses into lane rows (the bands are known from
//! the survey) and merges runs of events on the same row; the serial phase
//! keeps the time and adds to the grid.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cannoli::{Cannoli, ClientInfo};

use crate::grid::{Access, Grid};
use crate::layout::{band_of, col_of, Band};

/// Per stream: its bands and grid size, set before the pass.
pub struct LaneSetup {
    pub bands: Vec<Band>,
    pub rows: u32,
}

pub static SETUP: Mutex<Option<Arc<HashMap<u64, LaneSetup>>>> = Mutex::new(None);
/// Grids, filled as streams end.
pub static GRIDS: Mutex<BTreeMap<u64, Grid>> = Mutex::new(BTreeMap::new());
/// Plot columns and the time axis's end.
pub static COLS: AtomicU64 = AtomicU64::new(1);
pub static TIME_TOTAL: AtomicU64 = AtomicU64::new(1);
/// The time axis counts loads and stores (no instructions recorded).
pub static TIME_IN_ACCESSES: AtomicBool = AtomicBool::new(false);
pub use crate::survey::FETCH_FROM_REGS;

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
    type PidContext = ();

    fn init_pid(_: &ClientInfo) -> Arc<()> {
        Arc::new(())
    }

    fn init_tid(_: &(), ci: &ClientInfo) -> (Painter, Lane) {
        let setup = SETUP.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (bands, rows) = setup
            .as_ref()
            .and_then(|s| s.get(&ci.stream))
            .map_or((Vec::new(), 0), |l| (l.bands.clone(), l.rows));
        let cols = COLS.load(Ordering::Relaxed) as u32;
        (
            Painter {
                stream: ci.stream,
                grid: Grid::new(if rows == 0 { 0 } else { cols }, rows),
                t: 0,
                col: 0,
                next: 0,
                total: TIME_TOTAL.load(Ordering::Relaxed),
                in_accesses: TIME_IN_ACCESSES.load(Ordering::Relaxed),
            },
            Lane { bands },
        )
    }

    fn exec(_: &(), l: &Lane, pc: u64, t: &mut Vec<Item>) {
        push(t, row(l, pc), Access::Fetch, 1)
    }

    fn exec_run(_: &(), l: &Lane, pcs: &[u64], t: &mut Vec<Item>) {
        // The run's first pc stands for the whole run (a few instructions
        // in a row, a pixel at most apart): one lookup per run.
        if let Some(&a) = pcs.first() {
            push(t, row(l, a), Access::Fetch, pcs.len() as u32);
        }
    }

    fn regs(_: &(), l: &Lane, pc: u64, _: &[u8], t: &mut Vec<Item>) {
        if FETCH_FROM_REGS.load(Ordering::Relaxed) {
            push(t, row(l, pc), Access::Fetch, 1)
        }
    }

    fn branch(_: &(), l: &Lane, pc: u64, _: bool, _: &[u8], t: &mut Vec<Item>) {
        if FETCH_FROM_REGS.load(Ordering::Relaxed) {
            push(t, row(l, pc), Access::Fetch, 1)
        }
    }

    fn read(_: &(), l: &Lane, _: u64, addr: u64, _: u64, _: u8, t: &mut Vec<Item>) {
        push(t, row(l, addr), Access::Load, 1)
    }

    fn write(_: &(), l: &Lane, _: u64, addr: u64, _: u64, _: u8, t: &mut Vec<Item>) {
        push(t, row(l, addr), Access::Store, 1)
    }

    fn trace(&mut self, _: &(), _: &Lane, trace: &[Item]) {
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
        let g = std::mem::replace(&mut self.grid, Grid::new(0, 0));
        let mut grids = GRIDS.lock().unwrap_or_else(|p| p.into_inner());
        match grids.get_mut(&self.stream) {
            Some(old) => old.merge(&g),
            None => {
                grids.insert(self.stream, g);
            }
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
            // Not handed to GRIDS when dropped.
            p.grid = Grid::new(0, 0);
        }
    }

    #[test]
    fn runs_spread_over_their_columns() {
        let mut p = Painter {
            stream: 0,
            grid: Grid::new(10, 2),
            t: 0,
            col: 0,
            next: 0,
            total: 100,
            in_accesses: false,
        };
        p.trace(
            &(),
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
        p.grid = Grid::new(0, 0);
    }
}
