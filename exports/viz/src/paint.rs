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
    t: u64,
    total: u64,
    in_accesses: bool,
}

impl Painter {
    #[inline(always)]
    fn col(&self, t: u64) -> u32 {
        col_of(t, self.total, self.grid.cols)
    }

    /// `n` events at the current time on `row`, spanning `n` time units
    /// if they count as time.
    #[inline(always)]
    fn advance(&mut self, row: u32, kind: Access, n: u32, counts: bool) {
        if !counts {
            if row != NO_ROW {
                let c = self.col(self.t);
                self.grid.add(c, row, kind, n);
            }
            return;
        }
        if row != NO_ROW {
            let c0 = self.col(self.t);
            let c1 = self.col(self.t + n as u64 - 1);
            self.grid.add_span(c0, c1, row, kind, n as u64);
        }
        self.t += n as u64;
    }
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
        let (Some(&a), Some(&b)) = (pcs.first(), pcs.last()) else {
            return;
        };
        let ra = row(l, a);
        if ra == row(l, b) {
            push(t, ra, Access::Fetch, pcs.len() as u32);
        } else {
            for &pc in pcs {
                push(t, row(l, pc), Access::Fetch, 1);
            }
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
