//! The client's side of the block table (`wire::blocks`): where the
//! instructions of a run event come from.
//!
//! A [`BlockSource`] hands out checked entries by id (the shared-memory
//! table of a QEMU process, or a list in a test). A [`BlockCache`] keeps
//! them pre-decoded ([`Block`]: the pcs, the exec mask unless every bit is
//! set, and the pcs' stride) in a plain vector indexed by id. A slot holds
//! the block itself, not a pointer to it: the pcs' address and length are
//! in the slot, so the decoder reaches a run event's pcs in two dependent
//! loads (the slot, then the pcs), not three. The
//! cache is shared by every worker of every stream that reads the same
//! source ([`cache_for`]); a worker read-locks it once per chunk and only
//! takes the write lock to fill an id it does not have yet (an entry never
//! changes once published, so a filled slot stays valid for good).

use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, Weak};

use wire::blocks::{Entry, EntryError, MAX_BLOCK_INSNS};

/// Where a process's block table entries come from.
pub(crate) trait BlockSource: Send + Sync {
    /// Entry `id`, checked (see `wire::blocks::Table::entry`).
    fn entry(&self, id: u64) -> Result<Entry, EntryError>;
}

/// A table in memory (tests, fuzzing): entry `id` is element `id`.
impl BlockSource for Vec<Entry> {
    fn entry(&self, id: u64) -> Result<Entry, EntryError> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.get(i))
            .cloned()
            .ok_or(EntryError::NotPublished)
    }
}

/// A process's shared-memory table.
impl BlockSource for mempipe::TableReader {
    fn entry(&self, id: u64) -> Result<Entry, EntryError> {
        mempipe::TableReader::entry(self, id)
    }
}

/// [`Block::shift`] of a block whose pcs are not evenly spaced by a power
/// of two (variable-length instructions): events are placed by a scan.
pub(crate) const IRREGULAR: u8 = u8::MAX;

/// How many bits each byte value has set ([`Block::reported`]).
static BYTE_ONES: [u8; 256] = {
    let mut t = [0; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).count_ones() as u8;
        i += 1;
    }
    t
};

/// One translated block, checked and ready for the decode loop. Cloning it
/// takes two reference counts; the slots of [`BlockCache`] hold it inline
/// (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    /// The instructions' pcs in execution order (1..=`MAX_BLOCK_INSNS`).
    pub pcs: Arc<[u64]>,
    /// Exec mask, `pcs.len().div_ceil(64)` words; `None` when every bit is
    /// set, so that expansion is a plain loop over `pcs`.
    pub mask: Option<Arc<[u64]>>,
    /// Where every pc is `pcs[0] + (k << shift)` (mod 2^64), `shift`: an
    /// event's instruction is then found by its pc in one subtraction and
    /// one shift instead of a scan of the pcs (fixed-width instruction
    /// sets; a memory event comes every few instructions). Else
    /// [`IRREGULAR`].
    pub shift: u8,
}

impl Block {
    /// Checks an entry (whatever its source: the count and the mask's
    /// length must agree) and pre-decodes it.
    pub fn new(e: Entry) -> Result<Block, EntryError> {
        let n = e.pcs.len();
        if n == 0 || n > MAX_BLOCK_INSNS || e.exec.len() != n.div_ceil(64) {
            return Err(EntryError::Damaged);
        }
        let mut mask = e.exec.into_boxed_slice();
        // Bits past the last instruction mean nothing: clear them, so that
        // `all` only looks at real instructions.
        if n % 64 != 0 {
            mask[n / 64] &= (1u64 << (n % 64)) - 1;
        }
        let all = (0..n).all(|i| mask[i / 64] >> (i % 64) & 1 != 0);
        let shift = shift_of(&e.pcs);
        Ok(Block {
            pcs: e.pcs.into(),
            mask: (!all).then(|| mask.into()),
            shift,
        })
    }

    /// Every instruction is reported executed.
    #[inline(always)]
    pub fn all(&self) -> bool {
        self.mask.is_none()
    }

    /// Instruction count.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.pcs.len()
    }

    /// How many of the instructions `from..to` (`to` at most
    /// [`Block::len`]) are reported executed: what expanding them would
    /// give, counted without visiting them.
    #[inline(always)]
    pub fn reported(&self, from: usize, to: usize) -> u64 {
        let Some(mask) = self.mask.as_deref() else {
            return to.saturating_sub(from) as u64;
        };
        if from >= to {
            return 0;
        }
        // The bits of `from..to` lie in words `first..=last`; `ones(w)`:
        // the low `w` bits (1 to 64).
        let ones = |w: usize| u64::MAX >> (64 - w);
        let (first, last) = (from / 64, (to - 1) / 64);
        let head = mask[first] >> (from % 64);
        if first == last {
            // Between two events of one block: the common case, and mostly
            // a few instructions, counted by a table (`count_ones` is some
            // 15 instructions on x86-64's baseline, which has no popcnt).
            let bits = head & ones(to - from);
            return match u8::try_from(bits) {
                Ok(b) => u64::from(BYTE_ONES[usize::from(b)]),
                Err(_) => u64::from(bits.count_ones()),
            };
        }
        let middle: u32 = mask[first + 1..last].iter().map(|w| w.count_ones()).sum();
        let tail = mask[last] & ones(to - last * 64);
        u64::from(head.count_ones() + middle + tail.count_ones())
    }

    /// Whether instruction `i` (below [`Block::len`]) is reported executed.
    #[cfg(test)]
    pub fn is_exec(&self, i: usize) -> bool {
        match &self.mask {
            None => true,
            Some(m) => m[i / 64] >> (i % 64) & 1 != 0,
        }
    }

    /// The index of the instruction at `pc` among those from `from` on, if
    /// it is one of them (the first, should a pc repeat).
    #[inline(always)]
    pub fn find(&self, from: usize, pc: u64) -> Option<usize> {
        if self.shift == IRREGULAR {
            return self.pcs[from..]
                .iter()
                .position(|&p| p == pc)
                .map(|k| from + k);
        }
        // Evenly spaced pcs are all different: the one at `pc` is where
        // its distance from the first says, if that is a whole step within
        // the block.
        let d = pc.wrapping_sub(self.pcs[0]);
        let j = d >> self.shift;
        let whole = d & ((1u64 << self.shift) - 1) == 0;
        (whole && j < self.pcs.len() as u64 && j >= from as u64).then_some(j as usize)
    }
}

/// [`Block::shift`] of `pcs` (not empty).
fn shift_of(pcs: &[u64]) -> u8 {
    let step = match pcs {
        [_] => return 0,
        [a, b, ..] => b.wrapping_sub(*a),
        [] => return IRREGULAR,
    };
    if !step.is_power_of_two() {
        return IRREGULAR;
    }
    let shift = step.trailing_zeros();
    let first = pcs[0];
    let even = pcs
        .iter()
        .enumerate()
        .all(|(k, &p)| p == first.wrapping_add((k as u64) << shift));
    if even {
        shift as u8
    } else {
        IRREGULAR
    }
}

/// The cache's slots, indexed by entry id.
pub(crate) type Slots = Vec<Option<Block>>;

/// Most ids a miss fills at once: the one asked for and the next ones the
/// source already has (blocks are translated, hence numbered, in bursts, and
/// one chunk's run events name many new ones at the start of a program).
const FILL_AHEAD: u64 = 256;

/// Pre-decoded blocks of one source, by id.
pub(crate) struct BlockCache {
    source: Arc<dyn BlockSource>,
    slots: RwLock<Slots>,
}

impl BlockCache {
    /// A cache over `source`.
    pub fn new(source: Arc<dyn BlockSource>) -> BlockCache {
        BlockCache {
            source,
            slots: RwLock::new(Vec::new()),
        }
    }

    /// The slots, read-locked: held for a whole chunk.
    pub fn read(&self) -> RwLockReadGuard<'_, Slots> {
        self.slots.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes sure slot `id` is filled: from the source, with up to
    /// [`FILL_AHEAD`] of the ids after it that the source already has.
    /// Call it without holding [`BlockCache::read`]'s guard.
    pub fn fill(&self, id: u64) -> Result<(), EntryError> {
        let source = &self.source;
        if id >= wire::blocks::CAPACITY as u64 {
            return Err(EntryError::NotPublished);
        }
        let mut slots = self.slots.write().unwrap_or_else(|p| p.into_inner());
        if slots.get(id as usize).is_some_and(Option::is_some) {
            return Ok(()); // another worker was first
        }
        let first = Block::new(source.entry(id)?)?;
        let mut found = vec![first];
        for next in id + 1..(id + FILL_AHEAD).min(wire::blocks::CAPACITY as u64) {
            if slots.get(next as usize).is_some_and(Option::is_some) {
                break;
            }
            match source.entry(next).and_then(Block::new) {
                Ok(b) => found.push(b),
                Err(_) => break,
            }
        }
        let end = id as usize + found.len();
        if slots.len() < end {
            slots.resize(end, None);
        }
        for (slot, b) in slots[id as usize..end].iter_mut().zip(found) {
            *slot = Some(b);
        }
        Ok(())
    }

    /// Block `id` (filling it if needed), for callers off the hot path.
    #[cfg(test)]
    pub fn get(&self, id: u64) -> Result<Block, EntryError> {
        if let Some(Some(b)) = self.read().get(id as usize) {
            return Ok(b.clone());
        }
        self.fill(id)?;
        Ok(self.read()[id as usize].clone().expect("filled"))
    }
}

/// The caches alive, one per source (by address; a cache holds its source,
/// so the address cannot be reused while the entry is alive).
static CACHES: Mutex<Vec<Weak<BlockCache>>> = Mutex::new(Vec::new());

/// The cache of `source`, shared with every stream that reads the same
/// source (one `Arc` per process: the threads of a process then share one
/// cache). Made on first use, dropped with its last stream.
pub(crate) fn cache_for(source: Arc<dyn BlockSource>) -> Arc<BlockCache> {
    let addr = Arc::as_ptr(&source) as *const ();
    let mut caches = CACHES.lock().unwrap_or_else(|p| p.into_inner());
    caches.retain(|w| w.strong_count() > 0);
    for w in caches.iter() {
        if let Some(c) = w.upgrade() {
            if Arc::as_ptr(&c.source) as *const () == addr {
                return c;
            }
        }
    }
    let c = Arc::new(BlockCache::new(source));
    caches.push(Arc::downgrade(&c));
    c
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An entry of `pcs` with `exec[i]` its bits.
    pub fn entry(pcs: &[u64], exec: &[bool]) -> Entry {
        let mut w = vec![0; wire::blocks::entry_words(pcs.len())];
        wire::blocks::encode_entry(pcs, |i| exec[i], &mut w);
        Entry {
            pcs: pcs.to_vec(),
            exec: w[1 + pcs.len()..].to_vec(),
        }
    }

    #[test]
    fn reported_counts_what_the_mask_reports() {
        // Lengths around the mask's word edges, bits from a fixed sequence.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in [1, 5, 63, 64, 65, 127, 128, 129, 200] {
            let pcs: Vec<u64> = (0..len as u64).map(|i| 0x1000 + 4 * i).collect();
            let exec: Vec<bool> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % 3 != 0
                })
                .collect();
            let b = Block::new(entry(&pcs, &exec)).unwrap();
            for from in 0..=len {
                for to in from..=len {
                    let want = (from..to).filter(|&i| b.is_exec(i)).count() as u64;
                    assert_eq!(b.reported(from, to), want, "{len} {from}..{to}");
                }
            }
        }
        let all = Block::new(entry(&[1, 2, 3], &[true; 3])).unwrap();
        assert_eq!(all.reported(1, 3), 2);
    }

    #[test]
    fn blocks_are_checked_and_predecoded() {
        let b = Block::new(entry(&[1, 2, 3], &[true, true, true])).unwrap();
        assert!(b.all() && b.len() == 3);
        let b = Block::new(entry(&[1, 2, 3], &[true, false, true])).unwrap();
        assert!(!b.all());
        assert_eq!(
            (0..3).map(|i| b.is_exec(i)).collect::<Vec<_>>(),
            [true, false, true]
        );
        // 70 instructions: two mask words; stray bits past the end ignored.
        let pcs: Vec<u64> = (0..70).collect();
        let mut e = entry(&pcs, &[true; 70]);
        e.exec[1] |= 1 << 63;
        let b = Block::new(e).unwrap();
        assert!(b.all() && b.is_exec(69));
        let mut e = entry(&pcs, &[true; 70]);
        e.exec[1] &= !(1 << 5);
        e.exec[1] |= 1 << 63;
        let b = Block::new(e).unwrap();
        assert!(!b.all() && !b.is_exec(69) && b.is_exec(68));
        assert_eq!(b.mask.as_deref().unwrap()[1], (1 << 5) - 1);
        // Damaged: empty, too long, or a mask of the wrong length.
        assert_eq!(Block::new(Entry::default()), Err(EntryError::Damaged));
        let big: Vec<u64> = (0..MAX_BLOCK_INSNS as u64 + 1).collect();
        let e = Entry {
            exec: vec![u64::MAX; big.len().div_ceil(64)],
            pcs: big,
        };
        assert_eq!(Block::new(e), Err(EntryError::Damaged));
        let e = Entry {
            pcs: vec![1],
            exec: vec![],
        };
        assert_eq!(Block::new(e), Err(EntryError::Damaged));
    }

    /// An instruction is found by its pc alone, by arithmetic where the
    /// pcs are evenly spaced by a power of two, else by a scan; both agree
    /// with a scan from `from` on.
    #[test]
    fn instructions_are_found_by_pc() {
        let all = |n: usize| vec![true; n];
        let cases: [&[u64]; 7] = [
            &[0x400, 0x404, 0x408, 0x40c],
            &[0x400, 0x402, 0x404],
            &[0x400],
            &[0x400, 0x403, 0x405, 0x40a],
            &[0x400, 0x404, 0x40c],
            &[u64::MAX - 3, 0, 4],
            &[0x400, 0x401, 0x400],
        ];
        let shifts = [2, 1, 0, IRREGULAR, IRREGULAR, 2, IRREGULAR];
        for (pcs, shift) in cases.iter().zip(shifts) {
            let b = Block::new(entry(pcs, &all(pcs.len()))).unwrap();
            assert_eq!(b.shift, shift, "{pcs:x?}");
            let probes = pcs
                .iter()
                .flat_map(|&p| [p, p.wrapping_add(1), p.wrapping_add(2), p.wrapping_sub(4)])
                .chain([0, u64::MAX, 0x3fc, 0x410, 0x1_0000_0400]);
            for pc in probes {
                for from in 0..=pcs.len() {
                    let scan = pcs[from..].iter().position(|&p| p == pc).map(|k| from + k);
                    assert_eq!(b.find(from, pc), scan, "{pcs:x?} from {from} pc {pc:#x}");
                }
            }
        }
    }

    #[test]
    fn cache_fills_on_demand_and_ahead() {
        let table: Vec<Entry> = (0..5u64)
            .map(|k| entry(&[k * 16, k * 16 + 4], &[true, k != 2]))
            .collect();
        let c = BlockCache::new(Arc::new(table));
        assert!(c.read().is_empty());
        assert_eq!(c.get(1).unwrap().pcs[..], [16, 20]);
        // 1 and every later id the table has came in at once.
        assert_eq!(c.read().len(), 5);
        assert!(c.read()[0].is_none());
        assert!(!c.get(2).unwrap().all());
        assert_eq!(c.get(0).unwrap().pcs[..], [0, 4]);
        assert_eq!(c.fill(5), Err(EntryError::NotPublished));
        assert_eq!(c.fill(u64::MAX), Err(EntryError::NotPublished));
        // A damaged entry is refused, and does not stop the others.
        let mut table: Vec<Entry> = (0..3u64).map(|k| entry(&[k], &[true])).collect();
        table[1].exec.clear();
        let c = BlockCache::new(Arc::new(table));
        assert_eq!(c.fill(1), Err(EntryError::Damaged));
        assert!(c.fill(0).is_ok() && c.fill(2).is_ok());
        assert!(c.read()[1].is_none());
    }

    #[test]
    fn one_cache_per_source() {
        let s: Arc<dyn BlockSource> = Arc::new(vec![entry(&[7], &[true])]);
        let a = cache_for(s.clone());
        let b = cache_for(s.clone());
        assert!(Arc::ptr_eq(&a, &b));
        let other: Arc<dyn BlockSource> = Arc::new(vec![entry(&[8], &[true])]);
        let c = cache_for(other);
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.get(0).unwrap().pcs[..], [8]);
    }
}
