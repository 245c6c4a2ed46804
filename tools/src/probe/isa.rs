// SPDX-License-Identifier: GPL-2.0-or-later
//! Finding a function's return instructions in its bytes, per guest, so
//! that a return probe hooks exactly those (and the entry), decided before
//! the program runs: QEMU then reports registers at nothing else.
//!
//! Why the return instruction and not the return site: the instruction
//! after each call is not known at translation time (a call through a
//! pointer, a tail call, a PLT stub can all lead to the function), while a
//! function's own returns are in its bytes. The registers before the
//! return hold the result everywhere but on MIPS, where the delay slot
//! after `jr ra` runs before the jump and often sets `v0` or `sp`: that one
//! instruction is read from the file and its effect on the registers is
//! computed ([`mips_delay`]); a delay-slot load into the result register is
//! the one case reported as unknown.
//!
//! A conditional return (ARM outside AL or inside an IT block, PowerPC
//! `beqlr` and friends) is reported before the condition is known, so the
//! instruction after it is hooked too: reaching that one next means the
//! return was not taken.
//!
//! | guest | returns |
//! |---|---|
//! | MIPS | `jr ra` (`jr.hb ra`) |
//! | RISC-V | `jalr zero, 0(ra)`, `c.jr ra` |
//! | AArch64 | `ret`, `retaa`, `retab` |
//! | PowerPC | `bclr` without link (`blr`, `beqlr`, ...) |
//! | x86 | `ret`, `ret imm16` |
//! | ARM | `bx lr`, `mov pc, lr`, `add pc, lr, #0` (Go's), `pop {.., pc}` (`ldm sp!`), `ldr pc, [sp], #N`, in A32 and Thumb |

use iced_x86::{Decoder, DecoderOptions, Mnemonic};

use super::conv::Abi;
use super::elf::{Func, Image};

/// One return instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ret {
    pub pc: u64,
    /// Bytes it pops off the stack (ARM `pop`, x86 `ret`), so that the key
    /// of the frame it leaves is `sp + pops`.
    pub pops: u64,
    /// A conditional return: the pc of the instruction after it.
    pub cond_next: Option<u64>,
    /// MIPS: the instruction word of the delay slot.
    pub delay: Option<u32>,
}

impl Ret {
    /// The registers as this return leaves them: `regs` at the return
    /// instruction, with a MIPS delay slot's work done (`bits64`: on a
    /// 64-bit guest).
    pub fn after(&self, regs: &[u64], bits64: bool) -> AfterReturn {
        let mut after = AfterReturn {
            regs: regs.to_vec(),
            known: vec![true; regs.len()],
        };
        if let Some(w) = self.delay {
            mips_delay(w, &mut after.regs, &mut after.known, bits64);
        }
        after
    }
}

/// The registers after a return ([`Ret::after`]), some perhaps unknown: a
/// delay slot that loads a register.
#[derive(Debug, Clone)]
pub struct AfterReturn {
    regs: Vec<u64>,
    known: Vec<bool>,
}

impl AfterReturn {
    /// Register `i`'s value, if there is such a register and it is known.
    pub fn get(&self, i: Option<usize>) -> Option<u64> {
        let i = i?;
        (*self.known.get(i)?).then(|| self.regs[i])
    }
}

fn word(b: &[u8], big: bool) -> u32 {
    let a: [u8; 4] = b[..4].try_into().unwrap();
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

fn half(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

/// The return instructions of `f` (none if its bytes are not in the file).
pub fn returns(img: &Image, f: &Func) -> Vec<Ret> {
    let code = img
        .bytes(f.start, f.end - f.start)
        .or_else(|| img.bytes_to_segment_end(f.start, f.end - f.start));
    let Some(code) = code else {
        return Vec::new();
    };
    let big = img.big_endian;
    let mut out = Vec::new();
    let plain = |pc, pops| Ret {
        pc,
        pops,
        cond_next: None,
        delay: None,
    };
    match img.abi {
        Abi::O32 | Abi::N64 => {
            for (i, c) in code.chunks_exact(4).enumerate() {
                let w = word(c, big);
                if w == 0x03e0_0008 || w == 0x03e0_0408 {
                    let at = (i + 1) * 4;
                    let delay = code.get(at..at + 4).map(|d| word(d, big));
                    out.push(Ret {
                        delay: Some(delay.unwrap_or(0)),
                        ..plain(f.start + i as u64 * 4, 0)
                    });
                }
            }
        }
        Abi::Riscv => {
            let mut i = 0;
            while i + 2 <= code.len() {
                let h = half(&code[i..]);
                let len = if h & 3 == 3 { 4 } else { 2 };
                let ret = match len {
                    2 => h == 0x8082,
                    _ => code
                        .get(i..i + 4)
                        .is_some_and(|c| word(c, false) == 0x0000_8067),
                };
                if ret {
                    out.push(plain(f.start + i as u64, 0));
                }
                i += len;
            }
        }
        Abi::Aapcs64 => {
            for (i, c) in code.chunks_exact(4).enumerate() {
                let w = word(c, false);
                if w & 0xffff_fc1f == 0xd65f_0000 || w == 0xd65f_0bff || w == 0xd65f_0fff {
                    out.push(plain(f.start + i as u64 * 4, 0));
                }
            }
        }
        Abi::Elfv2 => {
            for (i, c) in code.chunks_exact(4).enumerate() {
                let w = word(c, big);
                if w & 0xfc00_07ff == 0x4c00_0020 {
                    let pc = f.start + i as u64 * 4;
                    // BO 1z1zz: branch always.
                    let always = (w >> 21) & 0x14 == 0x14;
                    out.push(Ret {
                        cond_next: (!always).then_some(pc + 4),
                        ..plain(pc, 0)
                    });
                }
            }
        }
        Abi::SysV | Abi::Cdecl => {
            let (bits, word) = if img.abi == Abi::SysV {
                (64, 8)
            } else {
                (32, 4)
            };
            let mut d = Decoder::with_ip(bits, code, f.start, DecoderOptions::NONE);
            while d.can_decode() {
                let ins = d.decode();
                if ins.mnemonic() == Mnemonic::Ret {
                    out.push(plain(ins.ip(), word + u64::from(ins.immediate16())));
                }
            }
        }
        Abi::Aapcs if f.thumb => thumb(code, f.start, &mut out),
        Abi::Aapcs => a32(code, f.start, big, &mut out),
    }
    out
}

/// The returns of A32 code at `start`.
fn a32(code: &[u8], start: u64, big: bool, out: &mut Vec<Ret>) {
    for (i, c) in code.chunks_exact(4).enumerate() {
        let w = word(c, big);
        let cond = w >> 28;
        let pops = match w & 0x0fff_ffff {
            // `bx lr`, `mov pc, lr`, and `add pc, lr, #0` (Go's `RET`).
            0x012f_ff1e | 0x01a0_f00e | 0x028e_f000 => Some(0),
            // `ldr pc, [sp], #N` (Go's epilogue pops its whole frame so;
            // GCC's a word).
            x if x & 0x0fff_f000 == 0x049d_f000 => Some(u64::from(w & 0xfff)),
            x if x & 0x0fff_8000 == 0x08bd_8000 => Some(4 * u64::from((w & 0xffff).count_ones())),
            _ => None,
        };
        if let (Some(pops), true) = (pops, cond != 0xf) {
            let pc = start + i as u64 * 4;
            out.push(Ret {
                pc,
                pops,
                delay: None,
                cond_next: (cond != 0xe).then_some(pc + 4),
            });
        }
    }
}

/// Where `f` jumps without linking, outside itself: its tail calls (a
/// jump to another function, whose return then leaves `f`'s frame too).
/// Direct jumps only; a jump through a register is not followed.
pub fn tail_jumps(img: &Image, f: &Func) -> Vec<u64> {
    let Some(code) = img
        .bytes(f.start, f.end - f.start)
        .or_else(|| img.bytes_to_segment_end(f.start, f.end - f.start))
    else {
        return Vec::new();
    };
    let big = img.big_endian;
    let sext = |v: u64, bits: u32| ((v << (64 - bits)) as i64 >> (64 - bits)) as u64;
    let mut out = Vec::new();
    match img.abi {
        Abi::O32 | Abi::N64 => {
            for (i, c) in code.chunks_exact(4).enumerate() {
                let (w, pc) = (word(c, big), f.start + i as u64 * 4);
                match w >> 26 {
                    2 => out.push((pc + 4) & !0x0fff_ffff | u64::from(w & 0x03ff_ffff) << 2),
                    // b: beq zero, zero
                    4 if w >> 16 == 0x1000 => out.push(
                        pc.wrapping_add(4)
                            .wrapping_add(sext(u64::from(w & 0xffff), 16) << 2),
                    ),
                    _ => {}
                }
            }
        }
        Abi::Riscv => {
            let mut i = 0;
            while i + 2 <= code.len() {
                let h = half(&code[i..]);
                let pc = f.start + i as u64;
                if h & 3 == 3 {
                    if let Some(c) = code.get(i..i + 4) {
                        let w = u64::from(word(c, false));
                        // jal zero, off
                        if w & 0xfff == 0x06f {
                            let imm = (w >> 31 & 1) << 20
                                | (w >> 21 & 0x3ff) << 1
                                | (w >> 20 & 1) << 11
                                | (w >> 12 & 0xff) << 12;
                            out.push(pc.wrapping_add(sext(imm, 21)));
                        }
                    }
                    i += 4;
                } else {
                    // c.j off
                    if h & 0xe003 == 0xa001 {
                        let h = u64::from(h);
                        let imm = (h >> 12 & 1) << 11
                            | (h >> 11 & 1) << 4
                            | (h >> 9 & 3) << 8
                            | (h >> 8 & 1) << 10
                            | (h >> 7 & 1) << 6
                            | (h >> 6 & 1) << 7
                            | (h >> 3 & 7) << 1
                            | (h >> 2 & 1) << 5;
                        out.push(pc.wrapping_add(sext(imm, 12)));
                    }
                    i += 2;
                }
            }
        }
        Abi::Aapcs64 => {
            for (i, c) in code.chunks_exact(4).enumerate() {
                let w = u64::from(word(c, false));
                if w & 0xfc00_0000 == 0x1400_0000 {
                    let pc = f.start + i as u64 * 4;
                    out.push(pc.wrapping_add(sext(w & 0x03ff_ffff, 26) << 2));
                }
            }
        }
        Abi::Elfv2 => {
            for (i, c) in code.chunks_exact(4).enumerate() {
                let w = u64::from(word(c, big));
                if w & 0xfc00_0003 == 0x4800_0000 {
                    let pc = f.start + i as u64 * 4;
                    out.push(pc.wrapping_add(sext(w & 0x03ff_fffc, 26)));
                }
            }
        }
        Abi::SysV | Abi::Cdecl => {
            let bits = if img.abi == Abi::SysV { 64 } else { 32 };
            let mut d = Decoder::with_ip(bits, code, f.start, DecoderOptions::NONE);
            while d.can_decode() {
                let ins = d.decode();
                if ins.mnemonic() == Mnemonic::Jmp && ins.near_branch_target() != 0 {
                    out.push(ins.near_branch_target());
                }
            }
        }
        Abi::Aapcs if f.thumb => {
            let mut i = 0;
            while i + 2 <= code.len() {
                let h = u64::from(half(&code[i..]));
                let pc = f.start + i as u64;
                let wide = matches!(h >> 11, 0b11101..=0b11111);
                if wide {
                    let h2 = code.get(i + 2..i + 4).map_or(0, |c| u64::from(half(c)));
                    // b.w (T4)
                    if h & 0xf800 == 0xf000 && h2 & 0xd000 == 0x9000 {
                        let s_ = h >> 10 & 1;
                        let i1 = !((h2 >> 13 & 1) ^ s_) & 1;
                        let i2 = !((h2 >> 11 & 1) ^ s_) & 1;
                        let imm =
                            s_ << 24 | i1 << 23 | i2 << 22 | (h & 0x3ff) << 12 | (h2 & 0x7ff) << 1;
                        out.push(pc.wrapping_add(4).wrapping_add(sext(imm, 25)));
                    }
                    i += 4;
                } else {
                    // b (T2)
                    if h & 0xf800 == 0xe000 {
                        out.push(pc.wrapping_add(4).wrapping_add(sext((h & 0x7ff) << 1, 12)));
                    }
                    i += 2;
                }
            }
        }
        Abi::Aapcs => {
            for (i, c) in code.chunks_exact(4).enumerate() {
                let w = u64::from(word(c, big));
                if w & 0x0f00_0000 == 0x0a00_0000 && w >> 28 != 0xf {
                    let pc = f.start + i as u64 * 4;
                    out.push(
                        pc.wrapping_add(8)
                            .wrapping_add(sext(w & 0x00ff_ffff, 24) << 2),
                    );
                }
            }
        }
    }
    out.retain(|&t| t < f.start || t >= f.end);
    out.sort_unstable();
    out.dedup();
    out
}

/// Thumb-2: 16- and 32-bit instructions, with IT blocks making the next
/// one to four conditional.
fn thumb(code: &[u8], start: u64, out: &mut Vec<Ret>) {
    let mut i = 0;
    let mut it_left = 0u32;
    while i + 2 <= code.len() {
        let h = half(&code[i..]);
        let wide = matches!(h >> 11, 0b11101..=0b11111);
        let len = if wide { 4 } else { 2 };
        let h2 = if wide && i + 4 <= code.len() {
            half(&code[i + 2..])
        } else {
            0
        };
        let cond = it_left > 0;
        it_left = it_left.saturating_sub(1);
        let pops = if wide {
            match (h, h2) {
                (0xe8bd, l) if l & 0x8000 != 0 => Some(4 * u64::from(l.count_ones())),
                // `ldr.w pc, [sp], #N`.
                (0xf85d, l) if l & 0xff00 == 0xfb00 => Some(u64::from(l & 0xff)),
                _ => None,
            }
        } else {
            match h {
                0x4770 | 0x46f7 => Some(0),
                _ if h & 0xff00 == 0xbd00 => Some(4 * u64::from((h & 0xff).count_ones() + 1)),
                _ if h & 0xff00 == 0xbf00 && h & 0xf != 0 => {
                    it_left = 4 - (h & 0xf).trailing_zeros();
                    None
                }
                _ => None,
            }
        };
        if let Some(pops) = pops {
            let pc = start + i as u64;
            out.push(Ret {
                pc,
                pops,
                cond_next: cond.then_some(pc + len as u64),
                delay: None,
            });
        }
        i += len;
    }
}

/// What a MIPS delay-slot instruction `w` does to the registers `r` (one
/// value per register, QEMU's order), computed for the integer operations
/// a compiler puts there. Returns whether it was understood; a load (or
/// anything else) into a register leaves that register unknown, which
/// `known` records.
pub fn mips_delay(w: u32, r: &mut [u64], known: &mut [bool], bits64: bool) -> bool {
    let (op, rs, rt, rd) = (
        w >> 26,
        ((w >> 21) & 31) as usize,
        ((w >> 16) & 31) as usize,
        ((w >> 11) & 31) as usize,
    );
    let (sa, funct) = ((w >> 6) & 31, w & 63);
    let simm = i64::from(w as u16 as i16) as u64;
    let uimm = u64::from(w & 0xffff);
    let s32 = |v: u64| v as u32 as i32 as i64 as u64;
    let get = |i: usize| if i == 0 { 0 } else { r[i] };
    let (a, b) = (get(rs), get(rt));
    let res: Option<(usize, u64)> = match op {
        0 => {
            let v = match funct {
                0x00 => Some(s32(u64::from((b as u32) << sa))),
                0x02 => Some(s32(u64::from((b as u32) >> sa))),
                0x03 => Some(s32(((b as u32 as i32) >> sa) as u32 as u64)),
                0x0a => Some(if b == 0 { a } else { get(rd) }),
                0x0b => Some(if b != 0 { a } else { get(rd) }),
                0x21 => Some(s32(a.wrapping_add(b))),
                0x23 => Some(s32(a.wrapping_sub(b))),
                0x24 => Some(a & b),
                0x25 => Some(a | b),
                0x26 => Some(a ^ b),
                0x27 => Some(!(a | b)),
                0x2a => Some(u64::from((a as i64) < (b as i64))),
                0x2b => Some(u64::from(a < b)),
                0x2d => Some(a.wrapping_add(b)),
                0x2f => Some(a.wrapping_sub(b)),
                0x38 => Some(b << sa),
                0x3a => Some(b >> sa),
                0x3b => Some(((b as i64) >> sa) as u64),
                0x3c => Some(b << (sa + 32)),
                0x3e => Some(b >> (sa + 32)),
                0x3f => Some(((b as i64) >> (sa + 32)) as u64),
                // No register written (nop is sll zero), or not understood.
                _ => None,
            };
            match v {
                Some(v) => Some((rd, v)),
                None if matches!(funct, 0x08 | 0x09 | 0x0c | 0x0d | 0x0f) => return true,
                None => {
                    known[rd] = false;
                    return false;
                }
            }
        }
        0x09 => Some((rt, s32(a.wrapping_add(simm)))),
        0x19 => Some((rt, a.wrapping_add(simm))),
        0x0a => Some((rt, u64::from((a as i64) < (simm as i64)))),
        0x0b => Some((rt, u64::from(a < simm))),
        0x0c => Some((rt, a & uimm)),
        0x0d => Some((rt, a | uimm)),
        0x0e => Some((rt, a ^ uimm)),
        0x0f => Some((rt, s32(uimm << 16))),
        0x1c if funct == 2 => Some((rd, s32(a.wrapping_mul(b)))),
        // Stores write no register.
        0x28..=0x2f | 0x39..=0x3f => return true,
        // Loads and the rest: the target is unknown.
        _ => {
            known[rt] = false;
            return false;
        }
    };
    if let Some((d, v)) = res {
        if d != 0 {
            r[d] = if bits64 { v } else { v & 0xffff_ffff };
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> ([u64; 32], [bool; 32]) {
        let mut r = [0u64; 32];
        for (i, v) in r.iter_mut().enumerate() {
            *v = i as u64 * 0x10;
        }
        (r, [true; 32])
    }

    #[test]
    fn mips_delay_slots() {
        // addu v0,a1,v0: v0 = 0x50 + 0x20
        let (mut r, mut k) = regs();
        assert!(mips_delay(0x00a2_1021, &mut r, &mut k, false));
        assert_eq!(r[2], 0x70);
        // addiu v0,a0,1
        let (mut r, mut k) = regs();
        assert!(mips_delay(0x2482_0001, &mut r, &mut k, false));
        assert_eq!(r[2], 0x41);
        // addiu sp,sp,32
        let (mut r, mut k) = regs();
        assert!(mips_delay(0x27bd_0020, &mut r, &mut k, false));
        assert_eq!(r[29], 29 * 0x10 + 32);
        // nop
        let (mut r, mut k) = regs();
        assert!(mips_delay(0, &mut r, &mut k, false));
        assert_eq!(r, regs().0);
        // lw v0,16(sp): unknown
        let (mut r, mut k) = regs();
        assert!(!mips_delay(0x8fa2_0010, &mut r, &mut k, false));
        assert!(!k[2] && k[29]);
        // li v0,-1 (addiu v0,zero,-1) on a 32-bit guest
        let (mut r, mut k) = regs();
        assert!(mips_delay(0x2402_ffff, &mut r, &mut k, false));
        assert_eq!(r[2], 0xffff_ffff);
    }

    #[test]
    fn thumb_returns_and_it_blocks() {
        // cbnz; movs r0,#1; bx lr; push; ...; pop {r4, pc}; it eq; bxeq lr
        let code: Vec<u8> = [0xb908u16, 0x2001, 0x4770, 0xb510, 0xbd10, 0xbf08, 0x4770]
            .iter()
            .flat_map(|h| h.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        thumb(&code, 0x1000, &mut out);
        let got: Vec<(u64, u64, Option<u64>)> =
            out.iter().map(|r| (r.pc, r.pops, r.cond_next)).collect();
        assert_eq!(
            got,
            [
                (0x1004, 0, None),
                (0x1008, 8, None),
                (0x100c, 0, Some(0x100e))
            ]
        );
    }

    #[test]
    fn a32_returns() {
        // bx lr; add pc, lr, #0 (Go's RET, as in runtime/internal/atomic.armcas);
        // addne pc, lr, #0; add pc, lr, #4 (no); ldr pc, [sp], #44; pop {r4, pc};
        // mov pc, lr
        let words = [
            0xe12f_ff1e_u32,
            0xe28e_f000,
            0x128e_f000,
            0xe28e_f004,
            0xe49d_f02c,
            0xe8bd_8010,
            0xe1a0_f00e,
        ];
        let code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut out = Vec::new();
        a32(&code, 0x1000, false, &mut out);
        let got: Vec<(u64, u64, Option<u64>)> =
            out.iter().map(|r| (r.pc, r.pops, r.cond_next)).collect();
        assert_eq!(
            got,
            [
                (0x1000, 0, None),
                (0x1004, 0, None),
                (0x1008, 0, Some(0x100c)),
                (0x1010, 44, None),
                (0x1014, 8, None),
                (0x1018, 0, None)
            ]
        );
        let be: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        let mut out_be = Vec::new();
        a32(&be, 0x1000, true, &mut out_be);
        assert_eq!(out_be.len(), out.len());
    }

    #[test]
    fn thumb_ldr_pc_pops_its_offset() {
        // ldr.w pc, [sp], #4; ldr.w pc, [sp], #12; ldr.w r0, [sp], #4 (no)
        let code: Vec<u8> = [0xf85du16, 0xfb04, 0xf85d, 0xfb0c, 0xf85d, 0x0b04]
            .iter()
            .flat_map(|h| h.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        thumb(&code, 0x1000, &mut out);
        let got: Vec<(u64, u64)> = out.iter().map(|r| (r.pc, r.pops)).collect();
        assert_eq!(got, [(0x1000, 4), (0x1004, 12)]);
    }
}
