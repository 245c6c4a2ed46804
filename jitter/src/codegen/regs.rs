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
//! Every register (the hook library's [`crate::every_register_here`]) and
//! an order number ([`crate::order_here`]) still go through the helper.
//! `CANNOLI_REGS_IN_PLACE=0` sends every event through the helper, to
//! compare the two.
//!
//! The JIT may clobber only the flags, so each register is copied memory
//! to memory through the host stack: `push qword [env + reg]`, then
//! `pop qword [cursor + slot]`. A 32-bit guest's registers are packed two
//! to a word: each copy moves 8 bytes, in ascending order, so the upper
//! half each one brings along is overwritten by the next; the last word's
//! upper half is zeroed when the count is odd, and for an even count the
//! last copy writes 4 bytes past the event, inside the chunk's headroom,
//! where the next event goes (the cursor never counts them).

use super::{advance, fetched, store_word, with_lifter, CURSOR, ENV};
use crate::asm::{mem, Asm};
use std::sync::LazyLock;
use wire::{frame, tag};

/// The most registers an event written in place carries.
const MOST: u32 = 8;

/// Bytes an in-place event may write, its 4-byte spill included.
const MOST_BYTES: usize = 8 * (3 + MOST as usize) + 8;
const _: () = assert!(MOST_BYTES <= wire::MAX_JIT_EVENT);

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
}

/// The event to write in place of the helper for an instruction hooked
/// with `kind`, if it can be: the registers were narrowed to a few and
/// this instruction asked neither for every one nor for an order number
/// (which the helper takes from its one counter, before the registers).
pub(super) fn in_place(kind: u32, asked: crate::events::Asked) -> Option<InPlace> {
    if asked.every || asked.ordered || !*ENABLED {
        return None;
    }
    let e = &crate::config::get()?.env;
    let n = e.reg_count;
    if !matches!(e.reg_bytes, 4 | 8) || n == 0 || n > 32 {
        return None;
    }
    let mask = crate::events::narrowed_mask(n)?;
    (mask.count_ones() <= MOST).then_some(InPlace {
        kind,
        mask,
        reg_bytes: e.reg_bytes,
        regs_at: e.regs_env_offset,
    })
}

/// Writes `p`'s event for the instruction at `pc` and steps over it.
pub(super) fn write(a: &mut Asm, pc: u64, p: &InPlace) {
    let len = encode(a, pc, p);
    advance(a, len);
    with_lifter(|l| fetched(a, l, len, false));
}

/// The event's code, without the cursor's step; returns its length.
fn encode(a: &mut Asm, pc: u64, p: &InPlace) -> i32 {
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
    8 * (3 + words as i32)
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
        let (lines, len) = code(pc, p);
        let mut out = vec![0xeeu8; len as usize + 8];
        let mut stack = Vec::new();
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
                "popq" => {
                    let at = disp(args) as usize;
                    out[at..at + 8].copy_from_slice(&stack.pop().unwrap().to_le_bytes());
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
        out
    }

    /// The helper's event for the same registers, built as
    /// `events::registers` builds it.
    fn helper_event(pc: u64, p: &InPlace, env: &[u8]) -> Vec<u8> {
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
                };
                let got = run(pc, &p, &env);
                let want = helper_event(pc, &p, &env);
                assert_eq!(got, want, "mask {mask:#x}, {reg_bytes}-byte registers");
                let (_, len) = code(pc, &p);
                assert!(len as usize + 8 <= MOST_BYTES);
            }
        }
    }
}
