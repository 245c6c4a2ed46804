// SPDX-License-Identifier: GPL-2.0-or-later
//! A process's address space as the trace shows it, and the executed pcs
//! and instruction lengths that wait for the mapping they lie in.

use std::collections::{HashMap, HashSet};

use super::collected::{lock, Coverage, Run};
use super::space::Space;

/// A process's address space, and what ran in it before the trace showed
/// the mapping it ran in. The serial phase sees each thread's events in
/// order, but not the threads' in each other's: a new thread's chunks may
/// be handled before the chunk of the thread that mapped its code (the
/// first thread maps the program's image, and hands its first chunk over
/// only once it is full). So a pc the space does not know yet waits here
/// until a mapping covers it; what none ever covers is reported as outside
/// every mapping when the process's last thread is done.
pub(super) struct AddrSpace {
    pub(super) space: Space,
    /// Executed pcs in no known mapping yet.
    early_hits: HashSet<u64>,
    /// Instruction lengths at pcs in no known mapping yet.
    early_lens: HashMap<u64, u8>,
    /// Where what never found a mapping goes when the space is dropped.
    run: Run,
}

impl AddrSpace {
    pub(super) fn new(arch: &str, bits: u32, run: Run) -> AddrSpace {
        AddrSpace {
            space: Space::new(arch, bits),
            early_hits: HashSet::new(),
            early_lens: HashMap::new(),
            run,
        }
    }

    /// The instruction at `pc` ran.
    pub(super) fn hit(&mut self, c: &mut Coverage, pc: u64) {
        match self.space.lookup(pc) {
            Some(m) => c.hit(m, pc),
            None => {
                self.early_hits.insert(pc);
            }
        }
    }

    /// QEMU translated a block at `pc` with these instruction lengths: each
    /// goes to the module its instruction lies in (a block may run over the
    /// end of a mapping). A length of 0 (QEMU could not tell) ends the
    /// block's usable part: the pcs after it are unknown.
    pub(super) fn block(&mut self, c: &mut Coverage, pc: u64, lens: &[u8]) {
        for (at, len) in (cannoli::Block { pc, lens }).insns() {
            match self.space.lookup(at) {
                Some(m) => c.len(m, at, len),
                None => {
                    self.early_lens.insert(at, len);
                }
            }
        }
    }

    /// Files what waited for a mapping that now exists (after a mapping
    /// became executable).
    pub(super) fn settle(&mut self, c: &mut Coverage) {
        let AddrSpace {
            space,
            early_hits,
            early_lens,
            ..
        } = self;
        early_hits.retain(|&pc| match space.lookup(pc) {
            Some(m) => {
                c.hit(m, pc);
                false
            }
            None => true,
        });
        early_lens.retain(|&pc, &mut n| match space.lookup(pc) {
            Some(m) => {
                c.len(m, pc, n);
                false
            }
            None => true,
        });
    }
}

impl Drop for AddrSpace {
    fn drop(&mut self) {
        if !self.early_hits.is_empty() {
            lock(&self.run).outside.extend(self.early_hits.drain());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_lengths_go_to_the_module_of_each_instruction() {
        let mut c = Coverage::default();
        let mut a = AddrSpace::new("armv5tel", 32, Run::default());
        a.space.map(
            0x10000,
            0x1000,
            true,
            Some(("/a".into(), 0)),
            &mut c.modules,
        );
        a.space.map(
            0x11000,
            0x1000,
            true,
            Some(("/b".into(), 0)),
            &mut c.modules,
        );
        // Thumb: 2, 4, 2 bytes; the last instruction is in the next
        // mapping.
        a.block(&mut c, 0x10ffa, &[2, 4, 2]);
        assert_eq!(c.lens[0].get(&0x10ffa), Some(&2));
        assert_eq!(c.lens[0].get(&0x10ffc), Some(&4));
        assert_eq!(c.lens[0].len(), 2);
        assert_eq!(c.lens[1].get(&0x11000), Some(&2));
        assert_eq!(c.lens[1].len(), 1);
        // An unknown length (0) leaves the rest of the block unsized.
        a.block(&mut c, 0x10100, &[4, 0, 2]);
        assert_eq!(c.lens[0].get(&0x10100), Some(&4));
        assert_eq!(c.lens[0].get(&0x10104), None);
        assert_eq!(c.lens[0].get(&0x10106), None);
    }

    #[test]
    fn code_that_ran_before_its_mapping_was_seen_waits_for_it() {
        // A second thread's events handled before the first thread's
        // mapping of the program.
        let mut c = Coverage::default();
        let run = Run::default();
        let mut a = AddrSpace::new("mipsel", 32, run.clone());
        a.block(&mut c, 0x400100, &[4, 4]);
        a.hit(&mut c, 0x400100);
        a.hit(&mut c, 0x400104);
        a.hit(&mut c, 0x7000);
        assert!(c.hits.is_empty() && c.lens.is_empty());
        // A data mapping settles nothing.
        a.space.map(0x7000, 0x1000, false, None, &mut c.modules);
        a.settle(&mut c);
        assert!(c.hits.is_empty());
        a.space.map(
            0x400000,
            0x1000,
            true,
            Some(("/p".into(), 0)),
            &mut c.modules,
        );
        a.settle(&mut c);
        assert_eq!(c.hits[0], HashSet::from([0x400100, 0x400104]));
        assert_eq!(c.lens[0], HashMap::from([(0x400100, 4), (0x400104, 4)]));
        // 0x7000 never became code: it is reported outside, once the
        // space is gone.
        assert_eq!(a.early_hits, HashSet::from([0x7000]));
        assert!(a.early_lens.is_empty());
        drop(a);
        assert!(lock(&run).outside.contains(&0x7000));
    }
}
