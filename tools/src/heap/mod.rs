// SPDX-License-Identifier: GPL-2.0-or-later
//! `cannoli heap`: use after free, heap overflows, double and invalid
//! frees and leaks of a program QEMU runs, on every guest, without its
//! source and without relinking it, with memcheck's kind of report.
//!
//! ```text
//! cannoli heap ./prog args...                  # findings on stderr
//! cannoli heap --json -o findings.jsonl ./prog # one JSON object a line
//! cannoli heap --alloc my_alloc=malloc --alloc my_free=free ./prog
//! cannoli heap --replay run.cnl                # cannoli record --hooks regs
//! cannoli heap --parquet out ./prog            # + out/allocations/*.parquet
//! ```
//!
//! Why this way: valgrind does not run most foreign-architecture guests,
//! ASan needs the source, and QASan works only inside a fuzzing run. The
//! allocation functions are interposed at lift time, as liballocs wants
//! it done at run time: they are `cannoli probe`'s probe points
//! ([`alloc`] picks them from the ELF symbol tables of the program and its
//! C and C++ libraries, [`sig`] by their code in the C library's archive
//! where a static program is stripped; `probe`'s plan places them, also in a
//! position-independent program or a shared library), with their
//! arguments at entry and their results at return by each guest's calling
//! convention. Every load and store is then checked against the blocks
//! ([`blocks`]), leaks are found at exit by scanning the memory the trace
//! showed ([`leaks`]), and each finding gets its call stack from the
//! backtrace machinery ([`tracer`]), written as memcheck or as JSON
//! ([`report`]). The summary at the end has the totals memcheck gives
//! ("total heap usage"), the peak of live bytes and when it was reached,
//! live bytes over the run, and the sites that allocated most; `--parquet`
//! writes every block as a row of the allocations table ([`rows`]), for
//! the SQL questions a summary cannot foresee.
//!
//! Exit status: [`FOUND_EXIT`] when anything was found (memcheck's
//! `--error-exitcode`), [`cannoli::EXIT_INCOMPLETE`] when events were
//! lost (then the check is incomplete, whatever it found), else the
//! program's own.

pub mod alloc;
pub mod blocks;
pub mod leaks;
pub mod parallel;
pub mod report;
pub mod rows;
pub mod sig;
pub mod tracer;

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cannoli::recording::{Needs, RegsAt};

use super::backtrace::symbols::Functions;
use super::probe::elf::Image;
use super::probe::plan::Plan;
use alloc::Role;
use blocks::Block;
use report::{Finding, Summary};
use rows::{Allocations, Row};
use tracer::lock;

/// The exit status when something was found.
pub const FOUND_EXIT: i32 = 99;

/// The variable the hook library reads its plan's file name from.
pub const PLAN_ENV: &str = "CANNOLI_HEAP_PLAN";

/// One line for `--help` and the `cannoli` command's list.
pub const ABOUT: &str =
    "Heap errors and leaks (use after free, overflows, double and invalid frees) on every guest, as memcheck reports them";

/// The command line of `heap`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// A custom allocation function (repeatable): NAME=malloc, calloc,
    /// realloc or free (its arguments as those have them); in code no
    /// symbol names, ADDR+SIZE=ROLE (the function's link-time address and
    /// size in bytes: 0x4012a0+72=malloc)
    #[arg(long = "alloc", value_name = "NAME=ROLE", value_parser = alloc::parse_alloc)]
    pub allocs: Vec<(String, Role)>,
    /// One JSON object per finding, and a summary object last
    #[arg(long)]
    pub json: bool,
    /// Write the findings to FILE (default: stderr)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Worker threads per guest thread: by default one per core beyond QEMU's thread, 2 to 16
    #[arg(long, value_name = "N", default_value_t = cannoli::default_workers(), value_parser = crate::args::threads)]
    pub threads: usize,
    /// Read a recording made by `cannoli record --hooks regs` instead of
    /// running a program
    #[arg(long, value_name = "FILE", conflicts_with = "program")]
    pub replay: Option<PathBuf>,
    /// Write every block the run allocated, freed or not, to
    /// DIR/allocations/part-00000.parquet (the layout of `cannoli export
    /// parquet`)
    #[arg(long, value_name = "DIR")]
    pub parquet: Option<PathBuf>,
    /// The program to run under the patched QEMU, and its arguments
    #[arg(value_name = "PROGRAM", trailing_var_arg = true)]
    pub program: Vec<OsString>,
}

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
    library_strings: Mutex<HashMap<Arc<str>, Ranges>>,
    /// Programs other than the plan's that a process exec'd and that went
    /// unchecked, each said once.
    pub unchecked: Mutex<HashSet<String>>,
    json: bool,
    out: Mutex<Option<launch::Output>>,
    pub summary: Mutex<Summary>,
    pub tables: Mutex<HashMap<String, Option<Arc<Functions>>>>,
    pub threads: Mutex<HashSet<i32>>,
    /// The parallel phase folds far loads and stores into segments
    /// ([`tracer::fold_segments`]).
    pub fold: bool,
    /// The allocations table's writer (`--parquet`); taken away by the
    /// first error, which waits in `rows_error` for the end of the run.
    rows: Mutex<Option<Box<dyn Allocations>>>,
    rows_error: Mutex<Option<String>>,
    /// Forked children's copies of their parents' state.
    pub forks: Mutex<tracer::Forks>,
    /// A live run (not `--replay`): a thread whose events wait long for
    /// a number of the process's order waits for it (`tracer`'s order).
    pub live: bool,
}

impl Run {
    /// Writes one finding; after a write error nothing more is written.
    pub fn emit(&self, f: &Finding) {
        let mut text = String::new();
        if self.json {
            text = f.json().to_string();
            text.push('\n');
        } else {
            f.text(&mut text);
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
    fn finish_rows(&self) -> Result<(), String> {
        let sink = lock(&self.rows).take();
        if let Some(e) = lock(&self.rows_error).take() {
            return Err(e);
        }
        sink.map_or(Ok(()), |w| w.finish().map(|_| ()))
    }
}

fn image(args: &Args) -> Result<Image, String> {
    let program =
        match &args.replay {
            Some(r) => {
                let rec = cannoli::Recording::open(r).map_err(|e| e.to_string())?;
                let exe =
                    rec.info().command.first().cloned().ok_or_else(|| {
                        format!("{}: the recording names no program", r.display())
                    })?;
                OsString::from(exe)
            }
            None => args
                .program
                .first()
                .cloned()
                .ok_or("no program; give one: cannoli heap ./prog args")?,
        };
    let path = launch::find::resolve_program(&program).map_err(|e| e.to_string())?;
    Image::read(&path).map_err(|e| e.to_string())
}

/// The line saying which allocation functions of a stripped program were
/// found by their code, and where (what the probes are planned at).
fn found_line(img: &Image, found: &sig::Found) -> String {
    let list: Vec<String> = found
        .funcs
        .iter()
        .map(|(f, _)| format!("{} {:#x}", f.name, f.start))
        .collect();
    format!(
        "{} has no symbols; {} of {} allocation functions found by their code in {}: {}",
        img.path.display(),
        found.funcs.len(),
        found.tried,
        found.archive.display(),
        list.join(", ")
    )
}

/// Runs heap; returns the exit status. Without a Parquet writer:
/// `--parquet` is refused (the `cannoli` command has one, [`main_with`]).
pub fn main(args: Args) -> i32 {
    if args.parquet.is_some() {
        eprintln!("heap: this program cannot write Parquet; use `cannoli heap --parquet DIR`");
        return 2;
    }
    main_with(args, None)
}

/// Runs heap with `rows`, the writer of the allocations table that
/// `--parquet` asked for (opened by the caller: the Parquet tables have
/// their own crate, see [`rows`]); returns the exit status.
pub fn main_with(args: Args, rows: Option<Box<dyn Allocations>>) -> i32 {
    let mut strings = Vec::new();
    let mut custom = Vec::new();
    let plan = image(&args).and_then(|mut img| {
        let c = alloc::custom(&img, &args.allocs)?;
        img.add_funcs(c.funcs);
        custom = c.named;
        let (mut specs, mut missing) = alloc::specs(&img, &custom)?;
        if specs.is_empty() && img.is_go() {
            // Go's heap is the runtime's, garbage collected: nothing frees
            // a block, so there is nothing of malloc's to check (cgo links
            // the C library, whose malloc the plan finds above).
            eprintln!(
                "heap: warning: {} is a Go program: its heap is the Go runtime's \
                 (runtime.mallocgc, garbage collected), not malloc's: nothing is checked",
                img.path.display()
            );
        } else if specs.is_empty() {
            // A stripped static program: its C library's code finds them.
            // Its string functions are looked for at the same time, on a
            // core of their own: each search reads and matches the whole
            // archive, before the program can start.
            let (discovered, string_funcs) = std::thread::scope(|s| {
                let strings = s.spawn(|| sig::string_funcs(&img));
                let found = sig::discover(&img, &custom);
                (found, strings.join())
            });
            let tried = match discovered {
                Ok(found) if found.usable() => {
                    eprintln!("heap: {}", found_line(&img, &found));
                    img.add_funcs(found.funcs.into_iter().map(|(f, _)| f).collect());
                    // Not found: their over-reads are reported, as before.
                    if let Ok(Ok(s)) = string_funcs {
                        strings = s.iter().map(|f| (f.start, f.end)).collect();
                    }
                    (specs, missing) = alloc::specs(&img, &custom)?;
                    String::new()
                }
                Ok(found) => format!(
                    "; by their code in {}, {} of {} functions were found, not both malloc and free",
                    found.archive.display(),
                    found.funcs.len(),
                    found.tried
                ),
                Err(why) => format!("; not looked for by their code: {why}"),
            };
            if specs.is_empty() {
                eprintln!(
                    "heap: warning: {} has no allocation function (malloc, free, ...) in its \
                     symbol tables (stripped?){tried}: nothing is checked; name them with \
                     --alloc NAME=malloc",
                    img.path.display()
                );
            }
        }
        if let Some(name) = missing {
            return Err(alloc::unknown(&img, &name));
        }
        let mut plan = Plan::new(&img, specs, false, false).map_err(|e| e.to_string())?;
        // Away from the allocation functions, registers only for the call
        // stacks: three where a guest has up to 32.
        plan.narrow = Some(tracer::narrowed_registers(plan.abi));
        // And at most block starts none (a loop's back edge, landing at
        // the stack pointer it left).
        (plan.quiet, plan.quiet_words) = tracer::quiet_sp(plan.abi);
        Ok(plan)
    });
    let plan = match plan {
        Ok(p) => Arc::new(p),
        Err(e) => {
            eprintln!("heap: {e}");
            return 2;
        }
    };
    let roles = plan
        .targets
        .iter()
        .map(|t| alloc::role_of(&custom, &t.name).unwrap_or(Role::Internal))
        .collect();
    let out = match &args.output {
        Some(path) => match launch::Output::create(path, "the findings") {
            Ok(w) => w,
            Err(e) => {
                eprintln!("heap: {e}");
                return 1;
            }
        },
        None => launch::Output::stderr("the findings"),
    };
    // The hook library's plan, a new file of this run, named to QEMU alone.
    let plan_file = match args
        .replay
        .is_none()
        .then(|| crate::scratch::Scratch::plan("heap", &plan.hooks()))
        .transpose()
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let run = Arc::new(Run {
        plan,
        roles,
        strings,
        library_strings: Mutex::new(HashMap::new()),
        unchecked: Mutex::new(HashSet::new()),
        json: args.json,
        out: Mutex::new(Some(out)),
        summary: Mutex::new(Summary::default()),
        tables: Mutex::new(HashMap::new()),
        threads: Mutex::new(HashSet::new()),
        fold: tracer::fold_segments(args.threads),
        rows: Mutex::new(rows),
        rows_error: Mutex::new(None),
        forks: Mutex::new(tracer::Forks::default()),
        live: args.replay.is_none(),
    });
    let mut launcher = launch::Launcher::new(launch::Options {
        hooks: "heap",
        threads: args.threads,
    })
    .state(run.clone());
    if let Some(f) = &plan_file {
        launcher = launcher.qemu_env(PLAN_ENV, f.path());
    }
    let needs = Needs {
        regs: Some(RegsAt::All),
        mem: true,
        exec: false,
        // Stacks follow calls and returns, as live.
        branch_flags: true,
        ..Needs::default()
    };
    let result =
        crate::input::run::<tracer::Stream>(launcher, args.replay.as_deref(), needs, args.program);
    drop(plan_file);
    // A child whose parent never applied its fork goes on empty now.
    tracer::settle_forks(&run.forks);
    // Every process has ended and written its last rows.
    let table = run.finish_rows();
    if let Err(e) = &table {
        eprintln!("heap: the allocations table: {e}");
    }
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let written = lock(&run.out).take().expect("finished once").finish();
            if let Err(w) = written {
                w.report("heap");
            }
            eprintln!("heap: {e}");
            return e.exit_code();
        }
    };
    let lost = report.stats.lost_events;
    let summary = lock(&run.summary);
    let text = if args.json {
        format!("{}\n", summary.json(lost))
    } else {
        summary.text(lost)
    };
    if let Some(w) = lock(&run.out).as_mut().filter(|w| w.is_writing()) {
        let _ = w.write_all(text.as_bytes());
    }
    let found = summary.total_found();
    let unordered = (summary.unordered > 0).then(|| summary.unordered_line());
    drop(summary);
    if let Some(line) = &unordered {
        eprintln!("heap: warning: {line}");
    }
    let written = lock(&run.out).take().expect("finished once").finish();
    let code = report.finish_with_output("heap", written);
    if code == cannoli::EXIT_INCOMPLETE || !report.stats.is_complete() || unordered.is_some() {
        cannoli::EXIT_INCOMPLETE
    } else if found > 0 {
        FOUND_EXIT
    } else if table.is_err() && code == 0 {
        1
    } else {
        code
    }
}

#[cfg(test)]
mod tests;
