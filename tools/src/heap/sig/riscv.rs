// SPDX-License-Identifier: GPL-2.0-or-later
//! RISC-V functions as [`Sig`]s. GNU ld relaxes (with `R_RISCV_RELAX` on
//! the relocation, as GCC's code has by default):
//!
//! - a call's `auipc`+`jalr` (`R_RISCV_CALL`, `_PLT`) into `jal rd`, a
//!   `c.j` (a tail call) or RV32's `c.jal`, or `jalr rd, x0` near address 0;
//! - an address's high part (`auipc` of `R_RISCV_PCREL_HI20`, `GOT_HI20`;
//!   `lui` of `HI20`, `TPREL_HI20`; the `add` of `TPREL_ADD`) away, the
//!   low part's instruction then based on `gp`, `x0` or `tp` (and a GOT
//!   load made an `addi`), or a `lui` into a `c.lui`;
//! - the nops of an `R_RISCV_ALIGN` down to what the linked address needs.
//!
//! Each relaxable span is a [`Piece::Either`] of those forms, with the
//! fields the linker fills (immediates, a relaxed low part's base
//! register) masked off; the rest of each instruction stays known. Every
//! branch and call carries a relocation (the assembler resolves none,
//! since relaxing may move its target), so no branch is left open blind.

use std::ops::Range;

use object::elf as E;

use super::{Pattern, Piece, Sig};

/// A relocation of a section, with the `R_RISCV_RELAX` that follows it
/// at the same offset folded in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reloc {
    pub off: usize,
    pub r_type: u32,
    pub addend: i64,
    /// Whether the linker may relax it.
    pub relax: bool,
    /// The symbol's index.
    pub sym: Option<usize>,
    /// The symbol's offset in the section, for a `PCREL_LO12`: its high
    /// part's instruction.
    pub target: Option<usize>,
}

/// A section's relocations, in order, each `R_RISCV_RELAX` folded into
/// the relocation before it.
pub fn fold(relocs: impl IntoIterator<Item = Reloc>) -> Vec<Reloc> {
    let mut out: Vec<Reloc> = Vec::new();
    for n in relocs {
        match out.last_mut() {
            Some(r) if n.r_type == E::R_RISCV_RELAX && r.off == n.off => r.relax = true,
            _ if n.r_type == E::R_RISCV_RELAX => {}
            _ => out.push(n),
        }
    }
    out.sort_by_key(|r| r.off);
    out
}

/// One 4-byte instruction `w`, with the bits of `mask` known.
fn word(w: u32, mask: u32) -> Pattern {
    Pattern::masked(&w.to_le_bytes(), &mask.to_le_bytes())
}

/// One 2-byte instruction.
fn half(h: u16, mask: u16) -> Pattern {
    Pattern::masked(&h.to_le_bytes(), &mask.to_le_bytes())
}

/// The bits of an instruction but its immediate: B-type (branches).
const B_FIELDS: u32 = 0x01ff_f07f;
/// U-type and J-type (`lui`, `auipc`, `jal`): opcode and `rd`.
const U_FIELDS: u32 = 0x0000_0fff;
/// I-type (loads, `addi`, `jalr`): opcode, `rd`, `funct3`, `rs1`.
const I_FIELDS: u32 = 0x000f_ffff;
/// S-type (stores): opcode, `funct3`, `rs1`, `rs2`.
const S_FIELDS: u32 = 0x01ff_f07f;
/// A register field at bit 15 (`rs1`).
const RS1: u32 = 0x000f_8000;
/// `c.beqz`, `c.bnez`: funct3, `rs1'`, op.
const CB_FIELDS: u16 = 0xe383;
/// `c.j`, `c.jal`: funct3, op.
const CJ_FIELDS: u16 = 0xe003;
/// `c.lui`: funct3, `rd`, op.
const CLUI_FIELDS: u16 = 0xef83;

/// The forms of a call's `auipc rd', 0; jalr rd, 0(rd')` once relaxed.
fn call(pair: &[u8], rv32: bool) -> Vec<Pattern> {
    let jalr = u32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]);
    let rd = (jalr >> 7) & 31;
    let mut both = word(
        u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]),
        U_FIELDS,
    );
    both.bytes.extend_from_slice(&pair[4..8]);
    both.mask.extend_from_slice(&I_FIELDS.to_le_bytes());
    let mut forms = vec![
        both,
        word(0x6f | rd << 7, U_FIELDS),
        // `jalr rd, imm(x0)`: a target near address 0.
        word(0x67 | rd << 7, I_FIELDS),
    ];
    if rd == 0 {
        forms.push(half(0xa001, CJ_FIELDS));
    } else if rd == 1 && rv32 {
        forms.push(half(0x2001, CJ_FIELDS));
    }
    forms
}

/// `form`, or nothing (the linker deleted it), when `relax`.
fn maybe_gone(form: Pattern, relax: bool) -> Piece {
    if relax {
        Piece::Either(vec![form, Pattern::new(&[])])
    } else {
        Piece::Fixed(form)
    }
}

/// The piece for the relocation `r` (its high part `hi`, if a
/// `PCREL_LO12`) at the start of `code`, and the bytes it spans; `None`
/// when `code` ends first, or for a pad no compiler asks for.
fn piece(r: &Reloc, hi: Option<&Reloc>, code: &[u8], rv32: bool) -> Option<(Piece, usize)> {
    let w = |n: usize| code.get(..n);
    let ins = || w(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let hw = || w(2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let p = match r.r_type {
        E::R_RISCV_CALL | E::R_RISCV_CALL_PLT => {
            let forms = call(w(8)?, rv32);
            if r.relax {
                (Piece::Either(forms), 8)
            } else {
                (Piece::Fixed(forms[0].clone()), 8)
            }
        }
        E::R_RISCV_BRANCH => (Piece::Fixed(word(ins()?, B_FIELDS)), 4),
        E::R_RISCV_JAL => (Piece::Fixed(word(ins()?, U_FIELDS)), 4),
        E::R_RISCV_RVC_BRANCH => (Piece::Fixed(half(hw()?, CB_FIELDS)), 2),
        E::R_RISCV_RVC_JUMP => (Piece::Fixed(half(hw()?, CJ_FIELDS)), 2),
        E::R_RISCV_RVC_LUI => (Piece::Fixed(half(hw()?, CLUI_FIELDS)), 2),
        E::R_RISCV_HI20 => {
            let lui = word(ins()?, U_FIELDS);
            let rd = (ins()? >> 7) & 31;
            if r.relax {
                let c_lui = half(0x6001 | (rd as u16) << 7, CLUI_FIELDS);
                (Piece::Either(vec![lui, c_lui, Pattern::new(&[])]), 4)
            } else {
                (Piece::Fixed(lui), 4)
            }
        }
        E::R_RISCV_PCREL_HI20
        | E::R_RISCV_GOT_HI20
        | E::R_RISCV_TLS_GOT_HI20
        | E::R_RISCV_TLS_GD_HI20
        | E::R_RISCV_TPREL_HI20 => (maybe_gone(word(ins()?, U_FIELDS), r.relax), 4),
        E::R_RISCV_TPREL_ADD => (maybe_gone(word(ins()?, !0), r.relax), 4),
        E::R_RISCV_LO12_I
        | E::R_RISCV_PCREL_LO12_I
        | E::R_RISCV_TPREL_LO12_I
        | E::R_RISCV_LO12_S
        | E::R_RISCV_PCREL_LO12_S
        | E::R_RISCV_TPREL_LO12_S => {
            let store = matches!(
                r.r_type,
                E::R_RISCV_LO12_S | E::R_RISCV_PCREL_LO12_S | E::R_RISCV_TPREL_LO12_S
            );
            let mut mask = if store { S_FIELDS } else { I_FIELDS };
            if r.relax {
                // Based on gp, x0 or tp once its high part is gone.
                mask &= !RS1;
            }
            let got = hi.is_some_and(|h| {
                h.relax && matches!(h.r_type, E::R_RISCV_GOT_HI20 | E::R_RISCV_TLS_GOT_HI20)
            });
            if got {
                // A load from the GOT made an `addi` of the address:
                // only its destination stays.
                mask = 0x0000_0f80;
            }
            (Piece::Fixed(word(ins()?, mask)), 4)
        }
        E::R_RISCV_ALIGN => {
            // (More than a page of padding is no compiler's: the rest
            // open, rather than thousands of lengths to try.)
            let max = usize::try_from(r.addend).ok().filter(|&m| m <= 4096)?;
            let align = (max as u64 + 2).next_power_of_two();
            (Piece::Pad { max, align }, max)
        }
        E::R_RISCV_TLSDESC_HI20
        | E::R_RISCV_TLSDESC_LOAD_LO12
        | E::R_RISCV_TLSDESC_ADD_LO12
        | E::R_RISCV_TLSDESC_CALL => (maybe_gone(word(0, 0), r.relax), 4),
        E::R_RISCV_64 | E::R_RISCV_ADD64 | E::R_RISCV_SUB64 => (open(8), 8),
        E::R_RISCV_ADD16 | E::R_RISCV_SUB16 | E::R_RISCV_SET16 => (open(2), 2),
        E::R_RISCV_ADD8
        | E::R_RISCV_SUB8
        | E::R_RISCV_SET8
        | E::R_RISCV_SET6
        | E::R_RISCV_SUB6
        | E::R_RISCV_SET_ULEB128
        | E::R_RISCV_SUB_ULEB128 => (open(1), 1),
        // Data words, and any relocation not known here: the word open.
        _ => (open(4), 4),
    };
    Some(p)
}

/// `parts` one after the other.
fn cat(parts: &[Pattern]) -> Pattern {
    let mut p = Pattern::new(&[]);
    for q in parts {
        p.bytes.extend_from_slice(&q.bytes);
        p.mask.extend_from_slice(&q.mask);
    }
    p
}

/// Registers a relaxed low part is based on: `x0`, `gp`, `tp`.
const X0: u32 = 0;
const GP: u32 = 3;
const TP: u32 = 4;

/// The relaxable high part `relocs[i]` at the start of `code` with the
/// low part right after it that completes it (`TPREL`: with the `add`
/// between), as one piece, and the bytes it spans: kept, the low part is
/// based on the high part's register as in the object; deleted, on one of
/// the registers the linker bases it on then. (Apart, each is a piece of
/// its own, the low part's base open, and a function that starts with a
/// deletable high part would match also one instruction on.) `None` when
/// they are not so adjacent.
fn pair(relocs: &[Reloc], i: usize, code: &[u8]) -> Option<(Piece, usize)> {
    let h = &relocs[i];
    let (mid, bases): (usize, &[u32]) = match h.r_type {
        E::R_RISCV_PCREL_HI20 | E::R_RISCV_HI20 => (0, &[GP, X0]),
        E::R_RISCV_TPREL_HI20 => (1, &[TP]),
        _ => return None,
    };
    let at = |k: usize| {
        relocs[i + 1..]
            .iter()
            .take_while(move |r| r.off <= h.off + k)
            .filter(move |r| r.off == h.off + k)
    };
    let same = |r: &Reloc| {
        r.relax
            && if h.r_type == E::R_RISCV_PCREL_HI20 {
                r.target == Some(h.off)
            } else {
                r.sym == h.sym && r.addend == h.addend
            }
    };
    if !h.relax || (mid == 1 && !at(4).any(|r| r.r_type == E::R_RISCV_TPREL_ADD && same(r))) {
        return None;
    }
    let lo = at(4 * (mid + 1)).find(|r| same(r))?;
    let fields = match (h.r_type, lo.r_type) {
        (E::R_RISCV_PCREL_HI20, E::R_RISCV_PCREL_LO12_I)
        | (E::R_RISCV_HI20, E::R_RISCV_LO12_I)
        | (E::R_RISCV_TPREL_HI20, E::R_RISCV_TPREL_LO12_I) => I_FIELDS,
        (E::R_RISCV_PCREL_HI20, E::R_RISCV_PCREL_LO12_S)
        | (E::R_RISCV_HI20, E::R_RISCV_LO12_S)
        | (E::R_RISCV_TPREL_HI20, E::R_RISCV_TPREL_LO12_S) => S_FIELDS,
        _ => return None,
    };
    let len = 4 * (mid + 2);
    let w = |k: usize| {
        let b = code.get(k..k + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (hi, lo_w) = (w(0)?, w(len - 4)?);
    let lo_kept = word(lo_w, fields);
    let mut forms = vec![if mid == 1 {
        cat(&[word(hi, U_FIELDS), word(w(4)?, !0), lo_kept.clone()])
    } else {
        cat(&[word(hi, U_FIELDS), lo_kept.clone()])
    }];
    if h.r_type == E::R_RISCV_HI20 {
        let rd = (hi >> 7) & 31;
        forms.push(cat(&[
            half(0x6001 | (rd as u16) << 7, CLUI_FIELDS),
            lo_kept,
        ]));
    }
    for b in bases {
        forms.push(word(lo_w & !RS1 | b << 15, fields));
    }
    Some((Piece::Either(forms), len))
}

/// `n` bytes, none known.
fn open(n: usize) -> Piece {
    Piece::Fixed(Pattern::masked(&vec![0; n], &vec![0; n]))
}

/// The signature of the function at `range` of a section's `code`, with
/// the section's `relocs` (sorted by offset); `rv32`: an RV32 object.
pub fn sig(code: &[u8], relocs: &[Reloc], range: Range<usize>, rv32: bool) -> Sig {
    let end = range.end.min(code.len());
    let mut pieces = Vec::new();
    let mut at = range.start.min(end);
    let first = relocs.partition_point(|r| r.off < at);
    for (i, r) in relocs.iter().enumerate().skip(first) {
        if r.off >= end {
            break;
        }
        if r.off < at {
            // Inside a span already taken (a call's `jalr`).
            continue;
        }
        if r.off > at {
            pieces.push(Piece::Fixed(Pattern::new(&code[at..r.off])));
        }
        let hi = r.target.and_then(|t| {
            relocs[relocs.partition_point(|h| h.off < t)..]
                .iter()
                .take_while(|h| h.off == t)
                .find(|h| h.r_type != r.r_type)
        });
        let code = &code[r.off..end];
        match pair(relocs, i, code).or_else(|| piece(r, hi, code, rv32)) {
            Some((p, n)) => {
                pieces.push(p);
                at = r.off + n;
            }
            None => {
                // The rest open (and as long as in the object).
                pieces.push(open(end - r.off));
                at = end;
            }
        }
    }
    if at < end {
        pieces.push(Piece::Fixed(Pattern::new(&code[at..end])));
    }
    Sig { pieces }
}

#[cfg(test)]
mod tests {
    use super::super::find;
    use super::*;

    /// A relocation and its `R_RISCV_RELAX`.
    fn rel(off: usize, r_type: u32, sym: usize, target: Option<usize>) -> Vec<Reloc> {
        let r = Reloc {
            off,
            r_type,
            addend: 0,
            relax: false,
            sym: Some(sym),
            target,
        };
        let relax = Reloc {
            r_type: E::R_RISCV_RELAX,
            sym: None,
            ..r
        };
        vec![r, relax]
    }

    fn le(words: &[u32], halves: &[(usize, u16)]) -> Vec<u8> {
        // 4-byte words, with 2-byte ones spliced in at their indexes.
        let mut out = Vec::new();
        let mut hi = halves.iter().peekable();
        for (i, w) in words.iter().enumerate() {
            while let Some((_, h)) = hi.next_if(|(at, _)| *at == i) {
                out.extend_from_slice(&h.to_le_bytes());
            }
            out.extend_from_slice(&w.to_le_bytes());
        }
        for (_, h) in hi {
            out.extend_from_slice(&h.to_le_bytes());
        }
        out
    }

    /// glibc 2.36's `memalign` for RV64 as `malloc.o` has it, and as GNU
    /// ld 2.40 linked it into a static program at 0x26772 (objdump).
    fn memalign() -> (Vec<u8>, Vec<Reloc>, Vec<u8>) {
        let obj: Vec<u8> = [
            &0x0000_0797u32.to_le_bytes()[..], // auipc a5, %pcrel_hi(x)
            &0x0007_c783u32.to_le_bytes(),     // lbu a5, %pcrel_lo(.)(a5)
            &0xc789u16.to_le_bytes(),          // beqz a5, 1f
            &0x0000_0317u32.to_le_bytes(),     // tail _mid_memalign
            &0x0003_0067u32.to_le_bytes(),
            &le(&[], &[(0, 0x1101), (0, 0xec06), (0, 0xe42e), (0, 0xe02a)]),
            &0x0000_0097u32.to_le_bytes(), // 1: call ptmalloc_init
            &0x0000_80e7u32.to_le_bytes(),
            &le(&[], &[(0, 0x65a2), (0, 0x6502), (0, 0x60e2), (0, 0x6105)]),
            &0x0000_0317u32.to_le_bytes(), // tail _mid_memalign
            &0x0003_0067u32.to_le_bytes(),
        ]
        .concat();
        let relocs = fold(
            [
                rel(0, E::R_RISCV_PCREL_HI20, 1, None),
                rel(4, E::R_RISCV_PCREL_LO12_I, 2, Some(0)),
                rel(8, E::R_RISCV_RVC_BRANCH, 6, None)[..1].to_vec(),
                rel(10, E::R_RISCV_CALL_PLT, 3, None),
                rel(26, E::R_RISCV_CALL_PLT, 4, None),
                rel(42, E::R_RISCV_CALL_PLT, 3, None),
            ]
            .concat(),
        );
        let linked: Vec<u8> = [
            &0x0005_e797u32.to_le_bytes()[..],
            &0xd8e7_c783u32.to_le_bytes(),
            &0xc391u16.to_le_bytes(),
            &0xb239u16.to_le_bytes(), // c.j: the tail call relaxed
            &le(&[], &[(0, 0x1101), (0, 0xec06), (0, 0xe42e), (0, 0xe02a)]),
            &0xcfdf_c0efu32.to_le_bytes(), // jal: the call relaxed
            &le(&[], &[(0, 0x65a2), (0, 0x6502), (0, 0x60e2), (0, 0x6105)]),
            &0xb8e5u16.to_le_bytes(),
        ]
        .concat();
        (obj, relocs, linked)
    }

    /// `body` at 0x26772 of a program between other code.
    fn program(body: &[u8]) -> Vec<u8> {
        let mut text = vec![0x01, 0x00, 0x82, 0x80]; // c.nop; ret
        text.extend_from_slice(body);
        text.extend_from_slice(&[0x82, 0x80]);
        text
    }

    const AT: u64 = 0x26772 - 4;

    #[test]
    fn relaxed_calls_and_addresses_match_at_the_linked_start_only() {
        let (obj, relocs, linked) = memalign();
        assert_eq!(obj.len(), 50);
        let sig = sig(&obj, &relocs, 0..obj.len(), false);
        let text = program(&linked);
        // Once, at its start: not also at the `lbu`, as if the `auipc`
        // had been deleted (then the `lbu` would be based on gp).
        assert_eq!(find(&[(AT, &text[..])], &sig, 2, 0, 8), vec![(0x26772, 34)]);
        // As the object has it (nothing relaxed): the same.
        let text = program(&obj);
        assert_eq!(find(&[(AT, &text[..])], &sig, 2, 0, 8), vec![(0x26772, 50)]);
        // The address relaxed to gp: the `auipc` gone, the `lbu` on gp.
        let mut gp = linked[4..].to_vec();
        gp[1] = (gp[1] & 0x7f) | 0x80;
        gp[2] = (gp[2] & 0xf0) | 0x01;
        let text = program(&gp);
        assert_eq!(find(&[(AT, &text[..])], &sig, 2, 0, 8), vec![(0x26772, 30)]);
    }

    #[test]
    fn a_changed_instruction_or_base_is_no_match() {
        let (obj, relocs, linked) = memalign();
        let sig = sig(&obj, &relocs, 0..obj.len(), false);
        // `sd a1, 8(sp)` made `sd a1, 16(sp)`.
        let mut other = linked.clone();
        other[16..18].copy_from_slice(&0xe82eu16.to_le_bytes());
        let text = program(&other);
        assert!(find(&[(AT, &text[..])], &sig, 2, 0, 8).is_empty());
        // The `auipc` kept but the `lbu` based on gp: no linker does that;
        // the function would start at the `lbu`, the `auipc` another's.
        let mut other = linked.clone();
        other[5] = (other[5] & 0x7f) | 0x80;
        other[6] = (other[6] & 0xf0) | 0x01;
        let text = program(&other);
        assert_eq!(find(&[(AT, &text[..])], &sig, 2, 0, 8), vec![(0x26776, 30)]);
        // A tail call relaxed into a `c.jal` (a call, RV32's): not a tail.
        let mut other = linked.clone();
        other[10..12].copy_from_slice(&0x3239u16.to_le_bytes());
        let text = program(&other);
        assert!(find(&[(AT, &text[..])], &sig, 2, 0, 8).is_empty());
    }

    #[test]
    fn thread_pointer_offsets_and_alignment_pads_shrink() {
        // lui s0, %tprel_hi(x); add s0, s0, tp, %tprel_add(x);
        // addi s0, s0, %tprel_lo(x); ld a5, 8(s0); .p2align 3 (6 bytes of
        // nops here); ret
        let mut obj = le(&[0x0000_0437, 0x0044_0433, 0x0004_0413], &[(3, 0x641c)]);
        obj.extend_from_slice(&[0x13, 0, 0, 0, 0x01, 0]);
        obj.extend_from_slice(&0x8082u16.to_le_bytes());
        let mut relocs = [
            rel(0, E::R_RISCV_TPREL_HI20, 5, None),
            rel(4, E::R_RISCV_TPREL_ADD, 5, None),
            rel(8, E::R_RISCV_TPREL_LO12_I, 5, None),
        ]
        .concat();
        relocs.push(Reloc {
            off: 14,
            r_type: E::R_RISCV_ALIGN,
            addend: 6,
            relax: false,
            sym: None,
            target: None,
        });
        let sig = sig(&obj, &fold(relocs), 0..obj.len(), false);
        // Linked at 0x1000 as `addi s0, tp, 40; ld a5, 8(s0)`: the pad to
        // 0x1008 is one `c.nop`.
        let body = [
            &0x0282_0413u32.to_le_bytes()[..],
            &0x641cu16.to_le_bytes(),
            &[0x01, 0],
            &0x8082u16.to_le_bytes(),
        ]
        .concat();
        let mut text = vec![0x82, 0x80, 0x82, 0x80];
        text.extend_from_slice(&body);
        assert_eq!(
            find(&[(0xffc, &text[..])], &sig, 2, 0, 8),
            vec![(0x1000, 10)]
        );
        // At 0x1002 that pad would leave the `ret` at 0x100a: no match.
        let mut text = vec![0x82, 0x80, 0x82, 0x80, 0x82, 0x80];
        text.extend_from_slice(&body);
        assert!(find(&[(0xffc, &text[..])], &sig, 2, 0, 8).is_empty());
        // Nothing relaxed at 0x1000: the pad to 0x1010 is one `c.nop`.
        let mut text = obj[..14].to_vec();
        text.extend_from_slice(&[0x01, 0, 0x82, 0x80]);
        assert_eq!(
            find(&[(0x1000, &text[..])], &sig, 2, 0, 8),
            vec![(0x1000, 18)]
        );
        // The `addi` based on tp only once the `lui` and `add` are gone:
        // the function would start at the `addi`.
        text[10] = (text[10] & 0xf0) | 0x02;
        assert_eq!(
            find(&[(0x1000, &text[..])], &sig, 2, 0, 8),
            vec![(0x1008, 10)]
        );
    }
}
