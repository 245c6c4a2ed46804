// SPDX-License-Identifier: GPL-2.0-or-later
//! How a finding reads: memcheck's and ASan's wording as text, or one JSON
//! object per finding (`--json`), and the summary at the end.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{json, Value};

use super::blocks::{relation, Bad, Block, Kind, Stack};

/// What the bad thing was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Free,
    /// A block still allocated at exit.
    Exit,
}

/// One finding, ready to print.
#[derive(Debug, Clone)]
pub struct Finding {
    pub bad: Bad,
    pub op: Op,
    pub pc: u64,
    /// Bytes accessed (the block's size for a leak, 0 for a free).
    pub size: u64,
    pub pid: i32,
    pub tid: i32,
    pub stack: Stack,
}

fn strings(s: &[Arc<str>]) -> Vec<&str> {
    s.iter().map(|f| &**f).collect()
}

fn empty() -> Stack {
    Arc::from(Vec::new())
}

impl Finding {
    fn alloc_stack(&self) -> Stack {
        self.bad
            .block
            .as_ref()
            .map_or_else(empty, |b| b.alloc_stack.clone())
    }

    fn free_stack(&self) -> Stack {
        self.bad
            .block
            .as_ref()
            .and_then(|b| b.freed.as_ref())
            .map_or_else(empty, |f| f.stack.clone())
    }

    /// The JSON object of `--json`.
    pub fn json(&self) -> Value {
        let hex = |v: u64| format!("{v:#x}");
        json!({
            "kind": self.bad.kind.name(),
            "op": match self.op { Op::Read => "read", Op::Write => "write", Op::Free => "free", Op::Exit => "exit" },
            "pc": hex(self.pc),
            "addr": hex(self.bad.addr),
            "size": self.size,
            "pid": self.pid,
            "tid": self.tid,
            "stack": strings(&self.stack),
            "alloc_stack": strings(&self.alloc_stack()),
            "free_stack": strings(&self.free_stack()),
            "block": self.bad.block.as_ref().map(|b| json!({"addr": hex(b.addr), "size": b.size})),
        })
    }

    /// memcheck's wording.
    pub fn text(&self, s: &mut String) {
        let p = "==heap==";
        let b = &self.bad;
        let what = match (b.kind, self.op) {
            (Kind::Leak, _) => format!(
                "{} bytes in 1 blocks are definitely lost (block {:#x})",
                self.size, b.addr
            ),
            (Kind::DoubleFree | Kind::InvalidFree, _) | (_, Op::Free) => {
                "Invalid free() / delete / delete[] / realloc()".to_string()
            }
            (_, Op::Write) => format!("Invalid write of size {}", self.size),
            _ => format!("Invalid read of size {}", self.size),
        };
        let _ = writeln!(
            s,
            "{p} {}: {what} (thread {}, process {})",
            b.kind.name(),
            self.tid,
            self.pid
        );
        let _ = writeln!(
            s,
            "{p}    at {:#x} in {}",
            self.pc,
            self.stack.first().map_or("?", |f| &**f)
        );
        for f in self.stack.iter().skip(1) {
            let _ = writeln!(s, "{p}    by {f}");
        }
        if b.kind == Kind::Leak {
            let _ = writeln!(s, "{p}");
            return;
        }
        match &b.block {
            None => {
                let _ = writeln!(
                    s,
                    "{p}  Address {:#x} is not the start of a block the allocator handed out",
                    b.addr
                );
            }
            Some(blk) => describe(s, b.addr, blk),
        }
        let _ = writeln!(s, "{p}");
    }
}

fn frames(s: &mut String, stack: &[Arc<str>]) {
    for (i, f) in stack.iter().enumerate() {
        let w = if i == 0 { "at" } else { "by" };
        let _ = writeln!(s, "==heap==    {w} {f}");
    }
}

fn describe(s: &mut String, addr: u64, b: &Block) {
    let state = if b.freed.is_some() {
        "free'd"
    } else {
        "alloc'd"
    };
    let _ = writeln!(
        s,
        "==heap==  Address {addr:#x} is {} {state}",
        relation(addr, b)
    );
    if let Some(f) = &b.freed {
        frames(s, &f.stack);
        let _ = writeln!(s, "==heap==  Block was alloc'd at");
    }
    frames(s, &b.alloc_stack);
}

/// The totals of a run, over all its processes.
#[derive(Debug, Default)]
pub struct Summary {
    pub allocs: u64,
    pub frees: u64,
    /// Bytes asked for by all allocations (memcheck's "bytes allocated").
    pub bytes: u64,
    pub peak_bytes: u64,
    /// The event (see `timeline`) after which `peak_bytes` were live.
    pub peak_event: u64,
    pub leaked_bytes: u64,
    pub leaked_blocks: u64,
    /// Lost blocks only other lost blocks point at (memcheck's
    /// "indirectly lost"): no finding of their own.
    pub indirect_bytes: u64,
    pub indirect_blocks: u64,
    pub reachable_bytes: u64,
    pub reachable_blocks: u64,
    /// Findings by kind (every occurrence, also those not printed again),
    /// less those suppressed.
    pub found: HashMap<&'static str, u64>,
    /// Suppressed findings (every occurrence) by the suppression that
    /// matched them (`NAME (FILE:LINE)`), and the blocks and bytes of
    /// the leaks among them (memcheck's "suppressed" leak line).
    pub suppressed: BTreeMap<Arc<str>, u64>,
    pub suppressed_bytes: u64,
    pub suppressed_blocks: u64,
    /// Allocations and bytes by site (the allocation's caller).
    pub sites: HashMap<Arc<str>, (u64, u64)>,
    /// Live bytes after each allocation or free: `(event number, bytes)`,
    /// every `stride`-th event.
    pub timeline: Vec<(u64, u64)>,
    pub stride: u64,
    pub events: u64,
    /// Events run before the other thread's event they waited for, because
    /// the process held back too many ([`super::tracer`]'s order), and
    /// allocation calls applied after a later one for the same reason:
    /// findings between threads may then be wrong, so the check is
    /// incomplete.
    pub unordered: u64,
}

impl Summary {
    /// Notes the live bytes after an allocation or free, keeping at most
    /// a few thousand points (the stride doubles when full), and the peak.
    pub fn sample(&mut self, live: u64) {
        self.events += 1;
        if live > self.peak_bytes {
            self.peak_bytes = live;
            self.peak_event = self.events;
        }
        if self.stride == 0 {
            self.stride = 1;
        }
        if self.events % self.stride == 0 {
            self.timeline.push((self.events, live));
            if self.timeline.len() >= 4096 {
                self.stride *= 2;
                let keep: Vec<(u64, u64)> = self
                    .timeline
                    .iter()
                    .copied()
                    .filter(|(e, _)| e % self.stride == 0)
                    .collect();
                self.timeline = keep;
            }
        }
    }

    /// At most `n` points of the timeline, evenly spread, the last one
    /// included: live bytes over the run, short enough for one line.
    pub fn over_time(&self, n: usize) -> Vec<(u64, u64)> {
        let t = &self.timeline;
        if t.len() <= n {
            return t.clone();
        }
        (1..=n).map(|i| t[i * (t.len() - 1) / n]).collect()
    }

    /// What [`Summary::unordered`] means, in one line.
    pub fn unordered_line(&self) -> String {
        format!(
            "{} events ran before the other thread's event they waited for (too many held \
             back): findings between threads may be wrong, the check is incomplete",
            self.unordered
        )
    }

    pub fn total_found(&self) -> u64 {
        self.found.values().sum()
    }

    fn top_sites(&self, n: usize) -> Vec<(&Arc<str>, &(u64, u64))> {
        let mut v: Vec<_> = self.sites.iter().collect();
        v.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// The `{"summary": {...}}` object.
    pub fn json(&self, lost: u64) -> Value {
        let found: serde_json::Map<String, Value> = Kind::ALL
            .iter()
            .map(|k| {
                (
                    k.name().to_string(),
                    json!(self.found.get(k.name()).copied().unwrap_or(0)),
                )
            })
            .collect();
        json!({"summary": {
            "allocations": self.allocs,
            "frees": self.frees,
            "bytes_allocated": self.bytes,
            "peak_live_bytes": self.peak_bytes,
            "peak_event": self.peak_event,
            "events": self.events,
            "leaked_bytes": self.leaked_bytes,
            "leaked_blocks": self.leaked_blocks,
            "indirect_bytes": self.indirect_bytes,
            "indirect_blocks": self.indirect_blocks,
            "reachable_bytes": self.reachable_bytes,
            "reachable_blocks": self.reachable_blocks,
            "findings": found,
            "suppressed": self.suppressed.iter().map(|(l, n)| (l.to_string(), json!(n))).collect::<serde_json::Map<String, Value>>(),
            "suppressed_bytes": self.suppressed_bytes,
            "suppressed_blocks": self.suppressed_blocks,
            "lost_events": lost,
            "unordered_events": self.unordered,
            "top_sites": self.top_sites(10).iter().map(|(s, (n, b))| json!({"site": &***s, "allocations": n, "bytes": b})).collect::<Vec<_>>(),
            "live_bytes": self.timeline.iter().map(|(e, b)| json!([e, b])).collect::<Vec<_>>(),
        }})
    }

    /// The text summary.
    pub fn text(&self, lost: u64) -> String {
        let mut s = String::new();
        let p = "==heap==";
        let _ = writeln!(s, "{p} HEAP SUMMARY:");
        let _ = writeln!(
            s,
            "{p}   total heap usage: {} allocs, {} frees, {} bytes allocated",
            self.allocs, self.frees, self.bytes
        );
        let _ = writeln!(
            s,
            "{p}   peak: {} bytes live after event {} of {} (allocations and frees)",
            self.peak_bytes, self.peak_event, self.events
        );
        let over: Vec<String> = self
            .over_time(8)
            .iter()
            .map(|(e, b)| format!("{e}:{b}"))
            .collect();
        if !over.is_empty() {
            let _ = writeln!(s, "{p}   live bytes by event: {}", over.join(" "));
        }
        let _ = writeln!(
            s,
            "{p}   definitely lost: {} bytes in {} blocks; indirectly lost: {} bytes in {} blocks; still reachable: {} bytes in {} blocks",
            self.leaked_bytes,
            self.leaked_blocks,
            self.indirect_bytes,
            self.indirect_blocks,
            self.reachable_bytes,
            self.reachable_blocks
        );
        if self.suppressed_blocks > 0 {
            let _ = writeln!(
                s,
                "{p}   suppressed: {} bytes in {} blocks",
                self.suppressed_bytes, self.suppressed_blocks
            );
        }
        for (site, (n, b)) in self.top_sites(5) {
            let _ = writeln!(s, "{p}   {b:>10} bytes in {n:>6} allocations from {site}");
        }
        let found: Vec<String> = Kind::ALL
            .iter()
            .filter_map(|k| {
                self.found
                    .get(k.name())
                    .map(|n| format!("{n} {}", k.name()))
            })
            .collect();
        let _ = writeln!(
            s,
            "{p} ERROR SUMMARY: {} findings{}{}",
            self.total_found(),
            if found.is_empty() {
                String::new()
            } else {
                format!(" ({})", found.join(", "))
            },
            if lost > 0 {
                format!("; {lost} events lost: the check is incomplete")
            } else {
                String::new()
            }
        );
        if !self.suppressed.is_empty() {
            let n: u64 = self.suppressed.values().sum();
            let _ = writeln!(s, "{p} suppressed: {n} findings");
            for (label, n) in &self.suppressed {
                let _ = writeln!(s, "{p}   used_suppression: {n:>6} {label}");
            }
        }
        if self.unordered > 0 {
            let _ = writeln!(s, "{p} {}", self.unordered_line());
        }
        s
    }
}
