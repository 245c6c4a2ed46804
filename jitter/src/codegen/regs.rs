//! Register events written by the JIT's own code instead of a helper.
//!
//! A `Register` or `Branch` hook reports the guest registers before its
//! instruction runs. TCG may hold a register's newest value in a host
//! register only, so the event used to be written by a helper whose call
//! makes TCG store them to env first (`events::registers`). A helper call
//! (the caller-saved registers spilled around it, the event built from a
//! description of the guest's registers) cost some 20 ns on the 2-core VM:
//! more than half of QEMU's time under `cannoli heap`, whose call stacks
//! put a register event on every branch and on every block a branch leads
//! to.
//!
//! Where the hook library narrowed the registers to a few
//! ([`crate::narrow_registers`]), `hook_insn` now answers `WANT_SYNCED`:
//! QEMU inserts a `cannoli_sync` op, which stores to env what TCG holds in
//! host registers (as it does before a helper call, and only that), and
//! lets the jitter write code there ([`super::synced`]). That code copies
//! the [`MOST`] or fewer registers from env into the same `SOME_REGS`
//! event the helper writes: the client sees the same bytes either way.
//! An order number ([`crate::order_here`]) still goes through the helper,
//! which takes it from the process's one counter. `CANNOLI_REGS_IN_PLACE=0`
//! sends every event through the helper, to compare the two.
//!
//! Every register (asked for with [`crate::every_register_here`], as a
//! `cannoli probe` pc probe does, or never narrowed) is written in place
//! too, as the helper writes it: on a 32-bit guest a straight copy of
//! env's registers, two to a word; on a 64-bit one a `REGS` event, a word
//! each. Both are a run of words copied from env, so a pc probe's hit
//! costs QEMU some twenty moves instead of a helper call. (On the 2-core
//! VM the bench's probe row, ten pcs of busybox `sha256sum` and a million
//! hits, did not move measurably: the client's formatting bounds it there,
//! and QEMU's CPU time varies by a tenth from run to run.) A run whose
//! code fits in [`PAIRS_MOST`] bytes is copied by pairs of `push`/`pop`;
//! a longer one (32 registers of 8 bytes) by `rep movsq`, the three
//! registers it uses saved on the stack around it, so that a splice stays
//! within the 256 bytes QEMU gives it.
//!
//! The JIT may clobber only the flags, so each register is copied memory
//! to memory through the host stack: `push qword [env + reg]`, then
//! `pop qword [cursor + slot]`. A 32-bit guest's registers are packed two
//! to a word: each copy moves 8 bytes, in ascending order, so the upper
//! half each one brings along is overwritten by the next; the last word's
//! upper half is zeroed when the count is odd, and for an even count the
//! last copy writes 4 bytes past the event, inside the chunk's headroom,
//! where the next event goes (the cursor never counts them).

use super::{advance, fetched, run_event, store_word, with_lifter, CURSOR, END, ENV};
use crate::asm::{mem, Asm, Reg};
use crate::stream::SP_SLOT;
use std::sync::LazyLock;
use wire::{frame, tag};

/// The most registers an event written in place carries.
const MOST: u32 = 8;

/// Bytes an in-place event may write, its 4-byte spill included.
const MOST_BYTES: usize = 8 * (3 + MOST as usize) + 8;
const _: () = assert!(MOST_BYTES <= wire::MAX_JIT_EVENT);

/// The most registers an event of every register carries in place (a
/// guest with more gets the helper's).
const MOST_EVERY: u32 = 32;

/// Bytes such an event may write: a `REGS` event of [`MOST_EVERY`] 8-byte
/// registers, or the packed `SOME_REGS` of 4-byte ones, which is smaller.
const MOST_EVERY_BYTES: usize = 8 * (2 + MOST_EVERY as usize);
const _: () = assert!(MOST_EVERY_BYTES <= wire::MAX_JIT_EVENT);

/// The most bytes of code a run of words is copied in by `push`/`pop`
/// pairs (16 words with short displacements take some 120): with the
/// event's head, the cursor's step and the `prefetchw`, a splice stays
/// well within QEMU's 256 bytes. A longer copy is a `rep movsq`.
const PAIRS_MOST: usize = 160;

/// `CANNOLI_REGS_IN_PLACE=0` turns writing in place off.
static ENABLED: LazyLock<bool> =
    LazyLock::new(|| std::env::var("CANNOLI_REGS_IN_PLACE").map_or(true, |v| v != "0"));

/// A register event that the JIT's code writes itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct InPlace {
    /// The event's [`wire::RegsKind`].
    kind: u32,
    /// The registers, a bit each in QEMU's order.
    mask: u64,
    /// Bytes a register (4 or 8).
    reg_bytes: u32,
    /// Where register 0 lies from env.
    regs_at: i32,
    /// Every register, as the helper writes them when asked for every one
    /// (`mask` has them all).
    every: bool,
    /// Where the stack pointer lies from env, where block starts are quiet
    /// ([`crate::quiet_block_starts`]): a block start's event leaves it in
    /// the chunk's [`SP_SLOT`] word, any other register event forgets it.
    quiet_sp_at: Option<i32>,
}

/// The event to write in place of the helper for an instruction hooked
/// with `kind`, if it can be: it reports every register (asked for here,
/// or never narrowed) of a guest with at most [`MOST_EVERY`], or the few
/// they were narrowed to; and it asked for no order number (which the
/// helper takes from its one counter, before the registers).
pub(super) fn in_place(kind: u32, asked: crate::events::Asked) -> Option<InPlace> {
    if asked.ordered || !*ENABLED {
        return None;
    }
    let e = &crate::config::get()?.env;
    let n = e.reg_count;
    if !matches!(e.reg_bytes, 4 | 8) || n == 0 || n > MOST_EVERY {
        return None;
    }
    // Not narrowed (`None`): every register, as when asked for them.
    let (mask, every) = match (asked.every, crate::events::narrowed_mask(n)) {
        (false, Some(mask)) => (mask.count_ones() <= MOST).then_some((mask, false))?,
        _ => ((1u64 << n) - 1, true),
    };
    let quiet_sp_at = crate::events::quiet_sp()
        .filter(|&i| i < n)
        .map(|i| e.regs_env_offset + (e.reg_bytes * i) as i32);
    Some(InPlace {
        kind,
        mask,
        reg_bytes: e.reg_bytes,
        regs_at: e.regs_env_offset,
        every,
        quiet_sp_at,
    })
}

impl InPlace {
    /// Whether the event may be left out where nothing moved: a block
    /// start's narrowed registers, where block starts are quiet.
    pub(super) fn may_be_quiet(&self) -> bool {
        self.quiet_sp_at.is_some() && !self.every && self.kind == wire::RegsKind::Regs as u32
    }
}

/// A quiet block start ([`crate::quiet_block_starts`]), at a block's first
/// instruction, where env holds every guest register (no instruction of
/// the block ran): where the stack pointer is the one the chunk's
/// [`SP_SLOT`] word holds, only the run event of table entry `quiet_run`
/// (the block with its first instruction among those it reports without
/// registers); elsewhere the run event of `regs_run` and `p`'s event, as
/// [`write`] writes it. The comparison needs a register: `rax`, saved
/// around it on the stack (the JIT may clobber only the flags, which
/// `pop` leaves as the comparison set them).
pub(super) fn write_quiet(a: &mut Asm, pc: u64, p: &InPlace, regs_run: u64, quiet_run: u64) {
    let at = p
        .quiet_sp_at
        .expect("a quiet block start knows its stack pointer");
    a.push(Reg::Rax);
    if p.reg_bytes == 8 {
        a.mov_r_m64(Reg::Rax, mem(ENV, at));
        a.cmp_r_m64(Reg::Rax, mem(END, SP_SLOT));
    } else {
        a.mov_r32_m32(Reg::Rax, mem(ENV, at));
        a.cmp_r32_m32(Reg::Rax, mem(END, SP_SLOT));
    }
    a.pop(Reg::Rax);
    let moved = a.jne_fwd();
    run_event(a, quiet_run);
    let done = a.jmp_fwd32();
    a.bind(moved);
    run_event(a, regs_run);
    let len = encode(a, pc, p);
    advance(a, len);
    a.bind32(done);
    with_lifter(|l| fetched(a, l, len, false));
}

/// Writes `p`'s event for the instruction at `pc` and steps over it.
pub(super) fn write(a: &mut Asm, pc: u64, p: &InPlace) {
    let len = encode(a, pc, p);
    advance(a, len);
    with_lifter(|l| fetched(a, l, len, false));
}

/// The event's code, without the cursor's step; returns its length.
fn encode(a: &mut Asm, pc: u64, p: &InPlace) -> i32 {
    if p.every {
        return encode_every(a, pc, p);
    }
    let words = wire::some_regs_words(p.mask, p.reg_bytes);
    store_word(a, 0, frame(tag::SOME_REGS, p.kind, 3 + words as u32));
    store_word(a, 8, pc);
    store_word(a, 16, p.mask);
    let size = p.reg_bytes as i32;
    let mut m = p.mask;
    let mut slot = 0;
    while m != 0 {
        let i = m.trailing_zeros() as i32;
        m &= m - 1;
        a.push_m64(mem(ENV, p.regs_at + size * i));
        a.pop_m64(mem(CURSOR, 24 + size * slot));
        slot += 1;
    }
    if size == 4 && slot % 2 == 1 {
        a.mov_m32_imm32(mem(CURSOR, 24 + 4 * slot), 0);
    }
    // Before the cursor's step, which may flush: the word is this chunk's.
    match p.quiet_sp_at {
        Some(at) if p.may_be_quiet() => {
            a.push_m64(mem(ENV, at));
            a.pop_m64(mem(END, SP_SLOT));
        }
        Some(_) => a.mov_m64_imm32(mem(END, SP_SLOT), -1),
        None => {}
    }
    8 * (3 + words as i32)
}

/// [`encode`] of every register: the helper's event for them (see
/// `events::registers`), its registers a straight copy of env's.
fn encode_every(a: &mut Asm, pc: u64, p: &InPlace) -> i32 {
    let n = p.mask.count_ones() as i32;
    let (head, words) = if p.reg_bytes == 8 {
        store_word(a, 0, frame(tag::REGS, p.kind, 2 + n as u32));
        store_word(a, 8, pc);
        (16, n)
    } else {
        let words = (n + 1) / 2;
        store_word(a, 0, frame(tag::SOME_REGS, p.kind, 3 + words as u32));
        store_word(a, 8, pc);
        store_word(a, 16, p.mask);
        (24, words)
    };
    copy_words(a, p.regs_at, head, words);
    if p.reg_bytes == 4 && n % 2 == 1 {
        // The last word's upper half came from past the last register.
        a.mov_m32_imm32(mem(CURSOR, head + 4 * n), 0);
    }
    if p.quiet_sp_at.is_some() {
        a.mov_m64_imm32(mem(END, SP_SLOT), -1);
    }
    head + 8 * words
}

/// Copies `words` words from env + `from` to the cursor + `to`: by
/// `push`/`pop` pairs where their code fits in [`PAIRS_MOST`] bytes, else
/// by `rep movsq`, whose registers are saved around it (the JIT may
/// clobber only the flags).
fn copy_words(a: &mut Asm, from: i32, to: i32, words: i32) {
    let pairs = |a: &mut Asm| {
        for w in 0..words {
            a.push_m64(mem(ENV, from + 8 * w));
            a.pop_m64(mem(CURSOR, to + 8 * w));
        }
    };
    let mut scratch = [0u8; 1024];
    let mut trial = Asm::new(&mut scratch, 0);
    pairs(&mut trial);
    if trial.len() <= PAIRS_MOST {
        return pairs(a);
    }
    a.push(Reg::Rsi);
    a.push(Reg::Rdi);
    a.push(Reg::Rcx);
    a.lea(Reg::Rsi, mem(ENV, from));
    a.lea(Reg::Rdi, mem(CURSOR, to));
    a.mov_r32_imm32(Reg::Rcx, words as u32);
    a.rep_movsq();
    a.pop(Reg::Rcx);
    a.pop(Reg::Rdi);
    a.pop(Reg::Rsi);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::tests::dis;

    fn code(pc: u64, p: &InPlace) -> (Vec<String>, i32) {
        let mut buf = [0u8; 512];
        let mut a = Asm::new(&mut buf, 0x1000);
        let len = encode(&mut a, pc, p);
        let n = a.len();
        (dis(&buf[..n], 0x1000), len)
    }

    /// Runs the encoded moves on a model of memory: env's registers and the
    /// event's bytes, as the CPU would.
    fn run(pc: u64, p: &InPlace, env: &[u8]) -> Vec<u8> {
        run_with_slot(pc, p, env).0
    }

    /// [`run`], and what the chunk's stack pointer word ([`SP_SLOT`] from
    /// the window's end, `r15`) was left holding, if it was written.
    fn run_with_slot(pc: u64, p: &InPlace, env: &[u8]) -> (Vec<u8>, Option<u64>) {
        let slot_at = format!("{SP_SLOT:#x}(%r15)");
        let mut slot = None;
        let (lines, len) = code(pc, p);
        let mut out = vec![0xeeu8; len as usize + 8];
        let mut stack = Vec::new();
        let (mut rsi, mut rdi, mut rcx) = (None, None, None);
        let disp = |s: &str| -> i64 {
            let d = s.split('(').next().unwrap_or("");
            let (neg, d) = d.strip_prefix('-').map_or((false, d), |d| (true, d));
            let v = if d.is_empty() {
                0
            } else {
                i64::from_str_radix(d.trim_start_matches("0x"), 16).unwrap()
            };
            if neg {
                -v
            } else {
                v
            }
        };
        for l in &lines {
            let (op, args) = l.split_once(' ').unwrap();
            let args = args.trim();
            match op {
                "pushq" => {
                    let at = (disp(args) - p.regs_at as i64) as usize;
                    stack.push(u64::from_le_bytes(env[at..at + 8].try_into().unwrap()));
                }
                "popq" if args == slot_at => slot = stack.pop(),
                "popq" => {
                    let at = disp(args) as usize;
                    out[at..at + 8].copy_from_slice(&stack.pop().unwrap().to_le_bytes());
                }
                "push" | "pop" if args.starts_with('%') => {
                    // rep movsq's registers, saved around it.
                }
                "lea" => {
                    let (src, dst) = args.split_once(',').unwrap();
                    let v = disp(src);
                    match dst {
                        "%rsi" => rsi = Some((v - p.regs_at as i64) as usize),
                        "%rdi" => rdi = Some(v as usize),
                        _ => panic!("unexpected {l}"),
                    }
                }
                "mov" => {
                    let (imm, dst) = args.split_once(',').unwrap();
                    assert_eq!(dst, "%ecx", "{l}");
                    rcx = Some(u64::from_str_radix(imm.trim_start_matches("$0x"), 16).unwrap());
                }
                "rep" => {
                    assert_eq!(args, "movsq (%rsi),(%rdi)");
                    let (s, d) = (rsi.unwrap(), rdi.unwrap());
                    let n = 8 * rcx.unwrap() as usize;
                    out[d..d + n].copy_from_slice(&env[s..s + n]);
                }
                "movq" if args.ends_with(&slot_at) => {
                    assert_eq!(args, format!("$0xffffffffffffffff,{slot_at}"));
                    slot = Some(u64::MAX);
                }
                "movq" | "movl" => {
                    let (imm, dst) = args.split_once(',').unwrap();
                    let v = u64::from_str_radix(imm.trim_start_matches("$0x"), 16).unwrap();
                    let at = disp(dst) as usize;
                    let n = if op == "movq" { 8 } else { 4 };
                    let v = if op == "movq" {
                        v as i32 as i64 as u64
                    } else {
                        v
                    };
                    out[at..at + n].copy_from_slice(&v.to_le_bytes()[..n]);
                }
                _ => panic!("unexpected {l}"),
            }
        }
        assert!(stack.is_empty());
        out.truncate(len as usize);
        (out, slot)
    }

    /// The helper's event for the same registers, built as
    /// `events::registers` builds it.
    fn helper_event(pc: u64, p: &InPlace, env: &[u8]) -> Vec<u8> {
        if p.every {
            return helper_every(pc, p, env);
        }
        let reg = |i: u32| {
            let at = (p.reg_bytes * i) as usize;
            let mut w = [0u8; 8];
            w[..p.reg_bytes as usize].copy_from_slice(&env[at..at + p.reg_bytes as usize]);
            u64::from_le_bytes(w)
        };
        let regs: Vec<u64> = (0..64).filter(|i| p.mask >> i & 1 != 0).map(reg).collect();
        let words: Vec<u64> = if p.reg_bytes == 8 {
            regs
        } else {
            regs.chunks(2)
                .map(|c| c[0] | c.get(1).copied().unwrap_or(0) << 32)
                .collect()
        };
        let head = frame(tag::SOME_REGS, p.kind, 3 + words.len() as u32);
        [head, pc, p.mask]
            .iter()
            .chain(&words)
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    #[test]
    fn the_same_bytes_as_the_helper() {
        // env: registers with distinct bytes, and more past the last one.
        let env: Vec<u8> = (0..400u32).map(|i| (i * 7 + 3) as u8).collect();
        let cases = [
            // mipsel's narrowed set: v0, sp, ra (odd: the last half zeroed).
            (4, 1 << 2 | 1 << 29 | 1 << 31),
            // Even on a 32-bit guest: the last copy spills past the event.
            (4, 1 << 13 | 1 << 14),
            (4, 0b1111_1111),
            (4, 1 << 31),
            // 64-bit guests.
            (8, 1 << 2 | 1 << 29 | 1 << 31),
            (8, 1 << 4 | 1),
            (8, 0xff << 8),
        ];
        for (reg_bytes, mask) in cases {
            for pc in [0x40_0000u64, 0xffff_8000_0000, 0x7fff_ffff] {
                let p = InPlace {
                    kind: wire::RegsKind::BranchYes as u32,
                    mask,
                    reg_bytes,
                    regs_at: 0x40,
                    every: false,
                    quiet_sp_at: None,
                };
                let got = run(pc, &p, &env);
                let want = helper_event(pc, &p, &env);
                assert_eq!(got, want, "mask {mask:#x}, {reg_bytes}-byte registers");
                let (_, len) = code(pc, &p);
                assert!(len as usize + 8 <= MOST_BYTES);
            }
        }
    }

    /// The helper's event of every register (`events::registers`): a
    /// 64-bit guest's a `REGS` event, a 32-bit guest's env copied.
    fn helper_every(pc: u64, p: &InPlace, env: &[u8]) -> Vec<u8> {
        let n = p.mask.count_ones() as usize;
        // The model's env starts at register 0 (see `run`).
        let (head, body): (Vec<u64>, Vec<u8>) = if p.reg_bytes == 8 {
            (
                vec![frame(tag::REGS, p.kind, 2 + n as u32), pc],
                env[..8 * n].to_vec(),
            )
        } else {
            let words = n.div_ceil(2);
            let mut b = env[..4 * n].to_vec();
            b.resize(8 * words, 0);
            (
                vec![frame(tag::SOME_REGS, p.kind, 3 + words as u32), pc, p.mask],
                b,
            )
        };
        head.iter()
            .flat_map(|w| w.to_le_bytes())
            .chain(body)
            .collect()
    }

    #[test]
    fn every_register_as_the_helper_writes_it_within_a_splice() {
        let env: Vec<u8> = (0..1400u32).map(|i| (i * 13 + 5) as u8).collect();
        for (reg_bytes, n) in [(4, 8), (4, 15), (4, 16), (4, 32), (8, 16), (8, 31), (8, 32)] {
            // Near env's start (short displacements) and far (long ones).
            for regs_at in [0, 0x40, 0x2a8] {
                let p = InPlace {
                    kind: wire::RegsKind::Regs as u32,
                    mask: (1u64 << n) - 1,
                    reg_bytes,
                    regs_at,
                    every: true,
                    quiet_sp_at: None,
                };
                let pc = 0x7fff_1234_5678;
                assert_eq!(
                    run(pc, &p, &env),
                    helper_every(pc, &p, &env),
                    "{n} registers of {reg_bytes} bytes at env + {regs_at:#x}"
                );
                let mut buf = [0u8; 1024];
                let mut a = Asm::new(&mut buf, 0x1000);
                let len = encode(&mut a, pc, &p);
                assert!(len as usize <= MOST_EVERY_BYTES);
                // The cursor's step and check, and a prefetchw, follow.
                assert!(a.len() + 32 <= 256, "{} bytes of code", a.len());
            }
        }
    }

    #[test]
    fn a_block_start_leaves_its_stack_pointer_and_other_events_forget_it() {
        let env: Vec<u8> = (0..400u32).map(|i| (i * 7 + 3) as u8).collect();
        // mipsel's narrowed set (sp is register 29) and x86_64's (rsp, 4).
        for (reg_bytes, mask, sp) in [(4, 1 << 2 | 1 << 29 | 1 << 31, 29), (8, 1 << 4 | 1, 4)] {
            let at = |i: u32| (reg_bytes * i) as usize;
            let sp_word = u64::from_le_bytes(env[at(sp)..at(sp) + 8].try_into().unwrap());
            for kind in [
                wire::RegsKind::Regs,
                wire::RegsKind::BranchYes,
                wire::RegsKind::BranchNo,
            ] {
                let p = InPlace {
                    kind: kind as u32,
                    mask,
                    reg_bytes,
                    regs_at: 0x40,
                    every: false,
                    quiet_sp_at: Some(0x40 + at(sp) as i32),
                };
                let (got, slot) = run_with_slot(0x40_1000, &p, &env);
                // The event is the helper's, whatever the word.
                assert_eq!(got, helper_event(0x40_1000, &p, &env));
                if kind == wire::RegsKind::Regs {
                    // A 32-bit guest's word: the stack pointer in its low
                    // half, which is all that is compared.
                    assert_eq!(slot, Some(sp_word), "{kind:?}");
                    assert_eq!(slot.map(|w| w as u32), Some(sp_word as u32));
                } else {
                    assert_eq!(slot, Some(u64::MAX), "{kind:?}");
                }
                let (_, len) = code(0x40_1000, &p);
                assert!(len as usize + 8 <= MOST_BYTES);
            }
            // Every register (a probe's pc): forgets it.
            let p = InPlace {
                kind: wire::RegsKind::Regs as u32,
                mask: (1 << 32) - 1,
                reg_bytes,
                regs_at: 0x40,
                every: true,
                quiet_sp_at: Some(0x40 + at(sp) as i32),
            };
            assert_eq!(run_with_slot(0x40_1000, &p, &env).1, Some(u64::MAX));
        }
    }

    /// The byte offset of the `k`th instruction of `code`.
    fn lines_len(code: &[u8], k: usize) -> u64 {
        let mut d = iced_x86::Decoder::with_ip(64, code, 0, iced_x86::DecoderOptions::NONE);
        (0..k).map(|_| d.decode().len() as u64).sum()
    }

    #[test]
    fn a_quiet_block_start_compares_then_writes_one_of_two_runs() {
        for (reg_bytes, sp_at, cmp) in [
            (4, 0x40 + 4 * 29, "cmp 0x3f8(%r15),%eax"),
            (8, 0x40 + 8 * 4, "cmp 0x3f8(%r15),%rax"),
        ] {
            let p = InPlace {
                kind: wire::RegsKind::Regs as u32,
                mask: 1 << 4 | 1 << 29 | 1,
                reg_bytes,
                regs_at: 0x40,
                every: false,
                quiet_sp_at: Some(sp_at),
            };
            assert!(p.may_be_quiet());
            let mut buf = [0u8; 512];
            let mut a = Asm::new(&mut buf, 0x1000);
            write_quiet(&mut a, 0x40_1000, &p, 0x11, 0x22);
            let n = a.len();
            // The whole splice, with the prefetchw before it, within QEMU's
            // 256 bytes.
            assert!(n + 8 <= 256, "{n} bytes of code");
            let lines = dis(&buf[..n], 0x1000);
            let load = if reg_bytes == 8 {
                format!("mov {sp_at:#x}(%rbp),%rax")
            } else {
                format!("mov {sp_at:#x}(%rbp),%eax")
            };
            assert_eq!(
                lines[..4],
                ["push %rax".to_string(), load, cmp.into(), "pop %rax".into()]
            );
            assert!(lines[4].starts_with("jne "), "{lines:?}");
            // Equal: the quiet run event and the cursor's step, then a
            // jump over the rest; moved: the other run event, the
            // registers, and the stack pointer left in the word.
            let run = |id: u64| format!("movl ${id:#x},(%r14)");
            assert_eq!(lines[5], run(0x22));
            let jmp = lines.iter().position(|l| l.starts_with("jmp ")).unwrap();
            assert_eq!(jmp, 11, "{lines:?}");
            assert_eq!(lines[jmp + 1], run(0x11));
            let left = lines.iter().position(|l| l == "popq 0x3f8(%r15)").unwrap();
            assert_eq!(lines[left - 1], format!("pushq {sp_at:#x}(%rbp)"));
            let step = if reg_bytes == 8 { 0x30 } else { 0x28 };
            assert_eq!(lines[left + 1], format!("add ${step:#x},%r14"));
            // The short jump lands on the other run event, the long one
            // where the code ends.
            let target = |l: &str| u64::from_str_radix(&l[l.len() - 16..], 16).unwrap();
            assert_eq!(target(&lines[4]), 0x1000 + lines_len(&buf, jmp + 1));
            let end = 0x1000 + lines_len(&buf, left + 5);
            assert_eq!(target(&lines[jmp]), end, "{lines:?}");
        }
    }
}
