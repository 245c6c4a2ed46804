//! The client's side of the block table (`wire::blocks`): where the
//! instructions of a run event come from.
//!
//! A [`BlockSource`] hands out checked entries by id (the shared-memory
//! table of a QEMU process, or a list in a test). A [`BlockCache`] keeps
//! them pre-decoded ([`Block`]: the pcs as a boxed slice, the exec mask,
//! and whether every bit is set) in a plain vector indexed by id, so the
//! decoder's lookup of a run event is one bounds check and one load. The
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

/// One translated block, checked and ready for the decode loop.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Block {
    /// The instructions' pcs in execution order (1..=`MAX_BLOCK_INSNS`).
    pub pcs: Box<[u64]>,
    /// Exec mask, `pcs.len().div_ceil(64)` words.
    pub mask: Box<[u64]>,
    /// Every bit of the mask is set: expansion is a plain loop over `pcs`.
    pub all: bool,
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
        Ok(Block {
            pcs: e.pcs.into_boxed_slice(),
            mask,
            all,
        })
    }

    /// Instruction count.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.pcs.len()
    }

    /// Whether instruction `i` (below [`Block::len`]) is reported executed.
    #[inline(always)]
    pub fn is_exec(&self, i: usize) -> bool {
        self.all || self.mask[i / 64] >> (i % 64) & 1 != 0
    }
}

/// The cache's slots, indexed by entry id.
pub(crate) type Slots = Vec<Option<Arc<Block>>>;

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
        let mut found = vec![Arc::new(first)];
        for next in id + 1..(id + FILL_AHEAD).min(wire::blocks::CAPACITY as u64) {
            if slots.get(next as usize).is_some_and(Option::is_some) {
                break;
            }
            match source.entry(next).and_then(Block::new) {
                Ok(b) => found.push(Arc::new(b)),
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
    pub fn get(&self, id: u64) -> Result<Arc<Block>, EntryError> {
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
    fn blocks_are_checked_and_predecoded() {
        let b = Block::new(entry(&[1, 2, 3], &[true, true, true])).unwrap();
        assert!(b.all && b.len() == 3);
        let b = Block::new(entry(&[1, 2, 3], &[true, false, true])).unwrap();
        assert!(!b.all);
        assert_eq!(
            (0..3).map(|i| b.is_exec(i)).collect::<Vec<_>>(),
            [true, false, true]
        );
        // 70 instructions: two mask words; stray bits past the end ignored.
        let pcs: Vec<u64> = (0..70).collect();
        let mut e = entry(&pcs, &[true; 70]);
        e.exec[1] |= 1 << 63;
        let b = Block::new(e).unwrap();
        assert!(b.all);
        assert_eq!(b.mask[1], (1 << 6) - 1);
        let mut e = entry(&pcs, &[true; 70]);
        e.exec[1] &= !(1 << 5);
        let b = Block::new(e).unwrap();
        assert!(!b.all && !b.is_exec(69) && b.is_exec(68));
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
        assert!(!c.get(2).unwrap().all);
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
