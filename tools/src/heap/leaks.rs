// SPDX-License-Identifier: GPL-2.0-or-later
//! Leaks at exit, as memcheck classifies them: a block never freed is
//! still reachable when a pointer to its start or inside it remains in
//! memory the trace shows live, indirectly lost when only another lost
//! block points at it, and definitely lost (a finding) otherwise.
//!
//! The memory is what the trace showed: the last value loaded from or
//! stored to each address, by any thread of the process. The roots are
//! every such word outside the heap's blocks (globals, the live part of
//! each stack), not a word the allocator itself accessed last (its
//! bookkeeping: glibc's top chunk pointer points into the last bytes of
//! the block before it, which memcheck, replacing the allocator, never
//! sees), not the stack below a
//! thread's last stack pointer (frames already returned from), nor freed
//! blocks; what a reachable block holds is followed in turn. Of the
//! registers at exit only the `exit_group` call's argument registers are
//! known (a pointer held only in another register counts as lost), nor memory the program never touched (the kernel's initial
//! stack, a file's mapped data: neither can hold a heap pointer the trace
//! did not show being stored).

use super::blocks::{Bad, Kind};
use super::report::{Finding, Op};
use super::tracer::Proc;
use super::Run;

/// Which of `blocks` (`(addr, size)`, sorted by address) no pointer in
/// `words` (`(where, value)`) reaches, directly or through another
/// block. `dead`: ranges whose words are not roots.
/// `mine`: words the allocator accessed last, followed inside a block
/// (realloc copies a block's pointers into the new one) but no root.
pub fn lost(
    blocks: &[(u64, u64)],
    words: &[(u64, u64)],
    mine: &[u64],
    dead: &[(u64, u64)],
) -> Vec<bool> {
    classify(blocks, words, mine, dead, &[]).0
}

/// [`lost`], and which of the lost blocks are only indirectly lost:
/// reached from another lost block, as memcheck tells them (its
/// "definitely lost" are the others: what a program lost a pointer to;
/// a cycle of lost blocks nothing else reaches is led by its block of
/// the lowest address, as memcheck takes blocks in address order).
/// `regs`: register values at exit, roots too.
pub fn classify(
    blocks: &[(u64, u64)],
    words: &[(u64, u64)],
    mine: &[u64],
    dead: &[(u64, u64)],
    regs: &[u64],
) -> (Vec<bool>, Vec<bool>) {
    let find = |v: u64| -> Option<usize> {
        let i = blocks.partition_point(|&(a, _)| a <= v).checked_sub(1)?;
        let (a, s) = blocks[i];
        (v < a.wrapping_add(s) || v == a).then_some(i)
    };
    let mut reached = vec![false; blocks.len()];
    let mut work = Vec::new();
    for b in regs.iter().filter_map(|&v| find(v)) {
        if !reached[b] {
            reached[b] = true;
            work.push(b);
        }
    }
    // Words by block, for following a reachable block's contents.
    let mut inside: Vec<Vec<u64>> = vec![Vec::new(); blocks.len()];
    for &(at, v) in words {
        if let Some(b) = find(at) {
            inside[b].push(v);
            continue;
        }
        if dead.iter().any(|&(lo, hi)| lo <= at && at < hi) || mine.binary_search(&at).is_ok() {
            continue;
        }
        if let Some(b) = find(v) {
            if !reached[b] {
                reached[b] = true;
                work.push(b);
            }
        }
    }
    while let Some(b) = work.pop() {
        for &v in &inside[b] {
            if let Some(c) = find(v) {
                if !reached[c] {
                    reached[c] = true;
                    work.push(c);
                }
            }
        }
    }
    let lost: Vec<bool> = reached.iter().map(|r| !r).collect();
    // Lost blocks another lost block points at (start or inside).
    let mut pointed = vec![false; blocks.len()];
    for (b, vs) in inside.iter().enumerate().filter(|&(b, _)| lost[b]) {
        for c in vs.iter().filter_map(|&v| find(v)) {
            pointed[c] |= c != b;
        }
    }
    // Leaders first (nothing lost points at them), then what is left: the
    // cycles, lowest address first; what a leader reaches is indirect.
    let mut indirect = vec![false; blocks.len()];
    let mut seen = reached;
    let leaders = (0..blocks.len())
        .filter(|&b| lost[b] && !pointed[b])
        .chain((0..blocks.len()).filter(|&b| lost[b]));
    for lead in leaders {
        if seen[lead] {
            continue;
        }
        seen[lead] = true;
        work.push(lead);
        while let Some(b) = work.pop() {
            for c in inside[b].iter().filter_map(|&v| find(v)) {
                if !seen[c] {
                    seen[c] = true;
                    indirect[c] = true;
                    work.push(c);
                }
            }
        }
    }
    (lost, indirect)
}

/// Reports the blocks of `st` definitely lost at the end of process `pid`,
/// adds them to the run's summary, and gives every block still allocated
/// its row of the allocations table with the verdict.
pub fn report(run: &Run, pid: i32, st: &mut Proc, dead: &[(u64, u64)]) {
    let blocks: Vec<(u64, u64)> = st.heap.live().map(|b| (b.addr, b.size)).collect();
    let freed = st.heap.freed_ranges();
    let mut words: Vec<(u64, u64)> = st
        .shadow
        .words(st.word, st.big_endian, true)
        .filter(|&(at, _)| !in_ranges(&freed, at))
        .collect();
    words.sort_unstable();
    let mut theirs: Vec<u64> = st
        .shadow
        .words(st.word, st.big_endian, false)
        .map(|(at, _)| at)
        .collect();
    theirs.sort_unstable();
    let mine: Vec<u64> = words
        .iter()
        .map(|&(at, _)| at)
        .filter(|at| theirs.binary_search(at).is_err())
        .collect();
    let (lost, indirect) = classify(&blocks, &words, &mine, dead, &st.exit_regs);
    let live: Vec<_> = st.heap.live().cloned().collect();
    let mut summary = super::tracer::lock(&run.summary);
    summary.peak_bytes = summary.peak_bytes.max(st.heap.peak_bytes);
    let mut found = Vec::new();
    for ((b, lost), indirect) in live.into_iter().zip(lost).zip(indirect) {
        // The table's `leaked` is memcheck's definitely lost.
        run.record(pid, &b, Some(lost && !indirect));
        if indirect {
            summary.indirect_bytes += b.size;
            summary.indirect_blocks += 1;
        } else if lost {
            let f = Finding {
                op: Op::Exit,
                pc: b.pc,
                size: b.size,
                pid,
                tid: b.tid,
                stack: b.alloc_stack.clone(),
                bad: Bad {
                    kind: Kind::Leak,
                    addr: b.addr,
                    block: Some(b),
                },
            };
            if let Some(label) = run.suppressed(&f) {
                summary.suppressed_bytes += f.size;
                summary.suppressed_blocks += 1;
                *summary.suppressed.entry(label).or_default() += 1;
                continue;
            }
            summary.leaked_bytes += f.size;
            summary.leaked_blocks += 1;
            *summary.found.entry(Kind::Leak.name()).or_default() += 1;
            found.push(f);
        } else {
            summary.reachable_bytes += b.size;
            summary.reachable_blocks += 1;
        }
    }
    drop(summary);
    for f in &found {
        run.emit(f);
    }
}

/// The end of process `pid`'s image by an `execve`: no leak check (memcheck
/// makes none there; a forked child's copy of its parent's blocks would
/// be counted twice), but its peak counts, and every block still
/// allocated gets its row of the allocations table, with no verdict.
pub fn exec_ends(run: &Run, pid: i32, st: &Proc) {
    for b in st.heap.live() {
        run.record(pid, b, None);
    }
    let mut summary = super::tracer::lock(&run.summary);
    summary.peak_bytes = summary.peak_bytes.max(st.heap.peak_bytes);
}

/// Whether `at` lies in one of `ranges` (sorted, not overlapping).
fn in_ranges(ranges: &[(u64, u64)], at: u64) -> bool {
    let i = ranges.partition_point(|&(lo, _)| lo <= at);
    i > 0 && at < ranges[i - 1].1
}
