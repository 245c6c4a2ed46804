// SPDX-License-Identifier: GPL-2.0-or-later
//! What every guest process of a heap run shares: the plan, the output,
//! the totals and the allocations table, and how findings and rows are
//! written to them.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::{Arc, Mutex};

use super::super::backtrace::symbols::Functions;
use super::super::probe::elf::Image;
use super::super::probe::plan::Plan;
use super::alloc::Role;
use super::blocks::Block;
use super::report::{Finding, Summary};
#[cfg(doc)]
use super::rows;
use super::rows::{Allocations, Row};
#[cfg(doc)]
use super::run::main;
use super::sig;
use super::suppress::{self, Suppressions};
use super::tracer::{self, lock};

/// `[start, end)` address ranges, shared.
pub type Ranges = Arc<[(u64, u64)]>;

/// What every guest process of a run shares: the plan, the output and
/// the totals. Made by [`main`], handed to the run.
pub struct Run {
    pub plan: Arc<Plan>,
    /// The role of each of the plan's targets.
    pub roles: Vec<Role>,
    /// The C library's string functions in a stripped static program,
    /// `[start, end)` at link time, found by their code ([`sig`]).
    pub strings: Vec<(u64, u64)>,
    /// The string functions of each shared C library a process mapped, by
    /// path, found by their code when a load past a block's end is first
    /// made in one ([`Run::library_strings`]).
    pub(super) library_strings: Mutex<HashMap<Arc<str>, Ranges>>,
    /// Programs other than the plan's that a process exec'd and that went
    /// unchecked, each said once.
    pub unchecked: Mutex<HashSet<String>>,
    pub(super) json: bool,
    /// `--suppressions`: findings left out.
    pub(super) suppressions: Suppressions,
    /// `--gen-suppressions`: the program, whose name a suppression's
    /// `obj:` line gives for a frame of its own sections.
    pub(super) gen_suppressions: Option<std::path::PathBuf>,
    pub(super) out: Mutex<Option<launch::Output>>,
    pub summary: Mutex<Summary>,
    pub tables: Mutex<HashMap<String, Option<Arc<Functions>>>>,
    pub threads: Mutex<HashSet<i32>>,
    /// The parallel phase folds far loads and stores into segments
    /// ([`tracer::fold_segments`]).
    pub fold: bool,
    /// The allocations table's writer (`--parquet`); taken away by the
    /// first error, which waits in `rows_error` for the end of the run.
    pub(super) rows: Mutex<Option<Box<dyn Allocations>>>,
    pub(super) rows_error: Mutex<Option<String>>,
    /// Forked children's copies of their parents' state.
    pub forks: Mutex<tracer::Forks>,
    /// A live run (not `--replay`): a thread whose events wait long for
    /// a number of the process's order waits for it (`tracer`'s order).
    pub live: bool,
}

impl Run {
    /// The suppression that leaves `f` out, as the summary names it.
    pub fn suppressed(&self, f: &Finding) -> Option<Arc<str>> {
        self.suppressions
            .matching(f)
            .map(|s| format!("{} ({})", s.name, s.at).into())
    }

    /// Writes one finding (and, with `--gen-suppressions`, a suppression
    /// of it); after a write error nothing more is written.
    pub fn emit(&self, f: &Finding) {
        let mut text = String::new();
        let supp = self
            .gen_suppressions
            .as_ref()
            .map(|p| suppress::generate(f, p));
        if self.json {
            let mut v = f.json();
            if let Some(s) = supp {
                v["suppression"] = s.into();
            }
            text = v.to_string();
            text.push('\n');
        } else {
            f.text(&mut text);
            if let Some(s) = supp {
                text.push_str(&s);
            }
        }
        if let Some(w) = lock(&self.out).as_mut().filter(|w| w.is_writing()) {
            let _ = w.write_all(text.as_bytes());
        }
    }

    /// Hands a block whose story ended (see [`rows`]) to the allocations
    /// table, if one is written.
    pub fn record(&self, pid: i32, block: &Block, leaked: Option<bool>) {
        let mut sink = lock(&self.rows);
        let Some(w) = sink.as_mut() else {
            return;
        };
        let name = |t: usize| self.plan.targets.get(t).map_or("?", |t| t.name.as_str());
        let row = Row {
            pid,
            block,
            function: name(block.target),
            free_function: block.freed.as_ref().map(|f| name(f.target)),
            leaked,
        };
        if let Err(e) = w.row(&row) {
            *lock(&self.rows_error) = Some(e);
            *sink = None;
        }
    }

    /// The string functions of the shared C library at `path`, `[start,
    /// end)` at its link-time addresses, found by the code of the C
    /// library's archive ([`sig::string_funcs`]) once per run; none where
    /// the file or the archive cannot be read. Asked only on the cold path
    /// of a bad access.
    pub fn library_strings(&self, path: &Arc<str>) -> Ranges {
        if let Some(r) = lock(&self.library_strings).get(path) {
            return r.clone();
        }
        let found: Ranges = Image::read(std::path::Path::new(&**path))
            .ok()
            .and_then(|img| sig::string_funcs(&img).ok())
            .map(|f| f.iter().map(|f| (f.start, f.end)).collect())
            .unwrap_or_default();
        lock(&self.library_strings).insert(path.clone(), found.clone());
        found
    }

    /// Closes the allocations table; an error of it or of any row.
    pub(super) fn finish_rows(&self) -> Result<(), String> {
        let sink = lock(&self.rows).take();
        if let Some(e) = lock(&self.rows_error).take() {
            return Err(e);
        }
        sink.map_or(Ok(()), |w| w.finish().map(|_| ()))
    }
}
